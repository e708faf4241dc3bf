"""SnapKV: observation-window attention, pooled, per-head top-k (Li et al., arXiv 2404.14469).

Score of position j < S - w (kvpress ``SnapKVPress.score``):

1. ``a[h, j] = mean_t A[h, t, j]`` over the w window queries (window attention input), or
   the given per-position score (input (L, H, S), read as that mean);
2. ``p[h] = pool(a[h])``: 1-D pooling, kernel k (odd), stride 1, padding k // 2; ``"avg"``
   counts the zero padding (torch ``avg_pool1d``), ``"max"`` ignores it (``max_pool1d``);
3. GQA: reduce the G query heads of each KV head, mean (kvpress) or max.

Selection: every (layer, KV head) keeps its top ``budget - w`` positions by that score (ties:
smaller position) plus the whole window ``[S - w, S)``; uniform over heads and layers.
Defaults follow kvpress: ``window_size=64, kernel_size=5, pooling="avg", gqa="mean"``
(the SnapKV repo's LongBench configs use w=32, k=7, max pooling).

:class:`SnapKV` is also the scorer the other observation-window methods build on
(:class:`~lamina.kv.AdaKV`, :class:`~lamina.kv.PyramidKV`, :class:`~lamina.kv.LAVa`), as in
kvpress where ``PyramidKVPress`` subclasses ``SnapKVPress``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from . import _ops
from .method import (
    KeepSet,
    KVMethod,
    Selection,
    check_kv_heads,
    check_scores,
    check_threads,
    is_integral,
    select_rows,
)

__all__ = ["SnapKV"]


@dataclass
class SnapKV(KVMethod):
    """Observation-window scores, pooling, uniform per-head top-k.

    Parameters
    ----------
    window_size : int, optional
        w, the observation window, always kept. For window attention input (L, H, w, S) it is
        the number of rows (passing a different value is an error); for (L, H, S) input it
        defaults to 64 (32 for LAVa).
    kernel_size : int
        Odd pooling width (1: no pooling). Default 5.
    pooling : {"avg", "max", "none"}
        Default "avg".
    gqa : {"mean", "max"}
        Reduction over the query heads of a KV group. Default "mean".

    The budget must be >= w (the window is always kept) unless the cache is not longer than
    the budget, in which case everything is kept.
    """

    name: ClassVar[str] = "snapkv"
    default_window: ClassVar[int] = 64
    window_size: int | None = None
    kernel_size: int = 5
    pooling: Literal["avg", "max", "none"] = "avg"
    gqa: Literal["mean", "max"] = "mean"

    def validate(self) -> None:
        ws = self.window_size
        if ws is not None:
            if isinstance(ws, (bool, np.bool_)) or not is_integral(ws):
                raise TypeError(f"window_size must be an int or None, got {type(ws).__name__}")
            if ws < 1:
                raise ValueError(f"window_size must be >= 1, got {ws}")
        k = self.kernel_size
        if isinstance(k, (bool, np.bool_)) or not is_integral(k):
            raise TypeError(f"kernel_size must be an int, got {type(k).__name__}")
        if k < 1 or k % 2 == 0:
            raise ValueError(f"kernel_size must be odd and >= 1 (length-preserving pooling), got {k}")
        if self.pooling not in ("avg", "max", "none"):
            raise ValueError(f"pooling must be 'avg', 'max' or 'none', got {self.pooling!r}")
        if self.gqa not in ("mean", "max"):
            raise ValueError(f"gqa must be 'mean' or 'max', got {self.gqa!r}")

    def window(self, scores: npt.NDArray[np.float32]) -> int:
        """w for this input (see ``window_size``)."""
        if scores.ndim == 4:
            w = int(scores.shape[2])
            if self.window_size is not None and int(self.window_size) != w:
                raise ValueError(
                    f"window_size={self.window_size} but the window attention has {w} rows; "
                    "omit window_size for window attention input"
                )
            return w
        return int(self.window_size) if self.window_size is not None else self.default_window

    # -- scores ------------------------------------------------------------------------
    def score(
        self,
        scores: npt.NDArray[np.float32],
        n_kv_heads: int | None = None,
        value_norms: npt.NDArray[np.float32] | None = None,
        *,
        threads: int = 0,
    ) -> npt.NDArray[np.float32]:
        """The per-(layer, KV head) scores of positions [0, S - w).

        Parameters
        ----------
        scores : ndarray, float32, shape (L, H, S) or (L, H, w, S)
        n_kv_heads : int, optional
        value_norms : ndarray, float32, optional (LAVa only)

        Returns
        -------
        ndarray, float32, shape (L, H_kv, S - w)
        """
        self.validate()
        _ops.check_same_side(("scores", scores), ("value_norms", value_norms))
        x = check_scores(scores)
        hkv = check_kv_heads(n_kv_heads, x.shape[1])
        if value_norms is not None and not self.uses_value_norms:
            raise ValueError(f"method {self.name!r} does not use value_norms; pass None")
        w = self.window(x)
        if w >= x.shape[-1]:
            raise ValueError(f"window_size ({w}) must be smaller than S ({x.shape[-1]})")
        rows: npt.NDArray[np.float32] = self._score(x, w, hkv, value_norms, check_threads(threads))
        return rows

    def _scale_args(
        self, value_norms: npt.NDArray[np.float32] | None, scores: npt.NDArray[np.float32], n_kv_heads: int
    ) -> tuple[Any, Any]:
        return None, None

    def _score(
        self,
        x: npt.NDArray[np.float32],
        w: int,
        n_kv_heads: int,
        value_norms: npt.NDArray[np.float32] | None,
        threads: int,
        entropy: bool = False,
    ) -> Any:
        return _ops.window_scores(self._scoring(x, n_kv_heads, x.shape[-1] - w, value_norms), threads, entropy)

    def _scoring(
        self, x: npt.NDArray[np.float32], n_kv_heads: int, n: int, value_norms: npt.NDArray[np.float32] | None
    ) -> _ops.WindowScoring:
        """SnapKV's scoring: the window's mean attention, pooled along positions, scaled by
        the value norms where the method uses them."""
        per_row, per_token = self._scale_args(value_norms, x, n_kv_heads)
        return _ops.WindowScoring(
            x, n_kv_heads, n, "mean", False, self.pooling, int(self.kernel_size), self.gqa, per_row, per_token
        )

    # -- budgets -----------------------------------------------------------------------
    # Methods whose per-row budgets do not depend on the scores (SnapKV, PyramidKV) score and
    # select each row in one fused native pass (the score tensor is never materialised);
    # the others (Ada-KV, LAVa) score first, then allocate, then select.
    scores_decide_budgets: ClassVar[bool] = False

    def _static_budgets(
        self, n_layers: int, n_kv_heads: int, per_head: int, n_candidates: int
    ) -> tuple[npt.NDArray[np.int64], dict[str, Any]]:
        """Non-window tokens kept per (layer, KV head), shape (L, H_kv), and diagnostics,
        for methods whose budgets do not depend on the scores."""
        return np.full((n_layers, n_kv_heads), per_head, dtype=np.int64), {}

    def _row_budgets(
        self, sel: Selection, w: int, per_head: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], dict[str, Any]]:
        """(scores (L, H_kv, S - w), non-window budgets (L, H_kv), diagnostics) for methods
        whose budgets depend on the scores; ``w`` the window, ``per_head`` the non-window
        tokens per KV head."""
        raise NotImplementedError

    def _budget_and_select(
        self, sel: Selection, w: int, per_head: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], dict[str, Any]]:
        """(kept indices, offsets, non-window budgets (L, H_kv), diagnostics) for methods whose
        budgets depend on the scores: _row_budgets, then the native per-row top-k. Methods
        may fuse the two (LAVa does)."""
        rows, k, info = self._row_budgets(sel, w, per_head)
        idx, off = select_rows(rows, k, sel.seq_len - w, w, sel.threads)
        return idx, off, k, info

    def _select(self, sel: Selection) -> KeepSet:
        scores, budget, n_kv_heads = sel.scores, sel.budget, sel.n_kv_heads
        value_norms, threads = sel.value_norms, sel.threads
        L, S = sel.n_layers, sel.seq_len
        w = self.window(scores)
        if budget >= S:
            if self.uses_value_norms:
                self._scale_args(value_norms, scores, n_kv_heads)  # still reject bad norms
            return sel.keep_all(like=scores)
        if budget < w:
            raise ValueError(
                f"{self.name}: budget ({budget} tokens per head) must be >= window_size ({w}); "
                "the observation window is always kept"
            )
        n = S - w
        if self.scores_decide_budgets:
            idx, off, k, info = self._budget_and_select(sel, w, budget - w)
        else:
            k, info = self._static_budgets(L, n_kv_heads, budget - w, n)
            idx, off = _ops.score_select(self._scoring(scores, n_kv_heads, n, value_norms), k, w, threads)
        info["window_size"] = w
        return sel.keep(idx, off, k + w, info)
