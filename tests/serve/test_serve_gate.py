"""Bodies are not buffered for anonymous callers, and imports hold a bounded number of bodies:
driven at the ASGI level, so the test sees exactly which bodies were read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lamina import Memory
from lamina.embedders.hashing import Hashing
from lamina.serve import Limits, ServeConfig, create_app
from lamina.serve.auth import KeyRing, hash_key

KEY = "gate-test-key-0123456789"
Receive = Callable[[], Awaitable[dict[str, Any]]]


def _scope(method: str, path: str, key: str | None, chunked: bool = True) -> dict[str, Any]:
    headers = [(b"content-type", b"application/x-ndjson")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if chunked:
        headers.append((b"transfer-encoding", b"chunked"))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


async def _call(app: Any, scope: dict[str, Any], receive: Receive) -> tuple[int, dict[str, Any], dict[str, str]]:
    out: list[dict[str, Any]] = []

    async def send(msg: dict[str, Any]) -> None:
        out.append(msg)

    await app(scope, receive, send)
    start = next(m for m in out if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], json.loads(body), headers


@pytest.fixture()
def mem() -> Any:
    with Memory(None, embedder=Hashing()) as m:
        yield m


@pytest.mark.parametrize("key", [None, "not-a-known-key-at-all"])
@pytest.mark.parametrize("path", ["/v1/users/x/import", "/v1/memories", "/v1/context", "/mcp"])
def test_no_body_is_read_without_a_known_key(mem: Memory, key: str | None, path: str) -> None:
    app = create_app(ServeConfig(db=None, keys=KeyRing({hash_key(KEY): "acme"})), memory=mem)
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"x" * (1 << 20), "more_body": True}

    status, body, headers = asyncio.run(_call(app, _scope("POST", path, key), receive))
    assert status == 401 and body["code"] == "unauthorized" and headers["www-authenticate"] == "Bearer"
    assert reads == 0


def test_open_paths_need_no_key(mem: Memory) -> None:
    app = create_app(ServeConfig(db=None, keys=KeyRing({hash_key(KEY): "acme"})), memory=mem)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    status, body, _ = asyncio.run(_call(app, _scope("GET", "/healthz", None, chunked=False), receive))
    assert status == 200 and body == {"status": "ok"}


def test_imports_hold_at_most_max_imports_bodies(mem: Memory) -> None:
    limits = Limits(max_imports=1, retry_after=3)
    app = create_app(ServeConfig(db=None, keys=KeyRing({hash_key(KEY): "acme"}), limits=limits), memory=mem)

    async def run() -> None:
        arrived = asyncio.Event()
        finish = asyncio.Event()

        async def slow() -> dict[str, Any]:  # the first import's body arrives slowly
            arrived.set()
            await finish.wait()
            return {"type": "http.request", "body": b"not a dump\n", "more_body": False}

        first = asyncio.ensure_future(_call(app, _scope("POST", "/v1/users/a/import", KEY), slow))
        await arrived.wait()
        reads = 0

        async def counted() -> dict[str, Any]:
            nonlocal reads
            reads += 1
            return {"type": "http.request", "body": b"", "more_body": False}

        status, body, headers = await _call(app, _scope("POST", "/v1/users/b/import", KEY), counted)
        assert status == 503 and body["code"] == "overloaded" and "max_imports" in body["message"]
        assert headers["retry-after"] == "3" and reads == 0
        finish.set()
        status, body, _ = await first
        assert status == 400 and body["code"] == "bad_dump"
        # the slot is free again
        status, body, _ = await _call(app, _scope("POST", "/v1/users/b/import", KEY), counted)
        assert status == 400 and body["code"] == "bad_dump" and reads == 1

    asyncio.run(run())


def test_max_imports_is_checked() -> None:
    from lamina import InvalidInput

    with pytest.raises(InvalidInput, match="max_imports"):
        Limits(max_imports=0)


def _get(app: Any, path: str, key: str | None) -> tuple[int, bytes]:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    out: list[dict[str, Any]] = []

    async def send(msg: dict[str, Any]) -> None:
        out.append(msg)

    asyncio.run(app(_scope("GET", path, key, chunked=False), receive, send))
    start = next(m for m in out if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")


def test_metrics_need_the_metrics_key_when_keys_are_on(mem: Memory) -> None:
    keys = KeyRing({hash_key(KEY): "acme"})
    mkey = "the-metrics-key-0123456789"
    # keys and no metrics key: /metrics is off (it names every tenant)
    app = create_app(ServeConfig(db=None, keys=keys), memory=mem)
    for key in (None, KEY):
        status, body = _get(app, "/metrics", key)
        assert status == 404 and json.loads(body)["code"] == "not_found" and b"--metrics-key" in body
    # keys and a metrics key: only that key reads it (a tenant's does not)
    app = create_app(ServeConfig(db=None, keys=keys, metrics_key=hash_key(mkey)), memory=mem)
    for key in (None, KEY, mkey + "x"):
        status, body = _get(app, "/metrics", key)
        assert status == 401 and json.loads(body)["code"] == "unauthorized"
    status, body = _get(app, "/metrics", mkey)
    assert status == 200 and b"lamina_users" in body
    # without keys (loopback only): open
    status, body = _get(create_app(ServeConfig(db=None), memory=mem), "/metrics", None)
    assert status == 200 and b"lamina_users" in body


def test_the_metrics_key_travels_to_workers_as_its_hash() -> None:
    from lamina import InvalidInput

    cfg = ServeConfig(db="x.db", keys=KeyRing({hash_key(KEY): "acme"}), metrics_key=hash_key("m" * 20))
    raw = cfg.to_env()
    assert "m" * 20 not in raw and ServeConfig.from_env(raw).metrics_key == hash_key("m" * 20)
    assert ServeConfig.from_env(ServeConfig(db="x.db", max_loaded_users=7).to_env()).max_loaded_users == 7
    assert ServeConfig.from_env(raw).max_loaded_users is None
    with pytest.raises(InvalidInput, match="metrics_key"):
        ServeConfig(db=None, metrics_key="plain-key-not-a-hash")


def test_the_default_import_limit_takes_a_large_users_export() -> None:
    """A user of 40k turns exports to 74 MB (156 MB with vectors): the default must take it back,
    and the CLI's default must be the same; the bodies held are bounded by max_imports."""
    import argparse

    from lamina.cli.serve_commands import add_serve_parsers

    assert Limits().max_import_bytes == 512 << 20 and Limits().max_imports == 2
    p = argparse.ArgumentParser()
    add_serve_parsers(p.add_subparsers())
    args = p.parse_args(["serve", "--db", ":memory:"])
    assert args.max_import_bytes == Limits().max_import_bytes and args.max_imports == Limits().max_imports
