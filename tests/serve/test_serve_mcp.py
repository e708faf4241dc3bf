"""The MCP server at ``/mcp`` of a real ``lamina serve``: the SDK's client over streamable HTTP
with a tenant's bearer key; the same memory as the HTTP routes; tenants kept apart; no key or
an unknown key refused before the MCP transport."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from servekit import KEY_A, KEY_B, MAX_MESSAGES, ServerProc

pytest.importorskip("mcp", reason="the MCP SDK (lamina[serve]) is not installed")
httpx2 = pytest.importorskip("httpx2", reason="the MCP SDK's HTTP client")

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcpkit import call_tool, tool_error  # noqa: E402

from lamina.serve.mcp_server import TOOLS  # noqa: E402

T0 = 1_683_550_000.0


_call, _error = call_tool, tool_error


def test_mcp_with_tenant_keys(server: ServerProc) -> None:
    user = f"mcp-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with AsyncExitStack() as stack:

            async def client(key: str, path: str = "/mcp") -> Client:
                http = await stack.enter_async_context(httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}))
                return await stack.enter_async_context(
                    Client(streamable_http_client(f"{server.url}{path}", http_client=http), read_timeout_seconds=30)
                )

            ca, cb = await client(KEY_A), await client(KEY_B, "/mcp/")
            assert sorted(t.name for t in (await ca.list_tools()).tools) == sorted(TOOLS)
            msg = [{"speaker": "Alice", "text": "I live in Lisbon with my cat Pixel.", "timestamp": T0}]
            (item,) = (await _call(ca, "add_memory", user_id=user, session_id="s", messages=msg))["ids"]
            await _call(ca, "end_session", user_id=user, session_id="s", now=T0 + 60)
            ctx = await _call(ca, "get_context", user_id=user, query="Where does Alice live?", now=T0 + 120)
            assert "Lisbon" in ctx["text"] and not ctx["abstain"] and "\x1f" not in str(ctx)
            # tenant b: the same user id names b's own user, of whom nothing was added
            other = await _error(cb, "get_context", user_id=user, query="Where does Alice live?", now=T0 + 120)
            assert f"unknown user_id {user!r}" in other and "\x1f" not in other
            assert f"unknown user_id {user!r}" in await _error(cb, "search_memory", user_id=user, query="Lisbon")
            assert (await _call(cb, "list_facts", user_id=user))["facts"] == []
            r = await cb.call_tool("delete_memory", {"user_id": user, "item_id": item})
            assert r.is_error and "\x1f" not in str(r.content)
            r = await cb.call_tool("get_context", {"user_id": f"a\x1f{user}", "query": "Lisbon"})
            assert r.is_error and "U+001F" in str(r.content)
            # the service's max_messages holds for add_memory as for POST /v1/memories
            many = [{"speaker": "A", "text": f"message {i}"} for i in range(MAX_MESSAGES + 1)]
            r = await ca.call_tool("add_memory", {"user_id": user, "session_id": "s2", "messages": many})
            assert r.is_error and f"at most {MAX_MESSAGES} (max_messages)" in str(r.content)
            ids = await _call(ca, "add_memory", user_id=user, session_id="s2", messages=many[:MAX_MESSAGES])
            assert len(ids["ids"]) == MAX_MESSAGES

    asyncio.run(main())
    # the MCP server wrote into the memory the HTTP routes serve, in tenant a's namespace only
    for key, seen in ((KEY_A, True), (KEY_B, False)):
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as h:
            assert (user in h.get("/v1/users").json()["users"]) is seen
            r = h.post("/v1/context", json={"user_id": user, "query": "Where does Alice live?", "now": T0 + 120})
            assert r.status_code == (200 if seen else 404), r.text  # b: no such user of its own
            assert ("Lisbon" in r.text) is seen


def test_mcp_without_a_valid_key_is_refused(server: ServerProc) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    hdrs = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=server.url) as h:
        for auth in ({}, {"Authorization": "Bearer not-a-key-of-anyone"}, {"Authorization": "Basic eDp5"}):
            for path in ("/mcp", "/mcp/"):
                r = h.post(path, json=init, headers={**hdrs, **auth})
                assert r.status_code == 401, (path, auth, r.text)
                assert r.json()["code"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"
        r = h.post("/mcp", json=init, headers={**hdrs, "Authorization": f"Bearer {KEY_A}"})
        assert r.status_code == 200 and '"serverInfo"' in r.text, r.text
        # stateless: a request needs no session of this process (any --workers N worker answers)
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "list_facts", "arguments": {"user_id": "nobody-here"}},
        }
        for key in (KEY_A, KEY_B):
            r = httpx.post(f"{server.url}/mcp", json=call, headers={**hdrs, "Authorization": f"Bearer {key}"})
            assert r.status_code == 200 and '"facts":[]' in r.text.replace(" ", ""), r.text
        r = httpx.post(f"{server.url}/mcp", json=call, headers=hdrs)
        assert r.status_code == 401

    async def main() -> None:  # the SDK's client sees the refusal as an error, not a session
        async with httpx2.AsyncClient() as http:
            with pytest.raises(Exception) as e:
                async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as c:
                    await c.list_tools()
            # (the SDK reports an HTTP error of the transport as "Server returned an error response")
            assert "MCPError" in repr(e.value) and "error response" in repr(e.value), repr(e.value)

    asyncio.run(main())


def test_openapi_lists_export_and_import(server: ServerProc) -> None:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    assert "get" in paths["/v1/users/{user_id}/export"] and "post" in paths["/v1/users/{user_id}/import"]
    assert not any(p.startswith("/mcp") for p in paths)


def test_mcp_tools_run_on_the_service_work_pool() -> None:
    """The tools' memory calls run on the routes' bounded pool (its threads), not the loop's."""
    import threading

    from servekit import serve_in_thread

    from lamina import Context, Memory
    from lamina.serve.app import ServeConfig, create_app
    from lamina.serve.auth import KeyRing, hash_key

    seen: list[str] = []

    class Recording(Memory):
        def context(self, *args: Any, **kwargs: Any) -> Context:
            seen.append(threading.current_thread().name)
            return super().context(*args, **kwargs)

    mem = Recording(None, embedder="hashing")
    app = create_app(ServeConfig(db=None, keys=KeyRing({hash_key(KEY_A): "a"})), memory=mem)
    with serve_in_thread(app) as url:

        async def main() -> None:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_A}"}) as http:
                async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as c:
                    await _call(c, "add_memory", user_id="u", messages=[{"speaker": "U", "text": "I like tea."}])
                    await _call(c, "get_context", user_id="u", query="anything")

        asyncio.run(main())
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY_A}"}) as h:
            assert h.post("/v1/context", json={"user_id": "u", "query": "anything"}).status_code == 200
    mem.close()
    assert len(seen) == 2 and all(n.startswith("lamina-serve") for n in seen), seen
