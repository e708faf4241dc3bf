"""lamina.integrations.openai_agents: the Agents SDK's Session protocol over lamina.Memory, as
the SDK's Runner uses it (with a scripted model: the SDK ships no fake one, so the test defines
the smallest ``Model``), and the docs' example."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from integkit import memory_fixture, need

need("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory.session import Session  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

import lamina  # noqa: E402
from lamina.integrations.openai_agents import LaminaSession  # noqa: E402

memory = memory_fixture()

set_tracing_disabled(True)  # (no trace export: the tests reach no network)


class ScriptedModel(Model):  # type: ignore[misc]
    """Answers with the next scripted line and records the input it was given."""

    def __init__(self, lines: list[str]) -> None:
        self.lines: list[str] = list(lines)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        self.inputs.append(input)
        text = self.lines.pop(0)
        msg = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
            role="assistant",
            status="completed",
            type="message",
        )
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


CALL = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Lisbon"}', "id": "fc_1"}
OUT = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}


def test_session_protocol(memory: lamina.Memory) -> None:
    s = LaminaSession(memory, session_id="chat-1", user_id="alice")
    assert isinstance(s, Session)

    async def run() -> None:
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items([{"role": "user", "content": "What's the weather in Lisbon?"}, CALL, OUT])
        await s.add_items(
            [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
                }
            ]
        )
        items = await s.get_items()
        assert items == [
            {"role": "user", "content": "What's the weather in Lisbon?"},
            CALL,
            OUT,
            {"role": "assistant", "content": "It is sunny."},
        ]
        assert await s.get_items(limit=2) == items[2:]
        assert await s.pop_item() == items[3]
        assert await s.get_items() == items[:3]
        other = LaminaSession(memory, session_id="chat-2", user_id="alice")
        await other.add_items([{"role": "user", "content": "other chat"}])
        await s.clear_session()
        assert await s.get_items() == [] and len(await other.get_items()) == 1
        await other.end_session()

    asyncio.run(run())
    # the messages are the user's memories (the JSON items too, verbatim)
    assert "other chat" in memory.context("chat", user_id="alice").render()


def test_runner_keeps_history_in_the_session(memory: lamina.Memory) -> None:
    model = ScriptedModel(["Hi Alice.", "Your cat is called Miso."])
    agent = Agent(name="assistant", instructions="Be brief.", model=model)
    s = LaminaSession(memory, session_id="run-1", user_id="alice")

    async def run() -> tuple[str, str]:
        a = await Runner.run(agent, "Hi, I am Alice and my cat is Miso", session=s)
        b = await Runner.run(agent, "What is my cat called?", session=s)
        return a.final_output, b.final_output

    assert asyncio.run(run()) == ("Hi Alice.", "Your cat is called Miso.")
    # the second run was given the first run's history, read back from lamina
    second = model.inputs[1]
    texts = [it.get("content") for it in second if isinstance(it, dict)]
    assert "Hi, I am Alice and my cat is Miso" in texts and "Hi Alice." in texts
    assert len(asyncio.run(s.get_items())) == 4
    hits = memory.search("my cat is Miso", user_id="alice", k=4)
    assert {h.session_id for h in hits} == {"run-1"} and any("Miso" in h.text for h in hits)


def test_bad_input_raises(memory: lamina.Memory) -> None:
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaSession(None, session_id="s", user_id="u")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_id"):
        LaminaSession(memory, session_id="", user_id="u")
    s = LaminaSession(memory, session_id="s", user_id="u")
    with pytest.raises(TypeError, match="items\\[0\\]"):
        asyncio.run(s.add_items(["hello"]))
    with pytest.raises(ValueError, match="neither"):
        asyncio.run(s.add_items([{"content": "x"}]))
    with pytest.raises(ValueError, match="limit"):
        asyncio.run(s.get_items(limit=0))
    assert memory.users() == []
