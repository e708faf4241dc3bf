"""The OpenAI Agents SDK's ``Session`` protocol (``agents.memory.session``) over :class:`lamina.Memory`.

A :class:`LaminaSession` is one lamina session of one user. A message item
(``{"role": ..., "content": ...}``, the SDK's input and output messages) is a raw turn: its text
(a string content, or the text parts of a list content joined by newlines) with the role as its
speaker, read back as ``{"role": role, "content": text}``. Every other item (function calls and
their outputs, reasoning, ...) is kept verbatim as JSON in a turn whose speaker is
``"item:<type>"``, read back as it was given, so the history the SDK replays is complete.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..memory.dump.entries import ItemEntry
from ..memory.facade import Memory
from ..memory.reports import SessionReport
from ._common import check_id, check_memory, check_positive, missing_framework, session_turns

try:
    import agents.memory.session as _session  # noqa: F401  (the protocol this module implements)
except ImportError as _e:  # pragma: no cover - exercised without the extra
    raise missing_framework("the OpenAI Agents SDK", "openai-agents", _e) from _e

__all__ = ["LaminaSession"]

_ITEM = "item:"
_ROLES = ("user", "assistant", "system", "developer")


class LaminaSession:
    """An OpenAI Agents SDK session (``agents.memory.Session``) kept as one lamina session.

    Parameters
    ----------
    memory : lamina.Memory
        The memory (the caller opens and closes it).
    session_id : str
        The SDK's session id, which is also the lamina session's.
    user_id : str
        The lamina user the session belongs to.

    Notes
    -----
    Messages are stored as text: a message's other fields (its id, status, annotations) are
    not kept, and a message without text is kept verbatim like any other item. Every call runs
    the memory's work on a worker thread.

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is.
    """

    session_settings: Any = None

    def __init__(self, memory: Memory, *, session_id: str, user_id: str) -> None:
        self._memory = check_memory(memory)
        self.session_id = check_id(session_id, "session_id")
        self.user_id = check_id(user_id, "user_id")

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first; with ``limit``, the latest ``limit`` of them."""
        if limit is not None:
            check_positive(limit, "limit")
        turns = await asyncio.to_thread(self._turns)
        if limit is not None:
            turns = turns[-limit:]
        return [_item(e) for e in turns]

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` (one lamina ``add``: all or nothing).

        Raises
        ------
        TypeError, ValueError
            An item is not a dict, or has neither a ``role`` nor a ``type``.
        """
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise TypeError(f"items must be a list of dicts, got {type(items).__name__}")
        rows = [_row(i, it) for i, it in enumerate(items)]
        if rows:
            await asyncio.to_thread(self._memory.add, rows, user_id=self.user_id, session_id=self.session_id)

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (None when the session is empty)."""

        def pop() -> Any | None:
            turns = self._turns()
            if not turns:
                return None
            self._memory.delete(turns[-1].id, user_id=self.user_id)
            return _item(turns[-1])

        return await asyncio.to_thread(pop)

    async def clear_session(self) -> None:
        """Delete the session's items (and what lamina derived from them)."""

        def clear() -> None:
            for e in self._turns():
                self._memory.delete(e.id, user_id=self.user_id)

        await asyncio.to_thread(clear)

    async def end_session(self) -> SessionReport:
        """Consolidate the session into the user's long-term layers (``Memory.end_session``)."""
        return await asyncio.to_thread(self._memory.end_session, user_id=self.user_id, session_id=self.session_id)

    def _turns(self) -> list[ItemEntry]:
        return session_turns(self._memory, user_id=self.user_id, session_id=self.session_id)


def _text(content: Any) -> str | None:
    """A message content's text: the string, or the text parts of a list joined by newlines;
    None when it has other parts (images, files) or no text."""
    if isinstance(content, str):
        return content if content.strip() else None
    if not isinstance(content, list) or not content:
        return None
    parts = []
    for p in content:
        if not isinstance(p, Mapping) or p.get("type") not in ("input_text", "output_text", "text"):
            return None
        if not isinstance(p.get("text"), str):
            return None
        parts.append(p["text"])
    text = "\n".join(parts)
    return text if text.strip() else None


def _row(i: int, item: Any) -> dict[str, str]:
    if not isinstance(item, Mapping):
        raise TypeError(f"items[{i}] must be a dict (a TResponseInputItem), got {type(item).__name__}")
    role, kind = item.get("role"), item.get("type")
    if role is None and not isinstance(kind, str):
        raise ValueError(f"items[{i}] has neither a 'role' nor a 'type': {dict(item)!r}")
    if role in _ROLES and kind in (None, "message"):
        text = _text(item.get("content"))
        if text is not None:
            return {"speaker": str(role), "text": text}
    try:
        blob = json.dumps(dict(item), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"items[{i}] is not JSON-serializable: {e}") from e
    return {"speaker": _ITEM + str(kind if isinstance(kind, str) else "message"), "text": blob}


def _item(e: ItemEntry) -> Any:
    if e.speaker is not None and e.speaker.startswith(_ITEM):
        try:
            return json.loads(e.text)
        except ValueError:
            pass
    return {"role": e.speaker or "user", "content": e.text}
