"""lamina — long-term memory engine for LLM agents with a native C++/CUDA core."""

from __future__ import annotations

from ._info import build_info, cuda_device_count, get_num_threads, has_cuda, set_num_threads
from . import kernels
from .search import Metric, VectorArena, topk

__version__ = str(build_info()["version"])

__all__ = [
    "VectorArena",
    "topk",
    "Metric",
    "kernels",
    "build_info",
    "has_cuda",
    "cuda_device_count",
    "set_num_threads",
    "get_num_threads",
    "__version__",
]
