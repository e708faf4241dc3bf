"""AutoGen's ``Memory`` (``autogen_core.memory``) over :class:`lamina.Memory`.

:class:`LaminaAutoGenMemory` is one lamina user. ``add`` stores a text (or JSON) ``MemoryContent``
as a raw turn of the adapter's session; ``query`` returns the user's nearest items (from every
session and layer lamina keeps: conversations, facts, summaries) with their provenance as
metadata; ``update_context`` puts lamina's budgeted context for the model context's last message
into it as one ``SystemMessage``, as AutoGen's ``ListMemory`` does with its list.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..memory.facade import Memory
from ..memory.reports import SessionReport
from ..memory.types import MemoryItem
from ._common import (
    check_id,
    check_memory,
    check_positive,
    missing_framework,
    provenance,
    read_or_empty,
    session_turns,
)

try:
    from autogen_core import CancellationToken
    from autogen_core.memory import (
        Memory as _AutoGenMemory,
    )
    from autogen_core.memory import (
        MemoryContent,
        MemoryMimeType,
        MemoryQueryResult,
        UpdateContextResult,
    )
    from autogen_core.model_context import ChatCompletionContext
    from autogen_core.models import SystemMessage
except ImportError as _e:  # pragma: no cover - exercised without the extra
    raise missing_framework("AutoGen", "autogen-core", _e) from _e

__all__ = ["LaminaAutoGenMemory"]

_TEXT_TYPES = (MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value)


class LaminaAutoGenMemory(_AutoGenMemory):
    """An AutoGen memory backed by one lamina user.

    Parameters
    ----------
    memory : lamina.Memory
        The memory (the caller opens and closes it: :meth:`close` leaves it open).
    user_id : str
        The lamina user whose memories are queried and added to.
    session_id : str
        The lamina session ``add`` writes to (default ``"autogen-memory"``); ``clear`` deletes it.
    speaker : str
        The speaker of an added content (default ``"user"``); a content's ``metadata["speaker"]``
        overrides it.
    k : int
        Items ``query`` returns (default 5; ``query(..., k=...)`` overrides it).
    budget : int
        The token budget of the context ``update_context`` adds (default 512).
    header : str
        The line before that context in the system message.

    Notes
    -----
    A content must be text (``text/plain``, ``text/markdown``; stored as is) or JSON
    (``application/json``; stored as its JSON text); images and bytes raise ``TypeError``.
    Every call runs the memory's work on a worker thread.

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is.
    """

    component_type = "memory"

    def __init__(
        self,
        memory: Memory,
        *,
        user_id: str,
        session_id: str = "autogen-memory",
        speaker: str = "user",
        k: int = 5,
        budget: int = 512,
        header: str = "Relevant memories of this user (from lamina):",
    ) -> None:
        self._memory = check_memory(memory)
        self.user_id = check_id(user_id, "user_id")
        self.session_id = check_id(session_id, "session_id")
        if not isinstance(speaker, str) or not speaker.strip():
            raise ValueError(f"speaker must be a non-empty str, got {speaker!r}")
        if not isinstance(header, str):
            raise TypeError(f"header must be a str, got {type(header).__name__}")
        self.speaker, self.header = speaker, header
        self.k = check_positive(k, "k")
        self.budget = check_positive(budget, "budget")

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        """Add lamina's context for the last message of ``model_context`` to it (one
        ``SystemMessage``; nothing when the context abstains or there is no text to ask with).

        Returns
        -------
        UpdateContextResult
            The items of that context as ``MemoryContent``, best first.
        """
        messages = await model_context.get_messages()
        query = _message_text(messages[-1]) if messages else ""
        if not query.strip() or self.user_id not in await asyncio.to_thread(self._memory.users):
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        ctx = await asyncio.to_thread(self._memory.context, query, user_id=self.user_id, budget=self.budget)
        if ctx.abstain or not ctx.items:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        await model_context.add_message(SystemMessage(content=f"{self.header}\n{ctx.render()}"))
        return UpdateContextResult(memories=MemoryQueryResult(results=[_content(it) for it in ctx.ranked]))

    async def query(
        self, query: str | MemoryContent, cancellation_token: CancellationToken | None = None, **kwargs: Any
    ) -> MemoryQueryResult:
        """The user's ``k`` items nearest ``query`` (``k=`` and ``layers=`` as keyword
        arguments override the adapter's), each with its provenance as metadata."""
        text = _content_text(query) if isinstance(query, MemoryContent) else query
        if not isinstance(text, str):
            raise TypeError(f"query must be a str or a MemoryContent, got {type(query).__name__}")
        unknown = set(kwargs) - {"k", "layers"}
        if unknown:
            raise TypeError(f"unexpected keyword arguments {sorted(unknown)}; expected k, layers")
        k = check_positive(kwargs.get("k", self.k), "k")
        layers = kwargs.get("layers")
        items = await asyncio.to_thread(
            read_or_empty, lambda: self._memory.search(text, user_id=self.user_id, k=k, layers=layers)
        )
        return MemoryQueryResult(results=[_content(it) for it in items])

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        """Store ``content`` as a raw turn of the adapter's session."""
        if not isinstance(content, MemoryContent):
            raise TypeError(f"content must be an autogen_core MemoryContent, got {type(content).__name__}")
        speaker = (content.metadata or {}).get("speaker", self.speaker)
        row = {"speaker": speaker, "text": _content_text(content)}
        await asyncio.to_thread(self._memory.add, [row], user_id=self.user_id, session_id=self.session_id)

    async def clear(self) -> None:
        """Delete what :meth:`add` stored (the adapter's session, and what lamina derived from it)."""

        def clear() -> None:
            for e in session_turns(self._memory, user_id=self.user_id, session_id=self.session_id):
                self._memory.delete(e.id, user_id=self.user_id)

        await asyncio.to_thread(clear)

    async def close(self) -> None:
        """Nothing to release: the wrapped memory is the caller's to close."""

    async def end_session(self) -> SessionReport:
        """Consolidate what :meth:`add` stored into the user's long-term layers."""
        return await asyncio.to_thread(self._memory.end_session, user_id=self.user_id, session_id=self.session_id)


def _content_text(content: MemoryContent) -> str:
    mime = content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else str(content.mime_type)
    if mime in _TEXT_TYPES and isinstance(content.content, str):
        return content.content
    if mime == MemoryMimeType.JSON.value:
        if isinstance(content.content, str):
            return content.content
        try:
            return json.dumps(content.content, ensure_ascii=False, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"a JSON memory content must be JSON-serializable: {e}") from e
    raise TypeError(
        f"lamina keeps text: a MemoryContent must be text/plain, text/markdown or application/json "
        f"with str (or, for JSON, dict) content; got {mime} with {type(content.content).__name__}"
    )


def _message_text(message: Any) -> str:
    """The text of an AutoGen LLM message (a list content's strings joined; '' without text)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c for c in content if isinstance(c, str))
    return ""


def _content(item: MemoryItem) -> MemoryContent:
    return MemoryContent(content=item.text, mime_type=MemoryMimeType.TEXT, metadata=provenance(item))
