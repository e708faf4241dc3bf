"""The admin route that adopts a database's un-namespaced users into a tenant, on a real
``lamina serve`` with API keys: a database written in process shows no users to a tenant until
adopted; the route needs the admin key (404 without one configured, 401 with a wrong one)."""

from __future__ import annotations

from pathlib import Path

import httpx
from servekit import KEY_A, serve_process

from lamina import Memory

ADMIN_KEY = "admin-key-0123456789abcdef0123456789"
T0 = 1_700_000_000.0


def _db(tmp_path: Path) -> str:
    path = str(tmp_path / "inproc.db")
    with Memory(path, embedder="hashing") as m:
        for u in ("ann", "bob"):
            m.add(
                [{"speaker": u.title(), "text": f"I am {u} and I work as a pilot.", "timestamp": T0}],
                user_id=u,
                session_id="s1",
            )
    return path


def test_adopt_over_http(tmp_path: Path) -> None:
    db = _db(tmp_path)
    # no --embedder: the server opens the database with the one it records
    with serve_process(tmp_path, ["--db", db], env_keys=f"a:{KEY_A}", extra_env={"LAMINA_ADMIN_KEY": ADMIN_KEY}) as sp:
        a = {"Authorization": f"Bearer {KEY_A}"}
        assert httpx.get(sp.url + "/v1/users", headers=a).json() == {"users": []}
        url = sp.url + "/v1/admin/tenants/a/adopt"
        assert httpx.post(url, json={}).status_code == 401
        assert httpx.post(url, json={}, headers=a).status_code == 401  # a tenant's key is not the admin key
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        r = httpx.post(url, json={"users": ["ann", "zed"]}, headers=admin)
        assert r.status_code == 404 and "zed" in r.text
        assert httpx.get(sp.url + "/v1/users", headers=a).json() == {"users": []}  # nothing moved
        assert httpx.post(sp.url + "/v1/admin/tenants/bad%20name/adopt", json={}, headers=admin).status_code == 422
        r = httpx.post(url, json={"users": ["ann"]}, headers=admin)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tenant"] == "a" and [u["user_id"] for u in body["users"]] == ["ann"] and body["items"] >= 1
        assert httpx.get(sp.url + "/v1/users", headers=a).json() == {"users": ["ann"]}
        ctx = httpx.post(
            sp.url + "/v1/context", json={"user_id": "ann", "query": "What do I work as, a pilot?"}, headers=a
        )
        assert ctx.status_code == 200 and "pilot" in ctx.text
        r = httpx.post(url, json={}, headers=admin)  # the rest
        assert [u["user_id"] for u in r.json()["users"]] == ["bob"]
        assert httpx.get(sp.url + "/v1/users", headers=a).json() == {"users": ["ann", "bob"]}
        # the report's new ids are the ids the tenant sees; the log says who adopted whom
        new_ids = set(r.json()["users"][0]["ids"].values())
        listed = httpx.get(sp.url + "/v1/users/bob/export", headers=a).text
        assert new_ids and all(str(i) in listed for i in new_ids)
        log = httpx.get(sp.url + "/v1/audit", headers=a).json()
        adopts = [e for e in log["entries"] if e["action"] == "adopt"]
        assert [(e["user_id"], e["who"]) for e in adopts] == [("ann", "admin"), ("bob", "admin")]


def test_admin_routes_are_off_without_an_admin_key(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with serve_process(tmp_path, ["--db", db], env_keys=f"a:{KEY_A}") as sp:
        r = httpx.post(sp.url + "/v1/admin/tenants/a/adopt", json={}, headers={"Authorization": f"Bearer {KEY_A}"})
        assert r.status_code == 404 and "admin" in r.json()["message"]
