"""Value-norm re-scoring: attention × ||value|| (after CriticalKV, Feng et al., arXiv
2502.03805, and the value term of Expected Attention, Devoto et al., arXiv 2510.00636).

An entry's contribution to the attention output is ``a_j · v_j``, so the error of evicting
it grows with ``a_j ||v_j||``. Score of position j < S - w::

    s[h, j] = pool( mean_t A[h, t, j] )[j] · ||v_{g(h), j}||_2

i.e. SnapKV's observation-window score (:class:`~lamina.kv.SnapKV`, same pooling and GQA
reduction) re-weighted per token by the L2 norm of its value. This is a one-stage
simplification of CriticalKV: the paper (and kvpress's ``CriticalKVPress``) first keeps a
share of the budget by attention alone and weights by ``||W_o v_j||`` (the value after the
output projection); here the norm is of the cached value itself and the selection is one
top-k. ``value_norms`` is (L, H_kv, S) (:func:`value_l2_norms`). Selection:
:class:`CriticalKV` keeps a uniform per-head top-k plus the window; :class:`AdaCriticalKV`
shares each layer's budget across its heads as Ada-KV does (kvpress's pairing of
``AdaKVPress`` with a value-aware scorer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .adakv import AdaKV
from .method import Selection
from .snapkv import SnapKV

__all__ = ["CriticalKV", "AdaCriticalKV", "value_l2_norms"]


def value_l2_norms(values: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """L2 norm of every value vector.

    Parameters
    ----------
    values : ndarray, float32, shape (..., D)

    Returns
    -------
    ndarray, float32, shape (...)
    """
    if not isinstance(values, np.ndarray) or values.dtype != np.float32:
        raise TypeError(f"values must be a float32 numpy array, got {getattr(values, 'dtype', type(values).__name__)}")
    out: npt.NDArray[np.float32] = np.ascontiguousarray(np.linalg.norm(values, axis=-1), dtype=np.float32)
    return out


def _per_token(value_norms: Any, scores: npt.NDArray[np.float32], n_kv_heads: int, name: str) -> tuple[Any, Any]:
    L, S = scores.shape[0], scores.shape[-1]
    if value_norms is None:
        raise ValueError(f"{name} needs value_norms: the L2 norms of the values, shape (L, H_kv, S) (value_l2_norms)")
    if not isinstance(value_norms, np.ndarray) or value_norms.dtype != np.float32:
        raise TypeError("value_norms must be a float32 numpy array")
    if value_norms.shape != (L, n_kv_heads, S):
        raise ValueError(f"value_norms must have shape (L, H_kv, S) = {(L, n_kv_heads, S)}, got {value_norms.shape}")
    if not np.isfinite(value_norms).all() or (value_norms < 0).any():
        raise ValueError("value_norms must be finite and >= 0")
    return None, np.ascontiguousarray(value_norms)


class _ValueWeighted:
    """Weights SnapKV's window scores (L, H_kv, S - w) by the value norms token by token,
    before any budget is allocated or selected (CPU arrays)."""

    name: ClassVar[str]

    def _scale_args(
        self, value_norms: npt.NDArray[np.float32] | None, scores: npt.NDArray[np.float32], n_kv_heads: int
    ) -> tuple[Any, Any]:
        _per_token(value_norms, scores, n_kv_heads, self.name)  # rejects missing or bad norms
        # the native row scale is LAVa's (one factor per row): the norms weight each token in _score
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
        if entropy:
            raise ValueError(f"{self.name} has no layer-entropy scores")
        _, norms = _per_token(value_norms, x, n_kv_heads, self.name)
        rows = np.asarray(super()._score(x, w, n_kv_heads, value_norms, threads))  # type: ignore[misc]
        n = x.shape[-1] - w
        return np.ascontiguousarray(rows * norms[:, :, :n], dtype=np.float32)


@dataclass
class CriticalKV(_ValueWeighted, SnapKV):
    """SnapKV scores × value L2 norm, uniform per-head top-k + window.

    Parameters
    ----------
    window_size, kernel_size, pooling, gqa
        As :class:`~lamina.kv.SnapKV` (defaults 64 / 5 / "avg" / "mean").
    """

    name: ClassVar[str] = "criticalkv"
    uses_value_norms: ClassVar[bool] = True
    scores_decide_budgets: ClassVar[bool] = True  # the weighted scores are selected in Python's pass

    def _row_budgets(
        self, sel: Selection, w: int, per_head: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], dict[str, Any]]:
        rows = self._score(sel.scores, w, sel.n_kv_heads, sel.value_norms, sel.threads)
        return rows, np.full(rows.shape[:2], per_head, dtype=np.int64), {}


@dataclass
class AdaCriticalKV(_ValueWeighted, AdaKV):
    """:class:`CriticalKV` scores with Ada-KV's head budgets (global top-k per layer + floor).

    Parameters
    ----------
    alpha_safeguard, window_size, kernel_size, pooling, gqa
        As :class:`~lamina.kv.AdaKV`.
    """

    name: ClassVar[str] = "adakv_criticalkv"
    uses_value_norms: ClassVar[bool] = True
