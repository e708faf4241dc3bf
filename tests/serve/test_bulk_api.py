"""The batch and whole-collection routes through ``lamina.Client`` and ``lamina.AsyncClient``
(a real uvicorn server with two tenants' keys): batch add and context give what the single calls
give, ``list_memories`` pages with its cursor, ``delete_memories`` deletes what a filter admits,
``reset`` deletes the caller's tenant only."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import pytest
from servekit import KEY_A, KEY_B, Blocking, serve_in_thread

from lamina import AsyncClient, Client, InvalidInput, Memory
from lamina.serve.app import ServeConfig, create_app
from lamina.serve.auth import KeyRing, hash_key

T0 = 1_683_550_000.0


@pytest.fixture
def url() -> Iterator[str]:
    keys = KeyRing({hash_key(KEY_A): "a", hash_key(KEY_B): "b"})
    with Memory(None, embedder="hashing") as mem:
        app = create_app(ServeConfig(db=None, embedder="hashing", keys=keys, ui=False, mcp=False), memory=mem)
        with serve_in_thread(app) as u:
            yield u


@pytest.fixture(params=["client", "async_client"])
def api(request: pytest.FixtureRequest, url: str) -> Iterator[Any]:
    if request.param == "client":
        with Client(url, KEY_A) as c:
            yield c
        return
    loop = asyncio.new_event_loop()
    try:
        obj = AsyncClient(url, KEY_A)
        yield Blocking(obj, loop)
        loop.run_until_complete(obj.aclose())
    finally:
        loop.close()


def _msgs(n: int, who: str) -> list[dict[str, Any]]:
    return [
        {"speaker": who, "text": f"{who} planted tomato row {i}", "timestamp": T0 + i, "metadata": {"row": i}}
        for i in range(n)
    ]


def test_batches_pages_filtered_deletes_and_tenant_reset(api: Any, url: str) -> None:
    ids = api.add_batch(
        [
            {"messages": _msgs(7, "Ann"), "user_id": "ann", "metadata": {"plot": "north"}},
            {"messages": _msgs(3, "Bo"), "user_id": "bo", "session_id": "s1"},
        ]
    )
    assert [len(x) for x in ids] == [7, 3]
    with Client(url, KEY_B) as other:  # tenant b: a user of its own, untouched by a's reset
        other.add([{"speaker": "Cy", "text": "hello"}], user_id="ann")
        ctxs = api.context_batch(["tomato row", "tomato"], user_ids=["ann", "bo"], filters={"row": {"lte": 2}})
        single = api.context("tomato row", user_id="ann", filters={"row": {"lte": 2}})
        assert [it.id for it in ctxs[0].items] == [it.id for it in single.items]
        assert all(it.metadata["row"] <= 2 for c in ctxs for it in c.items) and ctxs[1].items
        seen, cursor = [], None
        while True:
            page = api.list_memories(user_id="ann", filters={"plot": "north"}, cursor=cursor, limit=3)
            seen += [it.id for it in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
            # the cursor names the public id of the page's last item, never an internal one
            assert base64.urlsafe_b64decode(cursor).endswith(b":%d" % seen[-1])
        assert seen == ids[0]  # (in the order they were stored: public ids have no order of their own)
        rep = api.delete_memories(user_id="ann", filters={"row": {"gte": 5}})
        assert set(ids[0][5:]) <= set(rep.ids)
        assert [it.id for it in api.list_memories(user_id="ann").items] == ids[0][:5]
        with pytest.raises(InvalidInput, match="unknown key 'plt'"):
            api.list_memories(user_id="ann", filters={"plt": "north"})
        gone = api.reset()
        assert gone.deleted == 5 + 3 and api.users() == []
        assert other.users() == ["ann"]
