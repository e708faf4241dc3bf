"""Systems compared by ``lamina eval``: raw-turn baselines and lamina (with ablations).

Every system sees the same turns, session by session, through one interface:

* ``ingest(session)`` — add one session's turns (event times from the session date), then
  close the session;
* ``context(question, budget, now, q_emb)`` — a :class:`Ctx` of at most ``budget`` tokens.

Baselines work over raw turns, rendered exactly as lamina renders a raw turn
(``[YYYY-MM-DD HH:MM] Speaker: text``), on the same embedder:

* ``recency`` — the most recent turns that fit in the budget;
* ``dense-rag`` — turns by cosine similarity to the question (exact native top-k), greedily
  filled until the budget is used;
* ``bm25`` — Okapi BM25 (k1 = 1.2, b = 0.75, non-negative idf) on normalised, Porter-stemmed
  tokens, filled the same way;
* ``hybrid-rag`` — reciprocal-rank fusion (k = 60) of the dense and BM25 rankings.

A ``capacity`` (in turns) makes a baseline keep only its newest ``capacity`` turns (FIFO), the
bounded-store counterpart of lamina's layer capacities used for the retention measurement.
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..embedders import Embedder, SpanEmbedder, SpanVectors, is_lexical
from ..embedders.embedder import Span, check_spans
from ..memory import Memory, MemoryConfig
from ..memory.types import Context, ContextOrder, MemoryItem, format_time
from ..native.search import topk
from .locomo import Session, Turn
from .scoring import answer_tokens, count_tokens

__all__ = [
    "CtxItem",
    "Ctx",
    "CachedEmbedder",
    "render_turn",
    "RawTurns",
    "Recency",
    "DenseRAG",
    "BM25",
    "HybridRAG",
    "LaminaSystem",
    "BASELINES",
    "LAMINA_VARIANTS",
    "make_system",
]


@dataclass
class CtxItem:
    """One item of a context: its rendering, score and (speaker, text) parts for attribution."""

    text: str
    score: float
    parts: tuple[tuple[str | None, str], ...]
    layer: str = "raw"


@dataclass
class Ctx:
    """A system's context: its items (for attribution) and, when the system renders its own
    prompt text (lamina groups turns under shared date headers), that text; for lamina also the
    :class:`lamina.Context` itself (``source``), which :meth:`render_in` shows in another order."""

    items: list[CtxItem] = field(default_factory=list)
    abstain: bool = False
    text: str | None = None
    source: Context | None = None

    def render_in(self, order: ContextOrder) -> str:
        """The same selected items rendered in ``order`` (:func:`lamina.memory.types.arrange`).

        Raises
        ------
        ValueError
            An unknown order, or a context without a :class:`lamina.Context` (the raw-turn
            baselines: only lamina's contexts carry an order).
        """
        if self.source is None:
            raise ValueError("only lamina's contexts can be reordered (this context has no lamina.Context)")
        if self.abstain:
            return ""
        return self.source.reordered(order=order).render()

    def render(self) -> str:
        if self.abstain:
            return ""
        return self.text if self.text is not None else "\n".join(it.text for it in self.items)

    @property
    def tokens(self) -> int:
        return count_tokens(self.render())

    def top(self) -> CtxItem | None:
        return max(self.items, key=lambda it: it.score) if self.items and not self.abstain else None


class CachedEmbedder:
    """Memoises an embedder's vectors by text, so that every system of one run pays for each
    distinct text once (the vectors are the inner embedder's, bit for bit).

    With ``path``, vectors are also kept in a SQLite file keyed by the embedder's ``name`` and the
    SHA-256 of the text, so a rerun (another budget, system or code change) embeds nothing it has
    embedded before. Each batch is written in one transaction: a crash loses at most the batch in
    flight, never a half-written vector. Vectors read back are the stored float32 bytes.

    Thread safety: not thread-safe (the evaluation is single-threaded).
    """

    def __init__(self, inner: Embedder, path: str | None = None) -> None:
        self.inner = inner
        self._cache: dict[str, npt.NDArray[np.float32]] = {}
        self._late: dict[bytes, SpanVectors] = {}
        self.seconds = 0.0
        self.embedded = 0
        self.from_disk = 0
        self.path = path
        self._db: sqlite3.Connection | None = None
        if path is not None:
            d = os.path.dirname(os.path.abspath(path))
            os.makedirs(d, exist_ok=True)
            self._db = sqlite3.connect(path)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key BLOB NOT NULL, "
                "dim INTEGER NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, key))"
            )
            self._db.commit()

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def report(self) -> dict[str, Any]:
        """The run's embedding work, as the results file records it: ``name``, ``dim``,
        ``texts_embedded`` (by the inner embedder), ``from_cache`` (read from the file) and
        ``seconds`` (spent embedding)."""
        return {
            "name": self.name,
            "dim": self.dim,
            "texts_embedded": self.embedded,
            "from_cache": self.from_disk,
            "seconds": round(self.seconds, 3),
        }

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def lexical(self) -> bool:
        return is_lexical(self.inner)

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def _load(self, texts: list[str]) -> list[str]:
        """Fill the memo from the file; returns the texts still missing."""
        if self._db is None or not texts:
            return texts
        dim, name = self.dim, self.name
        missing: list[str] = []
        for i in range(0, len(texts), 500):
            chunk = texts[i : i + 500]
            keys = {self._key(t): t for t in chunk}
            q = ",".join("?" * len(keys))
            rows = self._db.execute(
                f"SELECT key, dim, vec FROM vectors WHERE model = ? AND key IN ({q})", [name, *keys]
            ).fetchall()
            for k, d, v in rows:
                if int(d) == dim and len(v) == 4 * dim:
                    self._cache[keys[bytes(k)]] = np.frombuffer(v, dtype=np.float32).copy()
                    self.from_disk += 1
            missing.extend(t for t in chunk if t not in self._cache)
        return missing

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """The inner embedder's vectors, each distinct text embedded once.

        Returns
        -------
        ndarray, shape (len(texts), dim), float32
        """
        import time

        missing = self._load([t for t in dict.fromkeys(texts) if t not in self._cache])
        if missing:
            t0 = time.perf_counter()
            E = self.inner.embed(missing)
            self.seconds += time.perf_counter() - t0
            self.embedded += len(missing)
            for t, e in zip(missing, E):
                self._cache[t] = np.array(e, dtype=np.float32)
            if self._db is not None:
                with self._db:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                        [(self.name, self._key(t), self.dim, self._cache[t].tobytes()) for t in missing],
                    )
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = self._cache[t]
        return out

    def embed_spans(self, texts: list[str], spans: list[list[Span]]) -> list[SpanVectors]:
        """The inner embedder's late-chunked vectors (:meth:`lamina.embedders.SpanEmbedder.embed_spans`),
        each distinct (text, spans) encoded once, kept under the model name + ``"/late"`` (a text's
        late vectors are not its plain vector). An inner embedder without ``embed_spans``
        embeds the text and each span's text on their own (through :meth:`embed`).

        Returns
        -------
        list of :class:`lamina.embedders.SpanVectors`, one per text
        """
        import time

        spans = check_spans(texts, spans)
        inner = self.inner
        if not isinstance(inner, SpanEmbedder):
            out = []
            for t, ss in zip(texts, spans):
                X = self.embed([t, *(t[a:b] for a, b in ss)])
                out.append(SpanVectors(whole=X[0].copy(), spans=np.ascontiguousarray(X[1:])))
            return out
        model, dim = self.name + "/late", self.dim
        keys = [hashlib.sha256(repr((t, ss)).encode("utf-8")).digest() for t, ss in zip(texts, spans)]
        got: dict[bytes, SpanVectors] = {k: v for k in keys if (v := self._late.get(k)) is not None}
        want = list(dict.fromkeys(k for k in keys if k not in got))
        if self._db is not None and want:
            for i in range(0, len(want), 500):
                chunk = want[i : i + 500]
                q = ",".join("?" * len(chunk))
                for k, d, v in self._db.execute(
                    f"SELECT key, dim, vec FROM vectors WHERE model = ? AND key IN ({q})", [model, *chunk]
                ).fetchall():
                    X = np.frombuffer(v, dtype=np.float32).reshape(-1, int(d))
                    if int(d) == dim and len(X):
                        got[bytes(k)] = self._late[bytes(k)] = SpanVectors(whole=X[0].copy(), spans=X[1:].copy())
                        self.from_disk += 1
        idx = {k: i for i, k in enumerate(keys)}
        miss = [k for k in want if k not in got]
        if miss:
            t0 = time.perf_counter()
            new = inner.embed_spans([texts[idx[k]] for k in miss], [spans[idx[k]] for k in miss])
            self.seconds += time.perf_counter() - t0
            self.embedded += len(miss)
            for k, sv in zip(miss, new):
                got[k] = self._late[k] = sv
            if self._db is not None:
                with self._db:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                        [
                            (model, k, dim, np.vstack([sv.whole[None], sv.spans]).astype(np.float32).tobytes())
                            for k, sv in zip(miss, new)
                        ],
                    )
        return [got[k] for k in keys]

    def forget(self) -> None:
        """Drop the in-process memo (the file keeps every vector; the counters are kept)."""
        self._cache.clear()
        self._late.clear()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def render_turn(t: Turn) -> str:
    """A raw turn as lamina renders one: ``[YYYY-MM-DD HH:MM] Speaker: text``."""
    return f"[{format_time(t.timestamp)}] {t.speaker}: {t.text}"


# ---- raw-turn baselines ---------------------------------------------------------------------------


class RawTurns(ABC):
    """Shared store of the baselines: raw turns, their vectors, a BM25 index, optional FIFO capacity."""

    name = "raw"

    def __init__(self, embedder: CachedEmbedder, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1 turn, got {capacity}")
        self.embedder = embedder
        self.capacity = capacity
        self.turns: list[Turn] = []
        self._vecs: list[npt.NDArray[np.float32]] = []
        self._rendered: list[str] = []
        self._ntok: list[int] = []
        self._bm25: _BM25Index | None = None

    def ingest(self, session: Session) -> None:
        if not session.turns:
            return
        E = self.embedder.embed([t.text for t in session.turns])
        for t, e in zip(session.turns, E):
            self.turns.append(t)
            self._vecs.append(e)
            r = render_turn(t)
            self._rendered.append(r)
            self._ntok.append(count_tokens(r))
        if self.capacity is not None and len(self.turns) > self.capacity:
            cut = len(self.turns) - self.capacity
            del self.turns[:cut], self._vecs[:cut], self._rendered[:cut], self._ntok[:cut]
        self._bm25 = None

    def _visible(self, now: float | None) -> int:
        """Number of leading turns stated at or before ``now`` (turns are in time order)."""
        if now is None:
            return len(self.turns)
        n = len(self.turns)
        while n and self.turns[n - 1].timestamp > now:
            n -= 1
        return n

    def _item(self, i: int, score: float) -> CtxItem:
        t = self.turns[i]
        return CtxItem(self._rendered[i], score, ((t.speaker, t.text),))

    def _fill(self, order: Sequence[int], scores: Sequence[float], budget: int) -> Ctx:
        items: list[CtxItem] = []
        used = 0
        for i, s in zip(order, scores):
            n = self._ntok[i]
            if used + n <= budget:
                items.append(self._item(i, s))
                used += n
            if budget - used < 4:
                break
        return Ctx(items, abstain=not items)

    @abstractmethod
    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        """Order of the first ``n`` turns for the question (best first) and their scores."""

    def context(self, question: str, budget: int, now: float | None, q_emb: npt.NDArray[np.float32]) -> Ctx:
        n = self._visible(now)
        if n == 0:
            return Ctx([], abstain=True)
        order, scores = self.ranking(question, q_emb, n)
        return self._fill(order, scores, budget)

    # rankings shared by the subclasses
    def _dense(self, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        M = np.ascontiguousarray(np.stack(self._vecs[:n]))
        s, idx = topk(np.ascontiguousarray(q_emb.reshape(1, -1), dtype=np.float32), M, n, "ip")
        return idx[0].tolist(), s[0].tolist()

    def _lexical(self, question: str, n: int) -> tuple[list[int], list[float]]:
        if self._bm25 is None or self._bm25.n != len(self.turns):
            self._bm25 = _BM25Index([answer_tokens(t.text) for t in self.turns])
        sc = self._bm25.scores(answer_tokens(question))[:n]
        order = np.argsort(-sc, kind="stable")
        return order.tolist(), sc[order].tolist()


class Recency(RawTurns):
    name = "recency"

    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        return list(range(n - 1, -1, -1)), [float(i) for i in range(n - 1, -1, -1)]

    def context(self, question: str, budget: int, now: float | None, q_emb: npt.NDArray[np.float32]) -> Ctx:
        n = self._visible(now)
        chosen: list[int] = []
        used = 0
        for i in range(n - 1, -1, -1):  # newest first, contiguous
            if used + self._ntok[i] > budget:
                break
            chosen.append(i)
            used += self._ntok[i]
        # chronological order; the newest turn is the top-scored one
        items = [self._item(i, float(i)) for i in reversed(chosen)]
        return Ctx(items, abstain=not items)


class DenseRAG(RawTurns):
    name = "dense-rag"

    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        return self._dense(q_emb, n)


class BM25(RawTurns):
    name = "bm25"

    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        return self._lexical(question, n)


class HybridRAG(RawTurns):
    name = "hybrid-rag"
    rrf_k = 60

    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        d_order, _ = self._dense(q_emb, n)
        l_order, l_scores = self._lexical(question, n)
        fused = np.zeros(n)
        fused[np.asarray(d_order)] += 1.0 / (self.rrf_k + 1 + np.arange(n))
        # turns sharing no term with the question get no lexical rank
        lex = [(i, s) for i, s in zip(l_order, l_scores) if s > 0]
        for r, (i, _) in enumerate(lex):
            fused[i] += 1.0 / (self.rrf_k + 1 + r)
        order = np.argsort(-fused, kind="stable")
        return order.tolist(), fused[order].tolist()


class _BM25Index:
    """Okapi BM25 over tokenised documents (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + .5)/(df + .5)))."""

    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.n = len(docs)
        self.k1, self.b = k1, b
        self.lens = np.array([len(d) for d in docs], dtype=np.float64)
        self.avg = float(self.lens.mean()) if self.n else 0.0
        self.post: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        acc: dict[str, tuple[list[int], list[float]]] = {}
        for i, d in enumerate(docs):
            for w, tf in Counter(d).items():
                a = acc.setdefault(w, ([], []))
                a[0].append(i)
                a[1].append(float(tf))
        for w, (ii, tfs) in acc.items():
            self.post[w] = (np.array(ii, dtype=np.int64), np.array(tfs))

    def scores(self, query: list[str]) -> npt.NDArray[np.float64]:
        s = np.zeros(self.n)
        if not self.n:
            return s
        norm = self.k1 * (1 - self.b + self.b * self.lens / max(self.avg, 1e-9))
        for w in set(query):
            p = self.post.get(w)
            if p is None:
                continue
            ii, tf = p
            idf = math.log(1.0 + (self.n - len(ii) + 0.5) / (len(ii) + 0.5))
            s[ii] += idf * tf * (self.k1 + 1) / (tf + norm[ii])
        return s


BASELINES: dict[str, type[RawTurns]] = {c.name: c for c in (Recency, DenseRAG, BM25, HybridRAG)}


# ---- lamina ----------------------------------------------------------------------------------------

#: lamina and its ablations, as MemoryConfig changes of the default configuration.
LAMINA_VARIANTS: dict[str, dict[str, Any]] = {
    "lamina": {},
    "lamina -semantic": {"layers": ("working", "episodic")},
    "lamina -episodic": {"layers": ("working", "semantic")},
    "lamina -gating": {"beta": 0.0, "max_entropy": None},  # β = 0: uniform γ, no sharpening
    "lamina -retention": {"profile_lambda": 0.0},  # λ = 0 (eq. 9-10 off)
    "lamina -time": {"time_channel": False},  # no time-bearing ranking for "when" questions
    "lamina -session": {"session_prior": 0.0},  # turns ranked on their own, not by their session too
    "lamina lex1": {"lexical_weight": 1.0},  # the BM25 term weighed as the dense one, whatever the embedder
    "lamina -sentences": {"turn_vectors": "text"},  # a turn embedded as its text alone
    "lamina late": {"turn_vectors": "late"},  # sentence vectors pooled from one pass over the turn
    "lamina parts": {"turn_vectors": "parts"},  # the sentences' vectors alone, no whole-turn text
    "lamina -per-token": {"fill_item_tokens": 0},  # the fill in score order, whatever an item's length
    "lamina -stale": {"stale_penalty": 0.0},  # superseded facts' turns not demoted
    "lamina +lend": {"lend_capacity": True},  # the capacity pools lend each other their unused room
}


class LaminaSystem:
    """lamina.Memory behind the evaluation interface (one user per conversation)."""

    def __init__(self, name: str, embedder: CachedEmbedder, config: MemoryConfig, user_id: str) -> None:
        self.name = name
        self.mem = Memory(None, embedder=embedder, config=config)
        self.user_id = user_id

    def ingest(self, session: Session) -> None:
        if not session.turns:
            return
        sid = f"session_{session.number}"
        msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in session.turns]
        self.mem.add(msgs, user_id=self.user_id, session_id=sid)
        self.mem.end_session(user_id=self.user_id, session_id=sid, now=session.turns[-1].timestamp)

    @staticmethod
    def _parts(it: MemoryItem) -> tuple[tuple[str | None, str], ...]:
        if it.kind == "turn":
            return ((it.speaker, it.text),)
        if it.kind == "segment" and it.turns:
            return tuple((sp, tx) for _, sp, tx in it.turns)
        if it.kind == "fact":
            parts = [(sp, tx) for _, sp, tx in it.turns]
            return tuple(parts) + ((it.subject, it.text),)
        return ((None, it.text),)  # summaries, notes, profiles: attributed to nobody

    def read_args(self, budget: int, now: float | None, q_emb: npt.NDArray[np.float32]) -> dict[str, Any]:
        """The keyword arguments of a read of this system's user (``Memory.context``,
        ``Memory.explain_context``): the budget, the time and the precomputed query embedding."""
        return {
            "user_id": self.user_id,
            "budget": budget,
            "now": now,
            "query_embedding": np.ascontiguousarray(q_emb, dtype=np.float32),
        }

    @classmethod
    def as_ctx(cls, c: Context) -> Ctx:
        """A lamina context as the evaluation's :class:`Ctx` (its items' source turns attributed)."""
        items = [CtxItem(it.render(), float(it.score), cls._parts(it), it.layer) for it in c.items]
        return Ctx(items, abstain=bool(c.abstain), text=c.render(), source=c)

    def context(self, question: str, budget: int, now: float | None, q_emb: npt.NDArray[np.float32]) -> Ctx:
        return self.as_ctx(self.mem.context(question, **self.read_args(budget, now, q_emb)))

    def close(self) -> None:
        self.mem.close()


def make_system(
    name: str,
    embedder: CachedEmbedder,
    user_id: str,
    *,
    capacity_turns: int | None = None,
    base_config: MemoryConfig | None = None,
) -> Any:
    """Build a fresh system by name. ``capacity_turns``: the retention capacity — for a baseline,
    the turns it keeps; for lamina, C_e + C_s, split evenly between episodic and semantic."""
    if name in BASELINES:
        return BASELINES[name](embedder, capacity=capacity_turns)
    if name in LAMINA_VARIANTS:
        cfg = replace(base_config or MemoryConfig(), **LAMINA_VARIANTS[name])
        if capacity_turns is not None:
            half = max(1, math.ceil(capacity_turns / 2))
            cfg = replace(cfg, episodic_capacity=half, semantic_capacity=half)
        return LaminaSystem(name, embedder, cfg, user_id)
    raise ValueError(f"unknown system {name!r}; expected one of {list(BASELINES) + list(LAMINA_VARIANTS)}")
