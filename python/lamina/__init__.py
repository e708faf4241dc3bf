"""lamina — long-term memory engine for LLM agents with a native C++/CUDA core."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import AuthError, InvalidInput, LaminaError, NotFoundError, Overloaded, PermissionDenied, StoreBusy
from .llm.extract import Fact, FactExtractor, Summarizer, Turn
from .llm.openai_chat import LLM, OpenAIChat
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
    MemoryPage,
    MemoryStats,
    Note,
    NoteRevision,
    ProfileDrift,
    SessionReport,
)
from .memory.aio import AsyncMemory
from .memory.dump.format import Dump, DumpError, UserDump
from .memory.dump.jsonl import export_jsonl, import_dump, import_jsonl, iter_export
from .memory.dump.reader import read_dump
from .memory.reports import ImportReport
from .memory.types import Blocked, Context, FirewallReport, MemoryItem
from .native._info import build_info, cuda_device_count, get_num_threads, has_cuda, set_num_threads
from .native.lexical import LexicalIndex, tokenize
from .native.search import Metric, VectorArena, topk

if TYPE_CHECKING:
    from . import embedders, kv, model
    from .client.http_client import AsyncClient, Client
    from .llm.local_chat import LocalChat
    from .native import fleet, kernels

__version__ = str(build_info()["version"])

# name -> the module that defines it, imported when the name is first used: the model runtime,
# the KV-cache methods, the fleet step, the kernels, the embedders, the HTTP client (httpx) and
# the local chat model are not loaded by ``import lamina``
_LAZY = {
    "embedders": ("lamina.embedders", None),
    "kv": ("lamina.kv", None),
    "model": ("lamina.model", None),
    "fleet": ("lamina.native.fleet", None),
    "kernels": ("lamina.native.kernels", None),
    "Client": ("lamina.client.http_client", "Client"),
    "AsyncClient": ("lamina.client.http_client", "AsyncClient"),
    "LocalChat": ("lamina.llm.local_chat", "LocalChat"),
}


def __getattr__(name: str) -> Any:
    """The heavy parts of the public API (see ``_LAZY``), imported when first used."""
    if name not in _LAZY:
        raise AttributeError(f"module 'lamina' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "MemoryPage",
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
