"""The HTTP API of a real ``lamina serve``: status codes and error bodies, tenants, limits,
health, metrics, the OpenAPI, and responses matching their schemas."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from servekit import KEY_A, MAX_BODY, MAX_MESSAGES, METRICS_KEY, ServerProc

from lamina.serve import schemas as S

T0 = 1_683_550_000.0


@pytest.fixture
def anon(server: ServerProc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url) as c:
        yield c


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def ok(r: httpx.Response, model: type[BaseModel] | None = None) -> Any:
    assert r.status_code == 200, r.text
    body = r.json()
    if model is not None:
        model.model_validate(body, strict=False)
        assert set(body) <= set(model.model_fields), set(body) - set(model.model_fields)
    return body


def err(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    S.ErrorOut.model_validate(body)
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return str(body["message"])


def add(c: httpx.Client, user: str, *texts: str, session: str = "s") -> list[int]:
    msgs = [{"speaker": "Alice", "text": t, "timestamp": T0 + i} for i, t in enumerate(texts)]
    body = ok(c.post("/v1/memories", json={"user_id": user, "session_id": session, "messages": msgs}), S.AddResponse)
    return [int(i) for i in body["ids"]]


def test_every_route_answers_with_its_schema(a: httpx.Client) -> None:
    u = uid()
    ids = add(a, u, "My sister is called Ana.", "We hiked up Mount Tamalpais on Sunday.")
    ok(a.get(f"/v1/memories/{ids[0]}"), S.ItemOut)
    ctx = ok(
        a.post("/v1/context", json={"user_id": u, "query": "hiked up Mount Tamalpais", "budget": 64, "now": T0 + 60}),
        S.ContextOut,
    )
    assert not ctx["abstain"] and "Tamalpais" in ctx["text"] and ctx["items"][0]["user_id"] == u
    ok(a.post("/v1/search", json={"user_id": u, "query": "hike", "k": 3, "layers": ["archive"]}), S.ItemsOut)
    ok(
        a.patch(
            f"/v1/memories/{ids[1]}", json={"text": "We hiked up Mount Diablo.", "timestamp": "2023-05-09T10:00:00Z"}
        ),
        S.ItemOut,
    )
    hist = ok(a.get(f"/v1/memories/{ids[1]}/history"), S.ItemsOut)
    assert [h["text"] for h in hist["items"]] == ["We hiked up Mount Tamalpais on Sunday.", "We hiked up Mount Diablo."]
    rep = ok(a.post("/v1/sessions/end", json={"user_id": u, "session_id": "s"}), S.SessionReportOut)
    assert rep["facts"] >= 1
    facts = ok(a.get(f"/v1/users/{u}/facts", params={"current": "false"}), S.ItemsOut)
    assert any(f["object"] == "Ana" for f in facts["items"])
    assert u in ok(a.get("/v1/users"), S.UsersOut)["users"]
    ok(a.delete(f"/v1/memories/{ids[1]}"), S.DeleteReportOut)
    gone = ok(a.delete(f"/v1/users/{u}"), S.DeleteReportOut)
    assert ids[0] in gone["ids"]
    err(a.get(f"/v1/memories/{ids[0]}"), 404, "not_found")


def test_auth(anon: httpx.Client, server: ServerProc) -> None:
    r = anon.post("/v1/context", json={"user_id": "x", "query": "q"})
    assert "unauthorized" == r.json()["code"] and r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    err(anon.get("/v1/users", headers={"Authorization": "Bearer not-a-key-of-anyone"}), 401, "unauthorized")
    err(anon.get("/v1/users", headers={"Authorization": f"Basic {KEY_A}"}), 401, "unauthorized")
    err(anon.get("/v1/memories/1", headers={"Authorization": f"Bearer {KEY_A}x"}), 401, "unauthorized")
    # health and readiness need no key; /metrics needs the metrics key (not a tenant's)
    assert ok(anon.get("/healthz")) == {"status": "ok"}
    assert ok(anon.get("/readyz")) == {"status": "ready"}
    assert "metrics key" in err(anon.get("/metrics"), 401, "unauthorized")
    err(anon.get("/metrics", headers={"Authorization": f"Bearer {KEY_A}"}), 401, "unauthorized")
    err(anon.get("/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}x"}), 401, "unauthorized")
    assert anon.get("/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"}).status_code == 200


def test_tenants_are_apart(a: httpx.Client, b: httpx.Client) -> None:
    u = uid()  # the same user id in both tenants: two different users
    ia = add(a, u, "Tenant A secret: the vault code is Zq4812x.")  # (a token no item id can contain)
    ib = add(b, u, "Tenant B note: lunch at noon.")
    ctx_b = ok(b.post("/v1/context", json={"user_id": u, "query": "What is the vault code?", "budget": 200}))
    assert "Zq4812x" not in str(ctx_b)
    hits_b = ok(
        b.post(
            "/v1/search", json={"user_id": u, "query": "vault code secret", "k": 50, "layers": ["archive", "working"]}
        )
    )
    assert [h["id"] for h in hits_b["items"]] == ib
    # item routes: another tenant's item is not found (as a missing one: #45), whatever the method
    msg = err(b.get(f"/v1/memories/{ia[0]}"), 404, "not_found")
    assert "Zq4812x" not in msg
    err(b.get(f"/v1/memories/{ia[0]}", params={"user_id": u}), 404, "not_found")
    err(b.get(f"/v1/memories/{ia[0]}/note"), 404, "not_found")
    err(b.get(f"/v1/memories/{ia[0]}/links"), 404, "not_found")
    err(b.patch(f"/v1/memories/{ia[0]}", json={"text": "overwritten"}), 404, "not_found")
    err(b.get(f"/v1/memories/{ia[0]}/history"), 404, "not_found")
    err(b.delete(f"/v1/memories/{ia[0]}"), 404, "not_found")
    assert ok(a.get(f"/v1/memories/{ia[0]}"))["text"] == "Tenant A secret: the vault code is Zq4812x."
    # deleting tenant b's user leaves tenant a's user of the same id
    ok(b.delete(f"/v1/users/{u}"))
    assert ok(a.get(f"/v1/memories/{ia[0]}"))["user_id"] == u
    assert u in ok(a.get("/v1/users"))["users"] and u not in ok(b.get("/v1/users"))["users"]
    # a client cannot spell another tenant's namespace
    err(b.post("/v1/context", json={"user_id": f"a\x1f{u}", "query": "vault"}), 400, "invalid_input")
    err(b.get(f"/v1/users/a%1F{u}/facts"), 400, "invalid_input")


def test_bad_input(a: httpx.Client) -> None:
    u = uid()
    err(a.post("/v1/memories", json={"user_id": u, "session_id": "s"}), 422, "validation_error")
    m = err(
        a.post("/v1/memories", json={"user_id": u, "session_id": "s", "messages": [{"text": "x", "colour": 1}]}),
        422,
        "validation_error",
    )
    assert "colour" in m
    err(a.post("/v1/context", json={"user_id": u, "query": "q", "budget": "lots"}), 422, "validation_error")
    err(
        a.post("/v1/context", content=b"{not json", headers={"content-type": "application/json"}),
        422,
        "validation_error",
    )
    err(
        a.post("/v1/memories", json={"user_id": u, "session_id": "s", "messages": [{"text": " "}]}),
        400,
        "invalid_input",
    )
    err(a.post("/v1/memories", json={"user_id": u, "session_id": "s", "messages": []}), 400, "invalid_input")
    err(a.post("/v1/memories", json={"user_id": u, "session_id": "s", "messages": [{}]}), 400, "type_error")
    err(a.post("/v1/context", json={"user_id": u, "query": "q", "budget": -3}), 400, "invalid_input")
    # a body that is not UTF-8 JSON: invalid_input (the client raises InvalidInput)
    assert "UTF-8" in err(
        a.post(
            "/v1/context", content=b'{"user_id": "u", "query": "\xff"}', headers={"content-type": "application/json"}
        ),
        400,
        "invalid_input",
    )
    # bounded at the source and in the schema: 422 before the memory is touched (was a 500)
    assert "less than or equal to 10000000" in err(
        a.post("/v1/context", json={"user_id": u, "query": "q", "budget": 10**30}), 422, "validation_error"
    )
    assert "less than or equal to 100000" in err(
        a.post("/v1/search", json={"user_id": u, "query": "q", "k": 2**63}), 422, "validation_error"
    )
    err(a.post("/v1/search", json={"user_id": u, "query": "q", "layers": ["bogus"]}), 400, "invalid_input")
    err(a.post("/v1/context", json={"user_id": "", "query": "q"}), 400, "invalid_input")
    err(a.get("/v1/memories/not-a-number"), 422, "validation_error")
    err(a.get(f"/v1/memories/{2**70}"), 422, "validation_error")
    err(a.get("/v1/memories/123"), 404, "not_found")
    err(a.get("/v1/no/such/route"), 404, "not_found")
    err(a.put("/v1/memories/123", json={}), 405, "method_not_allowed")
    msg = err(a.post("/v1/sessions/end", json={"user_id": u, "session_id": "s"}), 404, "not_found")
    assert msg == f"unknown user_id {u!r} (nothing was added for it; user ids are case-sensitive)"  # the caller's id
    for route in ("/v1/context", "/v1/search"):  # a read of a user nothing was added for: the same 404
        assert err(a.post(route, json={"user_id": u, "query": "q"}), 404, "not_found") == msg
    add(a, u, "a first turn")
    msg = err(a.post("/v1/sessions/end", json={"user_id": u, "session_id": "nope"}), 404, "not_found")
    assert msg == f"unknown session 'nope' for user {u!r}"
    ok(a.delete(f"/v1/users/{u}"))
    assert u not in ok(a.get("/v1/users"))["users"]  # nothing was written


def test_size_limits(a: httpx.Client) -> None:
    u = uid()
    big = {"user_id": u, "session_id": "s", "messages": [{"text": "x" * (MAX_BODY + 10)}]}
    err(a.post("/v1/memories", json=big), 413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
        yield b'{"user_id": "' + u.encode() + b'", "session_id": "s", "messages": [{"text": "'
        for _ in range(MAX_BODY // 1024 + 2):
            yield b"y" * 1024
        yield b'"}]}'

    err(a.post("/v1/memories", content=chunks(), headers={"content-type": "application/json"}), 413, "too_large")
    many = [{"text": f"message {i}"} for i in range(MAX_MESSAGES + 1)]
    msg = err(
        a.post("/v1/memories", json={"user_id": u, "session_id": "s", "messages": many}), 413, "too_many_messages"
    )
    assert str(MAX_MESSAGES) in msg
    assert len(add(a, u, *[f"message {i}" for i in range(MAX_MESSAGES)])) == MAX_MESSAGES


def test_metrics(a: httpx.Client, b: httpx.Client, anon: httpx.Client) -> None:
    add(a, uid(), "counted for tenant a")
    add(b, uid(), "counted for tenant b")
    a.post("/v1/context", json={"user_id": "m", "query": "q"})
    text = anon.get("/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"}).text
    assert 'lamina_requests_total{method="POST",route="/v1/memories",status="200"}' in text
    assert 'lamina_request_seconds_bucket{le="0.001",method="POST",route="/v1/context"}' in text
    # refused by the key gate before routing
    assert 'lamina_requests_total{method="GET",route="unauthenticated",status="401"}' in text
    assert "lamina_embed_seconds_count" in text and "lamina_embedded_texts_total" in text
    # each memory call's wait for a pool thread and its run on it; the worker that answered
    calls = {
        ln.split()[0]: float(ln.split()[1])
        for ln in text.splitlines()
        if ln.startswith(("lamina_queue_seconds_count", "lamina_call_seconds_count"))
    }
    assert calls["lamina_queue_seconds_count"] == calls["lamina_call_seconds_count"] >= 3
    assert re.search(r'^lamina_worker\{pid="\d+"\} 1\.0$', text, re.M)
    users = {
        ln.split()[0]: float(ln.split()[1])
        for ln in text.splitlines()
        if ln.startswith(("lamina_users{", "lamina_items{"))
    }
    assert users['lamina_users{tenant="a"}'] >= 1 and users['lamina_users{tenant="b"}'] >= 1
    assert users['lamina_items{tenant="b"}'] >= 1


def test_openapi_and_docs(anon: httpx.Client) -> None:
    spec = ok(anon.get("/openapi.json"))
    paths = spec["paths"]
    for p in (
        "/v1/memories",
        "/v1/sessions/end",
        "/v1/context",
        "/v1/search",
        "/v1/memories/{item_id}",
        "/v1/memories/{item_id}/history",
        "/v1/users/{user_id}/facts",
        "/v1/users/{user_id}",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert p in paths, p
    assert paths["/v1/context"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ContextOut"
    )
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    r = anon.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
