"""The MCP server, driven by the official SDK's own client: over stdio (``lamina mcp --db`` as a
real subprocess) and over streamable HTTP (the server's ASGI app under a real uvicorn on a
random port). Tool listing and schemas, each tool's happy path, refused input as tool errors
(the server keeps serving), tenant mapping of user ids."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK (lamina[serve]) is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn (lamina[serve]) is not installed")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcpkit import call_tool, tool_error  # noqa: E402

import lamina  # noqa: E402
from lamina import Memory  # noqa: E402
from lamina.errors import UNSEEN_ITEM  # noqa: E402
from lamina.serve.mcp_server import TOOLS, build_mcp_server, mcp_http_app  # noqa: E402

T0 = 1_683_550_000.0


def _lamina_command(*args: str) -> tuple[str, list[str], dict[str, str]]:
    """``python -m lamina ...`` with the interpreter, site mode and import path of this test run
    (so the subprocess imports this lamina, in a checkout or an installed package)."""
    pkg_root = str(Path(lamina.__file__).resolve().parents[1])
    path = [pkg_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    flags = ["-S"] if sys.flags.no_site else []
    return sys.executable, [*flags, "-m", "lamina", *args], env


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


async def _check_tools(client: Client) -> None:
    listed = (await client.list_tools()).tools
    assert sorted(t.name for t in listed) == sorted(TOOLS)
    for t in listed:
        props = t.input_schema["properties"]
        assert "user_id" in props and props["user_id"]["type"] == "string", t.name
        assert t.description and t.output_schema and t.output_schema["type"] == "object", t.name
    add = next(t for t in listed if t.name == "add_memory")
    assert set(add.input_schema["required"]) == {"user_id", "messages"}  # (session_id: "default")
    search = next(t for t in listed if t.name == "search_memory")
    assert search.input_schema["properties"]["k"]["minimum"] == 1


_call, _error = call_tool, tool_error


async def _exercise(client: Client, user: str = "alice") -> None:
    """Every tool's happy path, then refused input; the server answers throughout."""
    await _check_tools(client)
    msgs = [
        {"speaker": "Alice", "text": "I live in Lisbon.", "timestamp": T0},
        {"speaker": "Alice", "text": "I work as a marine biologist.", "timestamp": T0 + 60},
        {"speaker": "Bot", "text": "Lisbon is lovely by the sea.", "timestamp": T0 + 120},
    ]
    ids = (await _call(client, "add_memory", user_id=user, session_id="s1", messages=msgs))["ids"]
    assert len(ids) == 3 and len(set(ids)) == 3
    ctx = await _call(client, "get_context", user_id=user, query="Where does Alice live?", budget=64, now=T0 + 600)
    assert not ctx["abstain"] and "Alice: I live in Lisbon." in ctx["text"]
    assert ctx["budget"] == 64 and 0 < ctx["tokens"] <= 64 and ctx["items"] and set(ctx["gates"]) >= {"working"}
    rep = await _call(client, "end_session", user_id=user, session_id="s1", now=T0 + 700)
    assert rep["facts"] >= 2 and rep["segments"] >= 1
    facts = (await _call(client, "list_facts", user_id=user))["facts"]
    assert {(f["predicate"], f["object"]) for f in facts} >= {("lives_in", "Lisbon"), ("works_as", "marine biologist")}
    assert all(f["kind"] == "fact" and f["sources"] for f in facts)
    found = (await _call(client, "search_memory", user_id=user, query="marine biologist", k=3, layers=["archive"]))[
        "items"
    ]
    assert found[0]["text"] == "I work as a marine biologist." and found[0]["layer"] == "archive"
    gone = await _call(client, "delete_memory", user_id=user, item_id=found[0]["id"])
    assert gone["deleted"] >= 2 and found[0]["id"] in gone["ids"]  # the turn and the fact drawn from it
    facts = (await _call(client, "list_facts", user_id=user))["facts"]
    assert [f["object"] for f in facts] == ["Lisbon"]
    again = (await _call(client, "search_memory", user_id=user, query="marine biologist", k=3, layers=["archive"]))[
        "items"
    ]
    assert all("biologist" not in it["text"] for it in again)
    # refused input: a tool error naming what was wrong, never a crash
    assert "empty text" in await _error(
        client, "add_memory", user_id=user, session_id="s1", messages=[{"speaker": "A", "text": "  "}]
    )
    assert f"not found: {UNSEEN_ITEM}" in await _error(client, "delete_memory", user_id=user, item_id=12345)
    assert f"not found: {UNSEEN_ITEM}" in await _error(  # (another user's item: as a missing one, #45)
        client, "delete_memory", user_id="mallory", item_id=ids[0]
    )
    assert "not found: unknown session 'nope'" in await _error(client, "end_session", user_id=user, session_id="nope")
    # a field the tool does not know, or a commitment of none of the four, is an error (was dropped: #45)
    for bad in ({"commitment": "forever"}, {"colour": "red"}):
        text = await _error(
            client, "add_memory", user_id=user, session_id="s2", messages=[{"speaker": "A", "text": "x", **bad}]
        )
        assert next(iter(bad)) in text
    (eph,) = (
        await _call(
            client,
            "add_memory",
            user_id=user,
            session_id="s2",
            messages=[{"speaker": "A", "text": "a passing thought", "commitment": "ephemeral"}],
        )
    )["ids"]
    assert eph > 0
    assert "invalid input: timestamp 'soon' is not an ISO-8601 time" in await _error(
        client, "add_memory", user_id=user, session_id="s2", messages=[{"speaker": "A", "text": "hi"}], timestamp="soon"
    )
    # (arguments outside the schema: the SDK's validation names the field)
    assert "\nk\n  Input should be greater than or equal to 1" in await _error(
        client, "search_memory", user_id=user, query="x", k=0
    )
    assert "\nbudget\n  Input should be less than or equal to 10000000" in await _error(
        client, "get_context", user_id=user, query="x", budget=10**30
    )
    assert "\nlayers.0\n  Input should be 'working'" in await _error(
        client, "search_memory", user_id=user, query="x", layers=["attic"]
    )
    assert "\nmessages\n  List should have at least 1 item" in await _error(
        client, "add_memory", user_id=user, session_id="s2", messages=[]
    )
    assert "\nuser_id\n  Field required" in await _error(client, "get_context", query="x")
    # a user nothing was added for is an error naming it (a misspelt id is not an empty memory)
    assert "unknown user_id 'nobody'" in await _error(client, "get_context", user_id="nobody", query="anything")
    assert (await _call(client, "list_facts", user_id=user, current=False))["facts"]
    # related memories: a later turn about the same cat links back to the first
    cat = [
        {"speaker": "Alice", "text": "I adopted a grey cat named Pixel last spring.", "timestamp": T0 + 800},
        {"speaker": "Alice", "text": "Pixel, my grey cat, was adopted last spring.", "timestamp": T0 + 900},
    ]
    first, later = (await _call(client, "add_memory", user_id=user, session_id="s3", messages=cat))["ids"]
    rel = await _call(client, "related_memories", user_id=user, item_id=first)
    assert rel["keywords"][0] == "Pixel" and rel["context"].startswith("Alice on 2023-05-08, about Pixel")
    (link,) = rel["related"]
    assert link["item"]["id"] == later and link["newer"] and link["kind"] == "related" and "Pixel" in link["shared"]
    back = await _call(client, "related_memories", user_id=user, item_id=later)
    assert [x["item"]["id"] for x in back["related"]] == [first] and not back["related"][0]["newer"]
    assert f"not found: {UNSEEN_ITEM}" in await _error(client, "related_memories", user_id=user, item_id=12345)


def test_stdio_subprocess(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cmd, args, env = _lamina_command("mcp", "--db", str(db), "--embedder", "hashing", "--max-messages", "5")

    async def main() -> None:
        params = StdioServerParameters(command=cmd, args=args, env=env, cwd=str(tmp_path))
        async with Client(params, read_timeout_seconds=60) as client:
            await _exercise(client)
            six = [{"speaker": "A", "text": f"m{i}"} for i in range(6)]  # (lamina mcp --max-messages)
            assert "too many messages: 6" in await _error(
                client, "add_memory", user_id="bob", session_id="s", messages=six
            )

    _run(main)
    with Memory(db, embedder="hashing") as mem:  # the subprocess wrote through the store
        assert mem.users() == ["alice"]
        assert [f.object for f in mem.facts(user_id="alice")] == ["Lisbon"]


@contextmanager
def _uvicorn(app: Any) -> Iterator[str]:
    """``app`` under a real uvicorn on a random free port (in a thread); yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert t.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(30)
        sock.close()
        assert not t.is_alive()


def test_streamable_http_under_uvicorn(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "m.db", embedder="hashing")
    with _uvicorn(mcp_http_app(build_mcp_server(mem))) as url:

        async def main() -> None:
            async with Client(f"{url}/mcp", read_timeout_seconds=60) as client:
                await _exercise(client)

        _run(main)
    assert mem.users() == ["alice"]
    mem.close()


def test_tenant_mapping_over_http(tmp_path: Path) -> None:
    """One server, two tenants told apart by their bearer key (as ``lamina serve`` would map
    them): neither reads, searches, lists or deletes the other's items, no output shows the
    stored ids, a missing or unknown key is refused as a tool error."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    keys = {"k1": "t1", "k2": "t2"}

    def to_user(uid: str, request: Any) -> str:
        assert request is not None  # (over HTTP the tool sees the request that carried it)
        auth = request.headers.get("authorization", "")
        tenant = keys.get(auth.removeprefix("Bearer "))
        if tenant is None:
            raise ValueError("missing or unknown API key")
        if ":" in uid:
            raise ValueError(f"user_id {uid!r} may not contain ':'")
        return f"{tenant}:{uid}"

    mem = Memory(tmp_path / "m.db", embedder="hashing")
    with _uvicorn(mcp_http_app(build_mcp_server(mem, user_id_map=to_user))) as url:

        async def main() -> None:
            async with AsyncExitStack() as stack:

                async def client(key: str | None) -> Client:
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
                    return await stack.enter_async_context(
                        Client(streamable_http_client(f"{url}/mcp", http_client=http))
                    )

                ca, cb, anon, bad = [await client(k) for k in ("k1", "k2", None, "k3")]
                msg = [{"speaker": "Alice", "text": "I live in Lisbon.", "timestamp": T0}]
                (item,) = (await _call(ca, "add_memory", user_id="alice", session_id="s", messages=msg))["ids"]
                await _call(ca, "end_session", user_id="alice", session_id="s")
                ctx = await _call(ca, "get_context", user_id="alice", query="Where does Alice live?", now=T0 + 60)
                assert "Lisbon" in ctx["text"] and "t1:" not in str(ctx)
                # t2's "alice" is its own user, of whom nothing was added: not found, t1's not named
                other = await _error(cb, "get_context", user_id="alice", query="Where does Alice live?", now=T0 + 60)
                assert "unknown user_id 'alice'" in other and "t1:" not in other
                assert "unknown user_id 'alice'" in await _error(cb, "search_memory", user_id="alice", query="Lisbon")
                assert (await _call(cb, "list_facts", user_id="alice"))["facts"] == []
                await _call(cb, "add_memory", user_id="alice", session_id="s", messages=msg)  # t2's own alice
                refused = await _error(cb, "delete_memory", user_id="alice", item_id=item)
                assert UNSEEN_ITEM in refused and "t2:" not in refused  # (as a missing id: #45)
                assert "may not contain" in await _error(cb, "get_context", user_id="t1:alice", query="Lisbon")
                for c in (anon, bad):
                    assert "missing or unknown API key" in await _error(c, "list_facts", user_id="alice")

        _run(main)
    assert mem.users() == ["t1:alice", "t2:alice"]
    assert [f.object for f in mem.facts(user_id="t1:alice")] == ["Lisbon"]
    mem.close()


def test_the_factory_checks_its_memory() -> None:
    with pytest.raises(TypeError, match="lamina.Memory"):
        build_mcp_server("memory.db")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_budget must be an int in 1..10000000"):
        build_mcp_server(Memory(None, embedder="hashing"), default_budget=0)


def test_mounted_at_mcp_in_a_host_app(tmp_path: Path) -> None:
    """How ``lamina serve`` mounts it: the app built with ``path="/"`` mounted at ``/mcp`` in
    a host app whose lifespan runs the server's session manager; the host's own routes still
    answer."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    mem = Memory(None, embedder="hashing")
    server = build_mcp_server(mem)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    async def healthz(_r: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    host = Starlette(
        routes=[Route("/healthz", healthz), Mount("/mcp", app=mcp_http_app(server, path="/"))], lifespan=lifespan
    )
    with _uvicorn(host) as url:

        async def main() -> None:
            async with Client(f"{url}/mcp/") as client:
                assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(TOOLS)
                msg = [{"speaker": "Ann", "text": "I live in Oslo.", "timestamp": T0}]
                assert len((await _call(client, "add_memory", user_id="ann", session_id="s", messages=msg))["ids"]) == 1
            import httpx

            async with httpx.AsyncClient() as h:
                assert (await h.get(f"{url}/healthz")).text == "ok"

        _run(main)
    assert mem.users() == ["ann"]


def test_concurrent_sessions_over_http(tmp_path: Path) -> None:
    """Eight MCP sessions at once, each writing and reading its own user (tool calls run in
    worker threads on one shared Memory): every write lands, every context sees its own user."""
    mem = Memory(tmp_path / "m.db", embedder="hashing")
    cities = ["Oslo", "Lima", "Quito", "Hanoi", "Accra", "Perth", "Turin", "Dakar"]
    with _uvicorn(mcp_http_app(build_mcp_server(mem))) as url:

        async def one(i: int, city: str) -> None:
            async with Client(f"{url}/mcp") as c:
                for j in range(5):
                    msg = [{"speaker": f"P{i}", "text": f"Note {j}: I live in {city}.", "timestamp": T0 + j}]
                    await _call(c, "add_memory", user_id=f"u{i}", session_id="s", messages=msg)
                ctx = await _call(c, "get_context", user_id=f"u{i}", query=f"Where does P{i} live?", now=T0 + 60)
                assert city in ctx["text"] and not any(o in ctx["text"] for o in cities if o != city)

        async def main() -> None:
            await asyncio.gather(*(one(i, c) for i, c in enumerate(cities)))

        _run(main)
    assert mem.users() == [f"u{i}" for i in range(8)]
    assert all(mem.stats(user_id=f"u{i}").archive_turns == 5 for i in range(8))
    mem.close()


def test_the_runner_runs_every_memory_call(tmp_path: Path) -> None:
    """``run``: each tool's memory call goes through it (off the event loop); a runner that
    refuses (a full work pool) gives a tool error ``busy``."""
    from lamina.errors import Overloaded

    calls: list[str] = []
    refuse = False

    async def run(fn: Callable[[], Any]) -> Any:
        if refuse:
            raise Overloaded("the server has 256 requests pending (max_pending)", 1)
        calls.append(threading.current_thread().name)
        return await asyncio.to_thread(fn)

    mem = Memory(None, embedder="hashing")
    with _uvicorn(mcp_http_app(build_mcp_server(mem, run=run))) as url:

        async def main() -> None:
            nonlocal refuse
            async with Client(f"{url}/mcp") as c:
                msg = [{"speaker": "Ann", "text": "I live in Oslo.", "timestamp": T0}]
                await _call(c, "add_memory", user_id="ann", session_id="s", messages=msg)
                await _call(c, "get_context", user_id="ann", query="Oslo")
                refuse = True
                assert "busy: the server has 256 requests pending" in await _error(
                    c, "search_memory", user_id="ann", query="Oslo"
                )

        _run(main)
    assert len(calls) == 2
    mem.close()
