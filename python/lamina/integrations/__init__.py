"""Bridges from the frameworks agents are built with into :class:`lamina.Memory`.

One module per framework, each importing its framework when it is itself imported (install
them all with ``pip install "lamina[integrations]"``); this package imports none of them:

=====================================================  ================================================
module                                                 what it implements
=====================================================  ================================================
:mod:`lamina.integrations.langgraph_store`             LangGraph's ``BaseStore`` (:class:`LaminaStore`)
:mod:`lamina.integrations.langchain_memory`            LangChain's ``BaseChatMessageHistory`` and
                                                       ``BaseRetriever``
:mod:`lamina.integrations.openai_agents`               the OpenAI Agents SDK's ``Session`` protocol
:mod:`lamina.integrations.autogen_memory`              AutoGen's ``Memory`` (``autogen_core.memory``)
:mod:`lamina.integrations.llamaindex_memory`           LlamaIndex's ``BaseMemoryBlock``
=====================================================  ================================================

Every adapter wraps a :class:`lamina.Memory` the caller opened (and closes): several adapters
may share one memory, so what a LangGraph store writes for a user shows in that user's
``Memory.context`` too. See ``docs/guides/integrations.md``.
"""

from __future__ import annotations

__all__: list[str] = []
