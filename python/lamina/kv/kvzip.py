"""KVzip: query-agnostic eviction scored by context reconstruction (Kim et al., arXiv 2505.23416).

The score of a cached entry is how much the model needs it to *repeat* the context: after the
context is prefilled, the model is teacher-forced through "repeat the previous context"
followed by the context itself, and each entry j of the original cache gets

    ``s[l, h, j] = max_t A[l, h, t, j]``

over every reconstruction query t (the maximum, not the sum, so an entry one query needs
badly — the next digit of a number being copied — outranks an entry many queries glance at).
The reconstruction pass is the model's work (:func:`lamina.model.press.reconstruction_scores`
computes it on a clone of the cache; it costs about one more prefill); this module turns the
scores into a :class:`~lamina.kv.KeepSet`.

Selection: GQA reduces the G query heads of each KV head by max (the paper's choice); then
``budgets="global"`` (the paper's non-uniform head budgets) ranks every (layer, KV head,
position) of the model together and keeps the best ``b · H_kv · L`` (each head first keeps
its ``min_per_head`` best, so no head is emptied), while ``budgets="uniform"`` keeps the
best b of every head. Ties: the smaller (layer, head, position). Host (numpy) scores only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from ..native import _device
from .method import KeepSet, KVMethod, Selection, is_integral

__all__ = ["KVzip"]


@dataclass
class KVzip(KVMethod):
    """Context-reconstruction scores, global (non-uniform) head budgets.

    Parameters
    ----------
    budgets : {"global", "uniform"}
        One ranking over all layers and heads (default, as the paper), or b per head.
    min_per_head : int
        Entries every (layer, KV head) keeps before the global ranking (default 4).
    gqa : {"max", "mean"}
        Reduction over the query heads of a KV group (default "max").

    Input scores are (L, H, S): the maximum attention each entry received from the
    reconstruction queries (window attention (L, H, w, S) is rejected: it is another score).
    """

    name: ClassVar[str] = "kvzip"
    budgets: Literal["global", "uniform"] = "global"
    min_per_head: int = 4
    gqa: Literal["max", "mean"] = "max"

    def validate(self) -> None:
        if self.budgets not in ("global", "uniform"):
            raise ValueError(f"budgets must be 'global' or 'uniform', got {self.budgets!r}")
        m = self.min_per_head
        if isinstance(m, (bool, np.bool_)) or not is_integral(m):
            raise TypeError(f"min_per_head must be an int, got {type(m).__name__}")
        if int(m) < 1:
            raise ValueError(f"min_per_head must be >= 1, got {m}")
        if self.gqa not in ("max", "mean"):
            raise ValueError(f"gqa must be 'max' or 'mean', got {self.gqa!r}")

    def head_scores(self, scores: npt.NDArray[np.float32], n_kv_heads: int) -> npt.NDArray[np.float32]:
        """(L, H, S) query-head scores reduced to (L, H_kv, S) KV-head scores."""
        L, H, S = scores.shape
        g = scores.reshape(L, n_kv_heads, H // n_kv_heads, S)
        out = g.max(axis=2) if self.gqa == "max" else g.mean(axis=2)
        return np.ascontiguousarray(out, dtype=np.float32)

    def _select(self, sel: Selection) -> KeepSet:
        scores, budget, n_kv_heads = sel.scores, sel.budget, sel.n_kv_heads
        if _device.is_device_array(scores):
            raise ValueError("kvzip selects on host (numpy) scores; copy the scores to the host first")
        if scores.ndim != 3:
            raise ValueError(
                "kvzip needs (L, H, S) reconstruction scores (lamina.model.press.reconstruction_scores), "
                f"got a {scores.ndim}-d array"
            )
        L, S = sel.n_layers, sel.seq_len
        if budget >= S:
            return sel.keep_all(like=scores)
        s = self.head_scores(scores, n_kv_heads).reshape(L * n_kv_heads, S)
        R = s.shape[0]
        # per row: positions by descending score, ties to the smaller position
        order = np.argsort(-s, axis=1, kind="stable")
        keep = np.zeros((R, S), dtype=bool)
        if self.budgets == "uniform":
            np.put_along_axis(keep, order[:, :budget], True, axis=1)
        else:
            m = min(int(self.min_per_head), budget)
            np.put_along_axis(keep, order[:, :m], True, axis=1)
            rest = budget * R - m * R
            if rest > 0:
                flat = np.where(keep.ravel(), -np.inf, s.ravel().astype(np.float64))
                best = np.argsort(-flat, kind="stable")[:rest]
                keep.ravel()[best] = True
        rows, pos = np.nonzero(keep)
        lengths = np.bincount(rows, minlength=R).astype(np.int64)
        offsets = np.zeros(R + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        info = {"budgets": self.budgets, "min_per_head": int(self.min_per_head)}
        return sel.keep(pos.astype(np.int64), offsets, lengths.reshape(L, n_kv_heads), info)
