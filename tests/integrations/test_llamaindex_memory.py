"""lamina.integrations.llamaindex_memory: a LlamaIndex memory block over lamina.Memory, inside
LlamaIndex's own ``Memory`` (short-term queue flushed into the block, the block's context in the
system message), and the docs' example."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from integkit import memory_fixture, need

need("llama_index.core.memory")

from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.memory import BaseMemoryBlock, Memory  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

import lamina  # noqa: E402
from lamina.integrations.llamaindex_memory import LaminaMemoryBlock  # noqa: E402

memory = memory_fixture()


def _words(text: str) -> list[str]:  # (LlamaIndex's default tokenizer downloads tiktoken's tables)
    return text.split()


def test_block_put_and_get(memory: lamina.Memory) -> None:
    block = LaminaMemoryBlock(memory=memory, user_id="alice")
    assert isinstance(block, BaseMemoryBlock) and block.name == "lamina"

    async def run() -> tuple[str, str, str]:
        empty = await block.aget([ChatMessage(role="user", content="anything?")])
        await block.aput(
            [
                ChatMessage(role="user", content="I adopted a cat named Miso"),
                ChatMessage(role="assistant", content="What a lovely name!"),
                ChatMessage(role="assistant", content=""),  # no text: not kept
            ],
            session_id="chat-1",
        )
        await block.aput([ChatMessage(role="user", content="My sister plays the violin")])
        got = await block.aget([ChatMessage(role="user", content="What is the name of my cat named Miso?")])
        short = await block.atruncate(got, len(got.split()) // 2)
        return empty, got, short or ""

    empty, got, short = asyncio.run(run())
    assert empty == "" and "user: I adopted a cat named Miso" in got
    assert len(short.split()) <= len(got.split()) // 2 + 1
    page = memory.list_items(user_id="alice", limit=None)
    assert sorted((e.session_id, e.speaker) for e in page.items) == [
        ("chat-1", "assistant"),
        ("chat-1", "user"),
        ("llamaindex", "user"),
    ]


def test_llamaindex_memory_flushes_into_the_block(memory: lamina.Memory, tmp_path: Path) -> None:
    """LlamaIndex's Memory with a small token limit: the oldest messages leave its queue into
    the block, and its system message then carries lamina's context for the latest input."""
    block = LaminaMemoryBlock(memory=memory, user_id="alice", budget=64)

    async def run() -> list[ChatMessage]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'queue.db'}")
        li = Memory.from_defaults(
            session_id="li-session",
            token_limit=40,
            token_flush_size=10,
            tokenizer_fn=_words,
            memory_blocks=[block],
            async_engine=engine,
        )
        await li.aput_messages(
            [
                ChatMessage(role="user", content="I adopted a cat named Miso last spring"),
                ChatMessage(role="assistant", content="Miso is a lovely name for a cat"),
                ChatMessage(role="user", content="I also work as a nurse at the city hospital"),
                ChatMessage(role="assistant", content="Nursing must keep you busy every single day"),
            ]
        )
        try:
            return await li.aget(input="What is my cat called, the one named Miso?")
        finally:
            await engine.dispose()  # (its aiosqlite connection, closed on this loop)

    msgs = asyncio.run(run())
    flushed = memory.list_items(user_id="alice", limit=None).items
    assert flushed and {e.session_id for e in flushed} == {"li-session"}
    system = msgs[0]
    assert system.role.value == "system" and "<lamina>" in system.content and "Miso" in system.content


def test_bad_input_raises(memory: lamina.Memory) -> None:
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaMemoryBlock(memory="x", user_id="a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="user_id"):
        LaminaMemoryBlock(memory=memory, user_id="")
    with pytest.raises(ValueError, match="budget"):
        LaminaMemoryBlock(memory=memory, user_id="a", budget=0)
    block = LaminaMemoryBlock(memory=memory, user_id="a")
    with pytest.raises(TypeError, match="ChatMessage"):
        asyncio.run(block.aput(["hello"]))  # type: ignore[list-item]
    assert memory.users() == []
