"""``lamina.Memory``: the multi-layer memory loop (MLMF Algorithm 1 with MemoryOS / MemTree tiers).

Write path (``add``, ``end_session``) and read path (``context``, ``search``) of DESIGN.md §2:

* **working** — raw turns of each live (user, session), FIFO, at most ``working_capacity``;
  on overflow the oldest half is dequeued, cut into segments of adjacent turns by embedding
  similarity and inserted into the episodic tree (the raw turns move to the archive).
* **episodic** — a MemTree per user: segment leaves (raw turns + extractive summary ψ) under
  internal summary nodes, descended while cos ≥ θ(d) = θ0·exp(λ·d/D); session summaries
  EMA-blended (eq. 5, ``kernels.ema_blend``); heat (``kernels.heat_scores``) drives promotion
  (``kernels.select_hot``) to the semantic layer and capacity eviction (``kernels.evict_to_capacity``).
* **semantic** — facts (subject, predicate, object) with validity and provenance, resolved so
  that a new value of a functional predicate supersedes the old one (kept in ``history``), notes
  promoted from hot episodes, and one profile per entity whose embedding moves by the damped
  update of eq. 9–10 (``kernels.damped_update``; drift in ``stats()``).
* **archive** — every raw turn ever added; eviction never touches it.

Capacity projection Π_C (``end_session``, ``MemoryConfig.eviction = "coverage"``). Two pools: P_e
(leaves and session summaries, at most C_e per user) and P_s (current facts and notes, C_s). An
active pooled item *covers* the turns it renders verbatim (a leaf its member turns, a fact its
latest source turn); c_t is the number of items covering turn t. The novelty of a covered turn is
ν_t = 1 − max(0, cos(t, t′)) for its nearest covered turn t′ of another leaf (1 when there is
none): a line said in many places ("that's great!") is worth little, a specific one close to 1.
An item's value is its Shapley share of the coverage game v(S) = Σ_{t covered by S} ν_t,

    V_i = Σ_{t rendered by i} ν_t / c_t,

i.e. the novel raw text the active layers lose with it, shared evenly among the items that
duplicate it (a fact whose turn is also in an active leaf holds half of it). Aggregates (session
summaries, notes) render no raw text: V_i = (share of their source turns that no active item
covers) × (1 − max(0, cos to the nearest active aggregate of the pool)), zero while their leaves
survive — the cheapest to drop — and worth up to one specific turn once they are the last trace
of a session. The retention score is

    score_i = V_i · (1 + a·N_visit + R_i) + ε · exp(−Δt/μ)

with MemoryOS visits N_visit (a = ``heat_a``), a fact's restatements R_i (its strength above 1),
and recency (μ = ``heat_mu``) scaled by ε = ``eviction_tiebreak`` so that it only breaks ties:
age alone evicts nothing (the α decay of strengths is not a term). Each round evicts the
⌈excess/2⌉ lowest scores of every over-full pool (``kernels.evict_to_capacity``; on equal scores
the newer item goes) and re-measures c_t, ν and V, so of two near-duplicates only one goes.
``eviction = "heat"`` is the earlier rule: the lowest heat × strength (oldest first in practice).

Vectors live in a :class:`~lamina.layer_index.LayerIndex`: two native arenas (the archive apart
from the active layers), one namespace per (user, layer), searched with the native exact top-k up
to ``MemoryConfig.ann_threshold`` vectors and through hnswlib past it; the layer gate is
``kernels.softmax_gate`` (eq. 7, entropy bound ε).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt

from . import kernels
from .embedders import Embedder, check_embeddings, get_embedder
from .extract import (ExtractiveSummarizer, Fact, FactExtractor, RuleFactExtractor, Summarizer, Turn, fact_sentence,
                      is_functional)
from .items import LAYERS, Context, MemoryItem, _format_day
from .llm import LLM, LLMFactExtractor, LLMSummarizer
from .layer_index import LayerIndex
from .lexical import LexicalIndex
from .search import topk as _topk
from .store import ID_SHIFT, Store

__all__ = ["Memory", "MemoryConfig"]

_log = logging.getLogger("lamina")

TimeLike = Union[float, int, _dt.datetime, str, None]

_ACTIVE = ("working", "episodic", "semantic")
_COMMITMENTS = ("persist", "ephemeral", "verify")
_ROOT = 0  # parent id of the top-level nodes of a user's tree
_NO_TREE = -1  # parent id of episodic items outside the tree (session summaries)
# Per-turn vectors of the active episodic leaves live in their own namespace of the active arena
# (layer code 5, ``user_idx << 3 | 5``), keyed by the turn's item id with this bit set (item ids
# stay below 2**60): a leaf is found by its best-matching turn, not by the mean of its turns.
_TURN_VIEW = 5
# The episodic leaves (segments) have a namespace of their own (layer code 6): a context looks for
# episodes through their turns (above), so its search of the episodic layer reads only the
# summaries; search() of the episodic layer reads both.
_LEAF = 6
_ARCHIVE = LAYERS["archive"]
_TKEY = 1 << 62
# Kinds that describe many turns at once (summaries, promoted notes, entity profiles): they
# enter a context only after the specific items (turns, facts).
_GENERAL = ("summary", "note", "profile")
# No item adds fewer tokens to a context than one word ("Speaker: text" under an open group
# header counts its words only); a group's "[YYYY-MM-DD HH:MM]" header costs 2 (1 when the
# time is unknown: counted as 2, never under-counted).
_MIN_ITEM_TOKENS = 1
_HEADER_TOKENS = 2


@dataclass(frozen=True)
class MemoryConfig:
    """Parameters of the memory loop (paper symbols in brackets).

    Capacities: ``working_capacity`` [C_w] turns per live session; ``episodic_capacity`` [C_e]
    leaves and session summaries per user; ``semantic_capacity`` [C_s] current facts and notes per
    user (profiles are not counted; superseded facts live in ``history`` and are not counted).

    Write path: ``segment_threshold`` (a turn joins the running segment while its cosine to the
    segment centroid is at least this), ``min_segment_turns`` / ``max_segment_turns``;
    ``tree_theta0`` [θ0] and ``tree_lambda`` [λ_tree] of θ(d) = θ0·exp(λ·d/D);
    ``summary_words`` (ψ length); ``alpha`` [α] EMA retention (eq. 5): strengths decay by α per
    ended session and the matching episode's embedding becomes α·e + (1−α)·ŝ when its cosine to
    ŝ is at least ``blend_threshold``; heat [MemoryOS] = ``heat_a``·N_visit + ``heat_b``·L +
    ``heat_c``·exp(−Δt/``heat_mu``) and ``promote_threshold`` [τ]; ``resolve_threshold`` [τ_s]:
    objects at least this similar are the same value; ``profile_lambda`` [λ] of the damped
    profile update e = (e* + λ·e_prev)/(1+λ) (0 disables damping).

    Capacity projection Π_C: ``eviction`` "coverage" (default: beyond C_e / C_s, the items whose
    raw text is most redundant go first — the Shapley share of novelty-weighted turn coverage
    times 1 + ``heat_a``·N_visit, aggregates once their turns are gone; module docstring) or
    "heat" (the lowest heat × strength); ``eviction_tiebreak`` [ε] scales the recency term
    exp(−Δt/μ) that breaks ties between equally valuable items (0: the newer id goes).

    Read path: ``candidates`` [m] per layer; ``relevance_top`` similarities averaged into r_i;
    ``beta`` [β] and ``max_entropy`` [ε] of the gate (None: no bound); ``min_similarity`` (the
    firewall floor: below it nothing is returned and the context abstains);
    ``working_share`` (the largest share of the budget working memory gets first);
    ``stale_penalty`` (raw text whose sources only support superseded facts scores ×(1 − p));
    ``lexical``: episodic turns are also ranked by BM25 over ``speaker + text`` (native
    :class:`lamina.LexicalIndex`, per-user statistics) and the two rankings are fused by
    reciprocal rank (``rrf_k``), each turn keeping a score on the cosine scale;
    ``speaker_scope`` (attribution firewall: when the query names exactly one of the people
    this user's memory knows — speakers of turns, subjects of facts — the items it returns that
    are attributed to someone else score ×(1 − p) and are ordered accordingly, so the named
    person's memories come first and another person's are never presented as the best match;
    which items enter the context is decided before it — the firewall does not hide relevant
    memories; 0 disables).

    Storage: ``synchronous`` "NORMAL" (survives kill -9) or "FULL" (also power loss).

    Ablation: ``layers`` names the active layers in use (default all three); leaving out
    ``episodic`` or ``semantic`` stops writing to it and reading from it (turns still reach the
    archive), which is how ``lamina eval`` measures what each layer contributes.
    Index: a (user, layer) with at most ``ann_threshold`` vectors is searched exactly (native
    top-k); past it through an hnswlib graph (``ann_m`` [M], ``ann_ef_construction``,
    ``ann_ef_search`` [ef, at least k]), built lazily on the first search that needs it (also
    after reopening) and kept up to date incrementally. The default 20 000 sits above every
    active layer at the default capacities (C_e = 2 000 leaves plus their tree nodes and session
    summaries, C_s = 5 000 plus profiles), so the active layers stay exact — exact search of a few
    thousand rows costs well under a millisecond — while the archive, which grows by one row per
    turn forever, switches to ANN where exact search of one user's turns starts to cost
    milliseconds per query (``bench/bench_memory.py``, ``bench/bench_layer_index.py``).
    """

    working_capacity: int = 16
    episodic_capacity: int = 2000
    semantic_capacity: int = 5000
    segment_threshold: float = 0.2
    min_segment_turns: int = 2
    max_segment_turns: int = 6
    tree_theta0: float = 0.4
    tree_lambda: float = 0.5
    summary_words: int = 60
    alpha: float = 0.9
    blend_threshold: float = 0.5
    heat_a: float = 1.0
    heat_b: float = 0.5
    heat_c: float = 1.0
    heat_mu: float = 1e7
    promote_threshold: float = 5.0
    eviction: str = "coverage"
    eviction_tiebreak: float = 1e-3
    resolve_threshold: float = 0.9
    profile_lambda: float = 1.0
    candidates: int = 32
    relevance_top: int = 3
    beta: float = 5.0
    max_entropy: Optional[float] = 1.0
    min_similarity: float = 0.12
    working_share: float = 0.5
    stale_penalty: float = 0.5
    synchronous: str = "NORMAL"
    layers: tuple[str, ...] = ("working", "episodic", "semantic")
    ann_threshold: int = 20_000
    ann_m: int = 16
    ann_ef_construction: int = 100
    ann_ef_search: int = 96
    lexical: bool = True
    rrf_k: int = 60
    speaker_scope: float = 0.5

    def __post_init__(self) -> None:
        ints = ("working_capacity", "episodic_capacity", "semantic_capacity", "min_segment_turns",
                "max_segment_turns", "summary_words", "candidates", "relevance_top", "ann_threshold", "ann_m",
                "ann_ef_construction", "ann_ef_search", "rrf_k")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("synchronous", "layers", "eviction") or (f.name == "max_entropy" and v is None):
                continue
            if f.name == "lexical":
                if not isinstance(v, bool):
                    raise TypeError(f"MemoryConfig.lexical must be a bool, got {type(v).__name__}")
                continue
            if f.name in ints:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"MemoryConfig.{f.name} must be an int, got {type(v).__name__}")
                if v < 1:
                    raise ValueError(f"MemoryConfig.{f.name} must be >= 1, got {v}")
            else:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise TypeError(f"MemoryConfig.{f.name} must be a number, got {type(v).__name__}")
                if not math.isfinite(v):
                    raise ValueError(f"MemoryConfig.{f.name} must be finite, got {v}")
        if self.working_capacity < 2:
            raise ValueError("MemoryConfig.working_capacity must be >= 2 (half of it is dequeued on overflow)")
        if self.ann_m < 2:
            raise ValueError(f"MemoryConfig.ann_m must be >= 2 (hnswlib links per node), got {self.ann_m}")
        if self.min_segment_turns > self.max_segment_turns:
            raise ValueError("MemoryConfig.min_segment_turns must be <= max_segment_turns")
        for nm in ("alpha", "working_share", "stale_penalty", "speaker_scope"):
            if not 0.0 <= getattr(self, nm) <= 1.0:
                raise ValueError(f"MemoryConfig.{nm} must be in [0, 1], got {getattr(self, nm)}")
        for nm in ("profile_lambda", "heat_a", "heat_b", "heat_c", "beta"):
            if getattr(self, nm) < 0:
                raise ValueError(f"MemoryConfig.{nm} must be >= 0, got {getattr(self, nm)}")
        if self.heat_mu <= 0:
            raise ValueError("MemoryConfig.heat_mu must be > 0")
        if self.max_entropy is not None and self.max_entropy <= 0:
            raise ValueError("MemoryConfig.max_entropy must be > 0 or None")
        if (not isinstance(self.layers, tuple) or "working" not in self.layers
                or any(L not in _ACTIVE for L in self.layers)):
            raise ValueError(f"MemoryConfig.layers must be a tuple of {_ACTIVE} including 'working', "
                             f"got {self.layers!r}")
        if self.eviction not in ("coverage", "heat"):
            raise ValueError(f"MemoryConfig.eviction must be 'coverage' or 'heat', got {self.eviction!r}")
        if self.eviction_tiebreak < 0:
            raise ValueError(f"MemoryConfig.eviction_tiebreak must be >= 0, got {self.eviction_tiebreak}")
        if str(self.synchronous).upper() not in ("NORMAL", "FULL"):
            raise ValueError("MemoryConfig.synchronous must be 'NORMAL' or 'FULL'")


class _Rec:
    """In-memory mirror of one ``items`` row (plus two render caches of the read path)."""

    FIELDS = ("id", "user_id", "session_id", "layer", "kind", "status", "text", "summary", "speaker",
              "source_id", "sources", "members", "created_at", "timestamp", "last_access", "access_count",
              "interaction_len", "strength", "domain", "commitment", "subject", "predicate", "object",
              "valid_from", "valid_to", "superseded_by", "parent_id", "depth", "seq")
    # nt: (key, (tokens, group key)) of Memory._ntokens; tk: (text, normalised text) of _text_key
    __slots__ = FIELDS + ("nt", "tk")

    def __init__(self, **kw: Any) -> None:
        for k in self.FIELDS:
            setattr(self, k, kw.get(k))
        self.nt = None
        self.tk = None

    def row(self, emb: npt.NDArray[np.float32]) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.FIELDS}
        d["embedding"] = np.ascontiguousarray(emb, dtype=np.float32).tobytes()
        return d


class _User:
    __slots__ = ("user_id", "idx", "ids", "by_src", "working", "children", "current", "max_depth", "drift_total", "drift_last",
                 "drift_updates", "stale", "stale_last", "facts", "profiles", "n_active", "seg_of", "people")

    def __init__(self, user_id: str, idx: int) -> None:
        self.user_id = user_id
        self.idx = idx
        self.ids: set[int] = set()  # every record of this user
        self.by_src: dict[str, int] = {}  # source id -> turn record id
        self.working: dict[str, list[int]] = {}  # session -> turn ids in order
        self.children: dict[int, list[int]] = {_ROOT: []}
        self.current: dict[tuple[str, str], list[int]] = {}  # (subject key, predicate) -> current fact ids
        self.profiles: dict[str, int] = {}  # subject key -> profile item id
        self.max_depth = 0
        self.drift_total = 0.0
        self.drift_last = 0.0
        self.drift_updates = 0
        self.stale: Optional[_Staleness] = None  # cache, rebuilt after fact changes
        self.stale_last: Optional[_Staleness] = None  # the last one built (reused while equal)
        self.facts: list[int] = []  # ids of every fact record (any layer or status)
        self.n_active = {name: 0 for name in LAYERS}
        self.seg_of: dict[int, int] = {}  # turn id -> id of the active episodic leaf holding it
        self.people: dict[str, tuple[str, "re.Pattern[str]"]] = {}  # name key -> (name, word-bounded pattern)


def _now() -> float:
    return time.time()


def _to_time(t: TimeLike, what: str) -> Optional[float]:
    if t is None:
        return None
    if isinstance(t, bool):
        raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, not bool")
    if isinstance(t, (int, float, np.integer, np.floating)):
        v = float(t)
        if not math.isfinite(v):
            raise ValueError(f"{what} must be finite, got {t}")
        return v
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return t.timestamp()
    if isinstance(t, str):
        try:
            return _to_time(_dt.datetime.fromisoformat(t.strip().replace("Z", "+00:00")), what)
        except ValueError:
            raise ValueError(f"{what} {t!r} is not an ISO-8601 time (e.g. '2023-05-08T13:56:00')") from None
    raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, got {type(t).__name__}")


def _check_id(v: object, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, got {type(v).__name__}")
    if not v.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return v


def _norm_key(s: str) -> str:
    return " ".join(s.lower().split())


def _unit(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(n, 1e-12), dtype=np.float32)


class Memory:
    """Multi-layer long-term memory for LLM agents, persisted in SQLite.

    Parameters
    ----------
    path : str, os.PathLike or None
        SQLite database file (created if missing; reopening restores the exact state). None keeps
        everything in memory.
    embedder : "auto", "hashing", "minilm" or an :class:`~lamina.embedders.Embedder`
        ``"auto"`` uses MiniLM when its model files are present locally, else the native hashing
        embedder. A database remembers its embedder; reopening with a different one raises.
    config : MemoryConfig, optional
    llm : LLM, optional
        A chat model (e.g. :class:`lamina.OpenAIChat`); when given, ψ and 𝒜 are prompted (JSON
        validated; failures fall back to the defaults and are logged).
    summarizer, fact_extractor : optional
        Replace ψ / 𝒜 explicitly (they take precedence over ``llm``).

    Thread safety
    -------------
    Thread-safe. One ``Memory`` may be shared by many threads: every operation that reads or
    changes state holds one internal re-entrant lock, so operations are linearizable (each takes
    effect atomically at some point between its call and its return). Embedding, the expensive
    part, runs outside the lock, and native searches release the GIL.

    Durability and atomicity
    ------------------------
    Every public write (``add``, ``end_session``, ``update``, ``delete``, ``delete_user``) is one
    SQLite transaction: when it returns, its effects survive a killed process (WAL); when it
    raises (bad input, a failed summariser, a crash), nothing of it is visible, in the database or
    in memory. The access statistics that ``context`` bumps (visit counts, last access: they feed
    heat) are kept in memory and written before the next write, by :meth:`flush` and by
    :meth:`close`; a killed process loses only those bumps since its last write.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]", None] = None, embedder: Union[str, Embedder, None] = "auto",
                 config: Optional[MemoryConfig] = None, *, llm: Optional[LLM] = None,
                 summarizer: Optional[Summarizer] = None, fact_extractor: Optional[FactExtractor] = None) -> None:
        if config is None:
            config = MemoryConfig()
        if not isinstance(config, MemoryConfig):
            raise TypeError(f"config must be a lamina.MemoryConfig, got {type(config).__name__}")
        self.config = config
        self._embedder = get_embedder(embedder)
        self._dim = int(self._embedder.dim)
        self._lock = threading.RLock()
        self._facts_added = 0  # facts inserted by this process (end_session reports)
        self._closed = False
        self.llm = llm
        base_sum = ExtractiveSummarizer(self._embed_quiet)
        if summarizer is not None:
            self._summarizer: Summarizer = summarizer
        elif llm is not None:
            self._summarizer = LLMSummarizer(llm, base_sum)
        else:
            self._summarizer = base_sum
        if fact_extractor is not None:
            self._extractor: FactExtractor = fact_extractor
        elif llm is not None:
            self._extractor = LLMFactExtractor(llm, RuleFactExtractor())
        else:
            self._extractor = RuleFactExtractor()
        self._path = None if path is None else os.fspath(path)
        self._store = Store(self._path, synchronous=str(config.synchronous))
        with self._store.tx():
            name = self._store.get_meta("embedder")
            if name is None:
                self._store.set_meta("embedder", self._embedder.name)
                self._store.set_meta("dim", str(self._dim))
        if name is not None and name != self._embedder.name:
            self._store.close()
            raise ValueError(f"database {self._path} was built with embedder {name!r}, not "
                                 f"{self._embedder.name!r}; open it with embedder={name.split('-')[0]!r}")
        self._load()

    # ------------------------------------------------------------------ state (re)building
    def _load(self) -> None:
        """Rebuild every in-memory structure from the database."""
        c = self.config
        self._vectors = LayerIndex(self._dim, c.ann_threshold, c.ann_m, c.ann_ef_construction, c.ann_ef_search)
        self._lex = LexicalIndex()
        self._recs: dict[int, _Rec] = {}
        self._pending: dict[int, _Rec] = {}  # records whose access bumps are not yet written
        self._users: dict[str, _User] = {}
        self._sessions: dict[tuple[str, str], list[Any]] = {}
        for uid, idx, dt, dl, du in self._store.users():
            u = _User(uid, idx)
            u.drift_total, u.drift_last, u.drift_updates = dt, dl, du
            self._users[uid] = u
        for uid, sid, status, st, en in self._store.sessions():
            self._sessions[(uid, sid)] = [status, st, en]
        pending: dict[int, tuple[list[int], list[bytes]]] = {}
        for row in self._store.load_items():
            emb = row.pop("embedding")
            r = _Rec(**row)
            self._recs[r.id] = r
            u = self._users[r.user_id]
            u.ids.add(r.id)
            if r.status == "active":
                ns = self._ns_of(u, r)
                ids, embs = pending.setdefault(ns, ([], []))
                ids.append(r.id)
                embs.append(emb)
                u.n_active[r.layer] += 1
            self._index(u, r)
        for ns, (ids, embs) in pending.items():
            X = np.frombuffer(b"".join(embs), dtype=np.float32).reshape(len(ids), self._dim)
            self._vectors.add(ns, ids, X)
        for r in list(self._recs.values()):
            if r.kind == "segment" and r.status == "active" and r.layer == "episodic":
                self._add_turn_views(self._users[r.user_id], r, [m for m in r.members if m in self._vectors])
        for u in self._users.values():
            for lst in u.working.values():
                lst.sort(key=lambda i: self._recs[i].seq)
            for lst in u.children.values():
                lst.sort(key=lambda i: self._recs[i].seq)

    def _index(self, u: _User, r: _Rec) -> None:
        """Add a record to the per-user indexes (working queues, tree, current facts, profiles)."""
        if r.kind == "turn" and r.source_id is not None:
            u.by_src[r.source_id] = r.id
        elif r.kind == "fact":
            u.facts.append(r.id)
        who = r.speaker if r.kind == "turn" else (r.subject if r.kind == "fact" else None)
        if who and _norm_key(who) not in u.people:
            u.people[_norm_key(who)] = (who, re.compile(r"(?<!\w)" + re.escape(" ".join(who.split())) + r"(?!\w)", re.I))
        if r.status != "active":
            return
        if r.layer == "working":
            u.working.setdefault(r.session_id, []).append(r.id)
        elif r.layer == "episodic" and r.parent_id is not None and r.parent_id != _NO_TREE:
            u.children.setdefault(r.parent_id, []).append(r.id)
            u.max_depth = max(u.max_depth, int(r.depth))
        elif r.layer == "semantic" and r.kind == "fact":
            u.current.setdefault((_norm_key(r.subject), r.predicate), []).append(r.id)
            u.stale = None
        elif r.layer == "semantic" and r.kind == "profile":
            u.profiles[_norm_key(r.subject)] = r.id
        elif r.layer == "history":
            u.stale = None

    def _urecs(self, u: _User) -> list[_Rec]:
        return [self._recs[i] for i in u.ids]

    def _ns(self, u: _User, layer: str) -> int:
        return (u.idx << 3) | LAYERS[layer]

    @staticmethod
    def _ns_of(u: _User, r: _Rec) -> int:
        """Namespace of an active record's vector (its layer's; episodic leaves: _LEAF)."""
        return (u.idx << 3) | (_LEAF if r.kind == "segment" and r.layer == "episodic" else LAYERS[r.layer])

    def _reload_after_failure(self) -> None:
        try:
            self._store.next_seq = int(self._store.get_meta("next_seq") or 1)
            self._load()
        except Exception:  # pragma: no cover - the database itself is unusable
            _log.exception("lamina: could not rebuild state after a failed write")
            raise

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this Memory is closed")

    def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        x = self._embedder.embed(texts)
        return check_embeddings(x, len(texts), self._dim, type(self._embedder).__name__)

    def _embed_quiet(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return self._embed(texts)

    def _vec(self, r: _Rec) -> npt.NDArray[np.float32]:
        return self._vectors.get([r.id])[0]

    def _vecs(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        return self._vectors.get(ids)

    def _user(self, user_id: str, create: bool = False) -> Optional[_User]:
        u = self._users.get(user_id)
        if u is None and create:
            idx = 1 + max((x.idx for x in self._users.values()), default=0)
            if idx >= (1 << 60):
                raise ValueError("too many users")
            self._store.add_user(user_id, idx)
            u = _User(user_id, idx)
            self._users[user_id] = u
        return u

    def _new_rec(self, u: _User, emb: npt.NDArray[np.float32], new_rows: list[dict[str, Any]], **kw: Any) -> _Rec:
        """Create a record, put it in the arena and queue its database row (caller's transaction)."""
        (rid,) = self._store.new_ids(1)
        kw.setdefault("status", "active")
        kw.setdefault("access_count", 0)
        kw.setdefault("interaction_len", 0.0)
        kw.setdefault("strength", 1.0)
        kw.setdefault("commitment", "persist")
        kw.setdefault("sources", ())
        kw.setdefault("members", [])
        kw.setdefault("depth", 0)
        r = _Rec(id=rid, user_id=u.user_id, seq=rid & ((1 << ID_SHIFT) - 1), **kw)
        if r.last_access is None:
            r.last_access = r.timestamp
        self._recs[rid] = r
        u.ids.add(rid)
        self._place(u, r, emb)
        new_rows.append(r.row(emb))
        self._index(u, r)
        return r

    def _add_turn_views(self, u: _User, leaf: _Rec, members: Sequence[int],
                        embs: Optional[npt.NDArray[np.float32]] = None) -> None:
        """Index the member turns of an episodic leaf one by one (provenance: ``u.seg_of``)."""
        if not members:
            return
        X = self._vecs(members) if embs is None else embs
        self._vectors.add(((u.idx << 3) | _TURN_VIEW), [m | _TKEY for m in members], X)
        self._lex.add(list(members), [f"{self._recs[m].speaker or ''} {self._recs[m].text}" for m in members],
                      (u.idx << 3) | _TURN_VIEW)
        for m in members:
            u.seg_of[m] = leaf.id
            # the read path's per-turn caches, now rather than on a context's first sight of it
            self._ntokens(self._recs[m])
            self._text_key(self._recs[m])

    def _drop_turn_views(self, u: _User, leaf: _Rec) -> None:
        keys = [m | _TKEY for m in (leaf.members or ()) if u.seg_of.get(m) == leaf.id]
        for m in leaf.members or ():
            if u.seg_of.get(m) == leaf.id:
                del u.seg_of[m]
        self._vectors.remove([k for k in keys if k in self._vectors])
        self._lex.remove([k & ~_TKEY for k in keys], missing_ok=True)

    def _place(self, u: _User, r: _Rec, emb: npt.NDArray[np.float32]) -> None:
        self._vectors.add(self._ns_of(u, r), [r.id], emb.reshape(1, -1))
        u.n_active[r.layer] += 1

    def _unplace(self, u: _User, r: _Rec) -> npt.NDArray[np.float32]:
        emb = self._vec(r)
        self._vectors.remove([r.id])
        u.n_active[r.layer] -= 1
        return emb

    def _move(self, u: _User, r: _Rec, layer: str, emb: Optional[npt.NDArray[np.float32]] = None) -> None:
        """Move an active record to another layer (or replace its vector when ``emb`` is given)."""
        old = self._unplace(u, r)
        r.layer = layer
        self._place(u, r, old if emb is None else emb)

    # ------------------------------------------------------------------ write path
    def add(self, messages: Sequence[Mapping[str, Any]], user_id: str, session_id: str,
            timestamp: TimeLike = None) -> list[int]:
        """Append turns to working memory and the archive (one atomic transaction).

        Parameters
        ----------
        messages : list of dict
            Each: ``speaker`` or ``role`` (str), ``text`` or ``content`` (non-empty str), and
            optionally ``id`` (source id, str or int; default ``t<item id>``), ``timestamp``
            (event time: seconds since the epoch, datetime or ISO string), ``domain`` (str),
            ``commitment`` ("persist", "ephemeral": never consolidated, or "verify").
        user_id, session_id : str
        timestamp : event time for messages without one (default: the wall clock now).

        Returns
        -------
        list of int — the item ids of the new turns, in order.

        Raises
        ------
        TypeError, ValueError
            Bad messages, ids or times (nothing is written).
        """
        self._check_open()
        _check_id(user_id, "user_id")
        _check_id(session_id, "session_id")
        default_t = _to_time(timestamp, "timestamp")
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a list of dicts like {'speaker': 'Alice', 'text': '...'}")
        if not messages:
            raise ValueError("messages is empty; pass at least one message")
        parsed: list[dict[str, Any]] = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                raise TypeError(f"messages[{i}] must be a dict, got {type(m).__name__}")
            text = m.get("text", m.get("content"))
            if not isinstance(text, str):
                raise TypeError(f"messages[{i}] needs 'text' (or 'content') as a str, got {type(text).__name__}")
            if not text.strip():
                raise ValueError(f"messages[{i}] has empty text")
            sp = m.get("speaker", m.get("role"))
            if sp is not None and not isinstance(sp, str):
                raise TypeError(f"messages[{i}]['speaker'] must be a str, got {type(sp).__name__}")
            src = m.get("id")
            if src is not None:
                if isinstance(src, bool) or not isinstance(src, (str, int)):
                    raise TypeError(f"messages[{i}]['id'] must be a str or int, got {type(src).__name__}")
                src = str(src)
            t = _to_time(m.get("timestamp"), f"messages[{i}]['timestamp']")
            dom = m.get("domain")
            if dom is not None and not isinstance(dom, str):
                raise TypeError(f"messages[{i}]['domain'] must be a str")
            com = m.get("commitment", "persist")
            if com not in _COMMITMENTS:
                raise ValueError(f"messages[{i}]['commitment'] must be one of {_COMMITMENTS}, got {com!r}")
            parsed.append({"text": text, "speaker": sp, "source_id": src, "timestamp": t, "domain": dom,
                           "commitment": com})
        emb = self._embed([p["text"] for p in parsed])
        wall = _now()
        for p in parsed:
            if p["timestamp"] is None:
                p["timestamp"] = default_t if default_t is not None else wall
        with self._lock:
            self._check_open()
            self._flush_pending()
            try:
                with self._store.tx():
                    ids = self._add_locked(parsed, emb, user_id, session_id)
            except BaseException:
                self._reload_after_failure()
                raise
        return ids

    def _add_locked(self, parsed: list[dict[str, Any]], emb: npt.NDArray[np.float32], user_id: str,
                    session_id: str) -> list[int]:
        u = self._user(user_id, create=True)
        assert u is not None
        key = (user_id, session_id)
        first_t = parsed[0]["timestamp"]
        sess = self._sessions.get(key)
        if sess is None or sess[0] != "open":
            started = first_t if sess is None else sess[1]
            self._sessions[key] = ["open", started, None]
            self._store.upsert_session(user_id, session_id, "open", started, None)
        rows: list[dict[str, Any]] = []
        ids: list[int] = []
        for p, e in zip(parsed, emb):
            r = self._new_rec(u, e, rows, session_id=session_id, layer="working", kind="turn", text=p["text"],
                              speaker=p["speaker"], timestamp=p["timestamp"], created_at=p["timestamp"],
                              domain=p["domain"], commitment=p["commitment"], interaction_len=1.0)
            r.source_id = p["source_id"] if p["source_id"] is not None else f"t{r.id}"
            r.sources = (r.source_id,)
            u.by_src[r.source_id] = r.id
            rows[-1]["source_id"] = r.source_id
            rows[-1]["sources"] = r.sources
            ids.append(r.id)
        self._store.insert_items(rows)
        q = u.working.setdefault(session_id, [])
        if len(q) > self.config.working_capacity:
            half = max(1, self.config.working_capacity // 2)
            self._dequeue(u, session_id, len(q) - self.config.working_capacity + half)
        return ids

    def _dequeue(self, u: _User, session_id: str, n: int) -> None:
        """Move the oldest n turns of a session's working memory to the archive and the tree."""
        q = u.working[session_id]
        out, u.working[session_id] = q[:n], q[n:]
        if not u.working[session_id]:
            del u.working[session_id]
        turns = [self._recs[i] for i in out]
        embs = self._vecs(out)
        for r in turns:
            self._move(u, r, "archive")
        self._store.update_items([(r.id, {"layer": "archive"}) for r in turns])
        keep = [(r, e) for r, e in zip(turns, embs) if r.commitment != "ephemeral"]
        if keep:
            self._consolidate(u, [r for r, _ in keep], np.stack([e for _, e in keep]))

    def _segments(self, turns: list[_Rec], embs: npt.NDArray[np.float32]) -> list[list[int]]:
        """Cut adjacent turns into segments: a turn joins while cos(turn, centroid) >= threshold."""
        c = self.config
        segs: list[list[int]] = []
        cur: list[int] = []
        centroid = np.zeros(self._dim, dtype=np.float32)
        for i in range(len(turns)):
            if cur:
                sim = float(embs[i] @ _unit(centroid))
                if len(cur) >= c.max_segment_turns or (len(cur) >= c.min_segment_turns and sim < c.segment_threshold):
                    segs.append(cur)
                    cur, centroid = [], np.zeros(self._dim, dtype=np.float32)
            cur.append(i)
            centroid = centroid + embs[i]
        if cur:
            if segs and len(cur) < c.min_segment_turns and len(segs[-1]) + len(cur) <= c.max_segment_turns:
                segs[-1].extend(cur)
            else:
                segs.append(cur)
        return segs

    def _turn_views(self, recs: Iterable[_Rec]) -> list[Turn]:
        return [Turn(r.source_id, r.speaker, r.text, r.timestamp) for r in recs]

    def _consolidate(self, u: _User, turns: list[_Rec], embs: npt.NDArray[np.float32]) -> None:
        """Segments -> episodic leaves (MemTree insertion) and facts -> semantic (Resolve)."""
        rows: list[dict[str, Any]] = []
        updates: list[tuple[int, dict[str, Any]]] = []
        for seg in (self._segments(turns, embs) if "episodic" in self.config.layers else []):
            recs = [turns[i] for i in seg]
            e = _unit(embs[seg].mean(axis=0))
            summary = self._summarizer.summarize(self._turn_views(recs), self.config.summary_words) or recs[0].text
            text = "\n".join(f"{r.speaker}: {r.text}" if r.speaker else r.text for r in recs)
            srcs: list[str] = []
            for r in recs:
                srcs.extend(r.sources)
            leaf = self._new_rec(u, e, rows, session_id=recs[-1].session_id, layer="episodic", kind="segment",
                                 text=text, summary=summary, sources=tuple(dict.fromkeys(srcs)),
                                 members=[r.id for r in recs], timestamp=recs[-1].timestamp,
                                 created_at=recs[0].timestamp, interaction_len=float(len(recs)),
                                 domain=recs[0].domain, parent_id=None, depth=1)
            self._tree_insert(u, leaf, e, rows, updates)
            self._add_turn_views(u, leaf, [r.id for r in recs], np.ascontiguousarray(embs[seg]))
        self._store.insert_items(rows)
        self._store.update_items(updates)
        if "semantic" not in self.config.layers:
            return
        facts = self._extractor.extract(self._turn_views(turns))
        by_src = {r.source_id: r for r in turns}
        self._resolve(u, facts, by_src)

    # -- MemTree
    def _theta(self, depth: int, height: int) -> float:
        return self.config.tree_theta0 * math.exp(self.config.tree_lambda * depth / max(1, height))

    def _tree_insert(self, u: _User, leaf: _Rec, e: npt.NDArray[np.float32], rows: list[dict[str, Any]],
                     updates: list[tuple[int, dict[str, Any]]]) -> None:
        v, depth = _ROOT, 0
        path: list[int] = []
        height = max(1, u.max_depth)
        # The leaf was indexed under parent None; attach it properly below.
        while True:
            if v != _ROOT and self._recs[v].kind == "segment":
                # Leaf expansion: a new internal node takes v's place, v and the new leaf under it.
                old = self._recs[v]
                parent = old.parent_id
                sib = u.children[parent]
                node = self._new_rec(u, self._vec(old), rows, session_id=leaf.session_id, layer="episodic",
                                     kind="summary", text=old.summary or old.text, summary=old.summary,
                                     sources=(), members=[], timestamp=old.timestamp, created_at=old.created_at,
                                     parent_id=None, depth=old.depth)
                sib[sib.index(v)] = node.id
                sib.sort(key=lambda i: self._recs[i].seq)
                node.parent_id = parent
                rows[-1]["parent_id"] = parent
                u.children[node.id] = [v]
                old.parent_id, old.depth = node.id, old.depth + 1
                updates.append((old.id, {"parent_id": old.parent_id, "depth": old.depth}))
                self._attach(u, leaf, node.id, old.depth, rows)
                path.append(node.id)
                break
            kids = u.children.get(v, [])
            if not kids:
                self._attach(u, leaf, v, depth + 1, rows)
                break
            sims = self._vecs(kids) @ e
            b = int(np.argmax(sims))
            if float(sims[b]) >= self._theta(depth, height):
                v = kids[b]
                depth += 1
                if self._recs[v].kind == "summary":
                    path.append(v)
                continue
            self._attach(u, leaf, v, depth + 1, rows)
            break
        for nid in reversed(path):  # deepest first, so parents see fresh child summaries
            self._resummarise(u, self._recs[nid], leaf, rows, updates)

    def _attach(self, u: _User, leaf: _Rec, parent: int, depth: int, rows: list[dict[str, Any]]) -> None:
        leaf.parent_id, leaf.depth = parent, depth
        u.children.setdefault(parent, []).append(leaf.id)
        u.max_depth = max(u.max_depth, depth)
        for row in rows:
            if row["id"] == leaf.id:
                row["parent_id"], row["depth"] = parent, depth

    def _resummarise(self, u: _User, node: _Rec, leaf: _Rec, rows: list[dict[str, Any]],
                     updates: list[tuple[int, dict[str, Any]]]) -> None:
        """Re-summarise an ancestor of a newly inserted leaf (its sources and interaction length
        grow by the leaf's; a freshly expanded node also takes its first child's)."""
        kids = [self._recs[k] for k in u.children.get(node.id, [])]
        if not kids:
            return
        views = [Turn(str(k.id), None, k.summary or k.text, k.timestamp) for k in kids]
        summary = self._summarizer.summarize(views, self.config.summary_words) or kids[-1].text
        grow = list(leaf.sources)
        if not node.sources:  # new internal node from a leaf expansion: its first child's provenance
            grow = [s for k in kids if k.id != leaf.id for s in k.sources] + grow
            node.interaction_len = float(sum(k.interaction_len for k in kids if k.id != leaf.id))
        node.text = node.summary = summary
        node.sources = tuple(dict.fromkeys(tuple(node.sources) + tuple(grow)))
        node.timestamp = max((k.timestamp for k in kids if k.timestamp is not None), default=node.timestamp)
        node.interaction_len = float(node.interaction_len or 0.0) + float(leaf.interaction_len)
        emb = self._embed([summary])[0]
        self._move(u, node, "episodic", emb)
        fields_ = {"text": node.text, "summary": node.summary, "sources": node.sources, "timestamp": node.timestamp,
                   "interaction_len": node.interaction_len, "embedding": emb.tobytes()}
        for row in rows:
            if row["id"] == node.id:
                row.update(fields_)
                return
        updates.append((node.id, fields_))

    # -- semantic: Resolve and profiles
    def _same_value(self, a: str, b: str) -> bool:
        if _norm_key(a) == _norm_key(b):
            return True
        x = self._embed([a, b])
        return float(x[0] @ x[1]) >= self.config.resolve_threshold

    def _resolve(self, u: _User, facts: list[Fact], by_src: Mapping[str, _Rec]) -> None:
        """Resolve(τ_s): insert facts; a new object of a functional predicate supersedes the old."""
        if not facts:
            return
        rows: list[dict[str, Any]] = []
        updates: list[tuple[int, dict[str, Any]]] = []
        touched: set[str] = set()
        embs = self._embed([f.text for f in facts])
        for f, e in zip(facts, embs):
            key = (_norm_key(f.subject), f.predicate)
            src_recs = [by_src[s] for s in f.sources if s in by_src]
            commitment = "verify" if any(r.commitment == "verify" for r in src_recs) else "persist"
            domain = src_recs[0].domain if src_recs else None
            t = f.timestamp if f.timestamp is not None else (src_recs[0].timestamp if src_recs else _now())
            cur_ids = u.current.get(key, [])
            same = next((i for i in cur_ids if self._same_value(self._recs[i].object, f.object)), None)
            if same is not None:  # reinforcement: same value stated again
                r = self._recs[same]
                r.sources = tuple(dict.fromkeys(r.sources + tuple(f.sources)))
                r.strength += 1.0
                updates.append((r.id, {"sources": r.sources, "strength": r.strength}))
                u.stale = None
                continue
            if f.functional and cur_ids:
                cur = self._recs[cur_ids[0]]
                if t < cur.valid_from:
                    # An older statement replayed late: it goes straight to history.
                    self._new_rec(u, e, rows, session_id=src_recs[0].session_id if src_recs else None,
                                  layer="history", kind="fact", text=f.text, subject=f.subject, predicate=f.predicate,
                                  object=f.object, sources=tuple(f.sources), timestamp=t, created_at=t, valid_from=t,
                                  valid_to=cur.valid_from, superseded_by=cur.id, domain=domain, commitment=commitment)
                    continue
                new = self._new_rec(u, e, rows, session_id=src_recs[0].session_id if src_recs else None,
                                    layer="semantic", kind="fact", text=f.text, subject=f.subject,
                                    predicate=f.predicate, object=f.object, sources=tuple(f.sources), timestamp=t,
                                    created_at=t, valid_from=t, domain=domain, commitment=commitment)
                cur_ids = u.current[key]
                cur_ids.remove(cur.id)
                cur.valid_to, cur.superseded_by = t, new.id
                self._move(u, cur, "history")
                updates.append((cur.id, {"layer": "history", "valid_to": t, "superseded_by": new.id}))
                u.stale = None
            else:
                self._new_rec(u, e, rows, session_id=src_recs[0].session_id if src_recs else None, layer="semantic",
                              kind="fact", text=f.text, subject=f.subject, predicate=f.predicate, object=f.object,
                              sources=tuple(f.sources), timestamp=t, created_at=t, valid_from=t, domain=domain,
                              commitment=commitment)
            touched.add(f.subject)
            self._facts_added += 1
        self._store.insert_items(rows)
        self._store.update_items(updates)
        for subj in sorted(touched):
            self._update_profile(u, subj)

    def _update_profile(self, u: _User, subject: str) -> None:
        """Entity profile: text = current facts; embedding moves by the damped update (eq. 9–10)."""
        sk = _norm_key(subject)
        facts = [self._recs[i] for (s, _), ids in sorted(u.current.items()) if s == sk for i in ids]
        if not facts:
            return
        facts.sort(key=lambda r: (r.predicate, r.valid_from or 0.0))
        parts = [fact_sentence(subject, r.predicate, r.object)[len(subject) + 1:] for r in facts]
        text = f"{subject}: " + "; ".join(parts)
        target = self._embed([text])
        t = max(r.valid_from or 0.0 for r in facts)
        srcs: list[str] = []
        for r in facts:
            srcs.extend(r.sources)
        pid = u.profiles.get(sk)
        if pid is None:
            rows: list[dict[str, Any]] = []
            self._new_rec(u, target[0], rows, layer="semantic", kind="profile", text=text, subject=subject,
                          sources=tuple(dict.fromkeys(srcs)), timestamp=t, created_at=t)
            self._store.insert_items(rows)
            return
        p = self._recs[pid]
        rows_ = self._vec(p).reshape(1, -1).astype(np.float32)
        drift = kernels.damped_update(rows_, np.ascontiguousarray(target, dtype=np.float32),
                                      float(self.config.profile_lambda))
        d = float(np.asarray(drift).reshape(-1)[0])
        u.drift_total += d
        u.drift_last = d
        u.drift_updates += 1
        self._store.set_drift(u.user_id, u.drift_total, u.drift_last, u.drift_updates)
        p.text, p.timestamp, p.sources = text, t, tuple(dict.fromkeys(srcs))
        self._move(u, p, "semantic", rows_[0])
        self._store.update_items([(p.id, {"text": text, "timestamp": t, "sources": p.sources,
                                          "embedding": rows_[0].tobytes()})])

    # -- end of session
    def end_session(self, user_id: str, session_id: str, now: TimeLike = None) -> dict[str, Any]:
        """Consolidate a session (one atomic transaction).

        Flushes the session's working memory into episodic segments (and facts), adds the session
        summary ŝ = ψ(session) and blends it into the matching earlier episode (eq. 5, α),
        decays episodic strengths by α, promotes hot episodes (heat > τ) to semantic notes, and
        projects the layers onto their capacities (Π_C: the most redundant items go first; module
        docstring). Raw turns stay in the archive.

        Parameters
        ----------
        now : event time of the consolidation (default: the session's last turn time).

        Returns
        -------
        dict — counts: ``segments``, ``facts``, ``promoted``, ``evicted``, ``blend_drift``.

        Raises
        ------
        IndexError
            Unknown user or session.
        """
        self._check_open()
        _check_id(user_id, "user_id")
        _check_id(session_id, "session_id")
        t_now = _to_time(now, "now")
        with self._lock:
            self._check_open()
            u = self._users.get(user_id)
            if u is None:
                raise IndexError(f"unknown user_id {user_id!r}")
            if (user_id, session_id) not in self._sessions:
                raise IndexError(f"unknown session {session_id!r} for user {user_id!r}")
            self._flush_pending()
            try:
                with self._store.tx():
                    return self._end_session_locked(u, session_id, t_now)
            except BaseException:
                self._reload_after_failure()
                raise

    def _end_session_locked(self, u: _User, session_id: str, t_now: Optional[float]) -> dict[str, Any]:
        c = self.config
        report = {"segments": 0, "facts": 0, "promoted": 0, "evicted": 0, "blend_drift": 0.0}
        if self._sessions[(u.user_id, session_id)][0] == "ended" and session_id not in u.working:
            return report  # already consolidated
        n_seg0 = u.n_active["episodic"]
        n_fact0 = self._facts_added
        session_turns = sorted((r for r in self._urecs(u) if r.session_id == session_id
                                and r.kind == "turn" and r.commitment != "ephemeral"), key=lambda r: r.seq)
        if session_id in u.working:
            self._dequeue(u, session_id, len(u.working[session_id]))
        if t_now is None:
            t_now = max((r.timestamp for r in session_turns if r.timestamp is not None), default=_now())
        rows: list[dict[str, Any]] = []
        updates: list[tuple[int, dict[str, Any]]] = []
        # Strength decay of earlier episodes (the α·M_{t-1} part of eq. 5).
        old_ep = [r for r in self._urecs(u) if r.layer == "episodic"
                  and r.status == "active" and r.session_id != session_id]
        for r in old_ep:
            r.strength *= c.alpha
            updates.append((r.id, {"strength": r.strength}))
        if session_turns and "episodic" in c.layers:
            summary = self._summarizer.summarize(self._turn_views(session_turns), c.summary_words)
            if summary.strip():
                s_emb = self._embed([summary])
                # Blend ŝ into the most similar earlier session summary (eq. 5) via the EMA kernel.
                prev = [r.id for r in old_ep if r.kind == "summary" and r.parent_id == _NO_TREE]
                if prev:
                    P = self._vecs(prev)
                    sims = P @ s_emb[0]
                    b = int(np.argmax(sims))
                    if float(sims[b]) >= c.blend_threshold:
                        row = np.ascontiguousarray(P[b:b + 1])
                        drift = kernels.ema_blend(row, np.ascontiguousarray(s_emb), float(c.alpha), renormalize=True)
                        report["blend_drift"] = float(np.asarray(drift).reshape(-1)[0])
                        m = self._recs[prev[b]]
                        self._move(u, m, "episodic", row[0])
                        updates.append((m.id, {"embedding": row[0].tobytes()}))
                srcs: list[str] = []
                for r in session_turns:
                    srcs.extend(r.sources)
                self._new_rec(u, s_emb[0], rows, session_id=session_id, layer="episodic", kind="summary",
                              text=summary, summary=summary, sources=tuple(dict.fromkeys(srcs)),
                              timestamp=session_turns[-1].timestamp, created_at=session_turns[0].timestamp,
                              interaction_len=float(len(session_turns)), parent_id=_NO_TREE, depth=0)
        self._store.insert_items(rows)
        self._store.update_items(updates)
        report["promoted"] = self._promote(u, t_now) if "semantic" in c.layers else 0
        report["evicted"] = self._evict(u, t_now)
        report["segments"] = max(0, u.n_active["episodic"] - n_seg0)
        report["facts"] = self._facts_added - n_fact0
        key = (u.user_id, session_id)
        st = self._sessions[key]
        self._sessions[key] = ["ended", st[1], t_now]
        self._store.upsert_session(u.user_id, session_id, "ended", st[1], t_now)
        return report

    def _heat(self, recs: list[_Rec], now: float) -> npt.NDArray[np.float32]:
        c = self.config
        visits = np.array([r.access_count for r in recs], dtype=np.float32)
        ilen = np.array([r.interaction_len for r in recs], dtype=np.float32)
        last = np.array([r.last_access if r.last_access is not None else now for r in recs], dtype=np.float64)
        return np.asarray(kernels.heat_scores(visits, ilen, last, float(now), a=c.heat_a, b=c.heat_b, c=c.heat_c,
                                              mu=c.heat_mu), dtype=np.float32)

    def _promote(self, u: _User, now: float) -> int:
        """Episodes with heat > τ become semantic notes (their facts are already extracted)."""
        leaves = [r for r in self._urecs(u) if r.layer == "episodic"
                  and r.status == "active" and r.kind == "segment"]
        if not leaves:
            return 0
        heat = self._heat(leaves, now)
        hot = np.asarray(kernels.select_hot(heat, float(self.config.promote_threshold))).reshape(-1)
        if hot.size == 0:
            return 0
        rows: list[dict[str, Any]] = []
        updates: list[tuple[int, dict[str, Any]]] = []
        chosen = [leaves[int(i)] for i in hot]
        embs = self._embed([r.summary or r.text for r in chosen])
        for r, e in zip(chosen, embs):
            self._new_rec(u, e, rows, session_id=r.session_id, layer="semantic", kind="note", text=r.summary or r.text,
                          summary=r.summary, sources=r.sources, timestamp=r.timestamp, created_at=now,
                          domain=r.domain, last_access=now)
            r.access_count, r.interaction_len, r.last_access = 0, 0.0, now
            updates.append((r.id, {"access_count": 0, "interaction_len": 0.0, "last_access": now}))
        self._store.insert_items(rows)
        self._store.update_items(updates)
        return len(chosen)

    def _evict(self, u: _User, now: float) -> int:
        """Capacity projection Π_C: beyond C_e / C_s, the items whose loss costs least leave the
        active layers (``MemoryConfig.eviction``; the rule is in the module docstring)."""
        c = self.config
        recs = sorted((r for r in self._urecs(u) if r.status == "active" and (
            (r.layer == "episodic" and (r.kind == "segment" or r.parent_id == _NO_TREE))
            or (r.layer == "semantic" and r.kind in ("fact", "note")))), key=lambda r: r.id)
        ep = [r for r in recs if r.layer == "episodic"]
        sem = [r for r in recs if r.layer == "semantic"]
        if len(ep) <= c.episodic_capacity and len(sem) <= c.semantic_capacity:
            return 0
        if c.eviction == "heat":
            victims: list[_Rec] = []
            for pool, cap in ((ep, c.episodic_capacity), (sem, c.semantic_capacity)):
                if len(pool) <= cap:
                    continue
                score = (self._heat(pool, now) * np.array([r.strength for r in pool], dtype=np.float32))
                ns = np.zeros(len(pool), dtype=np.uint64)
                out = np.asarray(kernels.evict_to_capacity(np.ascontiguousarray(score, dtype=np.float32), ns,
                                                           int(cap))).reshape(-1)
                victims.extend(pool[int(i)] for i in out)
        else:
            items = ep + sem
            gone = _CoverageProjection(self, u, items, len(ep), now).run()
            victims = [items[int(i)] for i in gone]
        for r in victims:
            self._evict_one(u, r)
        if victims:
            u.max_depth = max((int(self._recs[i].depth) for kids in u.children.values() for i in kids), default=0)
        return len(victims)

    def _evict_one(self, u: _User, r: _Rec) -> None:
        updates: list[tuple[int, dict[str, Any]]] = []
        stack = [r]
        while stack:
            x = stack.pop()
            if x.status != "active":
                continue
            self._unplace(u, x)
            if x.kind == "segment":
                self._drop_turn_views(u, x)
            x.status = "evicted"
            updates.append((x.id, {"status": "evicted"}))
            if x.kind == "fact":
                lst = u.current.get((_norm_key(x.subject), x.predicate), [])
                if x.id in lst:
                    lst.remove(x.id)
                u.stale = None
            if x.layer == "episodic" and x.parent_id not in (None, _NO_TREE):
                sib = u.children.get(x.parent_id, [])
                if x.id in sib:
                    sib.remove(x.id)
                if not sib and x.parent_id != _ROOT:
                    u.children.pop(x.parent_id, None)
                    stack.append(self._recs[x.parent_id])  # an internal node with no children goes too
                elif len(sib) == 1 and x.parent_id != _ROOT:
                    self._splice(u, self._recs[x.parent_id], updates)
        self._store.update_items(updates)

    def _splice(self, u: _User, node: _Rec, updates: list[tuple[int, dict[str, Any]]]) -> None:
        """An internal node left with one child is replaced by that child (which moves up a level
        with its subtree), so that evictions do not leave chains of one-child summaries behind:
        without this, internal nodes outlive their leaves and the tree grows without bound."""
        (child,) = u.children.pop(node.id)
        parent = node.parent_id
        sib = u.children.get(parent, [])
        if node.id in sib:
            sib[sib.index(node.id)] = child
            sib.sort(key=lambda i: self._recs[i].seq)
        c = self._recs[child]
        c.parent_id = parent
        updates.append((c.id, {"parent_id": parent}))
        stack = [c]
        while stack:
            y = stack.pop()
            y.depth = max(0, int(y.depth) - 1)
            updates.append((y.id, {"depth": y.depth}))
            stack.extend(self._recs[k] for k in u.children.get(y.id, []))
        self._unplace(u, node)
        node.status = "evicted"
        updates.append((node.id, {"status": "evicted"}))

    # ------------------------------------------------------------------ read path
    def _query_vec(self, query: str, query_embedding: Optional[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if not query.strip():
            raise ValueError("query is empty")
        if query_embedding is None:
            return self._embed([query])
        q = query_embedding
        if not isinstance(q, np.ndarray) or q.dtype != np.float32:
            raise TypeError("query_embedding must be a float32 numpy array of shape (dim,)")
        if q.shape != (self._dim,):
            raise ValueError(f"query_embedding must have shape ({self._dim},), got {q.shape}")
        if not np.isfinite(q).all() or not np.any(q):
            raise ValueError("query_embedding must be finite and non-zero")
        return np.ascontiguousarray(q.reshape(1, -1))

    def _stale(self, u: _User) -> "_Staleness":
        """What only supports superseded facts: their source turns, and their object values
        (when the current value of the same subject + predicate is different)."""
        if u.stale is None:
            hist: set[str] = set()
            cur: set[str] = set()
            values: dict[str, set[str]] = {}
            resolved: set[int] = set()
            for i in u.facts:
                r = self._recs[i]
                if r.status != "active":
                    continue
                (hist if r.layer == "history" else cur).update(r.sources)
                if r.layer == "history" and r.superseded_by is not None:
                    resolved.add(int(r.superseded_by))
                if r.layer == "history":
                    key = (_norm_key(r.subject or ""), r.predicate or "")
                    now_ids = u.current.get(key, [])
                    now_vals = {_norm_key(self._recs[i].object or "") for i in now_ids}
                    old = _norm_key(r.object or "")
                    if old and now_vals and old not in now_vals:
                        values.setdefault(old, set()).update(now_vals)
            st = _Staleness(frozenset(hist - cur), values, frozenset(resolved))
            last = u.stale_last
            if last is not None and (last.sources, last.values, last.resolved) == (st.sources, st.values, st.resolved):
                st = last  # nothing it depends on changed: keep its per-item cache
            u.stale = u.stale_last = st
        return u.stale

    def _candidates_multi(self, u: _User, q: npt.NDArray[np.float32], layers: Sequence[str], k: int,
                          now: Optional[float], domain: Optional[str], leaves: bool = True,
                          k_of: Optional[Mapping[str, int]] = None) -> dict[str, list[tuple[float, _Rec]]]:
        """Top-k per layer: one native call per arena for the layers searched exactly (one query
        row per (user, layer) namespace), hnswlib for layers past ``ann_threshold``.

        The episodic layer's leaves are searched only with ``leaves`` (its list is then the
        top-k of leaves and of summaries each, for the caller to rank). ``k_of``: a smaller k
        for some layers (their top-k is the prefix of the top-``k``)."""
        res: dict[str, list[tuple[float, _Rec]]] = {L: [] for L in layers}
        live = [L for L in layers if u.n_active.get(L, 0) > 0]
        if not live:
            return res
        nss = [self._ns(u, L) for L in live]
        if leaves and "episodic" in live:
            nss.append((u.idx << 3) | _LEAF)
        found = self._vectors.search(q, nss, k)
        for L, (scores, ids) in zip(live, found):
            if k_of and L in k_of:
                scores, ids = scores[: k_of[L]], ids[: k_of[L]]
            res[L] = self._hits(scores, ids, now, domain)
        if len(found) > len(live):
            res["episodic"] += self._hits(*found[-1], now, domain)
        return res

    def _hits(self, scores: list[float], ids: list[int], now: Optional[float],
              domain: Optional[str]) -> list[tuple[float, _Rec]]:
        recs = self._recs
        if now is None and domain is None:
            return [(float(s), recs[i]) for s, i in zip(scores, ids)]
        return [(float(s), recs[i]) for s, i in zip(scores, ids) if self._visible(recs[i], now, domain)]

    @staticmethod
    def _visible(r: _Rec, now: Optional[float], domain: Optional[str]) -> bool:
        """Whether a candidate passes the replay clock (the future is not known yet) and the
        domain gate (items tagged with another domain are blocked)."""
        return not ((now is not None and r.timestamp is not None and r.timestamp > now)
                    or (domain is not None and r.domain is not None and r.domain != domain))

    def _item(self, r: _Rec, score: float = 0.0) -> MemoryItem:
        turns: tuple[tuple[Optional[float], Optional[str], str], ...] = ()
        if r.kind == "segment":
            turns = tuple((self._recs[m].timestamp, self._recs[m].speaker, self._recs[m].text)
                          for m in r.members if m in self._recs)
        if r.kind == "fact" and r.sources:
            u = self._users[r.user_id]
            src = self._recs.get(u.by_src.get(r.sources[-1], -1))
            if src is not None:
                turns = ((src.timestamp, src.speaker, src.text),)
        layer = r.layer if r.status == "active" else ("archive" if r.kind == "turn" else r.layer)
        return MemoryItem(id=r.id, text=r.text, layer=layer, kind=r.kind, user_id=r.user_id, session_id=r.session_id,
                          score=score, sources=tuple(r.sources), timestamp=r.timestamp, speaker=r.speaker,
                          subject=r.subject, predicate=r.predicate, object=r.object, valid_from=r.valid_from,
                          valid_to=r.valid_to, superseded_by=r.superseded_by, summary=r.summary,
                          access_count=int(r.access_count), last_access=r.last_access, strength=float(r.strength),
                          domain=r.domain, commitment=r.commitment, turns=turns)

    def context(self, query: str, user_id: str, budget: int = 1024, now: TimeLike = None, *,
                domain: Optional[str] = None, include_archive: bool = False,
                query_embedding: Optional[npt.NDArray[np.float32]] = None) -> Context:
        """Build a budgeted context for ``query`` from ``user_id``'s memory.

        Per active layer (working, episodic, semantic; the archive too with
        ``include_archive=True``): top-m candidates by cosine; layer relevance r_i = mean of the
        top ``relevance_top`` similarities; γ = softmax_gate(β·r) with the entropy bound ε;
        the budget is split ∝ γ (working first, at most ``working_share``), filled by score, then
        the rest by global score; duplicates (sources already covered) are dropped; items under
        ``min_similarity`` never enter (nothing left → ``abstain``); the result is ordered against
        lost-in-the-middle. Returned items get ``access_count`` += 1 and ``last_access`` = now.

        Parameters
        ----------
        query : str
        user_id : str
            An unknown user has no memories: the context abstains.
        budget : int
            Token budget (whitespace words of the rendered context), >= 1.
        now : event time of the question (default: wall clock). When given, items stated after
            ``now`` are invisible (replays behave as if it were then).
        domain : str, optional
            Domain gate: items tagged with another domain are blocked.
        query_embedding : ndarray, shape (dim,), float32, optional
            Precomputed query vector (skips embedding).

        Returns
        -------
        Context
        """
        self._check_open()
        _check_id(user_id, "user_id")
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
            raise TypeError(f"budget must be an int (tokens), got {type(budget).__name__}")
        if budget <= 0:
            raise ValueError(f"budget must be >= 1 token, got {budget}")
        budget = int(budget)
        t_now = _to_time(now, "now")
        if domain is not None and not isinstance(domain, str):
            raise TypeError("domain must be a str or None")
        q = self._query_vec(query, query_embedding)
        c = self.config
        with self._lock:
            self._check_open()
            u = self._users.get(user_id)
            empty = Context(items=[], gates={}, beta=float(c.beta), abstain=True, query=query, budget=budget)
            if u is None:
                return empty
            layers = [L for L in _ACTIVE if L in c.layers] + (["archive"] if include_archive else [])
            stale = self._stale(u)
            # enough candidates to fill the budget unless items average under 4 tokens (a turn
            # on its own renders as "[date time]" + "Speaker: word"); a shallower first search
            # with a deeper retry was measured slower (the retry ran for half the queries of
            # bench/bench_memory.py) and lost recall on LoCoMo (shallower fusion lists)
            m = max(c.candidates, -(-budget // 4))
            sel = self._select(u, q, query, layers, m, t_now, domain, budget, stale)
            if sel is None:
                return empty
            chosen, used, gates, b_used, via = sel
            if not chosen:
                return Context(items=[], gates=gates, beta=b_used, abstain=True, query=query, budget=budget)
            ordered = _lost_in_the_middle(chosen)
            bump_t = t_now if t_now is not None else _now()
            items = []
            for s, r in ordered:
                it = self._item(r, s)
                if r.id in via and r.status == "active" and r.layer == "archive":
                    it.layer = "episodic"  # an episode's turn, shown on its own
                items.append(it)
            # a turn shown for its episode also heats the episode (promotion, eviction)
            heated: dict[int, _Rec] = {}
            for _, r in ordered:
                heated[r.id] = r
                leaf = u.seg_of.get(r.id) if r.id in via else None
                if leaf is not None:
                    heated[leaf] = self._recs[leaf]
            self._bump(list(heated.values()), bump_t)
            return Context(items=items, gates=gates, beta=b_used, abstain=False, query=query, budget=budget)

    @staticmethod
    def _scope(u: _User, query: str) -> Optional[str]:
        """The one person the query names among those this user's memory attributes items to
        (speakers of turns, subjects of facts); None when it names none or several."""
        named = [k for k, (_, pat) in u.people.items() if pat.search(query)]
        return named[0] if len(named) == 1 else None

    def _select(self, u: _User, q: npt.NDArray[np.float32], query: str, layers: Sequence[str], m: int,
                t_now: Optional[float], domain: Optional[str], budget: int, stale: "_Staleness"
                ) -> Optional[tuple[list[tuple[float, _Rec]], int, dict[str, float], float, set[int]]]:
        """Candidates at depth ``m`` per layer, the gate, and the budget fill.

        Returns None when no layer has a candidate above the floor; else (chosen, tokens used,
        gates, β used, ids of turns found through their episode)."""
        c = self.config
        per_layer: dict[str, list[tuple[float, _Rec]]] = {}
        rel: dict[str, float] = {}
        scope = self._scope(u, query) if c.speaker_scope > 0 else None
        scope_name = u.people[scope][0] if scope is not None else None
        shown: dict[int, float] = {}  # scores lowered by the speaker scope (presentation only)
        other: dict[str, bool] = {}  # speaker / subject -> is someone else than the named person
        # The episodic layer's own rows searched here are its summaries (aggregates: they only
        # fill what specific items leave), so c.candidates of them are enough (its leaves are
        # found through their turns instead); the other layers get m.
        found = self._candidates_multi(u, q, layers, m, t_now, domain, leaves=False,
                                       k_of={"episodic": min(m, c.candidates)})
        via: set[int] = set()  # turns found through their leaf
        if "episodic" in found:
            found["episodic"], folded, via = self._episodic_candidates(u, q, query, found["episodic"], m, t_now,
                                                                       domain, found.get("semantic", ()))
            if folded:
                found["semantic"] = [(s, r) for s, r in found["semantic"] if r.id not in folded]
        for L in layers:
            cands = found[L]
            if not cands:
                continue
            adj: list[tuple[float, _Rec]] = []
            spec: list[float] = []  # scores of the layer's specific items (turns, facts)
            floor, sp, stp = c.min_similarity, c.speaker_scope, c.stale_penalty
            # (hot loop: names resolved once.) A penalty w in [0, 1] lowers a cosine-scale score
            # by the share w of its magnitude: s - |s|·w (×(1 − w) for a positive score; a
            # negative one moves down too, never up).
            wcache = stale._cache if stale else None
            for s, r in cands:
                kind = r.kind
                if kind not in _GENERAL:
                    spec.append(s)
                if wcache is not None and kind != "fact":
                    w = wcache.get(r.id)
                    if w is None:
                        w = stale.weight(r.id, r.text, r.sources, self._text_key(r))
                    if w:
                        s = s - abs(s) * (stp * w)  # the stale penalty
                if s < floor:
                    continue
                adj.append((s, r))
                if scope is not None:
                    who = r.speaker if kind == "turn" else (r.subject if kind in ("fact", "profile") else None)
                    if who is not None:
                        o = other.get(who)
                        if o is None:
                            o = other[who] = who != scope_name and _norm_key(who) != scope
                        if o:
                            shown[r.id] = s - abs(s) * sp  # the speaker-scope penalty
            # r_i from the layer's best specific items; aggregates only when it has nothing else
            top = sorted(spec or [s for s, _ in cands], reverse=True)[: c.relevance_top]
            acc = 0.0
            for x in top:  # the mean, summed in order (as numpy does for so few values)
                acc += x
            rel[L] = acc / len(top)
            if L == "working":  # the fill walks working memory in this order; the rest it ranks itself
                adj.sort(key=lambda x: (-x[0], x[1].id in shown, x[1].seq))  # ties: the named person first
            per_layer[L] = adj
        names = [L for L in layers if L in rel]
        if not names or not any(per_layer[L] for L in names):
            return None
        r_arr = np.array([[rel[L] for L in names]], dtype=np.float32)
        gamma, beta_used = kernels.softmax_gate(r_arr, float(c.beta), max_entropy=c.max_entropy)
        gamma = np.asarray(gamma, dtype=np.float64).reshape(-1)
        gates = {L: float(g) for L, g in zip(names, gamma)}
        b_used = float(np.asarray(beta_used).reshape(-1)[0])
        chosen, used = self._fill(per_layer, gates, b_used, budget, shown)
        if shown:
            chosen = [(shown.get(r.id, s), r) for s, r in chosen]
        return chosen, used, gates, b_used, via

    def _episodic_candidates(self, u: _User, q: npt.NDArray[np.float32], query: str,
                             found: list[tuple[float, _Rec]], k: int, now: Optional[float],
                             domain: Optional[str], facts: Sequence[tuple[float, _Rec]] = ()
                             ) -> tuple[list[tuple[float, _Rec]], set[int], set[int]]:
        """Episodic candidates: the turns of active leaves, each scored on its own (a leaf is as
        relevant as its best turn, and only its matching turns are shown), plus the layer's
        summaries (tree nodes, session summaries). Leaves themselves are not candidates.

        Turns are ranked by reciprocal-rank fusion (RRF, ``rrf_k``) of the dense (cosine of the
        turn) and lexical (BM25 over speaker + text) rankings. Each keeps a score on the cosine
        scale: the i-th turn in fused order gets the i-th largest cosine of the candidates (the
        layer's score distribution is unchanged — gate, floor and abstention read it as before —
        while the order follows both channels).

        Current facts (``facts``, the semantic layer's candidates) whose source turn belongs to
        an active episode are folded into that turn: a fact is derived from its turn, which holds
        the statement verbatim, so it takes the turn's place and rank (and renders as the turn,
        see :meth:`MemoryItem.turn_lines`) when the turn is a candidate, and is dropped when the
        turn is not — rankings follow the primary evidence, not the cosine of a short derived
        sentence. Facts that superseded another (the current value of something that changed:
        current beats stale) and facts whose turn has left the episodic layer stand on their own.

        Returns the candidates (in no particular order: the caller ranks them), the ids of the
        folded facts (the caller drops those from the semantic layer's list) and the ids of the
        turns among the candidates.
        """
        out = [(s, r) for s, r in found if r.kind != "segment"]
        folded: set[int] = set()
        via = {r.id for _, r in out if r.kind == "turn"}
        ns = ((u.idx << 3) | _TURN_VIEW)
        if self._vectors.count(ns):
            recs = self._recs
            _, d_ids = self._vectors.search_arrays(q, ns, k)
            d_ids = d_ids & ~_TKEY
            l_ids = self._lex.search(query, ns, k)[1] if self.config.lexical else np.empty(0, dtype=np.int64)
            if now is not None or domain is not None:  # replay clock / domain gate
                d_ids = d_ids[[self._visible(recs[i], now, domain) for i in d_ids.tolist()]]
                l_ids = l_ids[[self._visible(recs[i], now, domain) for i in l_ids.tolist()]]
            fact_of: dict[int, _Rec] = {}  # source turn -> its best-scored current fact
            resolved = self._stale(u).resolved
            for _, f in facts:
                t = u.by_src.get(f.sources[-1]) if f.kind == "fact" and f.sources else None
                if t is None or t not in u.seg_of or f.id in resolved:
                    # its turn is not an active episode's, or it is the current value of
                    # something that changed (current beats stale): it stands on its own
                    continue
                folded.add(f.id)
                fact_of.setdefault(t, f)
            nd, nl = len(d_ids), len(l_ids)
            if nd or nl:
                # The turn views are stored as float16 (half the bytes each search reads): every
                # candidate (dense or lexical) is scored exactly from its turn's float32 vector.
                if nd and nl:
                    dset = set(d_ids.tolist())
                    ids = np.concatenate([d_ids, l_ids[[i not in dset for i in l_ids.tolist()]]])
                else:
                    ids = d_ids if nd else l_ids
                cos = self._vectors.get_keyed(_ARCHIVE, ids) @ q.reshape(-1)
                seq = ids & ((1 << ID_SHIFT) - 1)
                # dense rank: by exact cosine (ties: older first); lexical rank: BM25 order.
                # One list alone keeps its order (a turn found only lexically is kept too).
                dense_rank = np.lexsort((seq[:nd], -cos[:nd]))
                kk = float(self.config.rrf_k)
                if nd and nl:  # where each lexical hit sits in ids
                    by_id = np.argsort(ids)
                    pos = np.concatenate([dense_rank, by_id[np.searchsorted(ids, l_ids, sorter=by_id)]])
                else:
                    pos = dense_rank if nd else np.arange(nl)
                contrib = np.concatenate([1.0 / (kk + 1 + np.arange(nd)), 1.0 / (kk + 1 + np.arange(nl))])
                fused = np.bincount(pos, weights=contrib, minlength=len(ids))
                order = np.lexsort((seq, -fused))
                dist = np.sort(cos)[::-1].tolist()
                ranked = ids[order].tolist()
                if fact_of:
                    out.extend(zip(dist, [fact_of.get(i) or recs[i] for i in ranked]))
                    via.update(i for i in ranked if i not in fact_of)
                else:
                    out.extend(zip(dist, [recs[i] for i in ranked]))
                    via.update(ranked)
        return out, folded, via

    def _fill(self, per_layer: dict[str, list[tuple[float, _Rec]]], gates: dict[str, float], beta: float,
              budget: int, demoted: Optional[Mapping[int, float]] = None) -> tuple[list[tuple[float, _Rec]], int]:
        """Fill the budget: working memory first (at most its γ share, bounded by
        ``working_share``), then every layer's candidates in one order of gate-weighted score
        s·(γ_L/γ_max)^(1/β) = s·exp(r_L − r_max) (the gate as a prior over layers, so the budget
        follows item scores rather than fixed shares); aggregates (summaries, notes, profiles) only
        fill what the specific items (turns, facts) above the floor leave. ``demoted``: items the
        speaker scope ranks lower — on equal scores they come after the others (so that of two
        identical statements the named person's is the one kept)."""
        c = self.config
        demoted = demoted or {}
        chosen: list[tuple[float, _Rec]] = []
        taken: set[int] = set()
        covered: set[str] = set()
        fact_keys: set[tuple[str, str, str]] = set()
        seen_text: set[str] = set()  # a turn repeating the words of one already taken adds nothing
        groups: set[tuple[Optional[str], str]] = set()  # (session, day) groups already opened
        used = 0

        def try_take(s: float, r: _Rec, limit: int) -> int:
            nonlocal used
            # the size test first: once the budget is nearly full most candidates fail it, and
            # it costs two dictionary lookups
            n, gk = self._ntokens(r)
            if gk is not None and gk not in groups:
                n += _HEADER_TOKENS  # this item opens a new [date time] group
            if n > limit or r.id in taken:
                return 0
            if r.kind == "fact":
                fk = (_norm_key(r.subject or ""), r.predicate or "", _norm_key(r.object or ""))
                if fk in fact_keys:
                    return 0
                if r.sources and r.sources[-1] in covered:
                    return 0  # the turn it renders verbatim is already in the context
            elif r.sources and set(r.sources) <= covered:
                return 0  # dedupe: the raw text of all its sources is already in the context
            tk = self._text_key(r) if r.kind == "turn" else None
            if tk is not None and tk in seen_text:
                return 0
            if gk is not None:
                groups.add(gk)
            taken.add(r.id)
            if tk is not None:
                seen_text.add(tk)
            if r.kind in ("turn", "segment"):
                covered.update(r.sources)
            elif r.kind == "fact" and r.sources:
                covered.add(r.sources[-1])  # a fact renders its latest source turn
            if r.kind == "fact":
                fact_keys.add(fk)
            chosen.append((s, r))
            used += n
            return n

        if "working" in gates:
            share = min(gates["working"], c.working_share) * budget if len(gates) > 1 else budget
            left = int(share)
            for s, r in per_layer.get("working", []):
                if left <= 0:
                    break
                left -= try_take(s, r, min(left, budget - used))
        g_max = max(gates.values())
        prior = {L: (g / g_max) ** (1.0 / beta) if beta > 0 and g > 0 else 1.0 for L, g in gates.items()}
        # Aggregates go last: their long texts score high against almost any question (cosine
        # favours long, general texts) while holding none of the raw turns the answer needs.
        # Ties: the named person's first (not demoted), then the older. (The key is a total order,
        # so the pool's input order does not matter.)
        pool: list[tuple[bool, float, bool, int, int, float, _Rec]] = []
        for L in gates:
            p = prior[L]
            for s, r in per_layer.get(L, ()):
                pool.append((r.kind in _GENERAL, -(s * p), r.id in demoted, r.seq, len(pool), s, r))
        pool.sort()  # (the position: a record in two layers, e.g. working and archive, never compares records)
        for _, _, _, _, _, s, r in pool:
            left = budget - used
            if left < _MIN_ITEM_TOKENS:
                break  # no item is shorter than this
            nt = r.nt  # (once the budget is nearly full most turns fail on size: test that first,
            if nt is not None and r.kind == "turn":  # from the record's cache, as _ntokens would)
                key, (n, gk) = nt
                if key[0] == r.text and key[1] == r.timestamp and key[2] == r.session_id and \
                        n + (_HEADER_TOKENS if gk not in groups else 0) > left:
                    continue
            try_take(s, r, left)
        return chosen, used

    @staticmethod
    def _text_key(r: _Rec) -> str:
        """Normalised text of a turn (cached on the record, keyed by its text)."""
        hit = r.tk
        if hit is not None and hit[0] == r.text:
            return hit[1]
        k = _norm_key(r.text)
        r.tk = (r.text, k)
        return k

    def _ntokens(self, r: _Rec) -> tuple[int, Optional[tuple[Optional[str], str]]]:
        """Whitespace tokens the item adds to :meth:`Context.render`, and its group key: for
        items showing raw turns, the ``Speaker: text`` lines only (a group's ``[date time]``
        header is paid once per group, by the fill); for the others their whole rendering, and
        None. Cached; the key covers what can change."""
        if r.kind == "turn":  # (a turn renders its speaker, immutable, and these)
            key: tuple[Any, ...] = (r.text, r.timestamp, r.session_id)
            hit = r.nt
            if hit is not None and hit[0] == key:
                return hit[1]
            # MemoryItem.turn_lines() and group_key() of a turn, without building the item
            line = f"{r.speaker}: {r.text}" if r.speaker else r.text
            r.nt = (key, (len(line.split()), (r.session_id, _format_day(r.timestamp))))
            return r.nt[1]
        src = None  # a fact renders its latest source turn
        if r.kind == "fact" and r.sources:
            u = self._users.get(r.user_id)
            src = self._recs.get(u.by_src.get(r.sources[-1], -1)) if u is not None else None
        key = (r.text, r.valid_to, r.superseded_by, len(r.members or ()), r.sources[-1] if r.sources else None,
               r.timestamp, r.session_id, r.valid_from, r.commitment,
               (src.text, src.timestamp, src.speaker) if src is not None else None)
        hit = r.nt
        if hit is not None and hit[0] == key:
            return hit[1]
        it = self._item(r)
        lines = it.turn_lines()
        if lines is None:
            val: tuple[int, Optional[tuple[Optional[str], str]]] = (len(it.render().split()), None)
        else:
            val = (sum(len(ln.split()) for _, ln in lines), it.group_key())
        r.nt = (key, val)
        return val

    def _bump(self, recs: list[_Rec], t: float) -> None:
        """Access bumps are applied in memory now and written with the next write transaction
        (or ``flush()`` / ``close()``): reads stay off the disk path."""
        for r in recs:
            r.access_count += 1
            r.last_access = t
            self._pending[r.id] = r

    def _flush_pending(self) -> None:
        """Write pending access bumps (caller holds the lock, outside any transaction)."""
        if not self._pending:
            return
        rows = [(r.access_count, r.last_access, r.id) for r in self._pending.values() if r.id in self._recs]
        with self._store.tx():
            self._store.bump_access(rows)
        self._pending.clear()

    def flush(self) -> None:
        """Write pending access statistics of ``context`` calls to the database."""
        self._check_open()
        with self._lock:
            self._flush_pending()

    def search(self, query: str, user_id: str, k: int = 10, layers: Optional[Sequence[str]] = None, *,
               now: TimeLike = None, query_embedding: Optional[npt.NDArray[np.float32]] = None) -> list[MemoryItem]:
        """Top-k items of ``user_id`` by cosine similarity (no budget, gate or floor; no access bump).

        Parameters
        ----------
        layers : list of str, optional
            Any of ``working``, ``episodic``, ``semantic``, ``archive`` (every raw turn ever added,
            including those still in working memory), ``history`` (superseded facts). Default:
            the active layers.
        """
        self._check_open()
        _check_id(user_id, "user_id")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"k must be an int, got {type(k).__name__}")
        if k <= 0:
            raise ValueError(f"k must be >= 1, got {k}")
        if layers is None:
            names = list(_ACTIVE)
        else:
            if isinstance(layers, str):
                raise TypeError("layers must be a list of layer names, e.g. ['archive']")
            names = list(layers)
            for L in names:
                if L not in LAYERS:
                    raise ValueError(f"unknown layer {L!r}; expected some of {list(LAYERS)}")
        if "archive" in names and "working" not in names:
            names.append("working")  # archive = every raw turn, live ones included
        t_now = _to_time(now, "now")
        q = self._query_vec(query, query_embedding)
        with self._lock:
            self._check_open()
            u = self._users.get(user_id)
            if u is None:
                return []
            hits: list[tuple[float, _Rec]] = []
            for lst in self._candidates_multi(u, q, list(dict.fromkeys(names)), int(k), t_now, None).values():
                hits.extend(lst)
            if layers is not None and "archive" in layers and "working" not in layers:
                hits = [(s, r) for s, r in hits if r.kind == "turn"]
            hits.sort(key=lambda x: (-x[0], x[1].seq))
            out = []
            for s, r in hits[: int(k)]:
                it = self._item(r, s)
                if layers is not None and "archive" in layers and "working" not in layers:
                    it.layer = "archive"
                out.append(it)
            return out

    # ------------------------------------------------------------------ items
    def _rec_checked(self, item_id: int, user_id: Optional[str] = None) -> _Rec:
        if isinstance(item_id, bool) or not isinstance(item_id, (int, np.integer)):
            raise TypeError(f"item_id must be an int, got {type(item_id).__name__}")
        iid = int(item_id)
        if iid <= 0 or not self._store.owns(iid):
            raise IndexError(f"item id {iid} does not belong to this database (ids are database-specific)")
        r = self._recs.get(iid)
        if r is None:
            raise IndexError(f"item id {iid} does not exist (deleted?)")
        if user_id is not None:
            _check_id(user_id, "user_id")
            if user_id not in self._users:
                raise IndexError(f"unknown user_id {user_id!r}")
            if r.user_id != user_id:
                raise IndexError(f"item id {iid} does not belong to user {user_id!r}")
        return r

    def get(self, item_id: int, user_id: Optional[str] = None) -> MemoryItem:
        """The item with this id (any layer, evicted and superseded included).

        Raises
        ------
        IndexError
            Unknown id, an id of another database, or (with ``user_id``) another user's item.
        """
        self._check_open()
        with self._lock:
            return self._item(self._rec_checked(item_id, user_id))

    def update(self, item_id: int, text: str, user_id: Optional[str] = None, timestamp: TimeLike = None) -> MemoryItem:
        """Replace an item's text (re-embedded); the previous text is kept in :meth:`history`."""
        self._check_open()
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text is empty")
        t = _to_time(timestamp, "timestamp")
        emb = self._embed([text])[0]
        with self._lock:
            self._check_open()
            r = self._rec_checked(item_id, user_id)
            u = self._users[r.user_id]
            self._flush_pending()
            try:
                with self._store.tx():
                    self._store.add_revision(r.id, r.text, t if t is not None else _now())
                    r.text = text
                    u.stale = None
                    fields_: dict[str, Any] = {"text": text, "embedding": emb.tobytes()}
                    if r.kind in ("summary", "note"):
                        r.summary = text
                        fields_["summary"] = text
                    if r.status == "active":
                        self._move(u, r, r.layer, emb)
                    leaf = u.seg_of.get(r.id)
                    if leaf is not None:  # re-index the turn under its leaf
                        self._vectors.remove([r.id | _TKEY])
                        self._vectors.add(((u.idx << 3) | _TURN_VIEW), [r.id | _TKEY], emb.reshape(1, -1))
                        self._lex.remove([r.id], missing_ok=True)
                        self._lex.add([r.id], [f"{r.speaker or ''} {text}"], (u.idx << 3) | _TURN_VIEW)
                    self._store.update_items([(r.id, fields_)])
            except BaseException:
                self._reload_after_failure()
                raise
            return self._item(r)

    def delete(self, item_id: int, user_id: Optional[str] = None) -> int:
        """Delete an item. Deleting a raw turn also deletes what was derived from it (segments,
        summaries, facts, notes whose sources include it), so its text leaves every layer.

        Returns
        -------
        int — number of items deleted.
        """
        self._check_open()
        with self._lock:
            self._check_open()
            r = self._rec_checked(item_id, user_id)
            u = self._users[r.user_id]
            doomed = {r.id}
            if r.kind == "turn":
                doomed.update(x.id for x in self._urecs(u) if x.id != r.id and r.source_id in x.sources)
            self._flush_pending()
            try:
                with self._store.tx():
                    self._store.delete_items(sorted(doomed))
            except BaseException:
                self._reload_after_failure()
                raise
            # Simplest exact way to keep trees, fact indexes and profiles consistent: rebuild.
            self._load()
            del u
            return len(doomed)

    def delete_user(self, user_id: str) -> int:
        """Delete every item, session and statistic of a user. Returns the number of items deleted."""
        self._check_open()
        _check_id(user_id, "user_id")
        with self._lock:
            self._check_open()
            if user_id not in self._users:
                raise IndexError(f"unknown user_id {user_id!r}")
            n = len(self._users[user_id].ids)
            self._flush_pending()
            try:
                with self._store.tx():
                    self._store.delete_user(user_id)
            except BaseException:
                self._reload_after_failure()
                raise
            self._load()
            return n

    def history(self, item_id: int, user_id: Optional[str] = None) -> list[MemoryItem]:
        """Versions of an item, oldest first, ending with the current one.

        For a fact: every fact on the same subject + predicate in time order (superseded ones
        carry ``valid_to`` and ``superseded_by``). For other items: earlier texts set by
        :meth:`update` (as items with ``kind`` unchanged and ``timestamp`` = change time).
        """
        self._check_open()
        with self._lock:
            r = self._rec_checked(item_id, user_id)
            if r.kind == "fact" and r.predicate is not None:
                key = (_norm_key(r.subject or ""), r.predicate)
                chain = [x for x in self._urecs(self._users[r.user_id]) if x.kind == "fact"
                         and (_norm_key(x.subject or ""), x.predicate) == key]
                if not is_functional(r.predicate):
                    chain = [x for x in chain if _norm_key(x.object or "") == _norm_key(r.object or "")]
                chain.sort(key=lambda x: (x.valid_from or 0.0, x.seq))
                return [self._item(x) for x in chain]
            out = [replace(self._item(r), text=t, timestamp=ct) for t, ct in self._store.revisions(r.id)]
            return out + [self._item(r)]

    # ------------------------------------------------------------------ facts and stats
    def facts(self, user_id: str, subject: Optional[str] = None, current: bool = True) -> list[MemoryItem]:
        """Semantic facts of a user (current only by default; ``current=False`` adds history)."""
        self._check_open()
        _check_id(user_id, "user_id")
        with self._lock:
            u = self._users.get(user_id)
            if u is None:
                return []
            out = [self._item(r) for r in self._urecs(u) if r.kind == "fact"
                   and r.status == "active" and (r.layer == "semantic" or not current)
                   and (subject is None or _norm_key(r.subject or "") == _norm_key(subject))]
            out.sort(key=lambda it: (it.subject or "", it.predicate or "", it.valid_from or 0.0))
            return out

    def stats(self, user_id: Optional[str] = None) -> dict[str, Any]:
        """Counts and state: items per layer, archive turns, facts (current / superseded), evicted
        items, sessions, users, profile drift (sum / last ‖Δe‖² of the damped updates), the embedder,
        the database path and LLM fallbacks."""
        self._check_open()
        with self._lock:
            if user_id is not None:
                _check_id(user_id, "user_id")
                if user_id not in self._users:
                    raise IndexError(f"unknown user_id {user_id!r}")
                users = [self._users[user_id]]
            else:
                users = list(self._users.values())
            uids = {u.user_id for u in users}
            layers = {L: 0 for L in LAYERS}
            kinds: dict[str, int] = {}
            evicted = 0
            turns = 0
            recs = [r for u in users for r in self._urecs(u)]
            for r in recs:
                if r.kind == "turn":
                    turns += 1
                if r.status == "active":
                    layers[r.layer] += 1
                    kinds[r.kind] = kinds.get(r.kind, 0) + 1
                else:
                    evicted += 1
            d: dict[str, Any] = {
                "embedder": self._embedder.name,
                "dim": self._dim,
                "path": self._path,
                "users": len(users),
                "sessions": sum(1 for (uid, _s) in self._sessions if uid in uids),
                "open_sessions": sum(1 for (uid, _s), v in self._sessions.items() if uid in uids and v[0] == "open"),
                "items": len(recs),
                "layers": layers,
                "kinds": kinds,
                "archive_turns": turns,
                "facts_current": sum(1 for r in recs if r.kind == "fact" and r.layer == "semantic" and r.status == "active"),
                "facts_superseded": layers["history"],
                "evicted": evicted,
                "profile_drift": {"total": float(sum(u.drift_total for u in users)),
                                  "last": float(users[-1].drift_last) if len(users) == 1 else None,
                                  "updates": int(sum(u.drift_updates for u in users)),
                                  "lambda": float(self.config.profile_lambda)},
                # (user/layer) searched through hnswlib (past ann_threshold), the rest exactly
                "ann_layers": sorted(f"{u.user_id}/{L}" for u in users for L in LAYERS
                                     if self._vectors.uses_ann(self._ns(u, L))
                                     or (L == "episodic" and self._vectors.uses_ann((u.idx << 3) | _LEAF))),
                "llm": repr(self.llm) if self.llm is not None else None,
                "llm_fallbacks": int(getattr(self._summarizer, "failures", 0)) + int(getattr(self._extractor, "failures", 0)),
                "config": asdict(self.config),
            }
            return d

    def users(self) -> list[str]:
        """All user ids."""
        with self._lock:
            return sorted(self._users)

    @property
    def embedder(self) -> Embedder:
        """The embedder in use."""
        return self._embedder

    @property
    def path(self) -> Optional[str]:
        return self._path

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the database (idempotent). Later calls raise ValueError."""
        with self._lock:
            if not self._closed:
                self._flush_pending()
                self._closed = True
                self._store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory(path={self._path!r}, embedder={self._embedder.name!r}, users={len(self._users)})"


class _Staleness:
    """Sources and values that only support superseded facts (for the stale penalty)."""

    def __init__(self, sources: frozenset[str], values: dict[str, set[str]],
                 resolved: frozenset[int] = frozenset()) -> None:
        self.sources = sources
        self.values = values
        self.resolved = resolved  # ids of current facts that superseded another
        self._cache: dict[int, float] = {}
        self._re = (re.compile(r"\b(" + "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)) + r")\b",
                               re.I) if values else None)
        # Prefilter: the pattern can match only where a value occurs case-insensitively, so a
        # text none of whose casefolded substrings is a casefolded value is skipped.
        self._folded = tuple({v.casefold() for v in values})

    def __bool__(self) -> bool:
        return bool(self.sources) or bool(self.values)

    def weight(self, item_id: int, text: str, sources: Sequence[str], low: Optional[str] = None) -> float:
        """1 when the text names a superseded value and not its current one (or all its sources
        are stale); else the share of stale sources. Cached per item (this object is rebuilt
        whenever facts or texts change). ``low``: the text's ``_norm_key``, when known."""
        w = self._cache.get(item_id)
        if w is None:
            w = self._cache[item_id] = self._weight(text, sources, low)
        return w

    def _weight(self, text: str, sources: Sequence[str], low: Optional[str] = None) -> float:
        if self._re is not None:
            if low is None:
                low = _norm_key(text)
            folded = low.casefold()
            for m in (self._re.finditer(low) if any(v in folded for v in self._folded) else ()):
                if not any(cur in low for cur in self.values.get(m.group(1), ())):
                    return 1.0
        if not sources or not self.sources:
            return 0.0
        if len(sources) == 1:  # (a turn)
            return 1.0 if sources[0] in self.sources else 0.0
        return sum(1 for x in sources if x in self.sources) / len(sources)


class _CoverageProjection:
    """Π_C by coverage (``MemoryConfig.eviction == "coverage"``; the rule is in the module docstring).

    ``items``: the pooled records of one user, sorted by id, episodic pool (leaves and session
    summaries) first, then the semantic pool (current facts and notes). ``run`` returns the
    indices of ``items`` to evict so that each pool fits its capacity.

    Cost: building the incidence is O(items + sources); one exact top-k over the T raw turns of
    the pooled items (O(T²·d), native, GIL released), repeated only when a turn's listed
    neighbours are all gone; then O(log₂ excess) rounds of vector arithmetic, each with one
    ``kernels.evict_to_capacity`` call.
    """

    _EXTRA = 16  # neighbours listed beyond one segment's worth, so rounds seldom need a new top-k

    def __init__(self, mem: "Memory", u: _User, items: list[_Rec], n_episodic: int, now: float) -> None:
        c = mem.config
        self.c = c
        self.items = items
        n = len(items)
        self.n = n
        self.pool = np.zeros(n, dtype=np.uint64)
        self.pool[n_episodic:] = 1
        self.cap = (int(c.episodic_capacity), int(c.semantic_capacity))
        col: dict[int, int] = {}  # turn record id -> column
        raw_i: list[int] = []
        raw_t: list[int] = []
        agg_i: list[int] = []
        agg_t: list[int] = []
        raw_ids: list[int] = []
        for i, r in enumerate(items):
            if r.kind in ("segment", "fact"):
                # Raw text the item renders verbatim: a leaf its member turns, a fact its latest source turn.
                raw = list(r.members or ()) if r.kind == "segment" else (
                    [u.by_src.get(r.sources[-1])] if r.sources else [])
                for t in raw:
                    if t is None or t not in mem._recs or t not in mem._vectors:
                        continue
                    j = col.get(t)
                    if j is None:
                        j = col[t] = len(col)
                        raw_ids.append(t)
                    raw_i.append(i)
                    raw_t.append(j)
        self.n_raw = len(raw_ids)
        for i, r in enumerate(items):
            if r.kind not in ("segment", "fact"):  # aggregates: session summaries, notes
                for src in r.sources or ():
                    t = u.by_src.get(src)
                    if t is not None:
                        agg_i.append(i)
                        agg_t.append(col.setdefault(t, len(col)))
        self.n_col = len(col)
        self.raw_i = np.asarray(raw_i, dtype=np.int64)
        self.raw_t = np.asarray(raw_t, dtype=np.int64)
        self.agg_i = np.asarray(agg_i, dtype=np.int64)
        self.agg_t = np.asarray(agg_t, dtype=np.int64)
        self.is_agg = np.array([r.kind not in ("segment", "fact") for r in items], dtype=bool)
        self.agg_n = np.bincount(self.agg_i, minlength=n).astype(np.float64)
        # Turns that go together (one leaf) never count as each other's redundancy.
        self.group = np.array([u.seg_of.get(t, -1 - t) for t in raw_ids], dtype=np.int64)
        self.X = mem._vecs(raw_ids) if raw_ids else np.zeros((0, mem._dim), dtype=np.float32)
        self.A = mem._vecs([r.id for r in items]) if bool(self.is_agg.any()) else None
        self.k_turn = int(c.max_segment_turns) + 1 + self._EXTRA
        self.nbr: Optional[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]] = None
        visits = np.array([r.access_count for r in items], dtype=np.float32)
        restated = np.array([max(0.0, float(r.strength) - 1.0) if r.kind == "fact" else 0.0 for r in items])
        self.use = 1.0 + float(c.heat_a) * visits.astype(np.float64) + restated
        last = np.array([r.last_access if r.last_access is not None else now for r in items], dtype=np.float64)
        zeros = np.zeros(n, dtype=np.float32)
        self.recency = np.asarray(kernels.heat_scores(zeros, zeros, last, float(now), a=0.0, b=0.0, c=1.0,
                                                      mu=float(c.heat_mu)), dtype=np.float64)

    def _neighbours(self, rows: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-k cosine neighbours of every raw turn among ``rows`` (indices into ``rows``' space
        mapped back to raw columns; -1 padded)."""
        X = np.ascontiguousarray(self.X[rows])
        k = min(self.k_turn, len(rows))
        S, I = _topk(X, X, k, "ip")
        S = np.asarray(S, dtype=np.float32)
        I = np.asarray(I, dtype=np.int64)
        full_S = np.full((self.n_raw, k), -np.inf, dtype=np.float32)
        full_I = np.full((self.n_raw, k), -1, dtype=np.int64)
        full_S[rows] = S
        full_I[rows] = np.where(I >= 0, rows[np.maximum(I, 0)], -1)
        return full_S, full_I

    def _turn_novelty(self, covered: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """ν_t = 1 − max(0, cos to the nearest covered raw turn of another leaf); 1 with none."""
        rows = np.flatnonzero(covered[: self.n_raw]).astype(np.int64)
        nu = np.ones(self.n_col, dtype=np.float64)
        if len(rows) < 2:
            return nu
        for attempt in range(2):
            if self.nbr is None:
                self.nbr = self._neighbours(rows)
            S, I = self.nbr
            ok = (I >= 0) & (self.group[np.maximum(I, 0)] != self.group[:, None])
            live = ok & covered[np.maximum(I, 0)]
            # A row whose listed neighbours all left (none padded) may have others: list them anew.
            exhausted = covered[: self.n_raw] & ~live.any(axis=1) & (I >= 0).all(axis=1) & (I.shape[1] < len(rows))
            if attempt == 0 and bool(exhausted.any()):
                self.nbr = None
                continue
            break
        best = np.where(live, S, -np.inf).max(axis=1)
        nu[: self.n_raw] = np.where(np.isfinite(best), 1.0 - np.clip(best, 0.0, 1.0), 1.0)
        return nu

    def _agg_novelty(self, active: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """ν_i of an aggregate: 1 − max(0, cos to the nearest active aggregate of its pool)."""
        nu = np.ones(self.n, dtype=np.float64)
        if self.A is None:
            return nu
        for p in (0, 1):
            idx = np.flatnonzero(self.is_agg & active & (self.pool == p)).astype(np.int64)
            if len(idx) < 2:
                continue
            Y = np.ascontiguousarray(self.A[idx])
            S, I = _topk(Y, Y, 2, "ip")
            S = np.asarray(S, dtype=np.float64)
            I = np.asarray(I, dtype=np.int64)
            other = np.where(I[:, 0] == np.arange(len(idx)), S[:, 1], S[:, 0])
            nu[idx] = 1.0 - np.clip(other, 0.0, 1.0)
        return nu

    def scores(self, active: npt.NDArray[np.bool_]) -> npt.NDArray[np.float32]:
        """Retention score per item: V_i · use_i + ε · recency_i (see the module docstring)."""
        on = active[self.raw_i]
        cover = np.bincount(self.raw_t[on], minlength=self.n_col)
        nu = self._turn_novelty(cover > 0)
        share = np.zeros(len(self.raw_t), dtype=np.float64)
        share[on] = nu[self.raw_t[on]] / cover[self.raw_t[on]]
        value = np.bincount(self.raw_i, weights=share, minlength=self.n)
        if self.A is not None:
            lost = np.bincount(self.agg_i, weights=(cover[self.agg_t] == 0).astype(np.float64), minlength=self.n)
            frac = np.where(self.agg_n > 0, lost / np.maximum(self.agg_n, 1.0), 1.0)
            value = np.where(self.is_agg, frac * self._agg_novelty(active), value)
        score = value * self.use + float(self.c.eviction_tiebreak) * self.recency
        return np.ascontiguousarray(score, dtype=np.float32)

    def run(self) -> npt.NDArray[np.int64]:
        active = np.ones(self.n, dtype=bool)
        while True:
            caps: dict[int, int] = {}
            for p in (0, 1):
                cnt = int(np.count_nonzero(active & (self.pool == p)))
                excess = cnt - self.cap[p]
                if excess > 0:  # halve the excess per round: redundancy is re-measured in between
                    caps[p] = cnt - (excess + 1) // 2
            if not caps:
                break
            out = np.asarray(kernels.evict_to_capacity(self.scores(active), self.pool, caps,
                                                       live=active.view(np.uint8))).reshape(-1)
            active[out] = False
        return np.flatnonzero(~active).astype(np.int64)


def _lost_in_the_middle(chosen: list[tuple[float, _Rec]]) -> list[tuple[float, _Rec]]:
    """Best first, second best last, the rest alternating inwards (weakest in the middle)."""
    ranked = sorted(chosen, key=lambda x: (-x[0], x[1].seq))
    front: list[tuple[float, _Rec]] = []
    back: list[tuple[float, _Rec]] = []
    for i, x in enumerate(ranked):
        (front if i % 2 == 0 else back).append(x)
    return front + back[::-1]
