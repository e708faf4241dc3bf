"""Applying a ``lamina.kv`` method to the model's real KV cache after prefill.

The prefill records the attention of its last ``w`` queries (every layer and query head,
``(L, H, w, S)``); the method selects the positions each (layer, KV head) keeps at the given
compression ratio (kvpress's ``compression_ratio``: the fraction removed), and the native
cache is compacted head by head, so the memory of the dropped entries is given back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import InvalidInput
from ..kv import KeepSet, KVMethod, make_method, value_norms

__all__ = ["DEFAULT_WINDOW", "SCORE_FREE", "ACCUMULATED", "observation_window", "resolve_press", "apply_press"]

#: Observation window of the recorded attention (kvpress's SnapKV default).
DEFAULT_WINDOW = 64


def resolve_press(press: str | KVMethod) -> KVMethod:
    """A method instance from a name (``"snapkv"``, ...) or an instance."""
    return make_method(press)


#: Methods that read no attention scores (nothing is recorded for them).
SCORE_FREE = frozenset({"streaming"})
#: Methods scored by the attention accumulated over every prefill query, (L, H, S) (H2O's
#: heavy hitters), rather than by the last w queries.
ACCUMULATED = frozenset({"h2o"})


def observation_window(press: KVMethod, seq_len: int, compression: float) -> int:
    """Rows of attention to record for a prompt of ``seq_len`` tokens: 0 for a method that
    reads no window (:data:`SCORE_FREE`, :data:`ACCUMULATED`), else the method's ``window_size`` when set, else :data:`DEFAULT_WINDOW`,
    capped so that it stays below the kept budget and the sequence length. (The record holds
    L·H·w·S float32: 0.55 GB for SmolLM2-135M at w = 64, S = 8,000.)"""
    if press.name in SCORE_FREE or press.name in ACCUMULATED:
        return 0
    w = getattr(press, "window_size", None)
    w = DEFAULT_WINDOW if w is None else int(w)
    keep = int(seq_len * (1.0 - compression))
    return max(1, min(w, keep, seq_len - 1))


def apply_press(
    cache: _core.KVCache,
    attention: npt.NDArray[np.float32] | None,
    press: KVMethod,
    compression: float,
    *,
    threads: int = 0,
) -> KeepSet:
    """Compress ``cache`` in place with ``press``.

    Parameters
    ----------
    cache : lamina._core.KVCache
        A cache every head of which holds the same S entries.
    attention : ndarray, float32, shape (L, H, w, S) or (L, H, S), or None
        Recorded attention of the last w prefill queries, or accumulated over all of them
        (:data:`ACCUMULATED`), or None (a method in :data:`SCORE_FREE`).
    press : KVMethod
    compression : float
        Fraction of the cache removed, in (0, 1).
    threads : int

    Returns
    -------
    KeepSet
        What each (layer, KV head) kept (positions index the cache before compression).
    """
    if not 0.0 < compression < 1.0:
        raise InvalidInput(f"compression must be in (0, 1) to apply a press, got {compression}")
    L, Hk = cache.n_layers, cache.n_kv_heads
    if attention is None:
        if press.name not in SCORE_FREE:
            raise InvalidInput(f"{press.name} needs the recorded prefill attention")
        lengths = cache.lengths()
        if (lengths != lengths.flat[0]).any():
            raise InvalidInput("the cache was already compressed head-wise")
        attention = np.zeros((L, Hk, 1, int(lengths.flat[0])), np.float32)
    kwargs: dict[str, Any] = {}
    if press.name == "lava":
        vals = np.stack([np.stack([cache.values(l, h) for h in range(Hk)]) for l in range(L)])
        kwargs["value_norms"] = value_norms(np.ascontiguousarray(vals, dtype=np.float32), threads=threads)
    keep = press.select(attention, compression, n_kv_heads=Hk, threads=threads, **kwargs)
    for l in range(L):
        for h in range(Hk):
            cache.keep(l, h, np.ascontiguousarray(keep.head(l, h), dtype=np.int64))
    return keep
