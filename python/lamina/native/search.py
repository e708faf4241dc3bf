"""Contiguous vector arena and exact top-k search (native, fused selection).

Ordering, ties and padding are the same everywhere:

* results are sorted best first: highest score for ``"ip"`` and ``"cosine"``, smallest
  squared distance for ``"l2"``;
* equal scores are ordered by the smaller slot / row index first, so results do not depend on
  the number of threads;
* when fewer than ``k`` candidates exist, the tail is padded with slot ``-1`` and score
  ``-inf`` (``"ip"``, ``"cosine"``) or ``+inf`` (``"l2"``).

Metrics: ``ip`` = <q, x>; ``cosine`` = <q, x> / (|q| |x|) (a stored zero vector scores 0, a
zero query is an error); ``l2`` = |q|^2 + |x|^2 - 2<q, x> clamped at 0 (squared Euclidean
distance, computed as FAISS does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .. import _core
from . import _device
from ._checks import check_k

__all__ = [
    "VectorArena",
    "topk",
    "inner_products",
    "Metric",
    "Codec",
    "CODECS",
    "DEFAULT_OVERSAMPLE",
    "DEPTH_REFERENCE_ROWS",
    "DEPTH_GROWTH",
    "MAX_DEFAULT_DEPTH",
    "rerank_oversample",
]

Metric = Literal["ip", "cosine", "l2"]
Codec = Literal["binary", "int8"]
CODECS: tuple[Codec, ...] = ("binary", "int8")
#: Candidates per result that the code scan keeps for the exact re-ranking, by codec, on stores
#: up to :data:`DEPTH_REFERENCE_ROWS` rows: chosen from recall@10 against the exact scan on
#: MiniLM vectors of LoCoMo turns (bench/bench_fleet.py); larger stores: :func:`rerank_oversample`.
DEFAULT_OVERSAMPLE: dict[Codec, int] = {"binary": 8, "int8": 2}
#: Rows up to which :data:`DEFAULT_OVERSAMPLE` keeps its measured recall; past them the default
#: depth grows with log2 of the scanned rows (:func:`rerank_oversample`).
DEPTH_REFERENCE_ROWS = 16_384
#: Growth of the default oversample per doubling of the scanned rows past
#: :data:`DEPTH_REFERENCE_ROWS`, as a share of the codec's base oversample.
DEPTH_GROWTH: dict[Codec, float] = {"binary": 1.0, "int8": 0.25}
#: The deepest default re-ranking (k·r): the GPU's largest candidate list (``cuda_max_k()``).
MAX_DEFAULT_DEPTH = 1024
NamespaceArg = int | np.integer | npt.NDArray[np.uint64] | None


def _as_slots(slots: int | Iterable[int] | npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(slots)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"slots must be integers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"slots must be a 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise IndexError("slot out of range (larger than any int64 slot)")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _namespace(ns: NamespaceArg) -> int | npt.NDArray[np.uint64] | None:
    if ns is None:
        return None
    if isinstance(ns, (bool, np.bool_)):
        raise TypeError("namespace must be an int or a uint64 array, not bool")
    if isinstance(ns, (int, np.integer)):
        v = int(ns)
        if not 0 <= v < 2**64:
            raise ValueError(f"namespace must be in [0, 2**64), got {v}")
        return v
    return ns  # checked strictly (dtype uint64, 1-D, contiguous) by the native layer


def topk(
    queries: npt.NDArray[np.float32],
    vectors: npt.NDArray[np.floating],
    k: int,
    metric: Metric = "ip",
    *,
    threads: int = 0,
    out: Any = None,
) -> tuple[Any, Any]:
    """Exact top-k of ``queries`` against the rows of a plain matrix.

    Parameters
    ----------
    queries : ndarray, shape (b, d), float32, C-contiguous, finite
    vectors : ndarray, shape (n, d), float32 or float16, C-contiguous, n >= 1
    k : int
        Results per query (>= 1); padded when ``k > n`` (see module docs).
    metric : {"ip", "cosine", "l2"}
    threads : int
        Worker threads (0: ``lamina.get_num_threads()``). The GIL is released.
    out : (scores, indices) pair, optional
        Preallocated outputs of shape (b, k) (float32, int64) on the inputs' device, written in
        place and returned.

    Device dispatch: when ``queries`` and ``vectors`` are CUDA arrays (anything exposing
    ``__cuda_array_interface__``: CuPy, PyTorch) the search runs on their device, on the
    caller's current stream, and returns arrays of the same library on that device (CuPy for
    other producers); the call waits for the result once to report NaN/Inf as ``ValueError``.
    On the GPU ``k`` is limited to ``cuda_max_k()`` (1024). Mixed host/device inputs raise
    ``ValueError``; device inputs to a build without CUDA raise ``RuntimeError``.

    Returns
    -------
    scores : array, shape (b, k), float32
    indices : array, shape (b, k), int64 (row indices, -1 pads)

    Raises
    ------
    TypeError
        Wrong dtype or a non-array argument (nothing is converted silently).
    ValueError
        Wrong shape, non-contiguous input, NaN/Inf, ``k <= 0``, empty ``vectors``, unknown metric.
    """
    k = check_k(k)
    outs = _device.out_pair(out) if out is not None else (None, None)
    if _device.on_device(("queries", queries), ("vectors", vectors), ("out[0]", outs[0]), ("out[1]", outs[1])):
        nq = int(queries.shape[0]) if len(queries.shape) else 0
        scores = outs[0] if out is not None else _device.empty_like_device(queries, (nq, k), np.float32)
        ids = outs[1] if out is not None else _device.empty_like_device(queries, (nq, k), np.int64)
        _core.cuda_topk(queries, vectors, k, str(metric), scores, ids, _device.current_stream(queries))
        return scores, ids
    res = _core.topk(queries, vectors, k, str(metric), int(threads))
    if out is None:
        return res
    return _copy_out(res, outs)


def inner_products(
    queries: npt.NDArray[np.float32],
    vectors: npt.NDArray[np.floating],
    *,
    out: npt.NDArray[np.float32] | None = None,
    threads: int = 0,
) -> npt.NDArray[np.float32]:
    """Every inner product of ``queries`` with the rows of ``vectors``: ``queries @ vectors.T``.

    Each product has the very bits of :func:`topk`'s ``"ip"`` score for the pair, on every
    instruction set (``LAMINA_SIMD``) and whatever the shapes: one summation order (sixteen
    fused lanes, a fixed tree, the tail in order). A decision that compares these scores with
    scores from a search therefore never depends on which of the two computed them, nor on
    the CPU (numpy's ``@`` goes through the BLAS, whose kernel and rounding vary with the CPU).

    Parameters
    ----------
    queries : ndarray, shape (b, d), float32, C-contiguous, finite
    vectors : ndarray, shape (n, d), float32 or float16, C-contiguous (n may be 0); a row
        holding NaN or Inf gives NaN or Inf products (not checked, unlike ``queries``)
    out : ndarray, shape (b, n), float32, C-contiguous, optional
        Written in place and returned; must not overlap the inputs.
    threads : int
        Worker threads for large products (0: ``lamina.get_num_threads()``). The GIL is released.

    Returns
    -------
    ndarray, shape (b, n), float32
    """
    if out is not None and isinstance(out, np.ndarray):
        if np.may_share_memory(out, queries) or np.may_share_memory(out, vectors):
            raise ValueError("out must not overlap queries or vectors")
    return _core.inner_products(queries, vectors, out, int(threads))


def _copy_out(res: tuple[Any, Any], outs: tuple[Any, Any]) -> tuple[Any, Any]:
    for name, src, dst, dt in (("scores", res[0], outs[0], np.float32), ("ids", res[1], outs[1], np.int64)):
        if not isinstance(dst, np.ndarray) or dst.dtype != dt or dst.shape != src.shape:
            raise ValueError(f"out {name} must be a numpy array of dtype {np.dtype(dt).name} and shape {src.shape}")
        dst[...] = src
    return outs[0], outs[1]


def rerank_oversample(codec: Codec, *, rows: int, k: int = 10) -> int:
    """The default oversample r of a code scan over ``rows`` rows: the re-ranking depth is k·r.

    The codes rank the true top k among more impostors as the scanned rows grow (a fixed depth
    loses recall: binary codes at r = 8 keep recall@10 0.99 on 12k MiniLM vectors of chat text
    and fall to 0.91 on 200k with near-duplicates). Up to :data:`DEPTH_REFERENCE_ROWS` rows
    the codec's :data:`DEFAULT_OVERSAMPLE` r0 holds; past them

        r = ceil(r0 · (1 + g · log2(rows / DEPTH_REFERENCE_ROWS)))

    with g = :data:`DEPTH_GROWTH` (calibrated with ``bench/bench_codec_depth.py`` on MiniLM
    vectors of chat text with near-duplicates: binary recall@10 0.99 from 10k to 200k rows and
    0.98 at 1M; docs/benchmarks/binary-codes.md), never past the rows themselves
    (k·r <= max(rows, k): a deeper re-ranking than the store is the exact scan) nor past
    :data:`MAX_DEFAULT_DEPTH` (k·r <= 1024, what the GPU scan can keep).

    Parameters
    ----------
    codec : {"binary", "int8"}
    rows : int
        Rows the scan reads (the namespace's live rows for a one-namespace search), >= 0.
    k : int
        Results per query (>= 1).

    Returns
    -------
    int, >= 1
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 0:
        raise ValueError(f"rows must be an int >= 0, got {rows!r}")
    k = check_k(k)
    r0 = DEFAULT_OVERSAMPLE[codec]
    r = (
        r0
        if rows <= DEPTH_REFERENCE_ROWS
        else math.ceil(r0 * (1.0 + DEPTH_GROWTH[codec] * math.log2(rows / DEPTH_REFERENCE_ROWS)))
    )
    return max(1, min(r, max(int(rows), k) // k, MAX_DEFAULT_DEPTH // k))


def _oversample(codec: Codec | None, oversample: int | None, rows: int | None = None, k: int = 10) -> int:
    """The oversample a search uses: ``oversample`` checked, or (None) the codec's default for
    ``rows`` scanned rows (:func:`rerank_oversample`; ``rows`` None: the base default)."""
    if oversample is None:
        if codec is None:
            return 0
        return DEFAULT_OVERSAMPLE[codec] if rows is None else rerank_oversample(codec, rows=rows, k=k)
    if isinstance(oversample, (bool, np.bool_)) or not isinstance(oversample, (int, np.integer)):
        raise TypeError(f"oversample must be an int or None, got {type(oversample).__name__}")
    if oversample < 0:
        raise ValueError(f"oversample must be >= 0 (0: exact scan), got {oversample}")
    return int(oversample)


class VectorArena:
    """Fixed-dimension vectors in one contiguous, 64-byte-aligned block with stable slots.

    Every row carries a ``namespace`` (uint64, e.g. a user or agent id), a ``layer`` (uint8)
    and a live flag. ``add`` returns int64 *slots*: ``(generation << 32) | row``. A fresh row
    has generation 0 (so a slot equals its row index until the row is reused); ``remove`` bumps
    the generation, so an old slot is refused with ``IndexError`` forever after, even when its
    row is reused by a later ``add``. Growth copies the block; slots stay valid.

    Thread safety: thread-safe. Many concurrent readers (``search``, ``get``, ``contains``...)
    or one writer (``add``, ``remove``, ``set_layer``, ``reserve``) at a time, enforced by an
    internal reader/writer lock. ``search`` and ``add`` release the GIL, so searches from
    several Python threads run in parallel.

    Parameters
    ----------
    dim : int
        Vector dimension (>= 1).
    dtype : {"float32", "float16"}
        Storage type. Queries are always float32; float16 rows are widened on the fly and
        accumulated in float32 (half the memory traffic).
    capacity : int
        Rows reserved up front (the block grows by doubling).
    device : {"cpu", "cuda", "cuda:N"}
        Where rows and columns live. With ``"cuda"`` (a CUDA build and a device are needed) the
        rows, the namespace / layer / live columns and the norms are in device memory; the
        bookkeeping is mirrored on the host so that ``add`` / ``remove`` need no device reads.
        ``add`` takes numpy or device arrays; ``search`` takes numpy queries (returns numpy) or
        device queries (returns device arrays of the same library, run on the caller's current
        stream); ``vectors`` is a read-only ``__cuda_array_interface__`` view. ``search`` with
        one namespace per query answers all queries in one launch (one agent per query).
    codec : {None, "binary", "int8"}
        A compact code per row beside the float rows (on either device), for a compressed first scan
        that :meth:`search` re-ranks exactly (see ``oversample``). ``"binary"``: one sign bit
        per dimension (48 bytes for 384 dims, 1/32 of float32), scanned against a 4-bit
        quantised query with popcounts; ``"int8"``: one byte per dimension with a per-row
        scale (1/4 of float32), scanned with 8-bit integer dot products. The code costs that
        much memory on top of the rows.
    """

    def __init__(
        self,
        dim: int,
        dtype: str | np.dtype | type = "float32",
        capacity: int = 1024,
        device: str = "cpu",
        codec: Codec | None = None,
    ) -> None:
        name = np.dtype(dtype).name
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if codec is not None and codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS} or None, got {codec!r}")
        kind, ordinal = _device.parse_device(device)
        self._cuda = kind == "cuda"
        self._codec = codec
        self._a: _core.VectorArena | _core.CudaVectorArena
        if self._cuda:
            if not _core.has_cuda():
                raise RuntimeError("VectorArena(device='cuda'): " + _device.REBUILD_HINT)
            if _core.cuda_device_count() == 0:
                raise RuntimeError("VectorArena(device='cuda'): no CUDA device is usable")
            self._a = _core.CudaVectorArena(int(dim), name, int(capacity), ordinal, codec)
        else:
            self._a = _core.VectorArena(int(dim), name, int(capacity), codec)

    def _dev(self) -> _core.CudaVectorArena:
        """The native arena of a ``device="cuda"`` arena."""
        a = self._a
        assert not isinstance(a, _core.VectorArena)
        return a

    def _host(self) -> _core.VectorArena:
        """The native arena of a ``device="cpu"`` arena."""
        a = self._a
        assert isinstance(a, _core.VectorArena)
        return a

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
        return f"cuda:{self._dev().device}" if self._cuda else "cpu"

    # -- facts ---------------------------------------------------------------------------
    @property
    def codec(self) -> Codec | None:
        """The rows' code (``"binary"``, ``"int8"``) or None."""
        return self._codec

    @property
    def code_bytes(self) -> int:
        """Bytes of one row's code (0 without a codec)."""
        return int(self._a.code_bytes)

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return int(self._a.dim)

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype (float32 or float16)."""
        return np.dtype(self._a.dtype)

    @property
    def capacity(self) -> int:
        """Rows the block can hold before it grows."""
        return int(self._a.capacity)

    @property
    def high_water(self) -> int:
        """Rows ever used (live and removed); the length of :attr:`vectors`."""
        return int(self._a.high_water)

    def __len__(self) -> int:
        """Number of live rows."""
        return int(len(self._a))

    def __repr__(self) -> str:
        return f"VectorArena(dim={self.dim}, dtype={self.dtype.name}, len={len(self)}, capacity={self.capacity})"

    # -- writes --------------------------------------------------------------------------
    def add(
        self,
        vectors: npt.NDArray[np.floating],
        namespace: int | npt.NDArray[np.uint64] = 0,
        layer: int | np.integer | npt.NDArray[np.uint8] = 0,
    ) -> npt.NDArray[np.int64]:
        """Append rows.

        Parameters
        ----------
        vectors : ndarray, shape (n, dim), dtype == self.dtype, C-contiguous, finite
        namespace : int or ndarray of shape (n,), uint64
        layer : int in [0, 255] or ndarray of shape (n,), uint8

        Returns
        -------
        ndarray, shape (n,), int64 — the slots of the new rows.
        """
        ns = _namespace(namespace)
        if ns is None:
            raise TypeError("namespace must be an int or a uint64 array, not None")
        if isinstance(layer, (np.integer,)):
            layer = int(layer)
        if self._cuda:
            stream = _device.current_stream(vectors) if _device.is_device_array(vectors) else 0
            return self._dev().add(vectors, ns, layer, stream)
        if _device.is_device_array(vectors):
            raise ValueError(
                "vectors are on a CUDA device but this arena is on the CPU; create it "
                "with VectorArena(..., device='cuda') or pass a numpy array"
            )
        return self._a.add(vectors, ns, layer)

    def remove(self, slots: int | Iterable[int] | npt.ArrayLike) -> None:
        """Remove rows. All slots are checked first; on any error nothing is removed.

        Raises
        ------
        IndexError
            A slot is out of range or stale (already removed).
        ValueError
            A slot appears twice.
        """
        self._a.remove(_as_slots(slots))

    def set_layer(self, slots: int | Iterable[int] | npt.ArrayLike, layer: int) -> None:
        """Move rows to another layer (0..255)."""
        self._a.set_layer(_as_slots(slots), int(layer))

    def reserve(self, capacity: int) -> None:
        """Grow the block to hold at least ``capacity`` rows."""
        self._a.reserve(int(capacity))

    # -- reads ---------------------------------------------------------------------------
    def get(self, slots: int | Iterable[int] | npt.ArrayLike) -> npt.NDArray[np.floating]:
        """Copies of rows, shape (len(slots), dim), dtype ``self.dtype``."""
        return self._a.get(_as_slots(slots))

    def contains(self, slots: int | Iterable[int] | npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Whether each slot names a live row, shape (len(slots),)."""
        return self._a.contains(_as_slots(slots))

    def namespaces_of(self, slots: int | Iterable[int] | npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Namespace of each slot, shape (len(slots),)."""
        return self._a.namespaces_of(_as_slots(slots))

    def layers_of(self, slots: int | Iterable[int] | npt.ArrayLike) -> npt.NDArray[np.uint8]:
        """Layer of each slot, shape (len(slots),)."""
        return self._a.layers_of(_as_slots(slots))

    def namespace_size(self, namespace: int) -> int:
        """Live rows in ``namespace``."""
        ns = _namespace(namespace)
        assert isinstance(ns, int)
        return int(self._a.namespace_size(ns))

    @property
    def vectors(self) -> npt.NDArray[np.floating]:
        """Zero-copy, read-only view of rows ``0 .. high_water``, shape (high_water, dim).

        Row ``slot & 0xffffffff`` holds that slot's vector; removed rows read as zeros (see
        :meth:`live_mask`). The view keeps its block alive: after the arena grows, an old view
        still reads the old block (a snapshot) rather than dangling.
        """
        if self._cuda:
            v = self._dev().device_view()
            elt = 2 if v["typestr"] == "<f2" else 4
            return _device.DeviceView(
                self._a,
                v["ptr"],
                (v["rows"], v["dim"]),  # type: ignore[return-value]
                (v["stride"] * elt, elt),
                v["typestr"],
                v["stream"],
            )
        return self._host().vectors_view()

    def live_mask(self) -> npt.NDArray[np.bool_]:
        """Copy of the live flags, shape (high_water,)."""
        return self._a.columns()[2]

    def columns(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
        """Copies of the (namespace, layer, live) columns, each shape (high_water,)."""
        ns, layers, live = self._a.columns()
        return ns, layers, live

    def _scanned_rows(self, namespace: NamespaceArg) -> int:
        """Live rows a search of ``namespace`` reads at most (the largest of its namespaces)."""
        ns = _namespace(namespace)
        if ns is None or self._codec is None:
            return len(self)
        if isinstance(ns, int):
            return int(self._a.namespace_size(ns))
        uniq = np.unique(np.asarray(ns))
        if len(uniq) > 64:  # one count per namespace costs a call each; the arena bounds them all
            return len(self)
        return max((int(self._a.namespace_size(int(v))) for v in uniq), default=0)

    def search(
        self,
        queries: npt.NDArray[np.float32],
        k: int,
        metric: Metric = "ip",
        namespace: NamespaceArg = None,
        layers: Iterable[int] | None = None,
        *,
        threads: int = 0,
        oversample: int | None = None,
        allow: npt.NDArray[np.uint8] | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-k over live rows, with optional namespace / layer / row filters.

        Filters select candidates *before* scoring (only matching rows are read), so a
        selective filter is faster than an unfiltered search and never loses results.
        Without a codec (or with ``oversample=0``) the search is exact. With one, the codes of
        the rows are scanned first for the best ``k * oversample`` rows per query, which are
        then re-scored exactly from the float rows: the scores returned are exact, but a row
        the codes ranked below that cut is missed (recall@10 on MiniLM vectors of LoCoMo turns
        at the default oversampling: see README, ``bench/bench_fleet.py``).

        Parameters
        ----------
        queries : ndarray, shape (b, dim), float32, C-contiguous, finite
        k : int
            Results per query (>= 1).
        metric : {"ip", "cosine", "l2"}
        namespace : None, int, or ndarray of shape (b,), uint64
            None: all namespaces; an int: one namespace for all queries; an array: query i
            searches only namespace ``namespace[i]`` (one agent per query).
        layers : iterable of int, optional
            Allowed layers (None: all).
        threads : int
            Worker threads (0: default). The GIL is released while searching.
        oversample : int, optional
            Candidates kept per result by the code scan (an arena with a codec): None, the
            codec's default for the rows scanned (:func:`rerank_oversample` of the namespace's
            live rows, or of the arena's; it grows with log2 of the rows past
            :data:`DEPTH_REFERENCE_ROWS`); 0, the exact scan of the float rows.
        allow : ndarray, shape (n,), uint8, C-contiguous, optional
            An allow-mask over rows (a slot's row is ``slot & 0xFFFFFFFF``), read in place:
            row ``r`` is a candidate only when ``r < n`` and ``allow[r] != 0``. Rows outside it
            are never scored, so each query gets ``min(k, admitted live rows)`` results (a
            metadata filter pushed into the search). Host arenas only.

        Returns
        -------
        scores : ndarray, shape (b, k), float32
        slots : ndarray, shape (b, k), int64 (``-1`` pads)

        Raises
        ------
        ValueError
            Empty arena, wrong shape, NaN/Inf queries, ``k <= 0``, unknown metric.
        TypeError
            Wrong dtype.
        """
        ls = None if layers is None else [int(x) for x in layers]
        k = check_k(k)
        r = _oversample(self._codec, oversample, self._scanned_rows(namespace) if oversample is None else None, k)
        if self._cuda:
            if allow is not None:
                raise ValueError("allow is supported by host arenas only; search a device='cpu' arena")
            if _device.is_device_array(queries):
                nq = int(queries.shape[0])
                scores = _device.empty_like_device(queries, (nq, k), np.float32)
                ids = _device.empty_like_device(queries, (nq, k), np.int64)
                return self._dev().search(
                    queries, k, str(metric), _namespace(namespace), ls, scores, ids, _device.current_stream(queries), r
                )
            return self._dev().search(queries, k, str(metric), _namespace(namespace), ls, oversample=r)
        if _device.is_device_array(queries):
            raise ValueError(
                "queries are on a CUDA device but this arena is on the CPU; pass a "
                "numpy array or use VectorArena(..., device='cuda')"
            )
        return self._host().search(queries, k, str(metric), _namespace(namespace), ls, int(threads), r, allow)
