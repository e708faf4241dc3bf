"""The systems of ``lamina eval longmemeval``: lamina and three baselines over one question's
history, each giving a budgeted context and a ranking of turns and sessions.

The history is fed through the LoCoMo systems' interface (:mod:`lamina.eval.systems`):
:func:`replay_sessions` turns a question's haystack into :class:`lamina.eval.locomo.Session`
objects whose turns carry only what a memory may see — the role as speaker (``user`` /
``assistant``), the text, and an event time (the session date, plus one second per turn so that
order survives as time). Sessions are numbered by their position in date order and turns are
named ``"<session number>:<turn index>"``; the file's session ids (gold-bearing: evidence sessions
are called ``answer_...``) never reach a system.

Baselines (same tokenizer, same renderer, same embedder and vectors as lamina's contexts):

* ``bm25`` and ``dense-rag`` (turn-level cosine) of :mod:`lamina.eval.systems`;
* :class:`ChunkHybrid` — fixed windows of consecutive turns of a session (6 turns, 1
  overlapping), each embedded as its text (``[date] role: text`` lines), scored
  ``0.6·cosine + 0.4·BM25/max BM25`` (the strongest simple peer measured on LoCoMo:
  ``../shared/references/peers-measured.md``), then filled turn by turn in chunk order.

lamina is read with :meth:`lamina.Memory.explain_context`, which returns what ``context`` would
and counts no visit, so that the contexts at several budgets and the ranking of one question do
not change each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..memory.reports import ContextExplanation
from ..memory.types import MemoryItem, format_time
from .locomo import Session, Turn
from .longmemeval import LmeQuestion, LmeSession
from .scoring import answer_tokens, count_tokens
from .systems import BM25, CachedEmbedder, Ctx, DenseRAG, LaminaSystem, RawTurns, _BM25Index, render_turn

__all__ = [
    "TurnKey",
    "Replay",
    "replay_sessions",
    "ChunkHybrid",
    "LME_BASELINES",
    "lamina_context",
    "lamina_ranking",
    "baseline_ranking",
    "history_tokens",
]

#: A turn of the file: (session id, turn index).
TurnKey = tuple[str, int]


@dataclass(frozen=True)
class Replay:
    """A question's history as systems ingest it, and the map back to the file for scoring.

    Attributes
    ----------
    sessions : list of Session
        In date order (ties: haystack order), numbered 1.. in that order; empty turns left out.
    key_of : dict
        Turn name (``Turn.dia_id``) → (file session id, turn index).
    session_of : dict
        Session number → file session id.
    """

    sessions: list[Session]
    key_of: dict[str, TurnKey]
    session_of: dict[int, str]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    @property
    def last_time(self) -> float:
        return max((t.timestamp for t in self.turns), default=0.0)


def replay_sessions(q: LmeQuestion, sessions: dict[str, LmeSession]) -> Replay:
    """The question's haystack as :class:`~lamina.eval.locomo.Session` objects (see module docs).

    A session listed twice in a haystack is replayed twice (two numbers), and both copies map
    to the same file session, as the benchmark's corpus ids do.
    """
    order = sorted(range(len(q.haystack)), key=lambda i: (q.haystack[i][1], i))
    out: list[Session] = []
    key_of: dict[str, TurnKey] = {}
    session_of: dict[int, str] = {}
    for n, i in enumerate(order, start=1):
        sid, t0 = q.haystack[i]
        turns = []
        for j, t in enumerate(sessions[sid].turns):
            if not t.text.strip():
                continue
            name = f"{n}:{j}"
            key_of[name] = (sid, j)
            turns.append(Turn(name, n, t.role, t.text, t0 + j))
        session_of[n] = sid
        out.append(Session(n, t0, tuple(turns)))
    return Replay(out, key_of, session_of)


# ---- the chunk hybrid -------------------------------------------------------------------------------


class ChunkHybrid(RawTurns):
    """Fixed windows of consecutive turns, cosine and BM25 fused (see module docs).

    Ranking: chunks by ``dense_weight·cos + (1 − dense_weight)·bm25 / max bm25``; the turns of
    each chunk in order, each at its first occurrence. The context is filled with those turns in
    that order (a turn that does not fit is skipped), rendered as every raw-turn baseline renders.
    """

    name = "chunk-hybrid"
    window = 6
    overlap = 1
    dense_weight = 0.6

    def __init__(self, embedder: CachedEmbedder, capacity: int | None = None) -> None:
        if capacity is not None:
            raise ValueError("chunk-hybrid keeps every turn (no capacity)")
        super().__init__(embedder, None)
        self._chunks: list[list[int]] = []  # turn positions per chunk
        self._cvecs: list[npt.NDArray[np.float32]] = []
        self._ctexts: list[str] = []
        self._cbm25: _BM25Index | None = None

    @staticmethod
    def chunk_text(session_time: float, turns: Sequence[Turn]) -> str:
        """A chunk as it is embedded and indexed: ``[date] role: text`` lines."""
        return f"[{format_time(session_time)}]\n" + "\n".join(f"{t.speaker}: {t.text}" for t in turns)

    def ingest(self, session: Session) -> None:
        first = len(self.turns)
        super().ingest(session)
        step = self.window - self.overlap
        n = len(session.turns)
        new: list[list[int]] = []
        for s in range(0, max(n - self.overlap, 1), step):
            new.append(list(range(first + s, first + min(s + self.window, n))))
        texts = [self.chunk_text(session.timestamp, [self.turns[i] for i in c]) for c in new if c]
        if not texts:
            return
        E = self.embedder.embed(texts)
        self._chunks.extend(c for c in new if c)
        self._cvecs.extend(E)
        self._ctexts.extend(texts)
        self._cbm25 = None

    def ranking(self, question: str, q_emb: npt.NDArray[np.float32], n: int) -> tuple[list[int], list[float]]:
        if not self._chunks:
            return [], []
        if self._cbm25 is None:
            self._cbm25 = _BM25Index([answer_tokens(t) for t in self._ctexts])
        lex = self._cbm25.scores(answer_tokens(question))
        top = float(lex.max()) if lex.size else 0.0
        lex = lex / top if top > 0 else lex
        cos = np.stack(self._cvecs) @ np.asarray(q_emb, dtype=np.float32)
        fused = self.dense_weight * cos.astype(np.float64) + (1.0 - self.dense_weight) * lex
        order: list[int] = []
        scores: list[float] = []
        seen: set[int] = set()
        for c in np.argsort(-fused, kind="stable").tolist():
            for i in self._chunks[c]:
                if i < n and i not in seen:
                    seen.add(i)
                    order.append(i)
                    scores.append(float(fused[c]))
        return order, scores


#: The baselines of the LongMemEval run, by name.
LME_BASELINES: dict[str, type[RawTurns]] = {c.name: c for c in (BM25, DenseRAG, ChunkHybrid)}


def baseline_ranking(sysm: RawTurns, question: str, q_emb: npt.NDArray[np.float32]) -> list[str]:
    """The baseline's full ranking of turns, as turn names (``Turn.dia_id``), best first."""
    order, _ = sysm.ranking(question, q_emb, len(sysm.turns))
    return [sysm.turns[i].dia_id for i in order]


# ---- lamina -----------------------------------------------------------------------------------------


def lamina_context(
    sysm: LaminaSystem, question: str, budget: int, now: float, q_emb: npt.NDArray[np.float32]
) -> tuple[Ctx, ContextExplanation]:
    """lamina's context for ``question`` (read-only: no visit counted) and its explanation."""
    ex = sysm.mem.explain_context(question, **sysm.read_args(budget, now, q_emb))
    return sysm.as_ctx(ex.context), ex


def _shown_turns(it: MemoryItem) -> tuple[str, ...]:
    """The source turns whose text an item shows in a context (a turn, a segment's turns, a
    current fact's latest source turn); none for summaries, notes and profiles."""
    if it.kind in ("turn", "segment"):
        return it.sources
    if it.kind == "fact" and it.current and it.sources:
        return it.sources[-1:]
    return ()


def lamina_ranking(ctx: Ctx, replay: Replay) -> tuple[list[str], list[int]]:
    """lamina's ranking from a context built with room for everything: its items by score.

    Returns
    -------
    turns : list of str
        Turn names (``Turn.dia_id``) in item order, each item's shown turns in order.
    sessions : list of int
        Session numbers in item order: the session of each shown turn, and for an item that
        shows no turn (a summary) the session it belongs to.
    """
    turns: list[str] = []
    sessions: list[int] = []
    src = ctx.source
    if src is None or ctx.abstain:
        return turns, sessions
    for it in sorted(src.items, key=lambda x: -float(x.score)):
        shown = [s for s in _shown_turns(it) if s in replay.key_of]
        turns.extend(shown)
        if shown:
            sessions.extend(int(s.split(":")[0]) for s in shown)
        elif it.session_id and it.session_id.startswith("session_"):
            sessions.append(int(it.session_id[len("session_") :]))
    return turns, sessions


def history_tokens(replay: Replay) -> int:
    """Tokens of the whole history as raw turns render (the ranking budget: room for all)."""
    return sum(count_tokens(render_turn(t)) for t in replay.turns)
