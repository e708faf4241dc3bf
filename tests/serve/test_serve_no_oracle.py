"""Ids are no oracle (issue 45): on a real ``lamina serve`` with two tenants, tenant B gets the
same answer for an existing id of tenant A as for a missing one, on every route of
``/openapi.json``, in the inspector and over MCP."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from servekit import KEY_A, KEY_B, ServerProc

from lamina.errors import UNSEEN_ITEM

T0 = 1_683_550_000.0
#: a request body per route that takes one (``{user}``: the user id under test)
_BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/memories"): {"user_id": "{user}", "session_id": "s", "messages": [{"speaker": "u", "text": "hi"}]},
    ("post", "/v1/sessions/end"): {"user_id": "{user}", "session_id": "s"},
    ("post", "/v1/context"): {"user_id": "{user}", "query": "the vault code", "budget": 200},
    ("post", "/v1/search"): {"user_id": "{user}", "query": "the vault code", "k": 5},
    ("patch", "/v1/memories/{item_id}"): {"text": "overwritten"},
    ("post", "/v1/memories/batch"): {"requests": [{"user_id": "{user}", "messages": [{"speaker": "u", "text": "hi"}]}]},
    ("post", "/v1/context/batch"): {"queries": ["the vault code"], "user_ids": "{user}", "budget": 200},
    ("post", "/v1/memories/list"): {"user_id": "{user}"},
    ("post", "/v1/memories/delete"): {"user_id": "{user}", "filters": {"topic": "vault"}},
    ("post", "/v1/chat/completions"): {
        "model": "lamina",
        "user": "{user}",
        "messages": [{"role": "user", "content": "What is the vault code?"}],
    },
}
#: routes that write for the caller's own (new) user: their answers differ by the new item ids
_WRITES = {
    ("post", "/v1/memories"),
    ("post", "/v1/users/{user_id}/import"),
    ("post", "/v1/memories/batch"),
    ("post", "/v1/reset"),  # (deletes the caller's own users: the second call finds fewer)
}


@pytest.fixture
def tenants(server: ServerProc) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    with (
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30) as a,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30) as b,
    ):
        yield a, b


def _fill(x: Any, user: str) -> Any:
    return json.loads(json.dumps(x).replace("{user}", user))


def _answer(r: httpx.Response, *secrets: str) -> tuple[int, str]:
    text = r.text
    for i, s in enumerate(secrets):
        text = text.replace(s, f"<{i}>")
    return r.status_code, re.sub(r'"(id|created_at|now)":[0-9.e+]+', r'"\1":<n>', text)


def _call(c: httpx.Client, method: str, path: str, item_id: int, user: str) -> httpx.Response:
    url = path.replace("{item_id}", str(item_id)).replace("{user_id}", user)
    body = _BODIES.get((method, path))
    if path.endswith("/import"):
        dump = b'{"lamina_dump": 1}\n'
        return c.request(method, url, content=dump, headers={"content-type": "application/x-ndjson"})
    if body is not None:
        return c.request(method, url, json=_fill(body, user))
    return c.request(method, url, params={"user_id": user} if "{item_id}" in path and "user_id" in url else None)


def test_another_tenants_ids_answer_as_missing_ones_on_every_route(
    server: ServerProc, tenants: tuple[httpx.Client, httpx.Client]
) -> None:
    a, b = tenants
    user_a = f"u-{uuid.uuid4().hex[:10]}"
    texts = ["Tenant A secret: the vault code is Zq4812x.", "I moved to Lisbon last year.", "I love sailing."]
    r = a.post(
        "/v1/memories",
        json={
            "user_id": user_a,
            "session_id": "s",
            "timestamp": T0,
            "messages": [{"speaker": "u", "text": t} for t in texts],
        },
    )
    ids = r.json()["ids"]
    assert a.post("/v1/sessions/end", json={"user_id": user_a, "session_id": "s"}).status_code == 200
    gone = a.post("/v1/memories", json={"user_id": user_a, "session_id": "s2", "messages": [{"text": "tmp"}]}).json()
    assert a.delete(f"/v1/memories/{gone['ids'][0]}").status_code == 200
    missing_ids = [gone["ids"][0], max(ids) + 10**6, 1, 2**62 + 5]

    spec = a.get("/openapi.json").json()
    routes = [(m, p) for p, ops in spec["paths"].items() for m in ops if m in ("get", "post", "patch", "delete", "put")]
    on_ids = [(m, p) for m, p in routes if "{item_id}" in p]
    assert len(on_ids) >= 6, routes
    seen_routes = 0
    # item routes: B's answer for A's items is the missing ids' answer, byte for byte (404 everywhere)
    for method, path in on_ids:
        for existing in ids:
            got = _call(b, method, path, existing, f"b-{uuid.uuid4().hex[:6]}")
            assert got.status_code == 404, (method, path, got.text)
            assert got.json() == {"code": "not_found", "message": UNSEEN_ITEM}, (method, path)
            for missing in missing_ids:
                other = _call(b, method, path, missing, f"b-{uuid.uuid4().hex[:6]}")
                assert (other.status_code, other.content) == (got.status_code, got.content), (method, path, missing)
        # with B's own user named too (?user_id=): the same again
        mine = f"b-{uuid.uuid4().hex[:6]}"
        b.post("/v1/memories", json={"user_id": mine, "session_id": "s", "messages": [{"text": "mine"}]})
        for x in [ids[0], missing_ids[1]]:
            url = path.replace("{item_id}", str(x))
            kw: dict[str, Any] = {"params": {"user_id": mine}}
            if (method, path) in _BODIES:
                kw["json"] = _BODIES[(method, path)]
            got = b.request(method, url, **kw)
            assert got.json() == {"code": "not_found", "message": UNSEEN_ITEM}, (method, path, got.text)
        seen_routes += 1
    # every other route: B naming A's user gets what it gets for a user no one has (the writes
    # last: they make B a user of that id)
    for method, path in sorted(routes, key=lambda r: r in _WRITES):
        if "{item_id}" in path or path in ("/openapi.json", "/metrics", "/healthz", "/readyz"):
            continue
        fresh = f"u-{uuid.uuid4().hex[:10]}"
        got = _answer(_call(b, method, path, 0, user_a), user_a)
        other = _answer(_call(b, method, path, 0, fresh), fresh)
        if (method, path) in _WRITES:
            assert got[0] == other[0], (method, path, got, other)
        else:
            assert got == other, (method, path)
        assert "Zq4812x" not in got[1]
        seen_routes += 1
    assert seen_routes >= len(routes) - 4
    # and A's items are untouched
    for i, t in zip(ids, texts):
        assert a.get(f"/v1/memories/{i}").json()["text"] == t


def test_inspector_and_mcp_answer_alike(server: ServerProc, tenants: tuple[httpx.Client, httpx.Client]) -> None:
    a, b = tenants
    user = f"u-{uuid.uuid4().hex[:10]}"
    (mine,) = b.post("/v1/memories", json={"user_id": user, "session_id": "s", "messages": [{"text": "b's"}]}).json()[
        "ids"
    ]
    (theirs,) = a.post("/v1/memories", json={"user_id": user, "session_id": "s", "messages": [{"text": "a's"}]}).json()[
        "ids"
    ]
    missing = theirs + 10**6
    # MCP over streamable HTTP: the tool error of an id of A's is the one of a missing id
    answers = []
    for item_id in (theirs, missing):
        for tool in ("delete_memory", "related_memories"):
            answers.append((tool, _mcp_tool(server.url, KEY_B, tool, {"user_id": user, "item_id": item_id})))
    by_tool: dict[str, set[str]] = {}
    for tool, text in answers:
        by_tool.setdefault(tool, set()).add(text)
    for tool, texts in by_tool.items():
        assert len(texts) == 1, (tool, texts)
        assert UNSEEN_ITEM in next(iter(texts)), texts
    assert b.get(f"/v1/memories/{mine}").status_code == 200
    assert a.get(f"/v1/memories/{theirs}").status_code == 200


def _mcp_tool(url: str, key: str, tool: str, args: dict[str, Any]) -> str:
    """One ``tools/call`` over the stateless streamable-HTTP transport: the error text."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": "2025-06-18",
    }
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    r = httpx.post(url + "/mcp", json=call, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    payload = r.text
    if "data:" in payload:
        payload = next(line[5:] for line in payload.splitlines() if line.startswith("data:"))
    result = json.loads(payload)["result"]
    assert result.get("isError"), result
    return str(result["content"][0]["text"])
