"""``lamina.agent``: the agent side of the memory (MemGPT virtual context, MemCon controller).

* :mod:`~lamina.agent.tool_chat` — tool-calling chat models (:class:`ChatModel`, an OpenAI-compatible
  client, a prompted-tools adapter for plain LLMs such as :class:`lamina.LocalChat`);
* :mod:`~lamina.agent.tool_schemas` — the memory tools in the OpenAI function-calling format;
* :mod:`~lamina.agent.context` — :class:`VirtualContext` (core memory, recall FIFO, memory
  pressure, flush with a recursive summary) over a :class:`lamina.Memory`;
* :mod:`~lamina.agent.tools` — the dispatcher (argument validation, tool errors);
* :mod:`~lamina.agent.loop` — :func:`run_turn` (tool calls, heartbeats, step limit);
* :mod:`~lamina.agent.memcon` — the MemCon bandit (UCB, reverse-discounted Q) and plan templates.
"""

from __future__ import annotations

from .context import PRESSURE_MESSAGE, PRESSURE_MESSAGE_PREFIX, CoreMemory, PressureEvent, VirtualContext, token_counter
from .loop import TurnResult, run_turn
from .memcon import Action, MemCon, PlanLibrary, default_actions, generalise
from .tool_chat import ChatModel, ChatReply, OpenAIToolChat, PromptedToolChat, ToolCall
from .tool_schemas import TOOL_SCHEMAS, tool_schemas
from .tools import PAGE_SIZE, ToolResult, dispatch

__all__ = [
    "ChatModel",
    "ChatReply",
    "ToolCall",
    "OpenAIToolChat",
    "PromptedToolChat",
    "CoreMemory",
    "PRESSURE_MESSAGE",
    "PRESSURE_MESSAGE_PREFIX",
    "PressureEvent",
    "VirtualContext",
    "token_counter",
    "TurnResult",
    "run_turn",
    "Action",
    "MemCon",
    "PlanLibrary",
    "default_actions",
    "generalise",
    "TOOL_SCHEMAS",
    "tool_schemas",
    "PAGE_SIZE",
    "ToolResult",
    "dispatch",
]
