"""What the adapters share: the install hint of a missing framework, argument checks, a
session's turns in order, and an item's provenance as plain metadata."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import NotFoundError
from ..memory.dump.entries import ItemEntry
from ..memory.facade import Memory
from ..memory.inputs import check_id
from ..memory.types import MemoryItem

__all__ = [
    "read_or_empty",
    "missing_framework",
    "check_memory",
    "check_id",
    "session_turns",
    "provenance",
    "check_positive",
]

INSTALL_HINT = 'pip install "lamina[integrations]"'


def missing_framework(framework: str, package: str, err: ImportError) -> ImportError:
    """The ImportError an adapter module raises when its framework is not installed."""
    return ImportError(
        f"lamina.integrations needs {framework} (the {package!r} package) for this adapter: {INSTALL_HINT} ({err})"
    )


def check_memory(memory: object) -> Memory:
    """``memory`` when it is a :class:`lamina.Memory`, else TypeError."""
    if not isinstance(memory, Memory):
        raise TypeError(f"memory must be a lamina.Memory, got {type(memory).__name__}")
    return memory


_T = TypeVar("_T")


def read_or_empty(read: Callable[[], list[_T]]) -> list[_T]:
    """``read()`` (a search, a context's items), or [] when the adapter's user has nothing stored
    yet: :meth:`lamina.Memory.search` and :meth:`~lamina.Memory.context` raise
    :class:`~lamina.NotFoundError` for an unknown user, while a framework asks its memory before
    the first turn is stored and expects "no memories"."""
    try:
        return read()
    except NotFoundError:
        return []


def check_positive(v: object, what: str) -> int:
    """A positive int (a ``k``, a ``limit``, a ``budget``)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, got {type(v).__name__}")
    if v <= 0:
        raise ValueError(f"{what} must be >= 1, got {v}")
    return v


def session_turns(memory: Memory, *, user_id: str, session_id: str) -> list[ItemEntry]:
    """The raw turns of one session of ``user_id``, oldest first (event time, then item id:
    the order they were added); [] for a user the memory does not know."""
    if user_id not in memory.users():
        return []
    page = memory.list_items(user_id=user_id, kinds=["turn"], limit=None)
    turns = [e for e in page.items if e.session_id == session_id]
    turns.sort(key=lambda e: (e.timestamp if e.timestamp is not None else float("-inf"), e.id))
    return turns


def provenance(item: MemoryItem) -> dict[str, Any]:
    """Where a retrieved item comes from, as plain values (for a framework's ``metadata``):
    its id, user, session, layer, kind, score, source turn ids, time and speaker; a fact's
    subject / predicate / object, validity and whether it is current."""
    meta: dict[str, Any] = {
        "id": item.id,
        "user_id": item.user_id,
        "session_id": item.session_id,
        "layer": item.layer,
        "kind": item.kind,
        "score": float(item.score),
        "sources": list(item.sources),
        "timestamp": item.timestamp,
        "speaker": item.speaker,
    }
    if item.kind == "fact":
        meta.update(
            subject=item.subject,
            predicate=item.predicate,
            object=item.object,
            valid_from=item.valid_from,
            valid_to=item.valid_to,
            current=item.current,
        )
    return meta
