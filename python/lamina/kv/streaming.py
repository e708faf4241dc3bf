"""StreamingLLM: attention sinks + a recent window (Xiao et al., arXiv 2309.17453).

Every (layer, KV head) keeps the first ``n_sink`` positions (the "attention sinks") and the
last ``budget - n_sink`` positions; no score is read. This is kvpress ``StreamingLLMPress``
(keep ``[0, n_sink)`` and the most recent tokens, prune the middle). Like kvpress, positions
are selected, not re-rotated: re-apply RoPE to the compacted cache (kvpress
``KeyRerotationPress``) to match the paper's in-cache positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import _ops
from .method import KeepSet, KVMethod, Selection, check_int_param

__all__ = ["StreamingLLM"]


@dataclass
class StreamingLLM(KVMethod):
    """Sink tokens + recent window.

    Parameters
    ----------
    n_sink : int
        Initial tokens always kept (default 4, the paper's and kvpress's). The budget must be
        >= ``n_sink`` (unless the cache is not longer than the budget).

    Only the *shape* of ``scores`` is used (values are not read, so not checked for NaN).
    Every row keeps exactly ``budget`` tokens: ``[0, n_sink) U [S - (budget - n_sink), S)``.
    """

    name: ClassVar[str] = "streaming"
    n_sink: int = 4

    def validate(self) -> None:
        check_int_param(self.n_sink, "n_sink", 0)

    def _select(self, sel: Selection) -> KeepSet:
        scores, budget, n_kv_heads = sel.scores, sel.budget, sel.n_kv_heads
        n_sink = check_int_param(self.n_sink, "n_sink", 0)
        L, S = sel.n_layers, sel.seq_len
        if budget >= S:
            return sel.keep_all(like=scores)
        if budget < n_sink:
            raise ValueError(f"streaming: budget ({budget} tokens per head) must be >= n_sink ({n_sink})")
        recent = budget - n_sink
        row = np.concatenate([np.arange(n_sink, dtype=np.int64), np.arange(S - recent, S, dtype=np.int64)])
        rows = L * n_kv_heads
        return sel.keep(
            _ops.fill_rows(row, rows, scores),
            np.arange(rows + 1, dtype=np.int64) * budget,
            np.full((L, n_kv_heads), budget, dtype=np.int64),
            {"n_sink": n_sink, "recent": recent},
        )
