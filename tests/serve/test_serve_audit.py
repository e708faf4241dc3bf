"""The audit log (issue 45): a real ``lamina serve`` on SQLite and on PostgreSQL logs each
administrative action of a tenant (delete, delete_user, export, import, a key's use from a new
address) with who, when and from where; the log survives a SIGKILL of the server, reads back in
the order the actions happened, page by page, and each tenant reads only its own."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from servekit import KEY_A, KEY_B, serve_process

from lamina import Memory
from lamina.serve.audit import ACTIONS, entries, record
from lamina.serve.auth import hash_key, key_id

NDJSON = {"content-type": "application/x-ndjson"}


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _log(c: httpx.Client, limit: int) -> list[dict[str, Any]]:
    """The whole log, read ``limit`` entries a page, following ``next``."""
    out: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        r = c.get("/v1/audit", params={"after": after, "limit": limit})
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["entries"]) <= limit
        out += page["entries"]
        after = page["next"]
    assert len(out) == page["total"]
    return out


def _add(c: httpx.Client, user: str, texts: list[str]) -> list[int]:
    body = {"user_id": user, "session_id": "s", "messages": [{"speaker": "u", "text": t} for t in texts]}
    r = c.post("/v1/memories", json=body)
    assert r.status_code == 200, r.text
    ids: list[int] = r.json()["ids"]
    return ids


def test_the_audit_log_survives_sigkill_in_order_and_per_tenant(tmp_path: Path, db: str) -> None:
    args = ["--db", db, "--embedder", "hashing"]
    keys = f"a:{KEY_A},b:{KEY_B}"
    with serve_process(tmp_path, args, env_keys=keys) as sp, _client(sp.url, KEY_A) as a, _client(sp.url, KEY_B) as b:
        ids = _add(a, "alice", ["I moved to Lisbon.", "My cat is Pixel.", "I sail on Sundays."])
        _add(a, "bob", ["bob was here"])
        assert a.delete(f"/v1/memories/{ids[0]}").status_code == 200
        dump = a.get("/v1/users/alice/export")
        assert dump.status_code == 200
        assert a.post("/v1/users/alice2/import", content=dump.content, headers=NDJSON).status_code == 200
        assert a.delete("/v1/users/bob").status_code == 200
        # through a proxy (uvicorn trusts loopback's X-Forwarded-For by default): a new address
        assert a.get("/v1/users", headers={"X-Forwarded-For": "10.9.8.7"}).status_code == 200
        assert a.get("/v1/users", headers={"X-Forwarded-For": "10.9.8.7"}).status_code == 200  # known now
        _add(b, "carol", ["carol's note"])
        assert b.delete("/v1/users/carol").status_code == 200
        assert sp.stop(signal.SIGKILL) == -signal.SIGKILL
    with serve_process(tmp_path, args, env_keys=keys) as sp, _client(sp.url, KEY_A) as a, _client(sp.url, KEY_B) as b:
        log_a = _log(a, limit=2)
        log_b = _log(b, limit=100)
        again = _log(a, limit=1000)  # (the requests after the restart came from known addresses)
        exported = [json.loads(ln) for ln in a.get("/v1/audit/export").text.splitlines()]
    who_a, who_b = key_id(hash_key(KEY_A)), key_id(hash_key(KEY_B))
    assert [(e["action"], e["user_id"], e["item_id"], e["address"]) for e in log_a] == [
        ("new_address", None, None, "127.0.0.1"),
        ("delete", "alice", ids[0], "127.0.0.1"),
        ("export", "alice", None, "127.0.0.1"),
        ("import", "alice2", None, "127.0.0.1"),
        ("delete_user", "bob", None, "127.0.0.1"),
        ("new_address", None, None, "10.9.8.7"),
    ]
    assert again == log_a == exported
    assert [e["seq"] for e in log_a] == list(range(1, 7))
    assert all(x["at"] <= y["at"] for x, y in zip(log_a, log_a[1:]))
    assert {e["who"] for e in log_a} == {who_a} and who_a.startswith("sha256:") and len(who_a) == 23
    assert [(e["action"], e["user_id"], e["who"]) for e in log_b] == [
        ("new_address", None, who_b),
        ("delete_user", "carol", who_b),
    ]
    text = str(log_a) + str(log_b)
    assert KEY_A not in text and KEY_B not in text and hash_key(KEY_A) not in text  # never the key


def test_a_command_appends_with_record_and_bad_entries_are_refused(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder="hashing") as m:
        e = record(m, tenant="acme", action="adopt", who="operator", detail="3 users")
        assert (e.seq, e.action, e.who) == (1, "adopt", "operator")
        with pytest.raises(ValueError, match="not one of"):
            record(m, tenant="acme", action="drop_table", who="operator")
        with pytest.raises(ValueError, match="needs who"):
            record(m, tenant="acme", action="adopt", who="")
        assert set(ACTIONS) >= {"delete", "delete_user", "export", "import", "adopt"}
    with Memory(tmp_path / "m.db", embedder="hashing") as m:  # committed, and the other tenant's log is empty
        page, total = entries(m, "acme")
        assert total == 1 and page[0].detail == "3 users" and entries(m, "other") == ([], 0)


def test_the_audit_route_checks_its_page_parameters(tmp_path: Path) -> None:
    with (
        serve_process(tmp_path, ["--db", str(tmp_path / "a.db"), "--embedder", "hashing"], env_keys=f"a:{KEY_A}") as sp,
        _client(sp.url, KEY_A) as a,
    ):
        assert a.get("/v1/audit", params={"limit": 0}).status_code == 422
        assert a.get("/v1/audit", params={"limit": 1001}).status_code == 422
        assert a.get("/v1/audit", params={"after": -1}).status_code == 422
        page = a.get("/v1/audit").json()  # (reading it logs nothing but the key's first address)
        assert [e["action"] for e in page["entries"]] == ["new_address"] and page["next"] is None
        assert httpx.get(sp.url + "/v1/audit").status_code == 401
