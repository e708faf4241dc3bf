"""KV-cache eviction for serving stacks: which tokens each (layer, KV head) keeps.

One file per method, in the style of NVIDIA kvpress, over one native selection core
(``cpp/lamina/kv.hpp``): :class:`StreamingLLM` (``"streaming"``), :class:`H2O` (``"h2o"``),
:class:`SnapKV` (``"snapkv"``), :class:`AdaKV` (``"adakv"``), :class:`PyramidKV`
(``"pyramidkv"``), :class:`LAVa` (``"lava"``), :class:`KeyDiff` (``"keydiff"``: key
similarity, no attention), :class:`CriticalKV` (``"criticalkv"``: attention × value norm),
:class:`AdaCriticalKV` (``"adakv_criticalkv"``: the same with Ada-KV's head budgets) and
:class:`KVzip` (``"kvzip"``: the attention of a context-reconstruction pass, global head
budgets; the model runs that pass, see :mod:`lamina.model.press`). Each module's docstring gives the formula
it implements and its reference.

Inputs
------
``scores`` is float32, C-contiguous, finite, either

* (L, H, S): a per-position score for every query head (e.g. the mean attention of the
  observation window for SnapKV-family methods, accumulated attention for H2O), or
* (L, H, w, S): the attention weights of the last w queries (the observation window) over
  all S positions, rows summing to 1 under the causal mask.

H counts query heads. With grouped-query attention pass ``n_kv_heads`` (H_kv, dividing H):
query head h belongs to KV head ``h // (H // H_kv)`` (HF ``repeat_kv`` layout) and the G
scores of a group are reduced as the reference of each method does (mean for SnapKV, Ada-KV,
PyramidKV and H2O, as kvpress; max for LAVa, as its reference code). Everything
downstream — budgets, the :class:`KeepSet`, :func:`compress` — is per KV head.

Budget (the one definition)
---------------------------
``budget`` is either

* an ``int`` b >= 1: tokens kept **per KV head on average, window and sink tokens included**.
  A layer keeps ``b * H_kv`` tokens. Uniform methods (streaming, h2o, snapkv) give every
  head exactly b; Ada-KV redistributes within each layer (every layer keeps exactly
  ``b * H_kv``); PyramidKV and LAVa also redistribute across layers (the model keeps exactly
  ``b * H_kv * L``). If S <= b the cache is kept whole (every head keeps S).
* a ``float`` r in (0, 1): kvpress's ``compression_ratio``, the fraction removed:
  ``b = int(S * (1 - r))``, then as above.

Methods that always keep a window (SnapKV family, w tokens) or sinks (streaming) need
b >= w (resp. n_sink) unless S <= b; otherwise ValueError.

Ties and order
--------------
Among equal scores the smaller position is kept; a cross-head selection (Ada-KV, LAVa)
prefers the smaller (head, position). Kept positions are returned sorted ascending, so the
compacted cache keeps the original token order. Results do not depend on the thread count.

Output
------
:func:`select` returns a :class:`KeepSet` (ragged: ``indices``, ``offsets``, ``lengths``).
:func:`compress` gathers keys/values into the **ragged** layout by default,
``(total, D)`` rows in (layer, head, position) order with ``offsets`` as cu_seqlens — the
layout of Ada-KV/LAVa's varlen attention; ``padded=True`` gives ``(L, H_kv, max_len, D)``
zero-padded plus ``lengths`` instead.

GPU
---
:func:`select`, :func:`compress` and :func:`value_norms` also take CUDA arrays
(``__cuda_array_interface__``: CuPy, PyTorch) for ``scores`` / ``value_norms`` / ``keys`` /
``values``; the work then runs on their device and the caller's current stream
(``cuda/kv.cu``) and gives the same result as on the CPU. The :class:`KeepSet` then holds
device ``indices`` (offsets and lengths stay small host arrays; budgets are resolved on the
host from per-layer entropies / head counts copied back). Mixing host and device arrays
raises ``ValueError``; ``threads`` is ignored on the device.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..native import _device
from . import _ops
from .adakv import AdaKV
from .criticalkv import AdaCriticalKV, CriticalKV, value_l2_norms
from .h2o import H2O
from .keydiff import KeyDiff, keydiff_scores
from .kvzip import KVzip
from .lava import LAVa
from .method import Budget, KeepSet, KVMethod, check_threads
from .pyramidkv import PyramidKV
from .snapkv import SnapKV
from .streaming import StreamingLLM

__all__ = [
    "select",
    "compress",
    "value_norms",
    "make_method",
    "KeepSet",
    "CompressedKV",
    "KVMethod",
    "Budget",
    "METHODS",
    "StreamingLLM",
    "H2O",
    "SnapKV",
    "AdaKV",
    "PyramidKV",
    "LAVa",
    "KeyDiff",
    "CriticalKV",
    "AdaCriticalKV",
    "KVzip",
    "keydiff_scores",
    "value_l2_norms",
]

METHODS: dict[str, type[KVMethod]] = {
    cls.name: cls
    for cls in (StreamingLLM, H2O, SnapKV, AdaKV, PyramidKV, LAVa, KeyDiff, CriticalKV, AdaCriticalKV, KVzip)
}
"""Method name -> class."""


def make_method(method: str | KVMethod, **params: Any) -> KVMethod:
    """A method instance from its name and hyper-parameters (or an instance, unchanged).

    Raises
    ------
    ValueError
        Unknown method name (the message lists the valid ones).
    TypeError
        Unknown parameter for that method (the message lists the valid ones), or parameters
        given together with an instance.
    """
    if isinstance(method, KVMethod):
        if params:
            raise TypeError("pass parameters either in the method instance or as keywords, not both")
        return method
    if not isinstance(method, str):
        raise TypeError(f"method must be a name or a KVMethod, got {type(method).__name__}")
    cls = METHODS.get(method.lower())
    if cls is None:
        raise ValueError(f"unknown KV method {method!r}; valid: {', '.join(sorted(METHODS))}")
    valid = [f.name for f in fields(cls)]
    bad = sorted(set(params) - set(valid))
    if bad:
        raise TypeError(f"{cls.name} got unknown parameter(s) {', '.join(bad)}; valid: {', '.join(valid) or 'none'}")
    return cls(**params)


def select(
    scores: npt.NDArray[np.float32],
    budget: Budget,
    method: str | KVMethod = "snapkv",
    value_norms: npt.NDArray[np.float32] | None = None,
    n_kv_heads: int | None = None,
    *,
    threads: int = 0,
    **params: Any,
) -> KeepSet:
    """Kept token positions per (layer, KV head): :meth:`KVMethod.select` of the method
    ``method`` names, configured with ``params``.

    Parameters
    ----------
    scores, budget, value_norms, n_kv_heads, threads
        As :meth:`KVMethod.select` (``value_norms``: LAVa's, from :func:`value_norms`).
    method : str or KVMethod
        ``"streaming"``, ``"h2o"``, ``"snapkv"``, ``"adakv"``, ``"pyramidkv"``, ``"lava"``,
        or a configured instance.
    **params
        Method hyper-parameters (e.g. ``window_size=32, kernel_size=7, floor_alpha=0.2``).

    Returns
    -------
    KeepSet

    Raises
    ------
    TypeError
        Non-array / non-float32 scores, bad parameter types, unknown parameters.
    ValueError
        Bad shapes, NaN/Inf, budget out of range, unknown method.
    """
    return make_method(method, **params).select(
        scores, budget, value_norms=value_norms, n_kv_heads=n_kv_heads, threads=threads
    )


@dataclass(frozen=True, eq=False)
class CompressedKV:
    """Compacted keys and values.

    Attributes
    ----------
    keys, values : ndarray
        Ragged: shape (total, D), rows of (layer, head) r at ``offsets[r]:offsets[r + 1]``.
        Padded: shape (L, H_kv, max_len, D), zeros past ``lengths``.
    offsets : ndarray, shape (L * H_kv + 1,), int64
        Row boundaries (cu_seqlens) of the ragged layout.
    lengths : ndarray, shape (L, H_kv), int64
        Kept tokens per (layer, KV head).
    padded : bool
        Which layout ``keys`` / ``values`` use.
    """

    keys: npt.NDArray[Any]
    values: npt.NDArray[Any]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    padded: bool


def _check_cache(x: object, name: str) -> None:
    """TypeError / ValueError unless ``x`` is a 4-D numeric KV cache (L, H_kv, S, D): a C-contiguous
    numpy array, or a CUDA array."""
    if _device.is_device_array(x):
        cai = x.__cuda_array_interface__
        if cai["typestr"][1] not in "fiu":
            raise TypeError(f"{name} must have a numeric dtype, got typestr {cai['typestr']!r}")
        if len(cai["shape"]) != 4:
            raise ValueError(f"{name} must be (L, H_kv, S, D), got shape {tuple(cai['shape'])}")
        return
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype.kind not in "fiu" or x.dtype.hasobject:
        raise TypeError(f"{name} must have a numeric dtype (float16/float32/...), got {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{name} must be (L, H_kv, S, D), got shape {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous; pass numpy.ascontiguousarray({name})")


def compress(
    keys: npt.NDArray[Any],
    values: npt.NDArray[Any],
    keep: KeepSet,
    *,
    padded: bool = False,
    threads: int = 0,
) -> CompressedKV:
    """Gather the kept keys/values of every (layer, KV head).

    Parameters
    ----------
    keys, values : ndarray, shape (L, H_kv, S, D), same shape and dtype, C-contiguous
        Any numeric dtype (float16, float32, ...); rows are copied bitwise.
    keep : KeepSet
        From :func:`select` on the same cache (L, H_kv and S must match).
    padded : bool
        False (default): ragged (total, D) + offsets. True: (L, H_kv, max_len, D) zero-padded.
    threads : int
        Worker threads (0: default). The GIL is released.

    Returns
    -------
    CompressedKV

    Raises
    ------
    TypeError, ValueError
        Wrong types / shapes, keys and values that differ, a KeepSet for another cache.
    IndexError
        A kept position outside [0, S) (a hand-built KeepSet).
    """
    _ops.check_same_side(("keys", keys), ("values", values))
    if _ops.on_device(("keys", keys), ("values", values)):
        return _compress_device(keys, values, keep, bool(padded))
    _check_cache(keys, "keys")
    _check_cache(values, "values")
    k, v = keys, values
    if k.shape != v.shape or k.dtype != v.dtype:
        raise ValueError(f"keys and values must match, got {k.shape} {k.dtype} and {v.shape} {v.dtype}")
    if not isinstance(keep, KeepSet):
        raise TypeError(f"keep must be a KeepSet, got {type(keep).__name__}")
    if keep.on_device:
        raise ValueError(
            "keep holds device indices but keys/values are host arrays; pass device keys/values or keep.to_host()"
        )
    L, hkv, S, _ = k.shape
    if keep.lengths.shape != (L, hkv) or keep.seq_len != S:
        raise ValueError(
            f"keep is for (L, H_kv, S) = ({keep.n_layers}, {keep.n_heads}, {keep.seq_len}) but the "
            f"cache is ({L}, {hkv}, {S}); with GQA, select with n_kv_heads={hkv}"
        )
    nt = check_threads(threads)
    if padded:
        max_len = int(keep.lengths.max()) if keep.lengths.size else 0
        if max_len == 0:
            shape = (L, hkv, 0, k.shape[3])
            return CompressedKV(np.zeros(shape, k.dtype), np.zeros(shape, v.dtype), keep.offsets, keep.lengths, True)
        ko = _core.kv_gather(k, keep.offsets, keep.indices, max_len, nt)
        vo = _core.kv_gather(v, keep.offsets, keep.indices, max_len, nt)
    else:
        ko = _core.kv_gather(k, keep.offsets, keep.indices, 0, nt)
        vo = _core.kv_gather(v, keep.offsets, keep.indices, 0, nt)
    return CompressedKV(ko, vo, keep.offsets, keep.lengths, bool(padded))


def _compress_device(keys: Any, values: Any, keep: KeepSet, padded: bool) -> CompressedKV:
    _check_cache(keys, "keys")
    _check_cache(values, "values")
    k, v = keys, values  # CUDA arrays (checked)
    ks = tuple(int(s) for s in k.__cuda_array_interface__["shape"])
    vs = tuple(int(s) for s in v.__cuda_array_interface__["shape"])
    kt, vt = k.__cuda_array_interface__["typestr"], v.__cuda_array_interface__["typestr"]
    if ks != vs or kt != vt:
        raise ValueError(f"keys and values must match, got {ks} {kt} and {vs} {vt}")
    if not isinstance(keep, KeepSet):
        raise TypeError(f"keep must be a KeepSet, got {type(keep).__name__}")
    if not keep.on_device:
        raise ValueError(
            "keys/values are on a CUDA device but keep.indices is a host array; select on the "
            "device scores, or move the indices explicitly"
        )
    L, hkv, S, D = ks
    if keep.lengths.shape != (L, hkv) or keep.seq_len != S:
        raise ValueError(
            f"keep is for (L, H_kv, S) = ({keep.n_layers}, {keep.n_heads}, {keep.seq_len}) but the "
            f"cache is ({L}, {hkv}, {S}); with GQA, select with n_kv_heads={hkv}"
        )
    offsets_dev = _ops.to_device_like(k, keep.offsets)  # metadata: L*H_kv+1 int64
    stream = _device.current_stream(k)
    max_len = int(keep.lengths.max()) if keep.lengths.size else 0
    shape = (L, hkv, max_len, D) if padded else (keep.total, D)
    dt = np.dtype(kt)
    outs = []
    for src in (k, v):
        o = _device.empty_like_device(k, shape, dt)
        _core.cuda_kv_gather(src, offsets_dev, keep.offsets, keep.indices, max_len if padded else 0, o, stream)
        outs.append(o)
    return CompressedKV(outs[0], outs[1], keep.offsets, keep.lengths, padded)


def value_norms(values: npt.NDArray[np.float32], *, threads: int = 0) -> npt.NDArray[np.float32]:
    """L1 norm of every value vector, ``sum_d |v[..., d]|`` (LAVa's value norms).

    Parameters
    ----------
    values : ndarray, float32, shape (L, H_kv, S, D) (any leading shape), C-contiguous, finite

    Returns
    -------
    ndarray, float32, shape (L, H_kv, S)
    """
    return _ops.l1_norms(values, check_threads(threads))  # type: ignore[no-any-return]
