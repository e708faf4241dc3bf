"""Typed stub of ``lamina._core``, the private pybind11 module built from ``bindings/*.cpp``.

Parameter names and defaults are those of the bindings' ``py::arg`` (positional-only where a
binding declares none: pybind11 names those ``arg0``, ``arg1``, ...); ``tests/test_core_stub.py``
checks them against the built module's docstrings. Host arrays are numpy arrays of the exact
dtype named here, C-contiguous (the bindings convert nothing). Functions and the class whose
names start with ``cuda_`` / ``Cuda`` exist only in CUDA builds; their array arguments are
objects exposing ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA tensors, ...), typed
``object`` because any producer library is accepted.
"""

from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypedDict, TypeVar, overload

import numpy as np
import numpy.typing as npt

_F32 = npt.NDArray[np.float32]
_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_U64 = npt.NDArray[np.uint64]
_U8 = npt.NDArray[np.uint8]
_Bool = npt.NDArray[np.bool_]
_Rows = npt.NDArray[np.floating[Any]]  # float32 or float16 rows (an arena's dtype)
_RowParam = float | npt.NDArray[np.float32] | npt.NDArray[np.float64]  # scalar or one per row
_Counts = npt.NDArray[np.float32] | npt.NDArray[np.int32] | npt.NDArray[np.int64]
_Namespace = int | npt.NDArray[np.uint64]  # one for all rows, or one per row / query
_Scalar = TypeVar("_Scalar", bound=np.generic)

# ---- build facts (bind_info.cpp) ---------------------------------------------------------

def build_info() -> dict[str, str | int | bool | list[str]]: ...
def has_cuda() -> bool: ...
def cuda_device_count() -> int: ...
def cuda_selftest() -> None: ...

# ---- cyclic GC (bind_gc.cpp) -------------------------------------------------------------------

def _gc_untrack(obj: object) -> None: ...

# ---- capacity projection's neighbour lists (bind_coverage.cpp) ---------------------------------

def _coverage_nearest(I: _I64, S: _F32, rows: _I64, on: _Bool, group: _I64) -> tuple[_F32, _I64]: ...
def _coverage_remap(I: _I64, S: _F32, kth: _F32, m: int, remap: _I64) -> None: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...

# ---- exact top-k and the vector arena (bind_search.cpp) ----------------------------------

def topk(queries: _F32, vectors: _Rows, k: int, metric: str = "ip", threads: int = 0) -> tuple[_F32, _I64]: ...
def inner_products(queries: _F32, vectors: _Rows, out: _F32 | None = None, threads: int = 0) -> _F32: ...
def codec_isa(isa: str = "?") -> str: ...

class VectorArena:
    def __init__(self, dim: int, dtype: str = "float32", capacity: int = 1024, codec: str | None = None) -> None: ...
    @property
    def codec(self) -> str | None: ...
    @property
    def code_bytes(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def high_water(self) -> int: ...
    @property
    def stride(self) -> int: ...
    def __len__(self) -> int: ...
    def contains(self, slots: _I64, /) -> _Bool: ...
    def namespaces_of(self, slots: _I64, /) -> _U64: ...
    def layers_of(self, slots: _I64, /) -> _U8: ...
    def reserve(self, capacity: int, /) -> None: ...
    def add(self, vectors: _Rows, namespace: _Namespace = 0, layer: int | _U8 = 0) -> _I64: ...
    def remove(self, slots: _I64, /) -> None: ...
    def get(self, slots: _I64, /) -> _Rows: ...
    def set_layer(self, slots: _I64, layer: int, /) -> None: ...
    def namespace_size(self, namespace: int, /) -> int: ...
    def search(
        self,
        queries: _F32,
        k: int,
        metric: str = "ip",
        namespace: _Namespace | None = None,
        layers: Iterable[int] | None = None,
        threads: int = 0,
        oversample: int = 0,
        allow: _U8 | None = None,
    ) -> tuple[_F32, _I64]: ...
    def vectors_view(self) -> _Rows: ...
    def columns(self) -> tuple[_U64, _U8, _Bool]: ...

# ---- __cuda_array_interface__ parsing, every build (bind_cuda.cpp) -----------------------

class _CudaArrayInfo(TypedDict):
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    typestr: str
    itemsize: int
    readonly: bool
    version: int
    stream: int | None
    c_contiguous: bool

def _cuda_array_info(obj: object, name: str = "array") -> _CudaArrayInfo: ...
def _check_cuda_array(
    obj: object, name: str, ndim: int, dtype_code: str, fix_dtype: str, writable: bool = False
) -> _CudaArrayInfo: ...

# ---- CUDA builds only (bind_cuda.cpp); `stream` is a cudaStream_t value ------------------

def cuda_pointer_device(ptr: int, /) -> int: ...
def cuda_max_k() -> int: ...
def cuda_topk(
    queries: object, vectors: object, k: int, metric: str, out_scores: object, out_ids: object, stream: int
) -> None: ...
def cuda_heat_scores(
    visits: object,
    interaction_len: object,
    last_access: object,
    now: float,
    a: float,
    b: float,
    c: float,
    mu: float,
    out: object,
    stream: int,
) -> None: ...
def cuda_ema_blend(
    rows: object,
    targets: object,
    alpha: float | object,
    index: object | None,
    renormalize: bool,
    out: object,
    stream: int,
) -> None: ...
def cuda_damped_update(
    rows: object, targets: object, lam: float | object, index: object | None, out: object, stream: int
) -> None: ...
def cuda_softmax_gate(
    relevance: object,
    beta: float | object,
    max_entropy: float | None,
    max_doublings: int,
    out: object,
    beta_used: object,
    stream: int,
) -> None: ...
def cuda_select_hot(heat: object, threshold: float, namespaces: object | None, out: object, stream: int) -> int: ...
def cuda_evict_to_capacity(
    scores: object,
    namespaces: object,
    default_capacity: int,
    cap_keys: _U64,
    cap_values: _I64,
    live: object | None,
    out: object,
    stream: int,
) -> int: ...
def cuda_kv_window_scores(
    scores: object,
    kv_heads: int,
    n_candidates: int,
    window_reduce: str,
    causal_normalize: bool,
    pool: str,
    kernel: int,
    group_reduce: str,
    scale_per_row: object | None,
    scale_per_token: object | None,
    out: object,
    stream: int,
) -> None: ...
def cuda_kv_layer_entropy(scores: object, stream: int) -> _F64: ...
def cuda_kv_layer_head_counts(scores: object, total: _I64, floor: _I64 | None, stream: int) -> _I64: ...
def cuda_kv_select_rows(scores: object | None, k: _I64, n: int, tail: int, out: object, stream: int) -> _I64: ...
def cuda_kv_fill_rows(pattern: _I64, n_rows: int, out: object, stream: int) -> None: ...
def cuda_kv_l1_norms(values: object, out: object, stream: int) -> None: ...
def cuda_kv_gather(
    src: object,
    offsets_dev: object,
    offsets_host: _I64,
    indices: object,
    padded_len: int,
    out: object,
    stream: int,
) -> None: ...

class _DeviceView(TypedDict):
    ptr: int
    rows: int
    dim: int
    stride: int
    typestr: str
    stream: int

class CudaFleetStep:
    def __init__(
        self,
        arena: CudaVectorArena,
        layers: list[int],
        k: int,
        oversample: int,
        metric: str,
        relevance_top: int,
        beta: float,
        max_entropy: float | None,
        max_doublings: int,
        a: float,
        b: float,
        c: float,
        mu: float,
    ) -> None: ...
    def run(
        self,
        queries: object,
        namespaces: _U64,
        now: float,
        visits: object,
        interaction_len: object,
        last_access: object,
        heat: object,
        scores: object,
        ids: object,
        relevance: object,
        gamma: object,
        beta_used: object,
        graph: bool,
        stream: int,
    ) -> None: ...
    def stats(self) -> dict[str, int]: ...

class CudaVectorArena:
    def __init__(
        self, dim: int, dtype: str = "float32", capacity: int = 1024, device: int = 0, codec: str | None = None
    ) -> None: ...
    @property
    def codec(self) -> str | None: ...
    @property
    def code_bytes(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def high_water(self) -> int: ...
    @property
    def stride(self) -> int: ...
    @property
    def device(self) -> int: ...
    def __len__(self) -> int: ...
    def contains(self, slots: _I64, /) -> _Bool: ...
    def namespaces_of(self, slots: _I64, /) -> _U64: ...
    def layers_of(self, slots: _I64, /) -> _U8: ...
    def reserve(self, capacity: int, /) -> None: ...
    def add(
        self, vectors: _Rows | object, namespace: _Namespace = 0, layer: int | _U8 = 0, stream: int = 0
    ) -> _I64: ...
    def remove(self, slots: _I64, stream: int = 0) -> None: ...
    def get(self, slots: _I64, stream: int = 0) -> _Rows: ...
    def set_layer(self, slots: _I64, layer: int, stream: int = 0) -> None: ...
    def namespace_size(self, namespace: int, /) -> int: ...
    def columns(self) -> tuple[_U64, _U8, _Bool]: ...
    def device_view(self) -> _DeviceView: ...
    # host queries: numpy (scores, slots); device queries: (out_scores, out_ids) as passed in
    def search(
        self,
        queries: _F32 | object,
        k: int,
        metric: str = "ip",
        namespace: _Namespace | None = None,
        layers: Iterable[int] | None = None,
        out_scores: object = None,
        out_ids: object = None,
        stream: int = 0,
        oversample: int = 0,
    ) -> tuple[Any, Any]: ...

# ---- feature-hashing embedder (bind_hashing.cpp) -----------------------------------------

class HashingEmbedder:
    def __init__(self, dim: int = 384, ngram_min: int = 3, ngram_max: int = 4) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def ngram_min(self) -> int: ...
    @property
    def ngram_max(self) -> int: ...
    def embed(self, texts: list[str], threads: int = 0) -> _F32: ...
    @staticmethod
    def fnv1a64(data: bytes, /) -> int: ...

# ---- memory-loop kernels (bind_kernels.cpp) ----------------------------------------------

def softmax_gate(
    relevance: _F32,
    beta: _RowParam,
    max_entropy: float | None = None,
    max_doublings: int = 32,
    out: _F32 | None = None,
    threads: int = 0,
    predict: int = -1,
) -> tuple[_F32, _F64]: ...
def ema_blend(
    rows: _F32,
    targets: _F32,
    alpha: _RowParam,
    index: _I64 | None = None,
    renormalize: bool = False,
    out: _F32 | None = None,
    threads: int = 0,
) -> _F32: ...
def damped_update(
    rows: _F32,
    targets: _F32,
    lam: _RowParam,
    index: _I64 | None = None,
    out: _F32 | None = None,
    threads: int = 0,
) -> _F32: ...
def heat_scores(
    visits: _Counts,
    interaction_len: _Counts,
    last_access: _F64,
    now: float,
    a: float = 1.0,
    b: float = 1.0,
    c: float = 1.0,
    mu: float = 1e7,
    out: _F32 | None = None,
    threads: int = 0,
) -> _F32: ...
def select_hot(heat: _F32, threshold: float, namespaces: _U64 | None = None, threads: int = 0) -> _I64: ...
def evict_to_capacity(
    scores: _F32,
    namespaces: _U64,
    default_capacity: int,
    cap_keys: _U64,
    cap_values: _I64,
    live: npt.NDArray[np.bool_ | np.uint8] | None = None,
    threads: int = 0,
) -> _I64: ...

# ---- KV-cache selection (bind_kv.cpp); scores: (L, H, S) or (L, H, w, S) float32 -----------

@overload
def kv_window_scores(
    scores: _F32,
    kv_heads: int,
    n_candidates: int,
    window_reduce: str = "mean",
    causal_normalize: bool = False,
    pool: str = "none",
    kernel: int = 1,
    group_reduce: str = "mean",
    scale_per_row: _F32 | None = None,
    scale_per_token: _F32 | None = None,
    threads: int = 0,
    entropy: Literal[False] = False,
) -> _F32: ...
@overload
def kv_window_scores(
    scores: _F32,
    kv_heads: int,
    n_candidates: int,
    window_reduce: str = "mean",
    causal_normalize: bool = False,
    pool: str = "none",
    kernel: int = 1,
    group_reduce: str = "mean",
    scale_per_row: _F32 | None = None,
    scale_per_token: _F32 | None = None,
    threads: int = 0,
    *,
    entropy: Literal[True],
) -> tuple[_F32, _F64]: ...
@overload
def kv_window_scores(
    scores: _F32,
    kv_heads: int,
    n_candidates: int,
    window_reduce: str = "mean",
    causal_normalize: bool = False,
    pool: str = "none",
    kernel: int = 1,
    group_reduce: str = "mean",
    scale_per_row: _F32 | None = None,
    scale_per_token: _F32 | None = None,
    threads: int = 0,
    entropy: bool = False,
) -> _F32 | tuple[_F32, _F64]: ...
def kv_score_select(
    scores: _F32,
    kv_heads: int,
    n_candidates: int,
    window_reduce: str,
    causal_normalize: bool,
    pool: str,
    kernel: int,
    group_reduce: str,
    scale_per_row: _F32 | None,
    scale_per_token: _F32 | None,
    k: _I64,
    tail: int,
    threads: int = 0,
) -> tuple[_I64, _I64]: ...
def kv_layer_entropy(scores: _F32, threads: int = 0) -> _F64: ...
def kv_layer_head_counts(scores: _F32, total: _I64, floor: _I64 | None = None, threads: int = 0) -> _I64: ...
def kv_apportion(weights: _F64, total: int, cap: int) -> _I64: ...
def kv_lava_select(
    scores: _F32,
    kv_heads: int,
    n_candidates: int,
    pool: str,
    kernel: int,
    group_reduce: str,
    scale_per_row: _F32 | None,
    scale_per_token: _F32 | None,
    per_head: int,
    alpha: float,
    tail: int,
    threads: int = 0,
) -> tuple[_I64, _I64, _I64, _I64, _F64, _I64]: ...
def kv_lava_layers(
    scores: _F32, layer_budget: _I64, alpha: float, tail: int = 0, threads: int = 0
) -> tuple[_I64, _I64, _I64, _I64]: ...
def kv_select_rows(scores: _F32 | None, k: _I64, n: int, tail: int = 0, threads: int = 0) -> tuple[_I64, _I64]: ...
def kv_l1_norms(values: _F32, threads: int = 0) -> _F32: ...
def kv_gather(
    src: npt.NDArray[_Scalar], offsets: _I64, indices: _I64, padded_len: int = 0, threads: int = 0
) -> npt.NDArray[_Scalar]: ...
def kv_kth_largest(scores: _F32, k: int) -> tuple[float, int, int]: ...
def kv_simd_isa(isa: str = "?") -> str: ...

# ---- encoder element-wise kernels, in place (bind_encoder.cpp) ---------------------------

def bias_gelu_(x: _F32, bias: _F32 | None = None, threads: int = 0) -> None: ...
def add_layer_norm_(x: _F32, residual: _F32 | None, weight: _F32, bias: _F32, eps: float, threads: int = 0) -> None: ...

# ---- BM25 lexical index (bind_lexical.cpp) -----------------------------------------------

def lexical_term_hash(term: str) -> int: ...
def lexical_hash_terms(docs: Sequence[Sequence[str]]) -> tuple[_U64, _I64]: ...

class LexicalIndex:
    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None: ...
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> float: ...
    def __len__(self) -> int: ...
    def count(self, namespace: int) -> int: ...
    def stats(self, namespace: int) -> dict[str, int | float]: ...  # docs, avg_len, terms, postings, dead_docs
    def add(self, keys: _I64, namespace: _Namespace, hashes: _U64, offsets: _I64) -> None: ...
    def remove(self, keys: _I64, missing_ok: bool = False) -> int: ...
    def contains(self, keys: _I64) -> _Bool: ...
    def compact(self) -> None: ...
    def search(
        self,
        hashes: _U64,
        offsets: _I64,
        namespace: _Namespace,
        k: int,
        threads: int = 0,
        allow: _I64 | None = None,
    ) -> tuple[_F32, _I64]: ...

# ---- llama-architecture model runtime (bind_model.cpp) -----------------------------------

class KVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int) -> None: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def n_seen(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def lengths(self) -> _I64: ...
    def keys(self, layer: int, head: int) -> _F32: ...
    def values(self, layer: int, head: int) -> _F32: ...
    def positions(self, layer: int, head: int) -> _I64: ...
    def keep(self, layer: int, head: int, indices: _I64) -> None: ...
    def truncate(self, n_tokens: int) -> None: ...
    def clear(self) -> None: ...
    def clone(self) -> KVCache: ...
    def reserve(self, entries: int) -> None: ...
    def ratio_index(self) -> npt.NDArray[np.int32] | None: ...
    def outlier_share(self) -> _F32 | None: ...

class LlamaModel:
    kernel_isa: str  # "scalar" | "avx2" | "avx512"
    q8_prefill: bool  # int8 activations on the prefill (integer GEMM); False: float32 panels
    def __init__(
        self,
        config: dict[str, int | float],
        tensors: dict[str, tuple[str, npt.NDArray[Any]]],
        position: dict[str, Any] | None = None,
    ) -> None: ...
    def ratio_of(self, index: int) -> float: ...
    def forward(
        self,
        ids: npt.NDArray[np.int32],
        cache: KVCache,
        logits: str = "last",
        threads: int = 0,
        record_window: int = 0,
        q8_decode: bool = True,
        accumulate_attention: bool = False,
        accumulate_reduce: str = "sum",
    ) -> tuple[_F32 | None, _F32 | None, _F32 | None]: ...
    # one decode step of len(ids) sequences, ids[b] into caches[b]: logits (B, vocab)
    def forward_batch(
        self, ids: npt.NDArray[np.int32], caches: list[KVCache], threads: int = 0, q8_decode: bool = True
    ) -> _F32: ...
    # single-channel scaling: None or {first_layer, last_layer, channel, factor, last_tokens}
    def set_channel_scaling(self, scaling: dict[str, int | float] | None) -> None: ...
    @property
    def channel_scaling(self) -> dict[str, int | float] | None: ...
    def forward_hidden(
        self,
        ids: npt.NDArray[np.int32],
        cache: KVCache,
        logits: str = "none",
        threads: int = 0,
        q8_decode: bool = True,
    ) -> tuple[_F32 | None, _F32]: ...  # hidden: (n_layers, T, d_model)

# ---- the model's CUDA path (bind_model_cuda.cpp) ------------------------------------------------
def model_dequantize_f16(type: str, data: npt.NDArray[Any]) -> npt.NDArray[np.float16]: ...
def model_window_attention_rows(q: _F32, keys: _F32, threads: int = 0) -> _F32: ...

# CUDA builds only: the fp16 device forward and its device-resident cache (same methods as
# LlamaModel / KVCache; keys() and values() are host float32 copies).
class CudaKVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int) -> None: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def n_seen(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def device(self) -> int: ...
    def lengths(self) -> _I64: ...
    def keys(self, layer: int, head: int) -> _F32: ...
    def values(self, layer: int, head: int) -> _F32: ...
    def positions(self, layer: int, head: int) -> _I64: ...
    def keep(self, layer: int, head: int, indices: _I64) -> None: ...
    def truncate(self, n_tokens: int) -> None: ...
    def clear(self) -> None: ...
    def clone(self) -> CudaKVCache: ...
    def reserve(self, entries: int) -> None: ...
    def ratio_index(self) -> npt.NDArray[np.int32] | None: ...
    def outlier_share(self) -> _F32 | None: ...

class CudaLlamaModel:
    def __init__(
        self,
        config: dict[str, int | float],
        tensors: dict[str, tuple[str, npt.NDArray[Any]]],
        position: dict[str, Any] | None = None,
    ) -> None: ...
    @property
    def weight_bytes(self) -> int: ...
    @property
    def device(self) -> int: ...
    def ratio_of(self, index: int) -> float: ...
    def set_channel_scaling(self, scaling: dict[str, int | float] | None) -> None: ...
    @property
    def channel_scaling(self) -> dict[str, int | float] | None: ...
    def forward(
        self,
        ids: npt.NDArray[np.int32],
        cache: CudaKVCache,
        logits: str = "last",
        threads: int = 0,
        record_window: int = 0,
        q8_decode: bool = True,
        accumulate_attention: bool = False,
        accumulate_reduce: str = "sum",
    ) -> tuple[_F32 | None, _F32 | None, None]: ...
