"""Ada-KV: one budget per layer, shared across its heads by score (Feng et al., arXiv 2407.11550).

Scores are SnapKV's (:class:`~lamina.kv.SnapKV`). Ada-KV's bound on the attention-output
error after eviction is minimised, at a fixed layer budget, by keeping the *global* top
entries across all heads of the layer, so heads with concentrated attention give tokens to
heads with spread-out attention. A safeguard floor keeps every head from starving.

Allocation implemented (per layer, non-window budget b' = budget - w per head on average):

1. every KV head first keeps its own top ``F = int(alpha_safeguard * b')`` positions;
2. the remaining ``H_kv * (b' - F)`` slots go to the highest remaining scores across all
   heads of the layer (ties: smaller (head, position));
3. each head also keeps the window ``[S - w, S)``.

So each layer keeps exactly ``H_kv * budget`` tokens and every head keeps at least
``F + w``. This is kvpress ``AdaKVPress`` (pin each head's top ``int(n_kept * alpha)``, then a
global top-k), with the floor taken over the non-window budget: kvpress scores the window at
the maximum, so its safeguard is spent on window tokens whenever ``n_safe <= w``. The AdaKV
repository's ``round((1 - alpha) * n_h + alpha * b')`` variant can miss the layer total by
a few tokens; lamina keeps the total exact (LAVa, which uses that mixing formula, rounds it by
largest remainder instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from . import _ops
from .method import Selection, check_fraction
from .snapkv import SnapKV

__all__ = ["AdaKV"]


@dataclass
class AdaKV(SnapKV):
    """SnapKV scores with head budgets shared across each layer (global top-k + floor).

    Parameters
    ----------
    alpha_safeguard : float in [0, 1]
        Floor: every head keeps at least ``int(alpha_safeguard * (budget - w))`` non-window
        tokens (default 0.2, kvpress and the AdaKV repo).
    window_size, kernel_size, pooling, gqa
        As :class:`~lamina.kv.SnapKV` (defaults 64 / 5 / "avg" / "mean", kvpress's).
    """

    name: ClassVar[str] = "adakv"
    alpha_safeguard: float = 0.2

    def validate(self) -> None:
        super().validate()
        check_fraction(self.alpha_safeguard, "alpha_safeguard")

    scores_decide_budgets: ClassVar[bool] = True

    def _row_budgets(
        self, sel: Selection, w: int, per_head: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], dict[str, Any]]:
        rows = self._score(sel.scores, w, sel.n_kv_heads, sel.value_norms, sel.threads)
        L, n_kv_heads = rows.shape[0], sel.n_kv_heads
        floor = int(per_head * float(self.alpha_safeguard))
        total = np.full(L, n_kv_heads * per_head, dtype=np.int64)
        floors = np.full(L, floor, dtype=np.int64)
        counts = _ops.layer_head_counts(rows, total, floors, sel.threads)
        return rows, counts, {"floor": floor, "head_budgets": counts.copy()}
