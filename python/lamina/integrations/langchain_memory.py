"""LangChain's chat history (``BaseChatMessageHistory``) and a retriever (``BaseRetriever``)
over :class:`lamina.Memory`.

:class:`LaminaChatMessageHistory` is one session of one lamina user: each message is a raw turn
(its text; its speaker the message's role), read back in the order added. :class:`LaminaRetriever`
returns a user's memories for a query, from lamina's vector search (``mode="search"``) or its
budgeted, layer-gated context (``mode="context"``), as ``Document`` objects whose metadata says
where each came from (item id, layer, kind, session, source turns, time, score; a fact's
validity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

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
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, field_validator
except ImportError as _e:  # pragma: no cover - exercised without the extra
    raise missing_framework("LangChain", "langchain-core", _e) from _e

__all__ = ["LaminaChatMessageHistory", "LaminaRetriever"]


class LaminaChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history kept as one lamina session.

    Parameters
    ----------
    memory : lamina.Memory
        The memory (the caller opens and closes it).
    user_id, session_id : str
        The lamina user and session the messages belong to.
    human_name, ai_name : str
        The speaker names lamina stores for ``HumanMessage`` and ``AIMessage`` (default
        ``"user"`` and ``"assistant"``); a person's name (``human_name="Alice"``) lets the
        memory's facts and contexts name them. ``SystemMessage`` is stored as ``"system"``,
        a ``ChatMessage`` with its role, any other message with its type (``"tool"``).

    Notes
    -----
    lamina keeps a message's text (``message.text``): a message without text (an AI message
    holding only tool calls) is not stored, and tool-call ids and other message fields are not
    kept; read back, ``"system"`` is a ``SystemMessage``, ``human_name`` a ``HumanMessage``,
    ``ai_name`` an ``AIMessage`` and any other speaker a ``ChatMessage`` with that role.
    ``clear`` deletes the session's turns and what lamina derived from them (``Memory.delete``);
    :meth:`end_session` consolidates the session into the user's long-term layers.

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is.
    """

    def __init__(
        self, memory: Memory, *, user_id: str, session_id: str, human_name: str = "user", ai_name: str = "assistant"
    ) -> None:
        self._memory = check_memory(memory)
        self.user_id = check_id(user_id, "user_id")
        self.session_id = check_id(session_id, "session_id")
        for what, name in (("human_name", human_name), ("ai_name", ai_name)):
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{what} must be a non-empty str, got {name!r}")
        if human_name == ai_name or "system" in (human_name, ai_name):
            raise ValueError(
                f"human_name and ai_name must differ from each other and from 'system', got {human_name!r}, {ai_name!r}"
            )
        self._human, self._ai = human_name, ai_name

    @property
    def messages(self) -> list[BaseMessage]:
        """The session's messages, oldest first."""
        return [self._message(e.speaker, e.text) for e in self._turns()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the session (one lamina ``add``: all or nothing).

        Raises
        ------
        TypeError
            An element is not a LangChain ``BaseMessage``.
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise TypeError(f"messages must be a sequence of BaseMessage, got {type(messages).__name__}")
        rows = []
        for i, m in enumerate(messages):
            if not isinstance(m, BaseMessage):
                raise TypeError(f"messages[{i}] must be a langchain_core BaseMessage, got {type(m).__name__}")
            text = m.text if isinstance(m.text, str) else str(m.text)
            if text.strip():
                rows.append({"speaker": self._speaker(m), "text": text})
        if rows:
            self._memory.add(rows, user_id=self.user_id, session_id=self.session_id)

    def clear(self) -> None:
        """Delete the session's turns (and what lamina derived from them)."""
        for e in self._turns():
            self._memory.delete(e.id, user_id=self.user_id)

    def end_session(self) -> SessionReport:
        """Consolidate the session into the user's episodic and semantic memory
        (``Memory.end_session``); later messages open it again."""
        return self._memory.end_session(user_id=self.user_id, session_id=self.session_id)

    def _turns(self) -> list[Any]:
        return session_turns(self._memory, user_id=self.user_id, session_id=self.session_id)

    def _speaker(self, m: BaseMessage) -> str:
        if isinstance(m, HumanMessage):
            return self._human
        if isinstance(m, AIMessage):
            return self._ai
        if isinstance(m, SystemMessage):
            return "system"
        if isinstance(m, ChatMessage):
            return str(m.role)
        return str(m.type)

    def _message(self, speaker: str | None, text: str) -> BaseMessage:
        if speaker == self._human:
            return HumanMessage(content=text)
        if speaker == self._ai:
            return AIMessage(content=text)
        if speaker == "system":
            return SystemMessage(content=text)
        return ChatMessage(role=speaker or "user", content=text)


class LaminaRetriever(BaseRetriever):
    """A LangChain retriever over one lamina user's memory.

    Parameters
    ----------
    memory : lamina.Memory
    user_id : str
    mode : {"search", "context"}
        ``"search"`` (default): the ``k`` items nearest the query (``Memory.search`` over
        ``layers``). ``"context"``: the items of ``Memory.context(query, budget=budget)``, best
        first (the layer gates, the fill to the budget, duplicates dropped; their visits counted).
    k : int
        Items a search returns (mode ``"search"``).
    layers : list of str, optional
        The layers a search reads (``working``, ``episodic``, ``semantic``, ``archive``,
        ``history``; default the active ones).
    budget : int
        The context's token budget (mode ``"context"``).

    Each ``Document``'s ``page_content`` is the item as a context shows it (dates, speakers;
    ``MemoryItem.render``) and its ``metadata`` the item's provenance: ``id``, ``user_id``,
    ``session_id``, ``layer``, ``kind``, ``score``, ``sources`` (source turn ids),
    ``timestamp``, ``speaker``, ``text`` (the raw text) and, for facts, ``subject``,
    ``predicate``, ``object``, ``valid_from``, ``valid_to``, ``current``.

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    user_id: str
    mode: Literal["search", "context"] = "search"
    k: int = 4
    layers: list[str] | None = None
    budget: int = 1024

    @field_validator("memory", mode="before")
    @classmethod
    def _check_memory(cls, v: object) -> Memory:
        return check_memory(v)

    @field_validator("user_id")
    @classmethod
    def _check_user(cls, v: str) -> str:
        return check_id(v, "user_id")

    @field_validator("k", "budget")
    @classmethod
    def _check_count(cls, v: int) -> int:
        return check_positive(v, "k and budget")

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        items: list[MemoryItem]
        if self.mode == "search":
            items = read_or_empty(lambda: self.memory.search(query, user_id=self.user_id, k=self.k, layers=self.layers))
        else:
            items = read_or_empty(lambda: self.memory.context(query, user_id=self.user_id, budget=self.budget).ranked)
        return [Document(page_content=it.render(), metadata={**provenance(it), "text": it.text}) for it in items]
