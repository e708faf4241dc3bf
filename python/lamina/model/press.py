"""Applying a ``lamina.kv`` method to the model's real KV cache after prefill.

The prefill records the attention of its last ``w`` queries (every layer and query head,
``(L, H, w, S)``); the method selects the positions each (layer, KV head) keeps at the given
compression ratio (kvpress's ``compression_ratio``: the fraction removed), and the native
cache is compacted head by head, so the memory of the dropped entries is given back.

Methods in :data:`CACHE_SCORED` (KeyDiff, StreamingLLM) read only the cache (keys, order), so
:func:`press_to_budget` applies them to a cache of any shape — also one already compressed
head-wise — during decoding and between the chunks of a chunked prefill.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import InvalidInput
from ..kv import (
    Budget,
    KeepSet,
    KeyDiff,
    KVMethod,
    StreamingLLM,
    keydiff_scores,
    make_method,
    value_l2_norms,
    value_norms,
)

__all__ = [
    "DEFAULT_WINDOW",
    "SCORE_FREE",
    "ACCUMULATED",
    "CACHE_SCORED",
    "observation_window",
    "resolve_press",
    "apply_press",
    "press_to_budget",
]

#: Observation window of the recorded attention (kvpress's SnapKV default).
DEFAULT_WINDOW = 64


def resolve_press(press: str | KVMethod) -> KVMethod:
    """A method instance from a name (``"snapkv"``, ...) or an instance."""
    return make_method(press)


#: Methods that read no attention scores (nothing is recorded for them).
SCORE_FREE = frozenset({"streaming", "keydiff"})
#: Methods that score from the cache alone (keys, order): they apply to a ragged cache.
CACHE_SCORED = frozenset({"streaming", "keydiff"})
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
    compression: Budget,
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
    compression : float or int
        Fraction of the cache removed, in (0, 1), or an int: tokens kept per KV head on
        average (the :mod:`lamina.kv` budget).
    threads : int

    Returns
    -------
    KeepSet
        What each (layer, KV head) kept (positions index the cache before compression).
    """
    if isinstance(compression, float) and not 0.0 < compression < 1.0:
        raise InvalidInput(f"compression must be in (0, 1) to apply a press, got {compression}")
    L, Hk = cache.n_layers, cache.n_kv_heads
    if press.name == "keydiff":
        keys = _stack(cache, "keys")
        keep = press.select(KeyDiff.key_scores(keys), compression, n_kv_heads=Hk, threads=threads)
        _keep(cache, keep)
        return keep
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
    elif getattr(press, "uses_value_norms", False):
        kwargs["value_norms"] = value_l2_norms(_stack(cache, "values"))
    keep = press.select(attention, compression, n_kv_heads=Hk, threads=threads, **kwargs)
    _keep(cache, keep)
    return keep


def _stack(cache: _core.KVCache, what: str) -> npt.NDArray[np.float32]:
    """Keys or values of a cache whose heads all hold S entries: (L, H_kv, S, D) float32."""
    get = cache.keys if what == "keys" else cache.values
    out = np.stack([np.stack([get(l, h) for h in range(cache.n_kv_heads)]) for l in range(cache.n_layers)])
    return np.ascontiguousarray(out, dtype=np.float32)


def _keep(cache: _core.KVCache, keep: KeepSet) -> None:
    for l in range(cache.n_layers):
        for h in range(cache.n_kv_heads):
            cache.keep(l, h, np.ascontiguousarray(keep.head(l, h), dtype=np.int64))


def press_to_budget(cache: _core.KVCache, press: KVMethod, budget: int) -> int:
    """Compact every (layer, KV head) holding more than ``budget`` entries down to ``budget``
    with a :data:`CACHE_SCORED` method, head by head (heads may hold different lengths).

    KeyDiff keeps each head's ``budget`` entries least similar to its anchor (the score is
    computed over the entries the head holds now; ``n_sink`` first entries pinned);
    StreamingLLM keeps the first ``n_sink`` entries and the most recent rest.

    Parameters
    ----------
    cache : lamina._core.KVCache
    press : KeyDiff or StreamingLLM
    budget : int
        Entries kept per (layer, KV head), >= 1 (and >= the method's ``n_sink``).

    Returns
    -------
    int
        Entries dropped over all heads.

    Raises
    ------
    InvalidInput
        A method outside :data:`CACHE_SCORED`, or a budget below 1 or below ``n_sink``.
    """
    if press.name not in CACHE_SCORED:
        raise InvalidInput(
            f"a fixed KV budget over a growing cache needs a method that scores from the cache alone "
            f"({', '.join(sorted(CACHE_SCORED))}); got {press.name!r}"
        )
    b = int(budget)
    n_sink = int(getattr(press, "n_sink", 0))
    if b < 1 or b < n_sink:
        raise InvalidInput(f"kv budget must be >= 1 and >= n_sink ({n_sink}), got {budget}")
    dropped = 0
    lengths = cache.lengths()
    for l in range(cache.n_layers):
        for h in range(cache.n_kv_heads):
            n = int(lengths[l, h])
            if n <= b:
                continue
            if isinstance(press, StreamingLLM):
                idx = np.concatenate([np.arange(n_sink), np.arange(n - (b - n_sink), n)]).astype(np.int64)
            else:
                s = keydiff_scores(cache.keys(l, h))
                s[:n_sink] = np.finfo(np.float32).max
                idx = np.sort(np.argsort(-s, kind="stable")[:b]).astype(np.int64)
            cache.keep(l, h, idx)
            dropped += n - b
    return dropped
