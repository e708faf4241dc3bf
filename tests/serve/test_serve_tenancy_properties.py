"""Property: over random sequences of routes by two tenants (the same user ids in both), no
tenant reads, changes or deletes anything of the other's — not through user ids, not by item
ids it saw nowhere or guessed, not by exporting a user or importing a dump (its own, or one
whose lines name the other tenant's stored user id)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from servekit import KEY_A, KEY_B, ServerProc

TENANTS = ("a", "b")
USERS = ("alice", "bob")
SESSIONS = ("s1", "s2")
QUERIES = ("garden", "what did I plan", "zz note", "tell me everything")
_marks = itertools.count()


@dataclass
class Item:
    tenant: str
    user: str
    text: str
    alive: bool = True


@pytest.fixture(scope="module")
def clients(server: ServerProc) -> Iterator[dict[str, httpx.Client]]:
    cs = {
        t: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {k}"})
        for t, k in zip(TENANTS, (KEY_A, KEY_B))
    }
    yield cs
    for c in cs.values():
        c.close()


tenant = st.sampled_from(TENANTS)
user = st.sampled_from(USERS)
target = st.one_of(
    st.tuples(st.just("own"), st.integers(0, 50)),
    st.tuples(st.just("other"), st.integers(0, 50)),
    st.tuples(st.just("guess"), st.integers(-5, 2**63 - 1)),
)
op = st.one_of(
    st.tuples(st.just("add"), tenant, user, st.sampled_from(SESSIONS), st.integers(1, 3)),
    st.tuples(st.just("context"), tenant, user, st.sampled_from(QUERIES)),
    st.tuples(st.just("search"), tenant, user, st.sampled_from(QUERIES)),
    st.tuples(st.sampled_from(["get", "patch", "delete", "history"]), tenant, target),
    st.tuples(st.just("facts"), tenant, user),
    st.tuples(st.just("end"), tenant, user, st.sampled_from(SESSIONS)),
    st.tuples(st.just("delete_user"), tenant, user),
    st.tuples(st.just("users"), tenant),
    st.tuples(st.just("export"), tenant, user),
    # export src, import it as dst (forged: the dump's lines name the other tenant's stored id)
    st.tuples(st.just("import"), tenant, user, user, st.booleans(), st.booleans()),
)


def _other(t: str) -> str:
    return "b" if t == "a" else "a"


def _check_no_leak(t: str, r: httpx.Response, items: dict[int, Item]) -> None:
    """Nothing of the other tenant in a response: no marker of theirs, no item id of theirs."""
    assert f"zz{_other(t)}" not in r.text, r.text
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
        body: Any = r.json()
        listed = body.get("items") if isinstance(body, dict) else None
        for it in listed if isinstance(listed, list) else []:  # (an import report counts them)
            owner = items.get(it["id"])
            assert owner is None or owner.tenant == t, (t, it)
            assert it["user_id"] in USERS
        if isinstance(body, dict) and "from_user_id" in body:  # an import report
            # (from_user_id: the dump's, as the caller sent it; a forged dump names a stored id)
            assert body["user_id"] in USERS and body["from_user_id"].split("\x1f")[-1] in USERS, body
            assert not set(body["ids"].values()) & {i for i, it in items.items() if it.tenant != t}


@given(st.lists(op, min_size=1, max_size=14))
def test_no_cross_tenant_read_write_or_delete(clients: dict[str, httpx.Client], ops: list[tuple[Any, ...]]) -> None:
    items: dict[int, Item] = {}
    for o in ops:
        kind, t = o[0], o[1]
        c = clients[t]
        if kind == "add":
            _, _, u, s, n = o
            texts = [f"note zz{t}{next(_marks)}zz about the garden plan" for _ in range(n)]
            r = c.post("/v1/memories", json={"user_id": u, "session_id": s, "messages": [{"text": x} for x in texts]})
            assert r.status_code == 200, r.text
            for i, x in zip(r.json()["ids"], texts):
                items[i] = Item(t, u, x)
        elif kind == "context":
            r = c.post("/v1/context", json={"user_id": o[2], "query": o[3], "budget": 400})
            assert r.status_code in (200, 404)  # 404: nothing added for this user in this tenant
        elif kind == "search":
            r = c.post(
                "/v1/search",
                json={
                    "user_id": o[2],
                    "query": o[3],
                    "k": 100,
                    "layers": ["archive", "working", "episodic", "semantic", "history"],
                },
            )
            assert r.status_code in (200, 404)
        elif kind == "facts":
            r = c.get(f"/v1/users/{o[2]}/facts", params={"current": "false"})
            assert r.status_code == 200
        elif kind == "end":
            r = c.post("/v1/sessions/end", json={"user_id": o[2], "session_id": o[3]})
            assert r.status_code in (200, 404)
        elif kind == "delete_user":
            r = c.delete(f"/v1/users/{o[2]}")
            assert r.status_code in (200, 404)
            if r.status_code == 200:
                for it in items.values():
                    if it.tenant == t and it.user == o[2]:
                        it.alive = False
        elif kind == "export":
            r = c.get(f"/v1/users/{o[2]}/export")
            assert r.status_code in (200, 404), r.text
            if r.status_code == 200:
                lines = [json.loads(x) for x in r.text.splitlines()]
                assert {ln["user_id"] for ln in lines if "user_id" in ln} == {o[2]}
                turns = {ln["text"] for ln in lines if ln["type"] == "item" and ln["kind"] == "turn"}
                mine = {it.text for it in items.values() if it.tenant == t and it.user == o[2] and it.alive}
                assert mine <= turns, (mine - turns, o)
        elif kind == "import":
            _, _, src, dst, replace, forged = o
            r = c.get(f"/v1/users/{src}/export")
            if r.status_code == 404:
                continue
            body = r.content
            if forged:
                body = body.replace(f'"user_id": "{src}"'.encode(), f'"user_id": "{_other(t)}\\u001f{src}"'.encode())
            params = {"replace": "true"} if replace else {}
            exists = dst in c.get("/v1/users").json()["users"]
            r = c.post(f"/v1/users/{dst}/import", content=body, params=params)
            if exists and not replace:
                assert r.status_code == 409 and r.json()["code"] == "user_exists", r.text
            else:
                assert r.status_code == 200 and r.json()["user_id"] == dst, r.text
                old = {i: it.text for i, it in items.items() if it.tenant == t and it.user == src and it.alive}
                if exists:  # replaced: dst's items are gone (src's were read before)
                    for it in items.values():
                        if it.tenant == t and it.user == dst:
                            it.alive = False
                for k, v in r.json()["ids"].items():
                    if int(k) in old:
                        items[v] = Item(t, dst, old[int(k)])
        elif kind == "users":
            r = c.get("/v1/users")
            # (other tests share the server: more users than these two may be listed)
            assert r.status_code == 200 and not any("\x1f" in x for x in r.json()["users"])
        else:  # an item route on an own, another tenant's, or a guessed id
            which, n = o[2]
            owner = t if which == "own" else _other(t)
            pool = sorted(i for i, it in items.items() if it.tenant == owner)
            iid = n if which == "guess" or not pool else pool[n % len(pool)]
            if which != "guess" and not pool:
                continue
            path = f"/v1/memories/{iid}"
            if kind == "get":
                r = c.get(path)
            elif kind == "history":
                r = c.get(path + "/history")
            elif kind == "patch":
                r = c.patch(path, json={"text": f"patched zz{t}{next(_marks)}zz"})
            else:
                r = c.delete(path)
            mine = items.get(iid)
            if mine is not None and mine.tenant != t:
                assert r.status_code == 404, r.text  # as a missing item's (#45)
            elif mine is not None and mine.alive:
                assert r.status_code == 200, r.text
                if kind == "patch":
                    mine.text = r.json()["text"]
                if kind == "delete":
                    for d in r.json()["ids"]:
                        if d in items:
                            items[d].alive = False
            else:
                assert r.status_code == 404, r.text
        _check_no_leak(t, r, items)
    # every live item is intact for its owner and not found by the other tenant
    for iid, it in items.items():
        r = clients[it.tenant].get(f"/v1/memories/{iid}")
        if it.alive:
            assert r.status_code == 200 and r.json()["text"] == it.text and r.json()["user_id"] == it.user, r.text
        else:
            assert r.status_code == 404
        assert clients[_other(it.tenant)].get(f"/v1/memories/{iid}").status_code == 404
