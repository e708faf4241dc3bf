"""Build and runtime facts."""

from __future__ import annotations

from typing import Any

from .. import _core

__all__ = ["build_info", "has_cuda", "cuda_device_count", "set_num_threads", "get_num_threads"]


def build_info() -> dict[str, Any]:
    """Facts about this build of lamina.

    Returns
    -------
    dict
        ``version``, ``compiler``, ``cxx_flags``, ``cxx_standard``, ``simd_compiled`` (SIMD
        paths compiled in), ``simd_available`` (those this CPU supports), ``simd_active`` (the
        one in use; cap it with the ``LAMINA_SIMD`` environment variable), ``cuda`` (bool),
        ``cuda_architectures`` and ``cuda_runtime`` when CUDA is on, ``num_threads``.
    """
    return dict(_core.build_info())


def has_cuda() -> bool:
    """True when this build contains the CUDA backend (a device may still be absent)."""
    return bool(_core.has_cuda())


def cuda_device_count() -> int:
    """Number of usable CUDA devices: 0 without a CUDA build, a driver or a device."""
    return int(_core.cuda_device_count())


def set_num_threads(n: int) -> None:
    """Set the default number of threads for native kernels (``0`` restores the default:
    ``LAMINA_NUM_THREADS`` or the number of hardware threads)."""
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    """The default number of threads used by native kernels."""
    return int(_core.get_num_threads())
