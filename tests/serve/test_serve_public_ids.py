"""Public item ids (issue 45): the service shows a keyed permutation of the internal ids, never
the internal (sequential) ids themselves, consistently over HTTP, MCP and exports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servekit import KEY_A, ServerProc, serve_process

from lamina import Memory
from lamina.errors import NotFoundError
from lamina.serve.ids import ID_BITS, PublicIds

HDR = {"Authorization": f"Bearer {KEY_A}"}


@given(key=st.binary(min_size=32, max_size=32), x=st.integers(1, 2**ID_BITS - 1))
@settings(max_examples=300, deadline=None)
def test_public_ids_are_a_permutation_of_the_id_space(key: bytes, x: int) -> None:
    p = PublicIds(key)
    y = p.public(x)
    assert 0 < y < 2**ID_BITS and p.internal(y) == x


@pytest.mark.parametrize("bad", [0, -1, 2**ID_BITS, 2**63, True, "12"])
def test_a_value_that_is_no_public_id_is_the_unseen_item(bad: object) -> None:
    with pytest.raises(NotFoundError, match="no item of yours has this id"):
        PublicIds(bytes(32)).internal(bad)  # type: ignore[arg-type]


def test_the_key_is_made_once_per_database_and_kept(tmp_path: Path) -> None:
    with Memory(tmp_path / "a.db", embedder="hashing") as m:
        first = PublicIds.of_memory(m).public(12345)
    with Memory(tmp_path / "a.db", embedder="hashing") as m:  # reopened: the same key
        assert PublicIds.of_memory(m).public(12345) == first
    with Memory(tmp_path / "b.db", embedder="hashing") as m:  # another database: another key
        assert PublicIds.of_memory(m).public(12345) != first


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, Path]]:
    tmp = tmp_path_factory.mktemp("pubids")
    db = tmp / "ids.db"
    with serve_process(tmp, ["--db", str(db), "--embedder", "hashing"], env_keys=f"a:{KEY_A}") as sp:
        yield sp, db


def test_consecutive_adds_give_ids_in_no_visible_order(served: tuple[ServerProc, Path]) -> None:
    sp, db = served
    got: list[int] = []
    with httpx.Client(base_url=sp.url, headers=HDR, timeout=30) as c:
        for i in range(120):
            body = {"user_id": "seq", "session_id": "s", "messages": [{"speaker": "u", "text": f"note number {i}"}]}
            r = c.post("/v1/memories", json=body)
            assert r.status_code == 200, r.text
            got += r.json()["ids"]
        items = c.post("/v1/search", json={"user_id": "seq", "query": "note number", "k": 200}).json()["items"]
    # ascending steps: about half of them, as for random numbers (a keyed pseudo-random
    # permutation: outside 30..90 of 119 has probability below 1e-7)
    ups = sum(b > a for a, b in zip(got, got[1:]))
    assert 30 <= ups <= 90, ups
    assert len({b - a for a, b in zip(got, got[1:])}) == len(got) - 1  # no common stride
    with Memory(db, embedder="hashing") as m:
        pub = PublicIds.of_memory(m)
        internal = [pub.internal(i) for i in got]
        assert internal == sorted(internal) and not set(internal) & set(got)  # sequential inside only
        assert [m.get(i).text for i in internal] == [f"note number {i}" for i in range(120)]
        shown = internal + [pub.internal(it["id"]) for it in items]  # (segments too)
    # no internal id in what the routes send: not as an id, not in a turn's sources
    text = json.dumps(items)
    assert {it["id"] for it in items if it["kind"] == "turn"} <= set(got)
    assert not any(str(i) in text for i in shown)


def test_every_item_route_takes_the_public_id_and_exports_carry_public_ids(served: tuple[ServerProc, Path]) -> None:
    sp, db = served
    with httpx.Client(base_url=sp.url, headers=HDR, timeout=30) as c:
        texts = ["I moved to Lisbon in May.", "My sister lives in Porto.", "I moved to Lisbon in May, yes."]
        body = {"user_id": "routes", "session_id": "s", "messages": [{"speaker": "u", "text": t} for t in texts]}
        ids = c.post("/v1/memories", json=body).json()["ids"]
        assert c.get(f"/v1/memories/{ids[0]}").json()["text"] == texts[0]
        assert c.patch(f"/v1/memories/{ids[1]}", json={"text": "My sister lives in Braga."}).json()["id"] == ids[1]
        assert [h["id"] for h in c.get(f"/v1/memories/{ids[1]}/history").json()["items"]] == [ids[1]] * 2
        assert c.get(f"/v1/memories/{ids[0]}/note").json()["note"]["item_id"] == ids[0]
        for link in c.get(f"/v1/memories/{ids[0]}/links").json()["links"]:
            assert link["item_id"] == ids[0] and link["other_id"] in ids
        dump = [json.loads(ln) for ln in c.get("/v1/users/routes/export").text.splitlines()]
        assert {d["id"] for d in dump if "text" in d and "id" in d} == set(ids)
        assert c.delete(f"/v1/memories/{ids[2]}").json() == {"deleted": 1, "ids": [ids[2]]}
        assert c.get(f"/v1/memories/{ids[2]}").status_code == 404
    with Memory(db, embedder="hashing") as m:
        pub = PublicIds.of_memory(m)
        assert m.get(pub.internal(ids[1])).text == "My sister lives in Braga."


def test_mcp_tools_show_and_take_the_http_ids(served: tuple[ServerProc, Path]) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK (lamina[serve]) is not installed")
    httpx2 = pytest.importorskip("httpx2", reason="the MCP SDK's HTTP client")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    sp, _db = served

    async def run() -> tuple[list[int], dict[str, Any]]:
        async with (
            httpx2.AsyncClient(headers=HDR) as http,
            Client(streamable_http_client(f"{sp.url}/mcp", http_client=http), read_timeout_seconds=30) as c,
        ):
            msgs = [{"speaker": "u", "text": "the boat is called Aurora"}, {"speaker": "u", "text": "it is blue"}]
            added = await c.call_tool("add_memory", {"user_id": "mcp", "session_id": "s", "messages": msgs})
            assert isinstance(added.structured_content, dict)
            ids = list(added.structured_content["ids"])
            gone = await c.call_tool("delete_memory", {"user_id": "mcp", "item_id": ids[1]})
            assert isinstance(gone.structured_content, dict)
            return ids, gone.structured_content

    ids, gone = asyncio.run(run())
    assert gone == {"deleted": 1, "ids": [ids[1]]}
    with httpx.Client(base_url=sp.url, headers=HDR, timeout=30) as c:
        assert c.get(f"/v1/memories/{ids[0]}").json()["text"] == "the boat is called Aurora"
        assert c.get(f"/v1/memories/{ids[1]}").status_code == 404
