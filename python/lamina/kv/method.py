"""Shared base of the :mod:`lamina.kv` methods: :class:`KeepSet`, :class:`KVMethod`, budgets.

The budget rule, the tie rule and the output layout are defined once, in the
:mod:`lamina.kv` package docstring; this module implements them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..native import _device
from . import _ops

__all__ = ["KeepSet", "KVMethod", "Budget", "Selection", "resolve_budget", "apportion"]

Budget = int | float
"""An int (tokens kept per KV head on average) or a float in (0, 1) (kvpress compression_ratio)."""


@dataclass(frozen=True, eq=False)
class KeepSet:
    """Kept token positions per (layer, KV head), ragged.

    Row ``r = layer * n_heads + head`` keeps ``indices[offsets[r]:offsets[r + 1]]``: unique
    positions in ``[0, seq_len)``, sorted ascending (cache order is preserved). This is the
    layout of varlen attention kernels (``offsets`` is ``cu_seqlens``).

    Attributes
    ----------
    indices : ndarray, shape (total,), int64
        Kept positions of every row, rows concatenated in row-major (layer, head) order.
    offsets : ndarray, shape (n_layers * n_heads + 1,), int64
        Row boundaries in ``indices``; ``offsets[0] == 0``, ``offsets[-1] == total``.
    lengths : ndarray, shape (n_layers, n_heads), int64
        Kept tokens per (layer, KV head); ``lengths.ravel() == diff(offsets)``.
    seq_len : int
        S, the length of the cache the positions index into.
    method : str
        Name of the method that produced the set.
    budget : int
        The resolved budget: tokens kept per KV head on average (``min(budget, S)``).
    info : dict
        Method diagnostics (e.g. ``layer_budgets``, ``entropy``, ``head_counts``); arrays
        there have a leading layer axis.

    Device sets: when :func:`lamina.kv.select` runs on CUDA scores, ``indices`` is a device
    array (CuPy / PyTorch, the scores' library) while ``offsets`` and ``lengths`` stay small
    host arrays; :meth:`head` works on it, :meth:`mask` / :meth:`padded` need a call of
    ``to_host()`` first (an explicit copy).

    Thread safety: immutable after construction (the arrays are made read-only); safe to share.
    """

    indices: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    seq_len: int
    method: str = "custom"
    budget: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("indices", "offsets", "lengths"):
            a = getattr(self, name)
            if name == "indices" and _device.is_device_array(a):
                cai = a.__cuda_array_interface__
                if cai["typestr"][1:] != "i8":
                    raise TypeError("KeepSet.indices must be an int64 (device) array")
                continue
            if not isinstance(a, np.ndarray) or a.dtype != np.int64:
                raise TypeError(f"KeepSet.{name} must be an int64 numpy array")
            a.flags.writeable = False
        if len(self.indices.shape) != 1 or self.offsets.ndim != 1 or self.lengths.ndim != 2:
            raise ValueError("KeepSet needs indices (total,), offsets (R+1,), lengths (L, H_kv)")
        r = self.lengths.size
        if self.offsets.shape[0] != r + 1 or self.offsets[0] != 0:
            raise ValueError(f"KeepSet.offsets must have {r + 1} entries starting at 0")
        if not np.array_equal(np.diff(self.offsets), self.lengths.ravel()):
            raise ValueError("KeepSet.offsets do not match lengths")
        if self.offsets[-1] != self.indices.shape[0]:
            raise ValueError("KeepSet.offsets[-1] must equal len(indices)")
        if int(self.seq_len) < 1:
            raise ValueError(f"KeepSet.seq_len must be >= 1, got {self.seq_len}")

    @property
    def on_device(self) -> bool:
        """True when ``indices`` lives in device memory (a CUDA array)."""
        return _device.is_device_array(self.indices)

    def to_host(self) -> KeepSet:
        """This set with ``indices`` copied to a numpy array (itself when already on the host)."""
        if not self.on_device:
            return self
        return KeepSet(
            indices=np.ascontiguousarray(_ops.to_host(self.indices), dtype=np.int64),
            offsets=self.offsets,
            lengths=self.lengths,
            seq_len=self.seq_len,
            method=self.method,
            budget=self.budget,
            info=self.info,
        )

    def _host_only(self, what: str) -> None:
        if self.on_device:
            raise ValueError(f"KeepSet.{what}() needs host indices; call keep.to_host().{what}()")

    @property
    def n_layers(self) -> int:
        """L."""
        return int(self.lengths.shape[0])

    @property
    def n_heads(self) -> int:
        """H_kv, the KV heads the set is per."""
        return int(self.lengths.shape[1])

    @property
    def total(self) -> int:
        """Kept tokens over all layers and heads."""
        return int(self.offsets[-1])

    def head(self, layer: int, head: int) -> npt.NDArray[np.int64]:
        """Kept positions of one (layer, KV head), ascending (a read-only view)."""
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise IndexError(f"(layer, head) = ({layer}, {head}) outside ({self.n_layers}, {self.n_heads})")
        r = layer * self.n_heads + head
        return self.indices[self.offsets[r] : self.offsets[r + 1]]

    def mask(self) -> npt.NDArray[np.bool_]:
        """Dense kept mask, shape (n_layers, n_heads, seq_len)."""
        self._host_only("mask")
        m = np.zeros((self.lengths.size, self.seq_len), dtype=bool)
        rows = np.repeat(np.arange(self.lengths.size), self.lengths.ravel())
        m[rows, self.indices] = True
        return m.reshape(self.n_layers, self.n_heads, self.seq_len)

    def padded(self, fill: int = -1) -> npt.NDArray[np.int64]:
        """Kept positions padded to the longest row, shape (n_layers, n_heads, max_len);
        entries past a row's length are ``fill``."""
        self._host_only("padded")
        max_len = int(self.lengths.max()) if self.lengths.size else 0
        out = np.full((self.lengths.size, max_len), fill, dtype=np.int64)
        lens = self.lengths.ravel()
        cols = np.arange(self.total) - np.repeat(self.offsets[:-1], lens)
        out[np.repeat(np.arange(lens.size), lens), cols] = self.indices
        return out.reshape(self.n_layers, self.n_heads, max_len)

    def __repr__(self) -> str:
        return (
            f"KeepSet(method={self.method!r}, layers={self.n_layers}, heads={self.n_heads}, "
            f"seq_len={self.seq_len}, budget={self.budget}, total={self.total})"
        )


def is_integral(x: object) -> bool:
    """``isinstance(x, numbers.Integral)`` (int, numpy integers, ...) as a plain bool: mypy does not
    know that int is registered with ``numbers.Integral``, so the check must not narrow the type."""
    return isinstance(x, numbers.Integral)


def is_real(x: object) -> bool:
    """``isinstance(x, numbers.Real)`` (int, float, numpy scalars, ...) as a plain bool (see
    :func:`is_integral`)."""
    return isinstance(x, numbers.Real)


def resolve_budget(budget: Budget, seq_len: int) -> int:
    """Tokens kept per KV head on average, from an int budget or a compression ratio.

    ``int`` b >= 1 -> ``min(b, seq_len)``; ``float`` r in (0, 1) -> ``int(seq_len * (1 - r))``
    (kvpress ``n_kept``), which must be >= 1.
    """
    if isinstance(budget, (bool, np.bool_)):
        raise TypeError("budget must be an int (tokens per head) or a float in (0, 1), not bool")
    if is_integral(budget):
        b = int(budget)
        if b < 1:
            raise ValueError(f"budget must be >= 1 token per head, got {b}")
        return min(b, seq_len)
    if is_real(budget):
        r = float(budget)
        if not 0.0 < r < 1.0:
            raise ValueError(
                f"a float budget is a compression_ratio (fraction removed) and must be in (0, 1), "
                f"got {r}; pass an int for a number of tokens"
            )
        b = int(seq_len * (1.0 - r))
        if b < 1:
            raise ValueError(f"compression_ratio {r} keeps 0 of {seq_len} tokens per head; lower it")
        return b
    raise TypeError(f"budget must be an int (tokens per head) or a float in (0, 1), got {type(budget).__name__}")


def apportion(weights: npt.ArrayLike, total: int, cap: int) -> npt.NDArray[np.int64]:
    """Split ``total`` into integers proportional to ``weights``, each in ``[0, cap]``.

    Shares above ``cap`` are clamped and their excess re-split over the rest in proportion
    (water filling); the real shares are then rounded by largest remainder, ties to the lower
    index, so the result sums to ``total`` exactly. All-zero weights split uniformly.
    Float noise is neutralised: a share within 1e-9 of an integer is that integer, and
    remainders are compared at 1e-9 resolution (so equal shares computed along different
    float paths still tie). Requires ``0 <= total <= len(weights) * cap``.
    """
    w = np.asarray(weights, dtype=np.float64).ravel()
    m = w.size
    if total < 0 or total > m * cap:
        raise ValueError(f"cannot split {total} into {m} parts of at most {cap}")
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    w = np.where(w > 0, w, 0.0)
    x = np.zeros(m)
    free = np.ones(m, dtype=bool)
    remaining = float(total)
    while True:
        wf = w[free]
        s = wf.sum()
        share = remaining * (wf / s if s > 0 else np.full(wf.size, 1.0 / wf.size))
        over = share > cap
        if not over.any():
            x[free] = share
            break
        idx = np.flatnonzero(free)[over]
        x[idx] = cap
        free[idx] = False
        remaining -= cap * idx.size
        if not free.any():
            break
    near = np.round(x)
    x = np.where(np.abs(x - near) < 1e-9, near, x)
    base = np.clip(np.floor(x), 0, cap).astype(np.int64)
    rem = np.round(x - base, 9)
    d = total - int(base.sum())
    order = np.lexsort((np.arange(m), -rem))  # remainder descending, then index ascending
    if d > 0:
        cand = order[base[order] < cap][:d]
        base[cand] += 1
    elif d < 0:
        cand = order[::-1][base[order[::-1]] > 0][:-d]
        base[cand] -= 1
    assert int(base.sum()) == total
    return base


def device_f32_shape(x: Any, name: str) -> tuple[int, ...]:
    """The shape of ``x``, a CUDA array (``__cuda_array_interface__``) that must be float32;
    a TypeError naming ``name`` and the conversion otherwise."""
    cai = x.__cuda_array_interface__
    if cai["typestr"][1:] != "f4":
        raise TypeError(
            f"{name} must have dtype float32, got typestr {cai['typestr']!r}; convert "
            f"explicitly with {name}.astype('float32')"
        )
    return tuple(int(s) for s in cai["shape"])


def check_scores(scores: Any) -> npt.NDArray[np.float32]:
    """scores: float32 ndarray, (L, H, S) or (L, H, w, S), C-contiguous, non-empty; or the same
    as a CUDA array (dtype / contiguity then checked natively)."""
    if _device.is_device_array(scores):
        shape = device_f32_shape(scores, "scores")
        if len(shape) not in (3, 4):
            raise ValueError(
                f"scores must be (L, H, S) per-position scores or (L, H, w, S) window attention, got shape {shape}"
            )
        if 0 in shape:
            raise ValueError(f"scores must be non-empty, got shape {shape}")
        if len(shape) == 4 and shape[2] > shape[3]:
            raise ValueError(
                f"window attention (L, H, w, S) needs w <= S (the window is the last w of the S "
                f"positions), got shape {shape}"
            )
        _device.require_cuda()
        return scores  # type: ignore[return-value]  # a CUDA array, typed as the host array it stands for
    if not isinstance(scores, np.ndarray):
        raise TypeError(
            f"scores must be a numpy.ndarray of dtype float32, got {type(scores).__name__}; "
            "use numpy.asarray(scores, dtype=numpy.float32)"
        )
    if scores.dtype != np.float32:
        raise TypeError(
            f"scores must have dtype float32, got {scores.dtype}; convert explicitly with scores.astype(numpy.float32)"
        )
    if scores.ndim not in (3, 4):
        raise ValueError(
            f"scores must be (L, H, S) per-position scores or (L, H, w, S) window attention, got shape {scores.shape}"
        )
    if 0 in scores.shape:
        raise ValueError(f"scores must be non-empty, got shape {scores.shape}")
    if scores.ndim == 4 and scores.shape[2] > scores.shape[3]:
        raise ValueError(
            f"window attention (L, H, w, S) needs w <= S (the window is the last w of the S "
            f"positions), got shape {scores.shape}"
        )
    if not scores.flags.c_contiguous:
        raise ValueError("scores must be C-contiguous; pass numpy.ascontiguousarray(scores)")
    return scores


def check_kv_heads(n_kv_heads: int | None, n_heads: int) -> int:
    """H_kv from the caller (None: no GQA, H_kv = H); must divide H."""
    if n_kv_heads is None:
        return n_heads
    if isinstance(n_kv_heads, (bool, np.bool_)) or not is_integral(n_kv_heads):
        raise TypeError(f"n_kv_heads must be an int or None, got {type(n_kv_heads).__name__}")
    hkv = int(n_kv_heads)
    if hkv < 1 or n_heads % hkv != 0:
        raise ValueError(f"n_kv_heads must divide the number of query heads ({n_heads}), got {hkv}")
    return hkv


def check_threads(threads: int) -> int:
    if isinstance(threads, (bool, np.bool_)) or not is_integral(threads):
        raise TypeError(f"threads must be an int, got {type(threads).__name__}")
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0: default), got {threads}")
    return int(threads)


def check_int_param(value: Any, name: str, lo: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    return int(value)


def check_fraction(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__}")
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {v}")
    return v


@dataclass(frozen=True, eq=False)
class Selection:
    """The checked arguments of one :meth:`KVMethod.select` call, as a method's ``_select``
    receives them, and the :class:`KeepSet` they make.

    Attributes
    ----------
    method : str
        The method's name (:attr:`KeepSet.method`).
    scores : ndarray, float32, shape (L, H, S) or (L, H, w, S)
        Host or CUDA array.
    budget : int
        Tokens kept per KV head on average (resolved, >= 1).
    value_norms : ndarray, float32, or None
    n_kv_heads : int
        H_kv (divides H).
    threads : int
        Worker threads (0: lamina's default).
    """

    method: str
    scores: npt.NDArray[np.float32]
    budget: int
    value_norms: npt.NDArray[np.float32] | None
    n_kv_heads: int
    threads: int

    @property
    def n_layers(self) -> int:
        """L."""
        return int(self.scores.shape[0])

    @property
    def seq_len(self) -> int:
        """S, the positions scored."""
        return int(self.scores.shape[-1])

    def keep_all(self, like: Any = None) -> KeepSet:
        """Every position of every row (see :func:`keep_all`)."""
        return keep_all(self.n_layers, self.n_kv_heads, self.seq_len, self.method, self.budget, like=like)

    def keep(
        self, indices: Any, offsets: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], info: dict[str, Any]
    ) -> KeepSet:
        """The :class:`KeepSet` of this call with these rows (lengths: shape (L, H_kv))."""
        return KeepSet(
            indices=indices,
            offsets=offsets,
            lengths=lengths,
            seq_len=self.seq_len,
            method=self.method,
            budget=self.budget,
            info=info,
        )


def keep_all(n_layers: int, n_heads: int, seq_len: int, method: str, budget: int, like: Any = None) -> KeepSet:
    """Every position of every row (the cache is not longer than the budget); indices on
    ``like``'s device when it is a CUDA array."""
    r = n_layers * n_heads
    return KeepSet(
        indices=_ops.fill_rows(np.arange(seq_len, dtype=np.int64), r, like),
        offsets=np.arange(r + 1, dtype=np.int64) * seq_len,
        lengths=np.full((n_layers, n_heads), seq_len, dtype=np.int64),
        seq_len=seq_len,
        method=method,
        budget=budget,
        info={"kept_all": True},
    )


def select_rows(
    scores: npt.NDArray[np.float32] | None,
    k: npt.NDArray[np.int64],
    n: int,
    tail: int,
    threads: int,
    like: Any = None,
) -> tuple[Any, npt.NDArray[np.int64]]:
    """Native per-row top-k (+ always-kept tail [n, n + tail)); returns (indices, offsets).
    Device scores (or ``like``) give device indices; offsets are always on the host."""
    return _ops.select_rows(scores, k, n, tail, threads, like)


@dataclass
class KVMethod:
    """Base of the KV-cache eviction methods (one subclass per file, kvpress style).

    A method is a small dataclass of hyper-parameters; :meth:`select` turns scores and a
    budget into a :class:`KeepSet`. Subclasses implement :meth:`_select`.

    Thread safety: methods hold only their parameters; ``select`` may run concurrently from
    several threads (the native work releases the GIL).
    """

    name: ClassVar[str] = "base"
    uses_value_norms: ClassVar[bool] = False

    def select(
        self,
        scores: npt.NDArray[np.float32],
        budget: Budget,
        value_norms: npt.NDArray[np.float32] | None = None,
        n_kv_heads: int | None = None,
        *,
        threads: int = 0,
    ) -> KeepSet:
        """Choose the kept tokens of every (layer, KV head).

        Parameters
        ----------
        scores : ndarray, float32, shape (L, H, S) or (L, H, w, S)
            Per-position scores of each query head, or the attention weights of the last w
            queries (the observation window) over all S positions.
        budget : int or float
            Tokens per KV head on average, or a compression ratio in (0, 1) (see the
            :mod:`lamina.kv` docstring).
        value_norms : ndarray, float32, optional
            Only for methods that use them (LAVa): (L, H_kv, S) L1 norms of the values or
            their per-head maxima (L, H_kv).
        n_kv_heads : int, optional
            H_kv for grouped-query attention (divides H); None means H_kv = H.
        threads : int
            Worker threads (0: lamina's default). The GIL is released.

        Returns
        -------
        KeepSet
            Per (layer, KV head) kept positions, shape (L, H_kv) of rows.
        """
        self.validate()
        _ops.check_same_side(("scores", scores), ("value_norms", value_norms))
        x = check_scores(scores)
        hkv = check_kv_heads(n_kv_heads, x.shape[1])
        nthreads = check_threads(threads)
        if value_norms is not None and not self.uses_value_norms:
            raise ValueError(f"method {self.name!r} does not use value_norms; pass None")
        b = resolve_budget(budget, x.shape[-1])
        return self._select(Selection(self.name, x, b, value_norms, hkv, nthreads))

    def validate(self) -> None:
        """Check the hyper-parameters; raises TypeError / ValueError naming the bad one."""

    def _select(self, sel: Selection) -> KeepSet:
        """The kept tokens of a checked call (what :meth:`select` checks, in ``sel``)."""
        raise NotImplementedError
