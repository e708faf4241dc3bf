"""The virtual context end to end: a scripted test model (a double of the chat model only)
drives lamina.agent over a real lamina.Memory on SQLite."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lamina.agent import (
    PRESSURE_MESSAGE_PREFIX,
    ChatReply,
    CoreMemory,
    ToolCall,
    VirtualContext,
    dispatch,
    run_turn,
    token_counter,
    tool_schemas,
)
from lamina.memory import Memory

Script = Callable[[list[dict[str, Any]]], ChatReply]


class ScriptedModel:
    """A test double of the chat model: replies come from a script, seeing the real prompt."""

    def __init__(self, script: Sequence[ChatReply] | Script) -> None:
        self.script = script
        self.calls: list[list[dict[str, Any]]] = []

    def chat(self, messages: list[dict[str, Any]], *, tools: Sequence[dict[str, Any]]) -> ChatReply:
        assert {t["function"]["name"] for t in tools} >= {"conversation_search", "core_memory_append"}
        self.calls.append(messages)
        if callable(self.script):
            return self.script(messages)
        return self.script[len(self.calls) - 1]


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=json.dumps(args))


@pytest.fixture()
def mem(tmp_path: Path) -> Any:
    m = Memory(str(tmp_path / "agent.sqlite"), embedder="hashing")
    yield m
    m.close()


def _vc(mem: Memory, **kw: Any) -> VirtualContext:
    t = iter(range(10**6))
    return VirtualContext(mem, user_id="u1", session_id="s1", clock=lambda: 1.7e9 + 60.0 * next(t), **kw)


def test_pressure_fires_at_70_percent_and_flush_loses_no_message(mem: Memory) -> None:
    vc = _vc(mem, window=400, system="sys", summary_words=40)
    model = ScriptedModel(lambda msgs: ChatReply(content="noted: " + msgs[-1]["content"]))
    said: list[str] = []
    first_warning: int | None = None
    for i in range(60):
        text = f"message {i}: my favourite number today is {i * 7919 % 1000} and colour code c{i}"
        before = vc.tokens()
        res = run_turn(vc, model, text)
        said += [text, res.reply]
        warn = [e for e in res.events if e.kind == "warning"]
        if warn and first_warning is None:
            first_warning = i
            assert warn[0].tokens >= 0.7 * 400 and before < 0.7 * 400
            assert any(str(m.get("content", "")).startswith(PRESSURE_MESSAGE_PREFIX) for m in vc.messages())
        assert vc.tokens() < 400  # never over the window after a turn
    assert first_warning is not None
    flushes = [e for e in vc.events if e.kind == "flush"]
    assert flushes and all(e.tokens >= 400 and e.tokens_after <= 0.5 * 400 + 40 and e.evicted > 0 for e in flushes)
    assert vc.summary  # the recursive summary of what was evicted
    in_context = " ".join(str(m.get("content")) for m in vc.messages())
    assert said[0] not in in_context  # the oldest messages really left the prompt
    for text in said:  # ...and every message is findable by conversation_search (through the tool)
        found = False
        for page in range(3):
            r = dispatch(vc, "conversation_search", {"query": text, "page": page})
            assert r.ok, r.content
            if text in r.content:
                found = True
                break
        assert found, text


def test_tools_edit_core_and_archival_memory_with_heartbeats(mem: Memory) -> None:
    vc = _vc(mem, core=CoreMemory(persona="I am Ada.", limit=200))
    model = ScriptedModel(
        [
            ChatReply("", (call("core_memory_append", block="human", content="Name: Lin", request_heartbeat=True),)),
            ChatReply(
                "",
                (
                    call(
                        "core_memory_replace",
                        block="persona",
                        old_content="Ada",
                        new_content="Ada, a tutor",
                        request_heartbeat=True,
                    ),
                ),
            ),
            ChatReply(
                "", (call("archival_memory_insert", content="Lin's thesis is on coral reefs", request_heartbeat=True),)
            ),
            ChatReply("", (call("archival_memory_search", query="coral reefs thesis", request_heartbeat=True),)),
            ChatReply("Hello Lin!"),
        ]
    )
    res = run_turn(vc, model, "Hi, I am Lin and I study coral reefs.")
    assert res.stopped == "reply" and res.reply == "Hello Lin!" and res.steps == 5
    assert all(r.ok for r in res.tool_results), [r.content for r in res.tool_results]
    assert vc.core.get("human") == "Name: Lin" and vc.core.get("persona") == "I am Ada, a tutor."
    assert "Lin's thesis is on coral reefs" in res.tool_results[3].content
    assert "Name: Lin" in vc.messages()[0]["content"]  # core memory is in the prompt
    # the model saw each tool result as a tool message following its call
    last = model.calls[-1]
    assert [m["role"] for m in last[-2:]] == ["assistant", "tool"]


def test_no_heartbeat_ends_the_turn_and_step_limit_holds(mem: Memory) -> None:
    vc = _vc(mem)
    once = ScriptedModel([ChatReply("", (call("archival_memory_insert", content="x y z"),))])
    assert run_turn(vc, once, "remember x y z").stopped == "no_heartbeat"
    loop = ScriptedModel(lambda _: ChatReply("", (call("archival_memory_search", query="x", request_heartbeat=True),)))
    r = run_turn(vc, loop, "search forever", max_steps=3)
    assert r.stopped == "max_steps" and r.steps == 3 and len(loop.calls) == 3


def test_dispatcher_returns_clear_tool_errors(mem: Memory) -> None:
    vc = _vc(mem, core=CoreMemory(limit=20))
    cases = {
        ("no_such_tool", "{}"): "unknown tool",
        ("archival_memory_insert", "{not json"): "not valid JSON",
        ("archival_memory_insert", "{}"): "missing required argument(s): content",
        ("archival_memory_insert", '{"content": 3}'): "'content' must be a string",
        ("archival_memory_search", '{"query": "a", "page": -1}'): "must be >= 0",
        ("archival_memory_search", '{"query": "a", "k": 3}'): "unexpected argument(s): k",
        ("core_memory_append", '{"block": "diary", "content": "x"}'): "must be one of",
        ("core_memory_append", '{"block": "human", "content": "' + "x" * 30 + '"}'): "over its limit of 20",
        ("core_memory_replace", '{"block": "human", "old_content": "zz", "new_content": ""}'): "not found",
        ("conversation_search", '{"query": "a", "start_date": "yesterday"}'): "ISO date",
    }
    for (name, args), msg in cases.items():
        r = dispatch(vc, name, args)
        assert not r.ok and msg in r.content and r.heartbeat, (name, args, r.content)
    # an error gives control back: the model can correct itself within the turn
    model = ScriptedModel([ChatReply("", (ToolCall("1", "archival_memory_insert", "{}"),)), ChatReply("fixed")])
    assert run_turn(vc, model, "go").reply == "fixed"


def test_conversation_search_by_date_and_paging(mem: Memory) -> None:
    vc = VirtualContext(mem, user_id="u2", session_id="s", clock=iter([]).__next__, window=4096)
    days = [1_700_000_000 + 86400 * d for d in range(12)]  # 2023-11-14 ..
    for d, t in enumerate(days):
        vc.clock = lambda t=t: float(t)
        vc.append({"role": "user", "content": f"on day {d} we talked about the garden"})
    r = dispatch(vc, "conversation_search", {"query": "garden", "start_date": "2023-11-16", "end_date": "2023-11-17"})
    assert r.ok and "(2 results)" in r.content and "day 2 " in r.content and "day 3 " in r.content
    p0 = dispatch(vc, "conversation_search", {"query": "garden"})
    p2 = dispatch(vc, "conversation_search", {"query": "garden", "page": 2})
    assert "page 0 of 3 (12 results)" in p0.content and p2.content.count("\n") == 2  # header + 2 lines


def test_token_counter_sources() -> None:
    assert token_counter()("a b  c") == 3
    assert token_counter(len)("abcd") == 4

    class Tok:
        def encode(self, s: str) -> list[int]:
            return [ord(c) for c in s]

    assert token_counter(Tok())("abc") == 3
    with pytest.raises(TypeError, match="token source"):
        token_counter(3)


def test_schemas_are_openai_function_format() -> None:
    names = []
    for s in tool_schemas():
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        names.append(s["function"]["name"])
    assert names == [
        "core_memory_append",
        "core_memory_replace",
        "archival_memory_insert",
        "archival_memory_search",
        "conversation_search",
    ]


def test_bad_configuration_is_refused(mem: Memory) -> None:
    with pytest.raises(ValueError, match="window"):
        VirtualContext(mem, user_id="u", session_id="s", window=10)
    with pytest.raises(ValueError, match="flush_target"):
        VirtualContext(mem, user_id="u", session_id="s", warn=0.4, flush_target=0.5)
    with pytest.raises(ValueError, match="max_steps"):
        run_turn(_vc(mem), ScriptedModel([]), "hi", max_steps=0)


_ENDPOINT = os.environ.get("LAMINA_AGENT_TEST_MODEL") or os.environ.get("LAMINA_LLM_MODEL")


@pytest.fixture(scope="module")
def endpoint_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real OpenAI-compatible endpoint: the configured one (LAMINA_AGENT_TEST_MODEL or
    LAMINA_LLM_MODEL, with LAMINA_LLM_BASE_URL / LAMINA_LLM_API_KEY), else ``lamina model
    serve`` on the packaged local model (a real uvicorn process, the OpenAI wire format)."""
    from lamina.agent import OpenAIToolChat

    if _ENDPOINT:
        yield OpenAIToolChat(model=_ENDPOINT, max_tokens=128)
        return
    from llmkit import MISSING, local_chat_endpoint

    if MISSING:
        pytest.skip(f"no endpoint configured and no local one possible (needs {', '.join(MISSING)})")
    with local_chat_endpoint(tmp_path_factory.mktemp("agent-endpoint"), "--name", "smol") as url:
        yield OpenAIToolChat(base_url=url, model="smol", api_key="none", max_tokens=24)


def test_real_endpoint_drives_the_loop_through_pressure_and_flush(mem: Memory, endpoint_model: Any) -> None:
    model = endpoint_model
    vc = _vc(mem, window=200, summary_words=30)
    said = []
    for i in range(7):
        text = f"Fact {i}: my locker number {i} holds item code K{i * 37}. Please remember it briefly."
        res = run_turn(vc, model, text, max_steps=2)
        said.append(text)
    kinds = {e.kind for e in vc.events}
    assert "warning" in kinds and "flush" in kinds
    for text in said:
        hits = " ".join(dispatch(vc, "conversation_search", {"query": text, "page": p}).content for p in range(3))
        assert text in hits
    assert res.steps >= 1
