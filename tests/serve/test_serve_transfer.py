"""Export and import routes of a real ``lamina serve``: a round trip within a tenant, tenant
isolation (no tenant prefix in a dump, no import into another tenant), bad dumps naming line
and field, 404 / 409 / 413, and the import's own body limit."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
from servekit import KEY_A, MAX_BODY, MAX_IMPORT, ServerProc

from lamina.memory.dump.reader import read_dump
from lamina.serve import schemas as S

T0 = 1_683_550_000.0
NDJSON = {"Content-Type": "application/x-ndjson"}
LINES = [
    ("Alice", "My sister is called Ana."),
    ("Bob", "Nice name."),
    ("Alice", "I adopted a grey cat named Pixel last spring."),
    ("Alice", "I moved to Lisbon in March."),
]
QUERIES = ["What is the name of the cat?", "Where does Alice live?", "sister"]


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def _fill(c: httpx.Client, user: str, sessions: int = 2) -> None:
    for j in range(sessions):
        msgs = [
            {"speaker": sp, "text": f"{tx} (day {j})", "id": f"s{j}:{i}", "timestamp": T0 + j * 86400 + 60 * i}
            for i, (sp, tx) in enumerate(LINES)
        ]
        assert (
            c.post("/v1/memories", json={"user_id": user, "session_id": f"s{j}", "messages": msgs}).status_code == 200
        )
        r = c.post("/v1/sessions/end", json={"user_id": user, "session_id": f"s{j}", "now": T0 + j * 86400 + 3600})
        assert r.status_code == 200, r.text
    # an updated item: the dump carries a revision
    ids = c.post("/v1/memories", json={"user_id": user, "session_id": "s9", "messages": [{"text": "zz draft"}]})
    assert c.patch(f"/v1/memories/{ids.json()['ids'][0]}", json={"text": "zz final"}).status_code == 200


def _contexts(c: httpx.Client, user: str) -> list[Any]:
    out = []
    for q in QUERIES:
        r = c.post("/v1/context", json={"user_id": user, "query": q, "budget": 128, "now": T0 + 9 * 86400})
        assert r.status_code == 200, r.text
        d = r.json()
        out.append((d["text"], d["abstain"], [(i["layer"], i["kind"], i["text"], i["score"]) for i in d["items"]]))
    return out


def _export(c: httpx.Client, user: str, **params: str) -> bytes:
    r = c.get(f"/v1/users/{user}/export", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-ndjson"
    return r.content


def _import(c: httpx.Client, user: str, body: bytes, **params: str) -> httpx.Response:
    return c.post(f"/v1/users/{user}/import", content=body, params=params, headers=NDJSON)


def _lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(x) for x in body.splitlines()]


def test_export_import_round_trip_in_a_tenant(a: httpx.Client) -> None:
    src, dst = uid(), uid()
    _fill(a, src)
    body = _export(a, src)
    lines = _lines(body)
    assert [ln["type"] for ln in lines[:2]] == ["header", "user"] and lines[-1]["type"] == "end"
    # the caller's user id, never the stored (tenant-prefixed) one
    assert {ln["user_id"] for ln in lines if "user_id" in ln} == {src}
    assert b"\\u001f" not in body and b"\x1f" not in body
    assert {ln["type"] for ln in lines} >= {"session", "item", "revision", "note", "note_revision", "link"}
    dump = read_dump(body.splitlines(keepends=True))
    before = _contexts(a, src)
    r = _import(a, dst, body)
    assert r.status_code == 200, r.text
    rep = S.ImportReportOut.model_validate(r.json())
    assert (rep.user_id, rep.from_user_id, rep.replaced) == (dst, src, False)
    assert rep.items == len(dump.users[0].items) and rep.revisions == 1 and rep.sessions == 3
    # the copy exports as itself, with the same rows (before a context updates access counts)
    again = _lines(_export(a, dst))
    assert {ln["user_id"] for ln in again if "user_id" in ln} == {dst}
    strip = ("user_id", "id", "members", "parent_id", "superseded_by", "item_id", "created_at", "cause", "src", "dst")
    assert [{k: v for k, v in ln.items() if k not in strip} for ln in again[1:]] == [
        {k: v for k, v in ln.items() if k not in strip} for ln in lines[1:]
    ]
    assert _contexts(a, dst) == before
    assert before[0][2] and not before[0][1]  # (the contexts compared hold items)
    assert dst in a.get("/v1/users").json()["users"]


def test_vectors_true_carries_every_vector(a: httpx.Client) -> None:
    src = uid()
    _fill(a, src, sessions=1)
    plain = _lines(_export(a, src))
    full = _lines(_export(a, src, vectors="true"))
    assert plain[0]["vectors"] == "derived" and full[0]["vectors"] == "all"
    assert any(ln["embedding"] is None for ln in plain if ln["type"] == "item")
    assert all(ln["embedding"] for ln in full if ln["type"] == "item")
    dst = uid()
    body = "".join(json.dumps(ln) + "\n" for ln in full).encode()
    r = _import(a, dst, body)
    assert r.status_code == 200 and r.json()["reembedded"] == 0, r.text
    assert _contexts(a, dst) == _contexts(a, src)


def test_tenants_cannot_reach_each_other(a: httpx.Client, b: httpx.Client) -> None:
    user = uid()
    _fill(a, user, sessions=1)
    body = _export(a, user)
    # b has no such user: its namespace is its own
    r = b.get(f"/v1/users/{user}/export")
    assert r.status_code == 404 and r.json()["code"] == "not_found" and "\x1f" not in r.text
    # b imports a's dump: it lands in b's namespace, a's user is untouched
    assert _import(b, user, body).status_code == 200
    # a dump naming a stored (prefixed) id of another tenant is still imported as the path's user
    forged = body.replace(f'"user_id": "{user}"'.encode(), f'"user_id": "a\\u001f{user}"'.encode())
    assert forged != body
    target = uid()
    r = _import(b, target, forged)
    assert r.status_code == 200 and r.json()["user_id"] == target, r.text
    r = _import(b, user, forged, replace="true")
    assert r.status_code == 200 and r.json()["replaced"] is True
    assert user in b.get("/v1/users").json()["users"] and target not in a.get("/v1/users").json()["users"]
    assert _export(a, user) != b""
    assert _contexts(a, user) == _contexts(b, user)
    # b's replace did not touch a's user: a deletes its own, b's copy stays
    assert a.delete(f"/v1/users/{user}").status_code == 200
    assert b.get(f"/v1/users/{user}/export").status_code == 200
    assert a.get(f"/v1/users/{user}/export").status_code == 404


def test_bad_dumps_are_400_naming_line_and_field(a: httpx.Client) -> None:
    src = uid()
    _fill(a, src, sessions=1)
    lines = _lines(_export(a, src))
    users_before = set(a.get("/v1/users").json()["users"])
    item_no = next(i for i, ln in enumerate(lines) if ln["type"] == "item")

    def body(ls: list[dict[str, Any]]) -> bytes:
        return "".join(json.dumps(ln) + "\n" for ln in ls).encode()

    refused_ids: list[str] = []

    def refused(data: bytes, *needles: str) -> None:
        refused_ids.append(uid())
        r = _import(a, refused_ids[-1], data)
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["code"] == "bad_dump", err
        for n in needles:
            assert n in err["message"], (n, err["message"])

    bad = [dict(ln) for ln in lines]
    bad[item_no]["kind"] = "memo"
    refused(body(bad), f"line {item_no + 1}", "'kind'")
    bad = [dict(ln) for ln in lines]
    bad[item_no]["strength"] = "strong"
    refused(body(bad), f"line {item_no + 1}", "'strength'")
    refused(body(lines)[:-40], "line")  # cut short inside the end line
    refused(body(lines[:-1]), "end line")  # no end line
    refused(b"not json\n", "line 1")
    refused(b"", "line 1")
    two = body(
        lines[:-1]
        + [{**ln, "user_id": "other"} for ln in lines[1:-1]]
        + [{"type": "end", "users": 2, "items": 2 * sum(ln["type"] == "item" for ln in lines)}]
    )
    refused(two, "2 users")
    # values the store or the index would have refused later (500s once): bad dumps too
    vec = [dict(ln) for ln in _lines(_export(a, src, vectors="true"))]
    vec[item_no]["embedding"] = base64.b64encode(np.full(vec[0]["dim"], 3e38, "<f4").tobytes()).decode()
    refused(body(vec), f"line {item_no + 1}", "'embedding'", "squared norm")
    bad = [dict(ln) for ln in lines]
    bad[item_no]["depth"] = 2**70
    refused(body(bad), f"line {item_no + 1}", "'depth'", "64-bit")
    seg_no = next(i for i, ln in enumerate(lines) if ln.get("kind") == "segment")
    bad = [dict(ln) for ln in lines]
    bad[seg_no]["members"] = [*lines[seg_no]["members"], lines[seg_no]["id"]]
    refused(body(bad), f"line {seg_no + 1}", "'members'", "its own member")
    for field in ("last_access", "interaction_len"):
        bad = [dict(ln) for ln in lines]
        bad[item_no][field] = 1e300
        refused(body(bad), f"line {item_no + 1}", repr(field))
    r = a.post(f"/v1/users/{uid()}/import", content=b"\xff\xfe\n", headers=NDJSON)
    assert r.status_code == 400 and "UTF-8" in r.json()["message"]
    # nothing was written by the refused imports (other tests may add users meanwhile: none of these)
    assert not (set(a.get("/v1/users").json()["users"]) - users_before) & set(refused_ids)


def test_existing_user_404_and_413(a: httpx.Client) -> None:
    src = uid()
    _fill(a, src, sessions=1)
    body = _export(a, src)
    r = _import(a, src, body)
    assert r.status_code == 409 and r.json()["code"] == "user_exists" and src in r.json()["message"], r.text
    assert "\x1f" not in r.text
    r = _import(a, src, body, replace="true")
    assert r.status_code == 200 and r.json()["replaced"] is True
    r = a.get(f"/v1/users/{uid()}/export")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    # an import may be larger than max_body_bytes, up to max_import_bytes
    big = uid()
    texts = [f"zz long note {i}: " + "lorem ipsum dolor sit amet " * 20 for i in range(40)]
    r = a.post("/v1/memories", json={"user_id": big, "session_id": "s", "messages": [{"text": t} for t in texts]})
    assert r.status_code == 200, r.text
    dump = _export(a, big, vectors="true")
    assert MAX_BODY < len(dump) < MAX_IMPORT
    assert _import(a, uid(), dump).status_code == 200
    r = a.post("/v1/context", content=b"x" * (MAX_BODY + 1), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "max_body_bytes" in r.json()["message"]
    r = _import(a, uid(), b"x" * (MAX_IMPORT + 1))
    assert r.status_code == 413 and r.json()["code"] == "too_large" and "max_import_bytes" in r.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(MAX_IMPORT // 4096 + 2):
            yield b"y" * 4096

    r = a.post(f"/v1/users/{uid()}/import", content=chunks(), headers=NDJSON)
    assert r.status_code == 413 and "max_import_bytes" in r.json()["message"]


def test_routes_need_a_key(server: ServerProc) -> None:
    with httpx.Client(base_url=server.url) as anon:
        assert anon.get("/v1/users/x/export").status_code == 401
        r = anon.post("/v1/users/x/import", content=b"{}\n", headers=NDJSON)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_odd_user_ids_through_the_client(server: ServerProc) -> None:
    """User ids with '/', spaces, quotes and non-ASCII letters survive the path and the header
    (a line break in a user id does not: no ``/v1/users/{user_id}/...`` route matches it)."""
    import lamina

    src, dst = f'team/ø "{uuid.uuid4().hex[:6]}" X', f"copy/{uuid.uuid4().hex[:6]}/é"
    with lamina.Client(server.url, KEY_A) as c:
        c.add([{"speaker": "Ann", "text": "I live in Oslo."}], user_id=src, session_id="s")
        ud = c.export_user(user_id=src)
        assert ud.user.user_id == src and {it.user_id for it in ud.items} == {src}
        rep = c.import_user(ud, embedder="nope", user_id=dst)
        assert rep.user_id == dst and rep.reembedded == rep.items == 1
        assert c.export_user(user_id=dst).items[0].text == "I live in Oslo."
        r = httpx.get(
            f"{server.url}/v1/users/{src.replace('/', '%2F')}/export", headers={"Authorization": f"Bearer {KEY_A}"}
        )
        assert r.status_code == 200 and r.headers["content-disposition"].startswith('attachment; filename="team_')
