"""Metadata filters give the same results on SQLite and PostgreSQL, in process, over HTTP
(``lamina.Client`` against a real uvicorn server) and over MCP (the SDK's client): the items a
filter admits are those whose metadata says so (an oracle computed from the messages), and a bad
filter is refused on every surface with the same message."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from servekit import serve_in_thread

from lamina import Client, InvalidInput, Memory
from lamina.serve.app import ServeConfig, create_app
from lamina.serve.ids import PublicIds

T0 = 1_683_550_000.0
DAY = 86_400.0
PEOPLE = ["Ana", "Ben", "Cleo", "Dan", "Eve", "Finn"]
MSGS = [
    {
        "speaker": "user",
        "text": f"{p} talked about the garden and the river trip number {i}",
        "timestamp": T0 + i * DAY,
        "metadata": {"agent_id": f"a{i % 2}", "category": ["work", "home", "health"][i % 3], "score": i, "tags": [p]},
    }
    for i, p in enumerate(PEOPLE * 3)
]
CASES: list[dict[str, Any]] = [
    {"agent_id": "a1"},
    {"category": {"in": ["home", "health"]}},
    {"score": {"gte": 4, "lte": 11}},
    {"created_at": {"gte": T0 + 3 * DAY, "lt": T0 + 9 * DAY}},
    {"or": [{"tags": "Ana"}, {"and": [{"agent_id": "a0"}, {"category": "health"}]}]},
]


def _holds(v: Any, op: str, x: Any) -> bool:
    vals = v if isinstance(v, list) else [v]
    if op == "eq":
        return x in vals
    if op == "in":
        return any(y in vals for y in x)
    return bool({"gte": v >= x, "lte": v <= x, "lt": v < x}[op]) if not isinstance(v, list) else False


def _oracle(f: dict[str, Any]) -> set[str]:
    """The texts of the messages ``f`` admits, read off the messages themselves."""

    def ok(m: dict[str, Any], f: dict[str, Any]) -> bool:
        md = m["metadata"]
        for key, want in f.items():
            if key == "or":
                if not any(ok(m, g) for g in want):
                    return False
                continue
            if key == "and":
                if not all(ok(m, g) for g in want):
                    return False
                continue
            v = m["timestamp"] if key == "created_at" else md[key]
            conds = want if isinstance(want, dict) else {"eq": want}
            if not all(_holds(v, op, x) for op, x in conds.items()):
                return False
        return True

    return {m["text"] for m in MSGS if ok(m, f)}


@pytest.fixture
def memory(db: str) -> Iterator[Memory]:
    with Memory(db, embedder="hashing") as mem:
        mem.add(MSGS, user_id="u", session_id="s")
        mem.end_session(user_id="u", session_id="s")
        yield mem


def _mcp(url: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    mcp = pytest.importorskip("mcp", reason="the MCP SDK (lamina[serve]) is not installed")

    async def main() -> Any:
        async with mcp.Client(f"{url}/mcp", read_timeout_seconds=60) as c:
            return await c.call_tool(tool, args)

    r = asyncio.run(main())
    if r.is_error:  # (a tool error: its message)
        raise InvalidInput(str(r.content[0].text))
    assert isinstance(r.structured_content, dict)
    return r.structured_content


def test_filters_agree_on_every_surface_and_backend(memory: Memory) -> None:
    app = create_app(ServeConfig(db=None, embedder="hashing", ui=False), memory=memory)
    pub = PublicIds.of_memory(memory).public  # (the service shows public ids: lamina.serve.ids)
    with serve_in_thread(app) as url, Client(url) as client:
        for f in CASES:
            want = _oracle(f)
            args = {"user_id": "u", "query": "garden river trip", "k": 100, "layers": ["archive"], "filters": f}
            local = memory.search(args["query"], user_id="u", k=100, layers=["archive"], filters=f)
            assert {it.text for it in local} == want, f
            http = client.search(args["query"], user_id="u", k=100, layers=["archive"], filters=f)
            assert [(it.id, it.metadata) for it in http] == [(pub(it.id), it.metadata) for it in local]
            over_mcp = _mcp(url, "search_memory", args)
            assert [(it["id"], it["metadata"]) for it in over_mcp["items"]] == [
                (pub(it.id), it.metadata) for it in local
            ]
            # contexts: only admitted turns, the same on each surface
            ctx = memory.context("garden river trip", user_id="u", budget=400, filters=f, now=T0 + 30 * DAY)
            assert ctx.items and {it.text for it in ctx.items} <= want
            ctx_http = client.context("garden river trip", user_id="u", budget=400, filters=f, now=T0 + 30 * DAY)
            assert [it.id for it in ctx_http.items] == [pub(it.id) for it in ctx.items]
            q = {"user_id": "u", "query": "garden river trip", "budget": 400, "filters": f, "now": T0 + 30 * DAY}
            assert [it["id"] for it in _mcp(url, "get_context", q)["items"]] == [pub(it.id) for it in ctx.items]
        bad = {"agent": "a1"}
        with pytest.raises(InvalidInput, match="unknown key 'agent'"):
            memory.search("garden", user_id="u", filters=bad)
        with pytest.raises(InvalidInput, match="unknown key 'agent'"):
            client.search("garden", user_id="u", filters=bad)
        with pytest.raises(InvalidInput, match="unknown key 'agent'"):
            _mcp(url, "search_memory", {"user_id": "u", "query": "garden", "filters": bad})
