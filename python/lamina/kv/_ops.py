"""Device dispatch of the KV selection core: host (numpy) arrays run ``cpp/kv_*.cpp``, CUDA
arrays (``__cuda_array_interface__``: CuPy, PyTorch) run ``cuda/kv.cu`` on their device and
the caller's current stream. Both give identical results (same arithmetic order, same tie rule);
the small per-layer results (entropies, head counts, offsets) are always host arrays.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .. import _core
from ..native import _device

__all__ = [
    "on_device",
    "check_same_side",
    "WindowScoring",
    "window_scores",
    "score_select",
    "layer_entropy",
    "layer_head_counts",
    "select_rows",
    "fill_rows",
    "l1_norms",
    "to_device_like",
]


def on_device(*named: tuple[str, Any]) -> bool:
    """True when the arrays are CUDA arrays (ValueError on a host/device mix)."""
    return _device.on_device(*named)


def check_same_side(*named: tuple[str, Any]) -> None:
    """ValueError when some of the arrays are CUDA arrays and others host arrays (checked
    before anything else, so the message names the mix rather than a later symptom)."""
    dev = [n for n, x in named if x is not None and _device.is_device_array(x)]
    host = [n for n, x in named if x is not None and not _device.is_device_array(x)]
    if dev and host:
        _device.on_device(*named)  # raises the shared mixed-device ValueError


class WindowScoring(NamedTuple):
    """How candidate positions are scored from the attention (the leading arguments of
    :func:`lamina._core.kv_window_scores` and ``kv_score_select``, in their order; see
    cpp/lamina/kv.hpp).

    Attributes
    ----------
    scores : array, float32, shape (L, H, w, S) or (L, H, S)
        Host or CUDA array.
    n_kv_heads : int
    n : int
        Candidate positions [0, n) scored.
    window_reduce : {"mean", "sum"}
    causal : bool
        Normalise each window query's row over the positions it sees (H2O's normalize).
    pool : str
        Pooling along positions ("avg", "max", "none").
    kernel : int
        Pooling width.
    gqa : {"mean", "max"}
    per_row, per_token : array or None
        Value-norm scales (one per row, or one per token).
    """

    scores: Any
    n_kv_heads: int
    n: int
    window_reduce: str
    causal: bool
    pool: str
    kernel: int
    gqa: str
    per_row: Any
    per_token: Any

    def on_device(self) -> bool:
        """True when the scores (and value norms) are CUDA arrays."""
        return on_device(("scores", self.scores), ("value_norms", self.per_row), ("value_norms", self.per_token))


def window_scores(ws: WindowScoring, threads: int, entropy: bool = False) -> Any:
    """Rows (L, H_kv, n) of :func:`lamina._core.kv_window_scores` (see cpp/lamina/kv.hpp);
    with ``entropy`` the pair (rows, per-layer normalised entropy as a host float64 array)."""
    if ws.on_device():
        x = ws.scores
        out = _device.empty_like_device(x, (int(x.shape[0]), int(ws.n_kv_heads), int(ws.n)), np.float32)
        _core.cuda_kv_window_scores(*ws, out, _device.current_stream(x))
        if entropy:
            return out, layer_entropy(out, threads)
        return out
    return _core.kv_window_scores(*ws, threads, entropy)


def score_select(
    ws: WindowScoring, k: npt.NDArray[np.int64], tail: int, threads: int
) -> tuple[Any, npt.NDArray[np.int64]]:
    """window_scores + select_rows: fused in one native pass on the host; on the device the
    scores are materialised and selected from (the same result)."""
    if ws.on_device():
        return select_rows(window_scores(ws, threads), k, ws.n, tail, threads)
    return _core.kv_score_select(*ws, np.ascontiguousarray(k, dtype=np.int64), tail, threads)


def layer_entropy(rows: Any, threads: int) -> npt.NDArray[np.float64]:
    """Normalised entropy per layer (host float64 array, also for device rows)."""
    if on_device(("scores", rows)):
        return _core.cuda_kv_layer_entropy(rows, _device.current_stream(rows))
    return _core.kv_layer_entropy(rows, threads)


def layer_head_counts(
    rows: Any, total: npt.NDArray[np.int64], floor: npt.NDArray[np.int64] | None, threads: int
) -> npt.NDArray[np.int64]:
    """Kept entries per (layer, KV head) of a per-layer global top-k (host int64 array)."""
    if on_device(("scores", rows)):
        return _core.cuda_kv_layer_head_counts(rows, total, floor, _device.current_stream(rows))
    return _core.kv_layer_head_counts(rows, total, floor, threads)


def select_rows(
    scores: Any, k: npt.NDArray[np.int64], n: int, tail: int, threads: int, like: Any = None
) -> tuple[Any, npt.NDArray[np.int64]]:
    """(indices, offsets): per-row top-k plus the tail ``[n, n + tail)``. Indices are on the
    device of ``scores`` (or ``like`` when scores is None), offsets on the host."""
    k = np.ascontiguousarray(k, dtype=np.int64)
    ref = scores if scores is not None else like
    if ref is not None and on_device(("scores", ref)):
        total = int(k.sum()) + k.size * int(tail)
        out = _device.empty_like_device(ref, (total,), np.int64)
        offsets = _core.cuda_kv_select_rows(scores, k, n, tail, out, _device.current_stream(ref))
        return out, offsets
    idx, off = _core.kv_select_rows(scores, k, n, tail, threads)
    return idx, off


def fill_rows(pattern: npt.NDArray[np.int64], n_rows: int, like: Any) -> Any:
    """``pattern`` repeated ``n_rows`` times, on ``like``'s device (numpy.tile on the host)."""
    pattern = np.ascontiguousarray(pattern, dtype=np.int64)
    if like is not None and on_device(("scores", like)):
        out = _device.empty_like_device(like, (pattern.size * n_rows,), np.int64)
        _core.cuda_kv_fill_rows(pattern, n_rows, out, _device.current_stream(like))
        return out
    return np.tile(pattern, n_rows)


def l1_norms(values: Any, threads: int) -> Any:
    """L1 norm of every value vector (last axis)."""
    if on_device(("values", values)):
        shape = tuple(int(s) for s in values.shape)
        if len(shape) < 1:
            raise ValueError("values must have at least one dimension")
        out = _device.empty_like_device(values, shape[:-1], np.float32)
        _core.cuda_kv_l1_norms(values, out, _device.current_stream(values))
        return out
    return _core.kv_l1_norms(values, threads)


def to_device_like(like: Any, a: npt.NDArray[Any]) -> Any:
    """An explicit host-to-device copy of a small host array (metadata such as offsets) onto
    ``like``'s device, with ``like``'s library."""
    if type(like).__module__.split(".")[0] == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)
    import cupy

    with cupy.cuda.Device(_device.device_of(like)):
        return cupy.asarray(a)


def to_host(x: Any) -> npt.NDArray[Any]:
    """An explicit device-to-host copy (CuPy ``.get()``, PyTorch ``.cpu().numpy()``)."""
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().cpu().numpy()  # type: ignore[no-any-return]
    if hasattr(x, "get"):
        return x.get()  # type: ignore[no-any-return]
    raise TypeError(f"cannot copy a {type(x).__name__} to the host; use its library's copy")
