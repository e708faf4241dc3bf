"""Applying a ``lamina.kv`` method to the model's real KV cache after prefill.

The prefill records the attention of its last ``w`` queries (every layer and query head,
``(L, H, w, S)``); the method selects the positions each (layer, KV head) keeps at the given
compression ratio (kvpress's ``compression_ratio``: the fraction removed), and the native
cache is compacted head by head, so the memory of the dropped entries is given back.

Methods in :data:`CACHE_SCORED` (KeyDiff, StreamingLLM) read only the cache (keys, order), so
:func:`press_to_budget` applies them to a cache of any shape — also one already compressed
head-wise — during decoding and between the chunks of a chunked prefill.

Methods in :data:`RECONSTRUCTED` (KVzip) are scored by one more pass: on a clone of the
prefilled cache the model is teacher-forced through an instruction to repeat the context and
the context itself (:func:`reconstruction_scores`), and every original entry keeps the largest
attention any of those queries gave it. :func:`prefill_for_press` runs the prefill and
whatever scoring pass the method needs, for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

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
from .native import NativeCache, NativeModel

__all__ = [
    "DEFAULT_WINDOW",
    "SCORE_FREE",
    "ACCUMULATED",
    "CACHE_SCORED",
    "RECONSTRUCTED",
    "REPEAT_INSTRUCTION",
    "reads_window",
    "observation_window",
    "reconstruction_scores",
    "prefill_for_press",
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
#: Methods scored by a context-reconstruction pass (KVzip), (L, H, S) maxima.
RECONSTRUCTED = frozenset({"kvzip"})

#: The instruction of the reconstruction pass, before the context is repeated (plain text, so
#: it needs no chat template; the context's own tokens follow it).
REPEAT_INSTRUCTION = "\n\nRepeat the previous context exactly.\n\n"


def reads_window(name: str) -> bool:
    """Whether method ``name`` is scored by the recorded window attention (L, H, w, S): not
    :data:`SCORE_FREE`, :data:`ACCUMULATED` or :data:`RECONSTRUCTED`."""
    return name not in SCORE_FREE and name not in ACCUMULATED and name not in RECONSTRUCTED


def observation_window(press: KVMethod, seq_len: int, compression: float) -> int:
    """Rows of attention to record for a prompt of ``seq_len`` tokens: 0 for a method that
    reads no window (:data:`SCORE_FREE`, :data:`ACCUMULATED`), else the method's ``window_size`` when set, else :data:`DEFAULT_WINDOW`,
    capped so that it stays below the kept budget and the sequence length. (The record holds
    L·H·w·S float32: 0.55 GB for SmolLM2-135M at w = 64, S = 8,000.)"""
    if not reads_window(press.name):
        return 0
    w = getattr(press, "window_size", None)
    w = DEFAULT_WINDOW if w is None else int(w)
    keep = int(seq_len * (1.0 - compression))
    return max(1, min(w, keep, seq_len - 1))


def reconstruction_scores(
    native: NativeModel,
    cache: NativeCache,
    context: npt.NDArray[np.int32],
    instruction: Sequence[int],
    *,
    context_length: int,
    threads: int = 0,
    q8_decode: bool = True,
    chunk: int = 2048,
) -> npt.NDArray[np.float32]:
    """KVzip's scores of the entries of ``cache``, which holds exactly ``context``.

    On a clone of ``cache`` the model runs ``instruction`` and then the context again
    (teacher-forced: the model "repeats" it); each original entry scores the maximum attention
    any of those queries gave it, per layer and query head. A context longer than ``chunk``
    (or than the room the model's window leaves) is repeated piece by piece, each piece on a
    fresh clone, and the maxima are merged. ``cache`` itself is not changed.

    Parameters
    ----------
    native : lamina._core.LlamaModel
    cache : lamina._core.KVCache
        Holds the S context entries, every head uncompressed.
    context : ndarray, int32, shape (S,)
    instruction : sequence of int
        Token ids of :data:`REPEAT_INSTRUCTION` (no BOS).
    context_length : int
        The model's window; a clone may hold S + len(instruction) + one piece.
    threads : int
    q8_decode : bool
    chunk : int
        Longest piece repeated on one clone.

    Returns
    -------
    ndarray, float32, shape (L, H, S)

    Raises
    ------
    InvalidInput
        The model's window leaves fewer than 16 tokens to repeat the context in.
    """
    S = len(context)
    room = min(int(chunk), context_length - S - len(instruction))
    if room < 16:
        raise InvalidInput(
            f"kvzip repeats the context after it: {S} context tokens leave {max(room, 0)} of the model's "
            f"{context_length} for the reconstruction pass (need >= 16); use a shorter context or another press"
        )
    head = np.asarray(instruction, dtype=np.int32)
    out: npt.NDArray[np.float32] | None = None
    for start in range(0, S, room):
        c = cache.clone()
        ids = np.concatenate([head, context[start : start + room]]).astype(np.int32)
        _, _, mx = native.forward(ids, c, "none", threads, 0, q8_decode, True, "max")
        assert mx is not None
        if out is None:
            out = np.ascontiguousarray(mx[:, :, :S])
        else:
            np.maximum(out, mx[:, :, :S], out=out)
    assert out is not None
    return out


def prefill_for_press(
    native: NativeModel,
    cache: NativeCache,
    context: npt.NDArray[np.int32],
    press: KVMethod | None,
    compression: float,
    *,
    instruction: Sequence[int],
    context_length: int,
    threads: int,
    q8_decode: bool,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
    """Prefill ``context`` into the empty ``cache`` and compute what ``press`` reads.

    Returns
    -------
    (logits (V,), scores)
        ``scores``: the recorded window attention (L, H, w, S), the accumulated attention
        (L, H, S) for :data:`ACCUMULATED`, the reconstruction maxima (L, H, S) for
        :data:`RECONSTRUCTED`, or None (no press, ``compression`` 0, or a
        :data:`SCORE_FREE` method).
    """
    pressing = press is not None and compression > 0.0
    window = observation_window(press, len(context), compression) if pressing and press is not None else 0
    accumulate = pressing and press is not None and press.name in ACCUMULATED
    logits, attention, accumulated = native.forward(context, cache, "last", threads, window, q8_decode, accumulate)
    assert logits is not None
    if not pressing or press is None:
        return logits, None
    if press.name in RECONSTRUCTED:
        rec = reconstruction_scores(
            native, cache, context, instruction, context_length=context_length, threads=threads, q8_decode=q8_decode
        )
        return logits, rec
    return logits, accumulated if accumulate else attention


def apply_press(
    cache: NativeCache,
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


def _stack(cache: NativeCache, what: str) -> npt.NDArray[np.float32]:
    """Keys or values of a cache whose heads all hold S entries: (L, H_kv, S, D) float32."""
    get = cache.keys if what == "keys" else cache.values
    out = np.stack([np.stack([get(l, h) for h in range(cache.n_kv_heads)]) for l in range(cache.n_layers)])
    return np.ascontiguousarray(out, dtype=np.float32)


def _keep(cache: NativeCache, keep: KeepSet) -> None:
    for l in range(cache.n_layers):
        for h in range(cache.n_kv_heads):
            cache.keep(l, h, np.ascontiguousarray(keep.head(l, h), dtype=np.int64))


def press_to_budget(cache: NativeCache, press: KVMethod, budget: int) -> int:
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
