"""lamina — long-term memory engine for LLM agents with a native C++/CUDA core."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import embedders, fleet, kernels, kv, model
from ._info import build_info, cuda_device_count, get_num_threads, has_cuda, set_num_threads
from .aio import AsyncMemory
from .errors import AuthError, InvalidInput, LaminaError, NotFoundError, Overloaded, PermissionDenied, StoreBusy
from .extract import Fact, FactExtractor, Summarizer, Turn
from .items import Blocked, Context, FirewallReport, MemoryItem
from .lexical import LexicalIndex, tokenize
from .llm import LLM, OpenAIChat
from .local_llm import LocalChat
from .memory import (
    Candidate,
    ClosedError,
    ContextExplanation,
    DeleteReport,
    DomainClassifier,
    Firewall,
    Link,
    Memory,
    MemoryConfig,
    MemoryStats,
    Note,
    NoteRevision,
    ProfileDrift,
    SessionReport,
)
from .memory.dump import Dump, DumpError, UserDump, read_dump
from .memory.reports import ImportReport
from .search import Metric, VectorArena, topk
from .transfer import export_jsonl, import_dump, import_jsonl, iter_export

if TYPE_CHECKING:
    from .client import AsyncClient, Client

__version__ = str(build_info()["version"])


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient`` import httpx (the ``serve`` extra) when first used."""
    if name in ("Client", "AsyncClient"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'lamina' has no attribute {name!r}")


__all__ = [
    "VectorArena",
    "topk",
    "LexicalIndex",
    "tokenize",
    "kv",
    "model",
    "Metric",
    "kernels",
    "fleet",
    "Memory",
    "AsyncMemory",
    "Client",
    "AsyncClient",
    "MemoryConfig",
    "SessionReport",
    "ContextExplanation",
    "Candidate",
    "DeleteReport",
    "MemoryStats",
    "ProfileDrift",
    "LaminaError",
    "InvalidInput",
    "NotFoundError",
    "StoreBusy",
    "AuthError",
    "PermissionDenied",
    "Overloaded",
    "ClosedError",
    "ImportReport",
    "Dump",
    "UserDump",
    "DumpError",
    "read_dump",
    "iter_export",
    "export_jsonl",
    "import_jsonl",
    "import_dump",
    "MemoryItem",
    "Note",
    "NoteRevision",
    "Link",
    "Context",
    "Firewall",
    "FirewallReport",
    "Blocked",
    "DomainClassifier",
    "embedders",
    "LLM",
    "OpenAIChat",
    "LocalChat",
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
