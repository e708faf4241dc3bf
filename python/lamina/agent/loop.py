"""The agent loop: one user turn through the model, its tool calls, heartbeats and limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import PressureEvent, VirtualContext
from .tool_chat import ChatModel
from .tool_schemas import tool_schemas
from .tools import ToolResult, dispatch

__all__ = ["TurnResult", "run_turn"]


@dataclass(frozen=True)
class TurnResult:
    """What one :func:`run_turn` did.

    Attributes
    ----------
    reply : str
        The assistant's final text ("" when the step limit ended the turn first).
    steps : int
        Model calls made.
    tool_results : list of ToolResult
        Every tool call's outcome, in order.
    events : list of PressureEvent
        Memory-pressure warnings and flushes during the turn.
    stopped : str
        ``"reply"`` (the model answered), ``"no_heartbeat"`` (tools ran, no heartbeat asked, no
        text), or ``"max_steps"``.
    """

    reply: str
    steps: int
    tool_results: list[ToolResult] = field(default_factory=list)
    events: list[PressureEvent] = field(default_factory=list)
    stopped: str = "reply"


def run_turn(
    vc: VirtualContext,
    model: ChatModel,
    user_message: str,
    *,
    max_steps: int = 6,
    retrieve_budget: int | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
) -> TurnResult:
    """Run one user turn.

    The user message enters the context (thresholds apply); optionally memory retrieved for it
    fills the retrieved block; then the model is called. Its tool calls are validated and run
    (results enter the context as ``tool`` messages); the loop continues while a call asked for
    a heartbeat or failed (so the model can fix it), and ends on a text reply without tool calls,
    or after ``max_steps`` model calls.

    Raises
    ------
    ValueError
        ``max_steps`` < 1 or an empty user message.
    """
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
    if not isinstance(user_message, str) or not user_message.strip():
        raise ValueError("user_message must be a non-empty str")
    schemas = list(tools) if tools is not None else tool_schemas()
    events = list(vc.append({"role": "user", "content": user_message}))
    if retrieve_budget is not None:
        vc.retrieve(user_message, budget=retrieve_budget)
    results: list[ToolResult] = []
    for step in range(1, max_steps + 1):
        reply = model.chat(vc.messages(), tools=schemas)
        if not reply.tool_calls:
            if reply.content.strip():
                events += vc.append({"role": "assistant", "content": reply.content})
            return TurnResult(reply=reply.content, steps=step, tool_results=results, events=events)
        events += vc.append(
            {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in reply.tool_calls
                ],
            }
        )
        again = False
        for c in reply.tool_calls:
            r = dispatch(vc, c.name, c.arguments)
            results.append(r)
            again = again or r.heartbeat or not r.ok
            events += vc.append({"role": "tool", "tool_call_id": c.id, "name": c.name, "content": r.content})
        if not again:
            return TurnResult(
                reply=reply.content, steps=step, tool_results=results, events=events, stopped="no_heartbeat"
            )
    return TurnResult(reply="", steps=max_steps, tool_results=results, events=events, stopped="max_steps")
