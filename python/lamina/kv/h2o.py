"""H2O: heavy hitters + recent tokens (Zhang et al., arXiv 2306.14048).

Score: accumulated attention. From window attention A[L,H,w,S] (the last w queries),
``acc[h, j] = sum_t A[h, t, j]``; with ``normalize=True`` it is divided by the number of those
queries that can see position j, ``min(w, S - j)`` (kvpress ``ObservedAttentionPress`` divides
by ``S - j`` with all S queries; with w = S the two agree). Per-position input [L,H,S] is taken
as the accumulated attention itself. GQA: mean over the query heads of a group (kvpress).

Selection (one-shot, prefill): of the per-head budget b, ``recent = int(b * recent_ratio)``
goes to the most recent positions and ``heavy = b - recent`` to the highest-scoring positions
among the others (ties: smaller position). The paper's standard split is 50/50
(``recent_ratio = 0.5``). The paper's decode-time greedy (evict one argmin per generated token)
is this rule applied again to an updated score; lamina does not keep decode state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from . import _ops
from .method import KeepSet, KVMethod, Selection, check_fraction

__all__ = ["H2O"]


@dataclass
class H2O(KVMethod):
    """Heavy-hitter oracle: accumulated attention, heavy/recent split.

    Parameters
    ----------
    recent_ratio : float in [0, 1]
        Share of the budget given to the most recent tokens (default 0.5).
    normalize : bool
        Divide accumulated attention by the number of window queries that see each position
        (needs window attention input).
    gqa : {"mean", "max"}
        Reduction over the query heads of a KV group (default "mean", as kvpress).
    """

    name: ClassVar[str] = "h2o"
    recent_ratio: float = 0.5
    normalize: bool = False
    gqa: Literal["mean", "max"] = "mean"

    def validate(self) -> None:
        check_fraction(self.recent_ratio, "recent_ratio")
        if self.gqa not in ("mean", "max"):
            raise ValueError(f"gqa must be 'mean' or 'max', got {self.gqa!r}")

    def split(self, budget: int) -> tuple[int, int]:
        """(heavy, recent) token counts per head for a resolved budget."""
        r = check_fraction(self.recent_ratio, "recent_ratio")
        recent = int(budget * r)
        return budget - recent, recent

    def score(
        self,
        scores: npt.NDArray[np.float32],
        n_candidates: int,
        n_kv_heads: int,
        threads: int = 0,
    ) -> npt.NDArray[np.float32]:
        """Accumulated attention of positions [0, n_candidates), shape (L, H_kv, n_candidates)."""
        self.validate()
        if self.normalize and scores.ndim != 4:
            raise ValueError("h2o normalize=True needs window attention (L, H, w, S)")
        return _ops.window_scores(self._scoring(scores, n_kv_heads, n_candidates), threads)  # type: ignore[no-any-return]

    def _scoring(self, scores: npt.NDArray[np.float32], n_kv_heads: int, n: int) -> _ops.WindowScoring:
        """H2O's scoring: each window query's attention summed per position (no pooling)."""
        return _ops.WindowScoring(scores, n_kv_heads, n, "sum", bool(self.normalize), "none", 1, self.gqa, None, None)

    def _select(self, sel: Selection) -> KeepSet:
        scores, budget, n_kv_heads = sel.scores, sel.budget, sel.n_kv_heads
        L, S = sel.n_layers, sel.seq_len
        heavy, recent = self.split(budget)
        if budget >= S:
            return sel.keep_all(like=scores)
        n = S - recent
        if self.normalize and scores.ndim != 4:
            raise ValueError("h2o normalize=True needs window attention (L, H, w, S)")
        k = np.full((L, n_kv_heads), heavy, dtype=np.int64)
        # scored and selected row by row in one native pass (see H2O.score for the scores)
        idx, off = _ops.score_select(self._scoring(scores, n_kv_heads, n), k, recent, sel.threads)
        lengths = np.full((L, n_kv_heads), budget, dtype=np.int64)
        return sel.keep(idx, off, lengths, {"heavy": heavy, "recent": recent})
