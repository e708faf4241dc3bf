"""``MemoryConfig``: every parameter of the memory loop, validated once."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Literal

from ..errors import InvalidInput
from ..native.search import CODECS, Codec

__all__ = ["MemoryConfig", "Eviction", "Synchronous", "VectorDType", "TurnVectors", "ACTIVE_LAYERS"]

#: The capacity projection's rule (see :mod:`lamina.memory.write.retention`).
Eviction = Literal["coverage", "heat"]
#: SQLite's ``synchronous`` setting: NORMAL survives kill -9, FULL also power loss.
Synchronous = Literal["NORMAL", "FULL"]
#: Storage of the index's searched arenas (:class:`lamina.VectorArena` dtypes).
VectorDType = Literal["float32", "float16"]
#: How a turn is embedded (:mod:`lamina.memory.state.turnvec`).
TurnVectors = Literal["sentences", "late", "parts", "text"]
#: ``MemoryConfig.lexical_weight`` of a memory whose embedder's vectors are word features.
LEXICAL_EMBEDDER_WEIGHT = 2.0
#: The active layers, in the order the read path visits them.
ACTIVE_LAYERS = ("working", "episodic", "semantic")


@dataclass(frozen=True)
class MemoryConfig:
    """Parameters of the memory loop (paper symbols in brackets).

    Capacities: ``working_capacity`` [C_w] turns per live session; ``episodic_capacity`` [C_e]
    leaves and session summaries per user; ``semantic_capacity`` [C_s] current facts and notes per
    user (profiles are not counted; superseded facts live in ``history`` and are not counted); with
    ``lend_capacity`` a pool may use what the other leaves unused (C_e + C_s in all).

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
    ``lend_capacity`` (default False): a pool may use the capacity the other leaves unused — the
    episodic pool holds at most C_e + max(0, C_s − |P_s|) items and the semantic pool at most
    C_s + max(0, C_e − |P_e|) —, so the two together never exceed C_e + C_s and each pool still
    gets its own capacity whenever it fills it (the borrower gives the slots back at the next
    projection). Without an LLM extractor the semantic pool holds few facts and C_s would
    otherwise idle while episodic leaves are evicted (LoCoMo retention at 25 % capacity: 75.0 %
    separate, 85.2 % lent). Off by default: at the default capacities (C_s = 5 000) lending
    lets the episodic pool grow to 7 000 leaves, and at 100k turns per user that raised
    ``end_session``'s p99 from 48 to 86 ms and the add's from 11-16 to 22 ms
    (``bench/bench_memory.py``); set it where the capacities are sized as one budget.

    Read path: ``candidates`` [m] per layer; ``relevance_top`` similarities averaged into r_i;
    ``beta`` [β] and ``max_entropy`` [ε] of the gate (None: no bound); ``min_similarity`` (the
    firewall floor: below it nothing is returned and the context abstains);
    ``working_share`` (the largest share of the budget working memory gets first);
    ``fill_floor`` (the fill passes over candidates whose gate-weighted score is below this share
    of the query's best gate-weighted score, so a budget is not filled with what barely
    relates to the question; 0: off, the default: on the LoCoMo and LongMemEval_S dev splits
    with the hashing embedder 0.3 kept LoCoMo's evidence recall within 0.3 point and used as
    many tokens, and saved 6 % of LongMemEval's tokens at 4,096 for 0.5 point of recall; 0.5
    saved 10-43 % of the tokens for 3-9 points; MiniLM on LoCoMo at 0.3: unchanged);
    ``fill_item_tokens`` and ``fill_length_power`` (value per token: a pool candidate longer
    than ``fill_item_tokens`` tokens enters the fill order with its gate-weighted score scaled by
    (``fill_item_tokens`` / its tokens) ** ``fill_length_power``, so a long item, which spends
    as much of the budget as several short ones, must score higher to go first; its score and
    the ranking are unchanged; 0: off. On the development splits at 128 / 0.5: LongMemEval_S
    evidence recall at 1,024 / 4,096 tokens with MiniLM 88.1 → 90.5 % / 93.3 → 97.6 %, with
    the hashing embedder 76.1 → 84.7 % / 86.8 → 93.4 % (long assistant answers had filled 83 %
    of a 4,096-token context; single-session-assistant questions, whose evidence is such an
    answer, lose 2 of 13 at 1,024 with MiniLM); LoCoMo, whose turns are under 100 words,
    unchanged on both embedders: docs/evaluation/longmemeval.md);
    ``stale_penalty`` (raw text whose sources only support superseded facts scores ×(1 − p),
    except for a query that asks for a time, :func:`lamina.text.timeref.date_intent`: when something
    happened is asked of its history, superseded or not);
    ``lexical``: episodic turns are also ranked by BM25 over ``speaker + text`` (native
    :class:`lamina.LexicalIndex`, per-user statistics) and the two rankings are fused by
    reciprocal rank (``rrf_k``: 1/(k + rank); 20 was chosen among 10 / 20 / 30 / 60 on the LoCoMo
    development split, better than the customary 60 with MiniLM and with the hashing embedder
    at 256 and 1,024 tokens), each turn keeping a score on the cosine scale;
    ``time_channel``: when the query asks for a time (:func:`lamina.text.timeref.date_intent`:
    "when ...", "what year ..."), the candidate turns that say when something happened
    (:func:`lamina.text.timeref.mentions_time`) are a third ranking in that fusion, in cosine order;
    ``lexical_weight``: the weight of the lexical (BM25) ranking's term in that fusion (the
    dense one has 1); ``None`` (default): set by the embedder when the memory opens — 2 for an
    embedder whose vectors are word features (``lexical = True``: the hashing embedder, whose
    dense ranking is a second, weaker lexical one), 1 for a semantic one (MiniLM, MPNet). On
    the development splits, hashing, 1 → 2: LoCoMo +3.0 / +1.2 points at 256 / 1,024 tokens,
    LongMemEval +1.3 / +0.8 at 1,024 / 4,096; with MiniLM 2 lost 1.2 points on LoCoMo at 1,024
    (docs/evaluation/locomo.md);
    ``long_turn_words`` and ``long_turn_damping``: a turn longer than ``long_turn_words`` words
    (its rendered line) has its dense term in the fusion divided by its length in
    ``long_turn_words``, at most by ``long_turn_damping`` (0 words: off) — a long turn's vector
    is the sum of many sentences (or a truncated text), and long, general texts score high against
    most queries, so its cosine witnesses less of what it says; BM25 normalises length itself
    (LongMemEval_S dev, hashing: evidence recall 69.7 → 75.1 % at 1,024 tokens; LoCoMo dev,
    whose turns are short: unchanged on both embedders; 100 / 3 chosen among 40, 60, 100 words);
    ``fill_past_floor``: the fused turns' depth is the searches' (set by the budget), not the
    number of turns whose cosine reaches ``min_similarity``: when a query's best turn reaches the
    floor, every turn its lexical search found is a candidate too, those past its cosines above
    the floor scored just above the floor (within 1e-6) in fused order, so lexical hits with
    low cosines enter and the context fills its budget (dense hits under the floor stay out:
    they would fill it with whatever is least unrelated) (off: the i-th fused turn takes the
    i-th largest cosine and only those at or above the floor are kept; a query whose best turn
    is under the floor abstains either way);
    ``session_prior`` [μ] (the two-stage read: a session is as relevant as its best candidate
    turn's fused score, and each of its candidate turns gets μ times that added, so the turns
    of the sessions that matter rank together; 0 disables; 1 was chosen among 0.3 / 1 / 2 / 4
    on the LoCoMo development split);
    ``speaker_scope`` (attribution firewall: when the query names exactly one of the people
    this user's memory knows — speakers of turns, subjects of facts — the items it returns that
    are attributed to someone else score ×(1 − p) and are ordered accordingly, so the named
    person's memories come first and another person's are never presented as the best match;
    which items enter the context is decided before it — the firewall does not hide relevant
    memories; 0 disables).

    Turn vectors: ``turn_vectors`` "sentences" (default: a turn is embedded as its text and as
    each of its sentences of three words or more, summed and normalised, and its speaker's name
    — unless a chat role like "user" — is added with weight 0.5: :mod:`lamina.memory.state.turnvec`;
    about 3.6 texts to embed per conversational turn, measured in docs/evaluation/locomo.md),
    "late" (the same sum from one encoder pass over the turn, its token states pooled over
    each sentence: one embedded text per turn with an encoder embedder such as MiniLM,
    "sentences" with one that cannot; cheaper to fill, lower evidence recall:
    docs/evaluation/ingest.md), "parts" (the sentences' vectors alone, the whole text embedded
    only for a turn with no sentence of its own to add: ingest within 1.2x of embedding the
    turns once, 0.5-0.7 points lower on LoCoMo with MiniLM: docs/evaluation/ingest.md) or
    "text" (the turn's text alone, one embedding). It decides how new and re-embedded turns are
    embedded; vectors already stored stay as they are.

    A-Mem notes (:mod:`lamina.memory.write.notes`): with ``notes`` on, every added turn gets a note
    (at most ``note_keywords`` keywords) and links to at most ``note_links`` earlier turns whose
    cosine is at least ``link_threshold`` and that share a keyword (``duplicate_threshold``: a
    link this close between turns of one speaker is a restatement); linked notes gain the shared
    keywords as tags (at most ``note_tags``, the oldest gained dropped first). Read through
    :meth:`lamina.Memory.note` and :meth:`lamina.Memory.links`; the read path does not use them.

    Storage: ``synchronous`` "NORMAL" (survives kill -9) or "FULL" (also power loss).

    Ablation: ``layers`` names the active layers in use (default all three); leaving out
    ``episodic`` or ``semantic`` stops writing to it and reading from it (turns still reach the
    archive), which is how ``lamina eval`` measures what each layer contributes.
    Index: a (user, layer) with at most ``ann_threshold`` vectors is searched exactly (native
    top-k); past it through an hnswlib graph (``ann_m`` [M], ``ann_ef_construction``,
    ``ann_ef_search`` [ef, at least k]), built lazily on the first search that needs it (also
    after reopening) and kept up to date incrementally. The default 20 000 sits above every
    active layer at the default capacities (C_e = 2 000 leaves plus their tree nodes and session
    summaries, C_s = 5 000 plus profiles; with ``lend_capacity`` on, up to C_e + C_s = 7 000
    leaves and their nodes while the semantic pool is nearly empty), so the active layers stay exact —
    exact search of a few thousand rows costs well under a millisecond — while the archive, which
    grows by one row per turn forever, switches to ANN where exact search of one user's turns
    starts to cost milliseconds per query (``bench/bench_memory.py``, ``bench/bench_layer_index.py``).
    ``codec`` (None, "binary" or "int8") gives the index's arenas a compact code per row, so those
    exact searches become code scans whose best ``k × oversample`` rows are re-scored exactly
    (:class:`lamina.VectorArena`; ``oversample`` None: the codec's default): scores stay exact,
    a row the codes ranked low can be missed. ``vector_dtype`` "float16" halves the bytes the
    searched arenas hold and scan (scores accumulate in float32; they round differently).
    ``pgvector_threshold`` (PostgreSQL with pgvector only): a user's archive with more rows than
    this is searched through a pgvector HNSW index in the database (one per user, built in the
    background the first time a search finds the archive past the threshold, shared by every
    replica; approximate, ``ann_ef_search`` candidates) instead of the handle's arena or hnswlib
    graph; None: never. The default was chosen from ``bench/bench_pgvector.py`` (README).
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
    eviction: Eviction = "coverage"
    eviction_tiebreak: float = 1e-3
    lend_capacity: bool = False
    resolve_threshold: float = 0.9
    profile_lambda: float = 1.0
    candidates: int = 32
    relevance_top: int = 3
    beta: float = 5.0
    max_entropy: float | None = 1.0
    min_similarity: float = 0.12
    working_share: float = 0.5
    stale_penalty: float = 0.5
    fill_floor: float = 0.0
    fill_item_tokens: int = 128
    fill_length_power: float = 0.5
    synchronous: Synchronous = "NORMAL"
    layers: tuple[str, ...] = ("working", "episodic", "semantic")
    ann_threshold: int = 20_000
    ann_m: int = 16
    ann_ef_construction: int = 100
    ann_ef_search: int = 96
    lexical: bool = True
    time_channel: bool = True
    session_prior: float = 1.0
    rrf_k: int = 20
    lexical_weight: float | None = None
    long_turn_words: int = 100
    long_turn_damping: float = 3.0
    fill_past_floor: bool = True
    speaker_scope: float = 0.5
    codec: Codec | None = None
    oversample: int | None = None
    vector_dtype: VectorDType = "float32"
    pgvector_threshold: int | None = 40_000
    turn_vectors: TurnVectors = "sentences"
    notes: bool = True
    note_keywords: int = 8
    note_tags: int = 8
    note_links: int = 5
    link_threshold: float = 0.5
    duplicate_threshold: float = 0.95

    def for_embedder(self, *, lexical: bool) -> MemoryConfig:
        """This configuration with what depends on the embedder set: ``lexical_weight`` left
        ``None`` becomes :data:`LEXICAL_EMBEDDER_WEIGHT` for an embedder whose vectors are word
        features (``lexical``), 1 otherwise; an explicit weight is kept."""
        if self.lexical_weight is not None:
            return self
        return replace(self, lexical_weight=LEXICAL_EMBEDDER_WEIGHT if lexical else 1.0)

    def __post_init__(self) -> None:
        ints = (
            "working_capacity",
            "episodic_capacity",
            "semantic_capacity",
            "min_segment_turns",
            "max_segment_turns",
            "summary_words",
            "candidates",
            "relevance_top",
            "ann_threshold",
            "ann_m",
            "ann_ef_construction",
            "ann_ef_search",
            "rrf_k",
            "pgvector_threshold",
            "note_keywords",
            "note_tags",
            "note_links",
        )
        if self.codec is not None and self.codec not in CODECS:
            raise InvalidInput(f"MemoryConfig.codec must be one of {CODECS} or None, got {self.codec!r}")
        if self.vector_dtype not in ("float32", "float16"):
            raise InvalidInput(f"MemoryConfig.vector_dtype must be 'float32' or 'float16', got {self.vector_dtype!r}")
        if self.oversample is not None:
            if isinstance(self.oversample, bool) or not isinstance(self.oversample, int):
                raise TypeError(f"MemoryConfig.oversample must be an int or None, got {type(self.oversample).__name__}")
            if self.oversample < 0:
                raise InvalidInput(f"MemoryConfig.oversample must be >= 0 (0: exact), got {self.oversample}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in (
                "synchronous",
                "layers",
                "eviction",
                "codec",
                "oversample",
                "vector_dtype",
                "turn_vectors",
            ) or (f.name in ("max_entropy", "pgvector_threshold", "lexical_weight") and v is None):
                continue
            if f.name in ("lexical", "time_channel", "notes", "lend_capacity", "fill_past_floor"):
                if not isinstance(v, bool):
                    raise TypeError(f"MemoryConfig.{f.name} must be a bool, got {type(v).__name__}")
                continue
            if f.name in ints:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise TypeError(f"MemoryConfig.{f.name} must be an int, got {type(v).__name__}")
                if v < 1:
                    raise InvalidInput(f"MemoryConfig.{f.name} must be >= 1, got {v}")
            else:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise TypeError(f"MemoryConfig.{f.name} must be a number, got {type(v).__name__}")
                if not math.isfinite(v):
                    raise InvalidInput(f"MemoryConfig.{f.name} must be finite, got {v}")
        if self.working_capacity < 2:
            raise InvalidInput("MemoryConfig.working_capacity must be >= 2 (half of it is dequeued on overflow)")
        if self.ann_m < 2:
            raise InvalidInput(f"MemoryConfig.ann_m must be >= 2 (hnswlib links per node), got {self.ann_m}")
        if self.min_segment_turns > self.max_segment_turns:
            raise InvalidInput("MemoryConfig.min_segment_turns must be <= max_segment_turns")
        for nm in ("alpha", "working_share", "stale_penalty", "speaker_scope", "fill_floor"):
            if not 0.0 <= getattr(self, nm) <= 1.0:
                raise InvalidInput(f"MemoryConfig.{nm} must be in [0, 1], got {getattr(self, nm)}")
        for nm in (
            "profile_lambda",
            "heat_a",
            "heat_b",
            "heat_c",
            "beta",
            "session_prior",
            "lexical_weight",
        ):
            if getattr(self, nm) is not None and getattr(self, nm) < 0:
                raise InvalidInput(f"MemoryConfig.{nm} must be >= 0, got {getattr(self, nm)}")
        if isinstance(self.long_turn_words, bool) or not isinstance(self.long_turn_words, int):
            raise TypeError(f"MemoryConfig.long_turn_words must be an int, got {type(self.long_turn_words).__name__}")
        if self.long_turn_words < 0:
            raise InvalidInput(f"MemoryConfig.long_turn_words must be >= 0 (0: off), got {self.long_turn_words}")
        if isinstance(self.fill_item_tokens, bool) or not isinstance(self.fill_item_tokens, int):
            raise TypeError(f"MemoryConfig.fill_item_tokens must be an int, got {type(self.fill_item_tokens).__name__}")
        if self.fill_item_tokens < 0:
            raise InvalidInput(f"MemoryConfig.fill_item_tokens must be >= 0 (0: off), got {self.fill_item_tokens}")
        if not 0.0 <= self.fill_length_power <= 4.0:
            raise InvalidInput(
                f"MemoryConfig.fill_length_power must be in [0, 4] (0: off), got {self.fill_length_power}"
            )
        if self.long_turn_damping < 1:
            raise InvalidInput(f"MemoryConfig.long_turn_damping must be >= 1, got {self.long_turn_damping}")
        if self.heat_mu <= 0:
            raise InvalidInput("MemoryConfig.heat_mu must be > 0")
        if self.max_entropy is not None and self.max_entropy <= 0:
            raise InvalidInput("MemoryConfig.max_entropy must be > 0 or None")
        if (
            not isinstance(self.layers, tuple)
            or "working" not in self.layers
            or any(L not in ACTIVE_LAYERS for L in self.layers)
        ):
            raise InvalidInput(
                f"MemoryConfig.layers must be a tuple of {ACTIVE_LAYERS} including 'working', got {self.layers!r}"
            )
        for nm in ("link_threshold", "duplicate_threshold"):
            if not -1.0 <= getattr(self, nm) <= 1.0:
                raise InvalidInput(f"MemoryConfig.{nm} must be a cosine in [-1, 1], got {getattr(self, nm)}")
        if self.link_threshold > self.duplicate_threshold:
            raise InvalidInput("MemoryConfig.link_threshold must be <= duplicate_threshold")
        if self.turn_vectors not in ("sentences", "late", "parts", "text"):
            raise InvalidInput(
                f"MemoryConfig.turn_vectors must be 'sentences', 'late', 'parts' or 'text', got {self.turn_vectors!r}"
            )
        if self.eviction not in ("coverage", "heat"):
            raise InvalidInput(f"MemoryConfig.eviction must be 'coverage' or 'heat', got {self.eviction!r}")
        if self.eviction_tiebreak < 0:
            raise InvalidInput(f"MemoryConfig.eviction_tiebreak must be >= 0, got {self.eviction_tiebreak}")
        if str(self.synchronous).upper() not in ("NORMAL", "FULL"):
            raise InvalidInput("MemoryConfig.synchronous must be 'NORMAL' or 'FULL'")
