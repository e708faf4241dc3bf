"""lamina.AsyncMemory: the Memory API as coroutines whose work runs off the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

import lamina
from lamina import AsyncMemory, Memory
from memkit import GatedEmbedder


def test_the_event_loop_runs_while_a_call_works() -> None:
    emb = GatedEmbedder()
    emb.gate.set()

    async def main() -> int:
        async with AsyncMemory(None, embedder=emb, max_workers=2) as am:
            await am.add([{"text": "warm up"}], user_id="u", session_id="s")
            emb.gate.clear()
            emb.entered.clear()
            pending = asyncio.ensure_future(am.add([{"text": "held in the embedder"}], user_id="u", session_id="s"))
            ticks = 0
            while not emb.entered.is_set():
                await asyncio.sleep(0.001)
            for _ in range(20):  # the loop keeps running while the add is held on its thread
                await asyncio.sleep(0.001)
                ticks += 1
            assert not pending.done()
            emb.gate.set()
            ids = await pending
            assert (await am.get(ids[0])).text == "held in the embedder"
            return ticks

    assert asyncio.run(main()) == 20


def test_same_results_and_errors_as_memory() -> None:
    async def main() -> None:
        am = await AsyncMemory.open(None, embedder="hashing")
        m = am.memory
        assert isinstance(m, Memory)
        ids = await am.add(
            [{"speaker": "Alice", "text": "My sister is called Ana.", "id": "x"}], user_id="u", session_id="s"
        )
        rep = await am.end_session(user_id="u", session_id="s")
        assert isinstance(rep, lamina.SessionReport) and rep.facts == 1
        assert await am.facts(user_id="u") == m.facts(user_id="u")
        ctx = await am.context("sister", user_id="u", budget=64)
        assert ctx.render() == m.context("sister", user_id="u", budget=64).render() and not ctx.abstain
        assert (await am.stats()).users == 1 and await am.users() == ["u"]
        with pytest.raises(lamina.InvalidInput):
            await am.context("q", user_id="u", budget=0)
        with pytest.raises(lamina.NotFoundError):
            await am.get(ids[0] + 1_000_000)
        await am.flush()
        await am.aclose()
        await am.aclose()  # idempotent
        with pytest.raises(lamina.ClosedError):
            await am.users()

    asyncio.run(main())


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="memory must be"):
        AsyncMemory(memory="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_workers"):
        AsyncMemory(None, embedder="hashing", max_workers=0)


def test_same_signatures_as_memory() -> None:
    """Every public method of Memory is in AsyncMemory with the same parameters (a coroutine)."""
    import inspect

    for name, fn in inspect.getmembers(Memory, inspect.isfunction):
        if name.startswith("_") or name == "close":
            continue
        twin = getattr(AsyncMemory, name)
        assert inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin).parameters.keys() == inspect.signature(fn).parameters.keys(), name
        for p, q in zip(inspect.signature(twin).parameters.values(), inspect.signature(fn).parameters.values()):
            assert (p.kind, p.default) == (q.kind, q.default), (name, p.name)


def test_async_client_reads_and_writes_dumps_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncClient.export_user parses and checks the dump (seconds for a large user), and
    import_user writes the body, on a worker thread: the event loop keeps serving meanwhile."""
    import io
    import json

    import httpx

    import lamina.client.calls as lc  # (where the client reads and writes dumps)
    from lamina.memory.dump.jsonl import export_jsonl

    with Memory(None, embedder="hashing") as mem:
        mem.add([{"text": "I live in Lisbon.", "timestamp": 1_700_000_000}], user_id="u", session_id="s")
        f = io.StringIO()
        export_jsonl(mem, f)
    dump_text = f.getvalue().encode()
    report = {
        "user_id": "v",
        "from_user_id": "u",
        "items": 1,
        "sessions": 1,
        "revisions": 0,
        "notes": 0,
        "links": 0,
        "reembedded": 1,
        "replaced": False,
        "ids": {},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, content=dump_text, headers={"content-type": "application/x-ndjson"})
        return httpx.Response(200, content=json.dumps(report).encode(), headers={"content-type": "application/json"})

    threads: dict[str, int] = {}
    real_read, real_lines = lc.read_dump, lc.dump_lines

    def read_dump(*a: object, **k: object) -> object:
        threads["read_dump"] = threading.get_ident()
        return real_read(*a, **k)  # type: ignore[arg-type]

    def dump_lines(*a: object, **k: object) -> object:
        threads["dump_lines"] = threading.get_ident()
        return real_lines(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(lc, "read_dump", read_dump)
    monkeypatch.setattr(lc, "dump_lines", dump_lines)

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with lamina.AsyncClient("http://lamina.test", transport=httpx.MockTransport(handler)) as c:
            ud = await c.export_user(user_id="u")
            rep = await c.import_user(ud, embedder="hashing", user_id="v")
        assert [it.text for it in ud.items] == ["I live in Lisbon."] and rep.user_id == "v"
        return loop_thread

    loop_thread = asyncio.run(main())
    assert set(threads) == {"read_dump", "dump_lines"}
    assert loop_thread not in threads.values()
