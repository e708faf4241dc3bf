"""A LlamaIndex memory block (``llama_index.core.memory.BaseMemoryBlock``) over :class:`lamina.Memory`.

LlamaIndex's ``Memory`` keeps the recent chat in its short-term queue and hands the messages that
overflow it to its memory blocks (``aput``); before each turn it asks every block for its text
(``aget``) and puts it into the system message. :class:`LaminaMemoryBlock` stores the flushed
messages as raw turns of one lamina user (the lamina session is the LlamaIndex ``Memory``'s
session id when it gives one) and answers ``aget`` with lamina's budgeted context for the latest
message: the user's long-term memory, ranked and gated, across all their sessions.
"""

from __future__ import annotations

from typing import Any

from ..memory.facade import Memory
from ._common import check_id, check_memory, check_positive, missing_framework

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import BaseMemoryBlock
    from pydantic import Field, PrivateAttr, field_validator
except ImportError as _e:  # pragma: no cover - exercised without the extra
    raise missing_framework("LlamaIndex", "llama-index-core", _e) from _e

__all__ = ["LaminaMemoryBlock"]


class LaminaMemoryBlock(BaseMemoryBlock[str]):
    """A LlamaIndex memory block backed by one lamina user.

    Parameters
    ----------
    memory : lamina.Memory
        The memory (the caller opens and closes it).
    user_id : str
        The lamina user.
    session_id : str
        The lamina session of messages put without one (default ``"llamaindex"``); messages
        flushed by a LlamaIndex ``Memory`` carry its session id, which is used instead.
    budget : int
        Token budget of the context ``aget`` returns (default 512).
    name, description, priority, accept_short_term_memory
        As for every LlamaIndex memory block (``name`` defaults to ``"lamina"``; ``priority``
        0 never truncates the block).

    Notes
    -----
    A message is stored with its role as the speaker (``user``, ``assistant``, ...) and its
    text (``ChatMessage.content``: the text blocks joined); a message without text (images,
    tool calls only) is not stored. ``aget`` returns ``""`` when the user has no memories or
    the context abstains; ``atruncate`` (LlamaIndex's token-limit hook) halves the budget until
    the context fits. The memory's work runs on the event loop's thread (lamina's calls take
    milliseconds at agent scale).

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is.
    """

    name: str = Field(default="lamina", description="The name of the memory block.")
    memory: Memory = Field(description="The lamina.Memory the block reads and writes.")
    user_id: str = Field(description="The lamina user.")
    session_id: str = Field(default="llamaindex", description="The lamina session of messages put without one.")
    budget: int = Field(default=512, description="Token budget of the context aget returns.")
    _last_query: str = PrivateAttr(default="")  # the query of the latest aget, which atruncate shortens

    @field_validator("memory", mode="before")
    @classmethod
    def _check_memory(cls, v: object) -> Memory:
        return check_memory(v)

    @field_validator("user_id", "session_id")
    @classmethod
    def _check_ids(cls, v: str) -> str:
        return check_id(v, "user_id and session_id")

    @field_validator("budget")
    @classmethod
    def _check_budget(cls, v: int) -> int:
        return check_positive(v, "budget")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return self._context(messages, self.budget)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        by_session: dict[str, list[dict[str, str]]] = {}
        for i, m in enumerate(messages):
            if not isinstance(m, ChatMessage):
                raise TypeError(f"messages[{i}] must be a llama_index ChatMessage, got {type(m).__name__}")
            text = m.content
            if not isinstance(text, str) or not text.strip():
                continue
            session = m.additional_kwargs.get("session_id") or self.session_id
            role = getattr(m.role, "value", m.role)
            by_session.setdefault(str(session), []).append({"speaker": str(role), "text": text})
        for session, rows in by_session.items():
            self.memory.add(rows, user_id=self.user_id, session_id=session)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """The context at a smaller budget: halved until it is ``tokens_to_truncate`` words
        shorter (None when no budget is small enough)."""
        target = len(content.split()) - max(int(tokens_to_truncate), 0)
        budget = self.budget
        while budget > 1:
            budget //= 2
            text = self._context(None, budget, query=self._last_query)
            if len(text.split()) <= target:
                return text or None
        return None

    def _context(self, messages: list[ChatMessage] | None, budget: int, *, query: str | None = None) -> str:
        if query is None:
            query = _last_text(messages or [])
            self._last_query = query
        if not query.strip() or self.user_id not in self.memory.users():
            return ""
        ctx = self.memory.context(query, user_id=self.user_id, budget=budget)
        return "" if ctx.abstain else ctx.render()


def _last_text(messages: list[ChatMessage]) -> str:
    for m in reversed(messages):
        text = m.content if isinstance(m, ChatMessage) else None
        if isinstance(text, str) and text.strip():
            return text
    return ""
