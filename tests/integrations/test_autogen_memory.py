"""lamina.integrations.autogen_memory: AutoGen's Memory over lamina.Memory, used as AutoGen's
agents use a memory (add, query, update_context on a model context, clear, close), and the
docs' example."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from integkit import memory_fixture, need

need("autogen_core")

from autogen_core.memory import Memory, MemoryContent, MemoryMimeType  # noqa: E402
from autogen_core.model_context import BufferedChatCompletionContext, UnboundedChatCompletionContext  # noqa: E402
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage  # noqa: E402

import lamina  # noqa: E402
from lamina.integrations.autogen_memory import LaminaAutoGenMemory  # noqa: E402

memory = memory_fixture()


def _text(s: str) -> MemoryContent:
    return MemoryContent(content=s, mime_type=MemoryMimeType.TEXT)


def test_add_query_update_context_clear(memory: lamina.Memory) -> None:
    mem = LaminaAutoGenMemory(memory, user_id="alice", speaker="Alice", k=2)
    assert isinstance(mem, Memory)

    async def run() -> None:
        await mem.add(_text("I am allergic to peanuts"))
        await mem.add(_text("My favourite city is Lisbon"))
        await mem.add(MemoryContent(content={"units": "metric"}, mime_type=MemoryMimeType.JSON))
        res = await mem.query("Is Alice allergic to peanuts?")
        assert len(res.results) == 2 and res.results[0].content == "I am allergic to peanuts"
        meta = res.results[0].metadata
        assert meta["user_id"] == "alice" and meta["session_id"] == "autogen-memory" and meta["kind"] == "turn"
        assert meta["speaker"] == "Alice" and memory.get(meta["id"]).text == "I am allergic to peanuts"
        assert len((await mem.query(_text("units"), k=3)).results) == 3

        ctx = UnboundedChatCompletionContext()
        await ctx.add_message(UserMessage(content="Am I allergic to peanuts?", source="user"))
        out = await mem.update_context(ctx)
        msgs = await ctx.get_messages()
        assert isinstance(msgs[-1], SystemMessage) and "peanuts" in msgs[-1].content
        assert msgs[-1].content.startswith("Relevant memories") and out.memories.results
        assert any("peanuts" in str(r.content) for r in out.memories.results)
        # the buffered context AutoGen agents default to, ending with the assistant's turn
        buf = BufferedChatCompletionContext(buffer_size=4)
        await buf.add_message(AssistantMessage(content="Tell me about Lisbon", source="a"))
        await mem.update_context(buf)
        assert "Lisbon" in (await buf.get_messages())[-1].content
        # nothing to ask with: the context is left as it was
        empty = UnboundedChatCompletionContext()
        assert (await mem.update_context(empty)).memories.results == [] and await empty.get_messages() == []

        await mem.clear()
        assert (await mem.query("peanuts")).results == []
        await mem.close()

    asyncio.run(run())
    memory.add([{"speaker": "Alice", "text": "Back from Porto"}], user_id="alice", session_id="chat")
    assert asyncio.run(mem.query("Porto")).results[0].metadata["session_id"] == "chat"  # every session is read


def test_unknown_user_gets_nothing(memory: lamina.Memory) -> None:
    mem = LaminaAutoGenMemory(memory, user_id="nobody")
    ctx = UnboundedChatCompletionContext()

    async def run() -> Any:
        await ctx.add_message(UserMessage(content="hello", source="user"))
        return await mem.update_context(ctx), await mem.query("hello")

    upd, res = asyncio.run(run())
    assert upd.memories.results == [] and res.results == [] and len(asyncio.run(ctx.get_messages())) == 1


def test_bad_input_raises(memory: lamina.Memory) -> None:
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaAutoGenMemory(object(), user_id="a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must"):
        LaminaAutoGenMemory(memory, user_id="a", k=0)
    mem = LaminaAutoGenMemory(memory, user_id="a")
    with pytest.raises(TypeError, match="lamina keeps text"):
        asyncio.run(mem.add(MemoryContent(content=b"\x00", mime_type=MemoryMimeType.BINARY)))
    with pytest.raises(TypeError, match="MemoryContent"):
        asyncio.run(mem.add("text"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword"):
        asyncio.run(mem.query("x", top_k=3))
    assert memory.users() == []
