"""``lamina serve`` and ``lamina keys`` as commands: refusing to expose an unauthenticated
server, keys, graceful shutdown that finishes in-flight writes, several workers on one file."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from servekit import KEY_A, serve_process

from lamina import Memory
from lamina.cli.serve_commands import is_loopback
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.ids import PublicIds
from prockit import lamina_cmd


def _run(*args: str, env_keys: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("LAMINA_API_KEYS", None)
    if env_keys is not None:
        env["LAMINA_API_KEYS"] = env_keys
    return subprocess.run(lamina_cmd(*args), env=env, capture_output=True, text=True, timeout=60, input=stdin)


def test_refuses_a_public_host_without_keys(tmp_path: Path) -> None:
    r = _run("serve", "--db", str(tmp_path / "x.db"), "--host", "0.0.0.0", "--port", "9")
    assert r.returncode == 2 and "refusing to serve 0.0.0.0 without API keys" in r.stderr
    assert not (tmp_path / "x.db").exists()
    r = _run("serve", "--db", str(tmp_path / "x.db"), "--keys", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "cannot read keys file" in r.stderr


def test_a_database_it_cannot_serve_is_one_clear_line(tmp_path: Path) -> None:
    Memory(tmp_path / "h.db", embedder="hashing").close()
    r = _run("serve", "--db", str(tmp_path / "h.db"), "--embedder", "hashing-128", "--port", "9")
    assert r.returncode == 2 and "cannot open" in r.stderr and "embedder='hashing-384'" in r.stderr
    assert "Traceback" not in r.stderr


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("no-such-host.invalid")


def test_keys_commands(tmp_path: Path) -> None:
    r = _run("keys", "hash", "s3cret-s3cret-s3cret")
    assert r.returncode == 0 and r.stdout.strip() == hash_key("s3cret-s3cret-s3cret")
    assert _run("keys", "hash", stdin="s3cret-s3cret-s3cret\n").stdout.strip() == hash_key("s3cret-s3cret-s3cret")
    r = _run("keys", "new", "acme")
    assert r.returncode == 0
    key = r.stderr.splitlines()[-1]
    assert key.startswith("lmn_") and key not in r.stdout
    keys = tmp_path / "keys.toml"
    keys.write_text(r.stdout, encoding="utf-8")  # the printed entry is a valid keys file
    ring = KeyRing.from_sources(keys, env={})
    assert ring.tenant_of(key) == "acme" and ring.tenant_of(key + "x") is None
    assert _run("keys", "new", "bad tenant!").returncode != 0


def test_graceful_shutdown_finishes_in_flight_writes(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    with serve_process(tmp_path, ["--db", str(db), "--embedder", "hashing"], env_keys=f"a:{KEY_A}") as sp:
        hdr = {"Authorization": f"Bearer {KEY_A}"}

        def add(i: int) -> tuple[int, list[int]]:
            body = {"user_id": "g", "session_id": "s", "messages": [{"text": f"write number {i} " * 20}] * 20}
            try:
                r = httpx.post(sp.url + "/v1/memories", json=body, headers=hdr, timeout=30)
            except httpx.TransportError:
                return -1, []
            return r.status_code, r.json().get("ids", []) if r.status_code == 200 else []

        with ThreadPoolExecutor(8) as ex:
            futs = [ex.submit(add, i) for i in range(40)]
            while not any(f.done() for f in futs):
                threading.Event().wait(0.005)
            rc = sp.stop(signal.SIGTERM)
            results = [f.result() for f in futs]
    assert rc == 0, sp.log.read_text()
    assert "stopped (SIGTERM)" in sp.log.read_text()
    done = [ids for status, ids in results if status == 200]
    assert done and all(status in (200, 503, -1) for status, _ in results)
    with Memory(db, embedder="hashing") as m:  # every acknowledged write is there
        pub = PublicIds.of_memory(m)
        for ids in done:
            for i in ids:
                m.get(pub.internal(i))


@pytest.mark.slow
def test_two_workers_share_one_file(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    args = ["--db", str(db), "--embedder", "hashing", "--workers", "2"]
    with serve_process(tmp_path, args, env_keys=f"a:{KEY_A}") as sp:
        with httpx.Client(base_url=sp.url, headers={"Authorization": f"Bearer {KEY_A}"}) as c:
            ids = []
            for i in range(20):  # new connections: the kernel spreads them over both workers
                r = httpx.post(
                    sp.url + "/v1/memories",
                    json={"user_id": "w", "session_id": "s", "messages": [{"text": f"worker note {i}"}]},
                    headers={"Authorization": f"Bearer {KEY_A}"},
                )
                assert r.status_code == 200, r.text
                ids += r.json()["ids"]
            for _ in range(4):  # every worker sees every write (each catches up from the change log)
                hits = httpx.post(
                    sp.url + "/v1/search",
                    json={"user_id": "w", "query": "worker note", "k": 50, "layers": ["archive"]},
                    headers={"Authorization": f"Bearer {KEY_A}"},
                ).json()["items"]
                assert sorted(h["id"] for h in hits) == sorted(ids)
            assert c.get("/readyz").status_code == 200
            # MCP on either worker (stateless: each request on a new connection, any worker)
            hdrs = {"Authorization": f"Bearer {KEY_A}", "Accept": "application/json, text/event-stream"}
            for i in range(6):
                call = {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {
                        "name": "add_memory",
                        "arguments": {
                            "user_id": "w",
                            "session_id": "m",
                            "messages": [{"speaker": "W", "text": f"mcp note {i}"}],
                        },
                    },
                }
                r = httpx.post(sp.url + "/mcp", json=call, headers=hdrs)
                assert r.status_code == 200 and '"isError":false' in r.text.replace(" ", ""), r.text
            for _ in range(4):
                hits = httpx.post(
                    sp.url + "/v1/search",
                    json={"user_id": "w", "query": "mcp note", "k": 50, "layers": ["archive"]},
                    headers={"Authorization": f"Bearer {KEY_A}"},
                ).json()["items"]
                assert sum(h["text"].startswith("mcp note") for h in hits) == 6


@pytest.mark.slow
def test_workers_share_one_postgresql_database(tmp_path: Path, pg_url: str) -> None:
    """``--workers 3`` on PostgreSQL: a write acknowledged by any worker is in the next search on
    any worker (each request on a new connection: the kernel spreads them), and a delete
    acknowledged by one is never served by any afterwards. Each worker keeps one user loaded
    (``--max-loaded-users 1``, handed to the workers with the rest of the configuration), and a
    second user's writes in between evict the first everywhere."""
    args = ["--db", pg_url, "--embedder", "hashing", "--workers", "3", "--max-loaded-users", "1"]
    hdr = {"Authorization": f"Bearer {KEY_A}"}
    with serve_process(tmp_path, args, env_keys=f"a:{KEY_A}") as sp:

        def search() -> list[int]:
            r = httpx.post(
                sp.url + "/v1/search",
                json={"user_id": "w", "query": "worker note", "k": 50, "layers": ["archive"]},
                headers=hdr,
            )
            assert r.status_code == 200, r.text
            return sorted(h["id"] for h in r.json()["items"])

        ids: list[int] = []
        for i in range(12):
            r = httpx.post(
                sp.url + "/v1/memories",
                json={"user_id": "w", "session_id": "s", "messages": [{"text": f"worker note {i}"}]},
                headers=hdr,
            )
            assert r.status_code == 200, r.text
            ids += r.json()["ids"]
            other = httpx.post(
                sp.url + "/v1/memories",
                json={"user_id": "v", "session_id": "s", "messages": [{"text": f"other note {i}"}]},
                headers=hdr,
            )
            assert other.status_code == 200, other.text
            assert search() == sorted(ids)  # read-your-writes on whichever worker answers
        for gone in ids[:4]:
            assert httpx.delete(f"{sp.url}/v1/memories/{gone}", params={"user_id": "w"}, headers=hdr).status_code == 200
            for _ in range(3):
                assert gone not in search()
        assert search() == sorted(ids[4:])
    assert "Traceback" not in sp.log.read_text()
