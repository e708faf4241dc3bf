"""lamina — long-term memory engine for LLM agents with a native C++/CUDA core."""

from __future__ import annotations

from . import embedders, kernels, kv, model
from ._info import build_info, cuda_device_count, get_num_threads, has_cuda, set_num_threads
from .errors import InvalidInput, LaminaError, NotFoundError, StoreBusy
from .extract import Fact, FactExtractor, Summarizer, Turn
from .items import Context, MemoryItem
from .lexical import LexicalIndex, tokenize
from .llm import LLM, OpenAIChat
from .memory import ClosedError, DeleteReport, Memory, MemoryConfig, MemoryStats, ProfileDrift, SessionReport
from .search import Metric, VectorArena, topk

__version__ = str(build_info()["version"])

__all__ = [
    "VectorArena",
    "topk",
    "LexicalIndex",
    "tokenize",
    "kv",
    "model",
    "Metric",
    "kernels",
    "Memory",
    "MemoryConfig",
    "SessionReport",
    "DeleteReport",
    "MemoryStats",
    "ProfileDrift",
    "LaminaError",
    "InvalidInput",
    "NotFoundError",
    "StoreBusy",
    "ClosedError",
    "MemoryItem",
    "Context",
    "embedders",
    "LLM",
    "OpenAIChat",
    "Summarizer",
    "FactExtractor",
    "Fact",
    "Turn",
    "build_info",
    "has_cuda",
    "cuda_device_count",
    "set_num_threads",
    "get_num_threads",
    "__version__",
]
