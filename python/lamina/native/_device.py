"""Device dispatch: the input's device picks the kernel.

numpy arrays run the CPU kernels; objects exposing ``__cuda_array_interface__`` (CuPy arrays,
PyTorch CUDA tensors, Numba device arrays, ...) run the CUDA kernels on the caller's current
stream, and outputs are allocated on the same device with the same library as the input (or
passed in with ``out=``). Nothing is ever copied between devices silently: mixing host and
device arrays, or arrays on two devices, raises ``ValueError``; a device array given to a build
without the CUDA backend raises ``RuntimeError`` saying how to rebuild.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import _core

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = [
    "REBUILD_HINT",
    "is_device_array",
    "on_device",
    "require_cuda",
    "current_stream",
    "device_of",
    "empty_like_device",
    "parse_device",
    "trimmed",
]

REBUILD_HINT = (
    "this lamina build has no CUDA backend; rebuild it with "
    "`pip install . -Ccmake.define.LAMINA_CUDA=ON` (needs nvcc; set CMAKE_CUDA_ARCHITECTURES, "
    "e.g. -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90), or pass numpy arrays to run on the CPU"
)


class CudaArrayLike(Protocol):
    """An object exposing ``__cuda_array_interface__`` (CuPy array, PyTorch CUDA tensor, ...)."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


def is_device_array(x: object) -> TypeIs[CudaArrayLike]:
    """True when ``x`` exposes ``__cuda_array_interface__``."""
    return x is not None and hasattr(x, "__cuda_array_interface__")


_cuda_ready: list[bool] = []  # [True] once require_cuda() passed: it runs on every device call


def require_cuda() -> None:
    """Raise ``RuntimeError`` unless this build has the CUDA backend and a usable device."""
    if _cuda_ready:
        return
    if not _core.has_cuda():
        raise RuntimeError("got a CUDA array (__cuda_array_interface__), but " + REBUILD_HINT)
    if _core.cuda_device_count() == 0:
        raise RuntimeError(
            "got a CUDA array, but no CUDA device is usable (no GPU or no driver); pass numpy arrays to run on the CPU"
        )
    _cuda_ready.append(True)


def on_device(*named: tuple[str, Any]) -> bool:
    """Decide where a call runs from its ``(name, array)`` arguments (``None`` entries ignored).

    Returns False when every array is a host array, True when every array is a device array
    (after checking that the CUDA backend is available). Raises ``ValueError`` on a mix.
    """
    dev = [n for n, x in named if x is not None and is_device_array(x)]
    if not dev:
        return False
    host = [n for n, x in named if x is not None and not is_device_array(x)]
    if host:
        raise ValueError(
            f"{', '.join(dev)} on a CUDA device but {', '.join(host)} in host memory; pass all "
            "arrays on the same device (lamina never copies between devices silently: use "
            "cupy.asarray / torch.as_tensor(..., device='cuda') or .get() / .cpu() explicitly)"
        )
    require_cuda()
    return True


def _library(x: Any) -> str:
    return type(x).__module__.split(".")[0]


def device_of(x: Any) -> int:
    """CUDA ordinal of a device array (from its data pointer)."""
    mod = _library(x)
    if mod == "cupy":
        return int(x.device.id)
    if mod == "torch":
        return int(x.device.index if x.device.index is not None else 0)
    ptr = int(x.__cuda_array_interface__["data"][0])
    return int(_core.cuda_pointer_device(ptr)) if ptr else 0


def current_stream(x: Any) -> int:
    """The caller's current stream for the library that produced ``x`` (a cudaStream_t value).

    CuPy: ``cupy.cuda.get_current_stream()`` on the array's device; PyTorch:
    ``torch.cuda.current_stream(device)``; other producers: the stream their interface names,
    else the legacy default stream (0).
    """
    mod = _library(x)
    if mod == "cupy":
        import cupy

        with x.device:
            return int(cupy.cuda.get_current_stream().ptr)
    if mod == "torch":
        import torch

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    s = x.__cuda_array_interface__.get("stream")
    return int(s) if isinstance(s, int) and s > 0 else 0


def empty_like_device(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialised array on ``like``'s device, from ``like``'s library when it is CuPy or
    PyTorch, else from CuPy. Raises ``TypeError`` when neither can allocate (pass ``out=``)."""
    dt = np.dtype(dtype)
    mod = _library(like)
    if mod == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dt.name), device=like.device)
    try:
        import cupy
    except ImportError:  # pragma: no cover - depends on the environment
        raise TypeError(
            "cannot allocate the output on the device: install CuPy (pip install lamina[gpu]) or "
            "pass out=(...) arrays preallocated on the device"
        ) from None
    with cupy.cuda.Device(device_of(like)):
        return cupy.empty(shape, dtype=dt)


def trimmed(buf: Any, k: int) -> Any:
    """The first ``k`` entries of a 1-D device buffer as their own array (a device-to-device
    copy when ``k`` is less than the buffer's length, so the oversized buffer is released)."""
    if k == int(buf.shape[0]):
        return buf
    head = buf[:k]
    return head.clone() if _library(buf) == "torch" else head.copy()


def parse_device(device: str) -> tuple[str, int]:
    """``"cpu"`` -> ("cpu", 0); ``"cuda"`` / ``"cuda:N"`` -> ("cuda", N)."""
    if not isinstance(device, str):
        raise TypeError(f"device must be a str ('cpu', 'cuda' or 'cuda:N'), got {type(device).__name__}")
    if device == "cpu":
        return "cpu", 0
    if device == "cuda":
        return "cuda", 0
    if device.startswith("cuda:") and device[5:].isdigit():
        return "cuda", int(device[5:])
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


class DeviceView:
    """A read-only ``__cuda_array_interface__`` view of device memory owned by ``owner``.

    Valid until the owner reallocates (e.g. a GPU arena grows); wrap with ``cupy.asarray`` or
    ``torch.as_tensor`` to use it. ``stream`` tells consumers which stream to wait for.
    """

    def __init__(
        self, owner: Any, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], typestr: str, stream: int
    ) -> None:
        self._owner = owner
        self._shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "data": (ptr if shape[0] else 0, True),
            "version": 3,
            "stream": stream if stream > 0 else None,
        }

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._shape)


def out_pair(out: Any, names: tuple[str, str] = ("scores", "ids")) -> tuple[Any, Any]:
    """Validate an ``out=`` pair argument."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be a ({names[0]}, {names[1]}) pair of arrays")
    return out[0], out[1]
