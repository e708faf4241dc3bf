"""KeyDiff: keep the keys least similar to the mean key (Park et al., arXiv 2504.15364).

Score of position j of a KV head (kvpress ``KeyDiffPress``)::

    a      = normalize( mean_j normalize(k_j) )        (the anchor: mean unit key)
    s[j]   = -cos(k_j, a)

Keys are the cached keys (after RoPE, as kvpress reads them from the cache). No attention is
read, so the method is query-agnostic by construction and works on a cache whose heads hold
different numbers of entries (during decoding, in chunked prefill). Every (layer, KV head)
keeps its top ``budget`` positions (ties: smaller position); uniform over heads and layers.

Input to :meth:`KeyDiff.select` is the score itself, (L, H_kv, S) (:meth:`KeyDiff.key_scores`
computes it from keys (L, H_kv, S, D)); pass ``n_kv_heads=H_kv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .method import KeepSet, KVMethod, Selection, check_int_param, select_rows

__all__ = ["KeyDiff", "keydiff_scores"]


def keydiff_scores(keys: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Negative cosine similarity of every key to its head's anchor (the normalised mean unit key).

    Parameters
    ----------
    keys : ndarray, float32, shape (..., S, D)
        Keys of one or more heads (leading axes are heads).

    Returns
    -------
    ndarray, float32, shape (..., S)

    Raises
    ------
    TypeError
        Not a float32 array.
    ValueError
        Fewer than 2 dimensions, an empty axis, or non-finite keys.
    """
    if not isinstance(keys, np.ndarray) or keys.dtype != np.float32:
        raise TypeError(f"keys must be a float32 numpy array, got {getattr(keys, 'dtype', type(keys).__name__)}")
    if keys.ndim < 2 or 0 in keys.shape:
        raise ValueError(f"keys must be (..., S, D) and non-empty, got shape {keys.shape}")
    if not np.isfinite(keys).all():
        raise ValueError("keys must be finite")
    norm = np.linalg.norm(keys, axis=-1, keepdims=True)
    unit = keys / np.maximum(norm, 1e-12)
    anchor = unit.mean(axis=-2, keepdims=True)
    anchor = anchor / np.maximum(np.linalg.norm(anchor, axis=-1, keepdims=True), 1e-12)
    out: npt.NDArray[np.float32] = np.ascontiguousarray(-(unit * anchor).sum(axis=-1), dtype=np.float32)
    return out


@dataclass
class KeyDiff(KVMethod):
    """Key-diversity scores (no attention), uniform per-head top-k.

    Parameters
    ----------
    n_sink : int
        Initial positions always kept (default 0: kvpress's KeyDiff keeps none).

    ``select`` takes the KeyDiff scores (L, H_kv, S) (:func:`keydiff_scores`), not attention.
    """

    name: ClassVar[str] = "keydiff"
    uses_keys: ClassVar[bool] = True
    n_sink: int = 0

    def validate(self) -> None:
        check_int_param(self.n_sink, "n_sink", 0)

    @staticmethod
    def key_scores(keys: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """:func:`keydiff_scores` of keys (L, H_kv, S, D) -> (L, H_kv, S)."""
        if keys.ndim != 4:
            raise ValueError(f"keys must be (L, H_kv, S, D), got shape {keys.shape}")
        return keydiff_scores(keys)

    def _select(self, sel: Selection) -> KeepSet:
        scores, budget, n_kv_heads = sel.scores, sel.budget, sel.n_kv_heads
        if scores.ndim != 3 or scores.shape[1] != n_kv_heads:
            raise ValueError(
                f"keydiff scores must be (L, H_kv, S) = (L, {n_kv_heads}, S) (KeyDiff.key_scores), got {scores.shape}"
            )
        n_sink = check_int_param(self.n_sink, "n_sink", 0)
        L, S = sel.n_layers, sel.seq_len
        if budget >= S:
            return sel.keep_all()
        if budget < n_sink:
            raise ValueError(f"keydiff: budget ({budget} tokens per head) must be >= n_sink ({n_sink})")
        x = scores
        if n_sink:
            x = scores.copy()
            x[..., :n_sink] = np.finfo(np.float32).max
        k = np.full((L, n_kv_heads), budget, dtype=np.int64)
        idx, off = select_rows(np.ascontiguousarray(x), k, S, 0, sel.threads)
        return sel.keep(idx, off, k, {"n_sink": n_sink})
