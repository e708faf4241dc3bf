"""Rate limits (issue 45) on a real ``lamina serve``: a flood of wrong keys gets 429s past the
failed-authentication budget while a client on another key and address is served; writes past
their budget get 429; both counted in ``/metrics``; keys shorter than 32 characters refused at
start-up; ``lamina keys new``."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from servekit import KEY_A, KEY_B, METRICS_KEY, serve_process

from lamina import InvalidInput
from lamina.serve.auth import MIN_KEY_LEN, KeyRing
from lamina.serve.ratelimit import Buckets, RateLimits, is_write
from prockit import lamina_cmd

AUTH_BUDGET = 20
WRITE_BUDGET = 30


def _counter(text: str, name: str) -> float:
    """A sample's value in a Prometheus text exposition (``name`` with its labels, if any)."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m is not None, (name, text)
    return float(m.group(1))


def test_a_flood_of_wrong_keys_gets_429_and_other_clients_are_served(tmp_path: Path) -> None:
    args = [
        "--db",
        ":memory:",
        "--embedder",
        "hashing",
        "--rate-limit",
        f"auth={AUTH_BUDGET}/1h,writes={WRITE_BUDGET}/1h",  # (an hour: no token comes back during the test)
    ]
    env = {"LAMINA_METRICS_KEY": METRICS_KEY}
    with serve_process(tmp_path, args, env_keys=f"a:{KEY_A},b:{KEY_B}", extra_env=env) as sp:
        legit_statuses: list[int] = []

        async def flood() -> list[int]:
            async with httpx.AsyncClient(base_url=sp.url, limits=httpx.Limits(max_connections=32), timeout=120) as c:
                rs = await asyncio.gather(
                    *(c.get("/v1/users", headers={"Authorization": f"Bearer wrong-key-{i:06d}"}) for i in range(1000))
                )
            return [r.status_code for r in rs]

        async def legit() -> None:
            # tenant b on its own address (127.0.0.2: another client of the same loopback server)
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
            headers = {"Authorization": f"Bearer {KEY_B}"}
            async with httpx.AsyncClient(base_url=sp.url, transport=transport, headers=headers, timeout=60) as c:
                for i in range(20):
                    r = await c.post(
                        "/v1/memories", json={"user_id": "legit", "session_id": "s", "messages": [{"text": f"m{i}"}]}
                    )
                    legit_statuses.append(r.status_code)
                    legit_statuses.append(
                        (await c.post("/v1/search", json={"user_id": "legit", "query": "m"})).status_code
                    )

        async def both() -> list[int]:
            got, _ = await asyncio.gather(flood(), legit())
            return got

        t0 = time.monotonic()
        statuses = asyncio.run(both())
        elapsed = time.monotonic() - t0
        assert statuses.count(401) == AUTH_BUDGET, (statuses.count(401), elapsed)
        assert statuses.count(429) == 1000 - AUTH_BUDGET
        assert legit_statuses == [200] * 40
        # the refused address stays refused, a right key included (no answer tells a guess right)
        r = httpx.get(sp.url + "/v1/users", headers={"Authorization": f"Bearer {KEY_A}"})
        assert r.status_code == 429 and r.json()["code"] == "rate_limited" and int(r.headers["Retry-After"]) >= 1
        assert httpx.get(sp.url + "/healthz").status_code == 200
        # ... and tenant a on another address is served
        with httpx.Client(
            base_url=sp.url,
            transport=httpx.HTTPTransport(local_address="127.0.0.3"),
            headers={"Authorization": f"Bearer {KEY_A}"},
        ) as a:
            assert a.get("/v1/users").status_code == 200
            # writes: WRITE_BUDGET per key and per address, then 429 with Retry-After (reads go on)
            codes = [
                a.post(
                    "/v1/memories", json={"user_id": "w", "session_id": "s", "messages": [{"text": "x"}]}
                ).status_code
                for _ in range(WRITE_BUDGET + 5)
            ]
            assert codes == [200] * WRITE_BUDGET + [429] * 5
            last = a.delete("/v1/users/w")
            assert last.status_code == 429 and last.json()["budget"] == "writes" and "Retry-After" in last.headers
            assert a.post("/v1/search", json={"user_id": "w", "query": "x"}).status_code == 200
        with httpx.Client(
            base_url=sp.url, transport=httpx.HTTPTransport(local_address="127.0.0.4"), timeout=30
        ) as m:  # (/metrics from an address in good standing)
            text = m.get("/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"}).text
        assert _counter(text, 'lamina_rate_limited_total{budget="auth"}') == 1000 - AUTH_BUDGET + 1
        assert _counter(text, 'lamina_rate_limited_total{budget="writes"}') == 6
        assert _counter(text, "lamina_auth_failures_total") == AUTH_BUDGET
        # requests that offer no key (a browser's /favicon.ico) guess nothing: no budget is spent
        with httpx.Client(base_url=sp.url, transport=httpx.HTTPTransport(local_address="127.0.0.5")) as n:
            assert {n.get("/favicon.ico").status_code for _ in range(2 * AUTH_BUDGET)} == {401}
            assert n.get("/v1/users", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 200


def test_rate_limit_spec_and_buckets() -> None:
    assert RateLimits.parse("auth=5/2s,writes=100/1m") == RateLimits(5, 2.0, 100, 60.0)
    assert RateLimits.parse("off") == RateLimits(0, 60.0, 0, 60.0) and not RateLimits.parse("off").enabled
    assert RateLimits.parse(RateLimits(7, 3.5, 9, 1.0).spec()) == RateLimits(7, 3.5, 9, 1.0)
    assert RateLimits.parse("writes=10/1h") == RateLimits(0, 60.0, 10, 3600.0)
    for bad in ("auth=5", "auth=-1/5s", "reads=5/1s", "auth=5/0s", ""):
        with pytest.raises(InvalidInput):
            RateLimits.parse(bad)
    now = [0.0]
    b = Buckets(2, 10.0, clock=lambda: now[0])
    assert b.wait("x") == 0.0
    b.take("x")
    b.take("x")
    assert b.wait("x") == pytest.approx(5.0) and b.wait("y") == 0.0
    now[0] = 5.0
    assert b.wait("x") == 0.0
    small = Buckets(1, 1.0, max_entries=10, clock=lambda: now[0])
    for i in range(100):
        small.take(f"k{i}")
    assert len(small._tokens) <= 10
    assert is_write("POST", "/v1/memories") and is_write("DELETE", "/v1/users/u") and is_write("POST", "/mcp")
    assert not is_write("POST", "/v1/search") and not is_write("GET", "/v1/users") and not is_write("POST", "/ui/login")


def test_configured_keys_need_32_characters(tmp_path: Path) -> None:
    short = "k" * (MIN_KEY_LEN - 1)
    with pytest.raises(InvalidInput, match="LAMINA_API_KEYS: the key of tenant 'a' has 31 characters"):
        KeyRing.from_sources(None, env={"LAMINA_API_KEYS": f"a:{short}"})
    r = subprocess.run(
        lamina_cmd("serve", "--db", ":memory:", "--embedder", "hashing", "--port", "1"),
        env={**_env(), "LAMINA_API_KEYS": f"a:{short}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "LAMINA_API_KEYS" in r.stderr and "at least 32" in r.stderr, r.stderr
    r = subprocess.run(
        lamina_cmd("serve", "--db", ":memory:", "--embedder", "hashing", "--port", "1"),
        env={**_env(), "LAMINA_API_KEYS": f"a:{KEY_A}", "LAMINA_METRICS_KEY": short},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "LAMINA_METRICS_KEY" in r.stderr and "at least 32" in r.stderr, r.stderr
    r = subprocess.run(
        lamina_cmd("serve", "--db", ":memory:", "--rate-limit", "auth=lots"),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "--rate-limit" in r.stderr, r.stderr
    new = subprocess.run(lamina_cmd("keys", "new"), env=_env(), capture_output=True, text=True, timeout=60)
    key = new.stdout.strip()
    assert new.returncode == 0 and len(key) >= MIN_KEY_LEN and "\n" not in key
    assert KeyRing.from_sources(None, env={"LAMINA_API_KEYS": f"t:{key}"}).tenant_of(key) == "t"


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("LAMINA_API_KEYS", None)
    env.pop("LAMINA_METRICS_KEY", None)
    return env
