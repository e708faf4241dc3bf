"""PyramidKV: layer budgets decreasing with depth (Cai et al., arXiv 2406.02069).

Scores and per-head selection are SnapKV's (:class:`~lamina.kv.SnapKV`); only the budget of
each layer changes. With b' = budget - w (the average non-window tokens per head) and
n = S - w, the KVCache-Factory / kvpress formula:

    min_num = b' / beta,   max_num = 2 b' - min_num
    if max_num >= n:  max_num = n,  min_num = 2 b' - max_num
    b'_l = max_num - l * (max_num - min_num) / (L - 1)        (l = 0 is the first layer)

The sequence is arithmetic with mean b', so the total is preserved. lamina rounds the real
b'_l by largest remainder (ties: lower layer), so the model keeps exactly
``L * H_kv * budget`` tokens; KVCache-Factory uses integer division (losing up to L - 1
tokens) and kvpress ``round``. Each head of layer l keeps ``b'_l + w`` tokens. kvpress applies
the formula to the total kept (window included) and falls back to SnapKV when
``min_num < w``; lamina applies it to the non-window part as KVCache-Factory does, so no
fallback is needed. With one layer the budget is uniform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .method import apportion, is_real
from .snapkv import SnapKV

__all__ = ["PyramidKV"]


@dataclass
class PyramidKV(SnapKV):
    """SnapKV with pyramid layer budgets.

    Parameters
    ----------
    beta : float >= 1
        Steepness: the last layer gets about ``1/beta`` of the average (default 20).
    window_size, kernel_size, pooling, gqa
        As :class:`~lamina.kv.SnapKV` (defaults 64 / 5 / "avg" / "mean", kvpress's).
    """

    name: ClassVar[str] = "pyramidkv"
    beta: float = 20.0

    def validate(self) -> None:
        super().validate()
        if isinstance(self.beta, bool) or not is_real(self.beta):
            raise TypeError(f"beta must be a number >= 1, got {type(self.beta).__name__}")
        if not float(self.beta) >= 1.0:
            raise ValueError(f"beta must be >= 1, got {self.beta}")

    def layer_budgets(self, n_layers: int, per_head: int, n_candidates: int) -> npt.NDArray[np.int64]:
        """Non-window tokens per head of each layer, shape (n_layers,), summing to
        ``n_layers * per_head``; each in ``[0, n_candidates]``."""
        if n_layers == 1:
            return np.array([per_head], dtype=np.int64)
        bp = float(per_head)
        min_num = bp / float(self.beta)
        max_num = 2.0 * bp - min_num
        if max_num >= n_candidates:
            max_num = float(n_candidates)
            min_num = 2.0 * bp - max_num
        steps = (max_num - min_num) / (n_layers - 1)
        real = max_num - np.arange(n_layers) * steps
        return apportion(real, n_layers * per_head, n_candidates)

    def _static_budgets(
        self, n_layers: int, n_kv_heads: int, per_head: int, n_candidates: int
    ) -> tuple[npt.NDArray[np.int64], dict[str, Any]]:
        b = self.layer_budgets(n_layers, per_head, n_candidates)
        return np.repeat(b[:, None], n_kv_heads, axis=1), {"layer_budgets": b}
