"""``lamina serve`` against the same memory in process: throughput and p50 / p99 per route.

N concurrent asyncio clients (default 1, 8, 64) ask for contexts and add turns for a fixed time
per phase, first in process (``lamina.AsyncMemory`` on a copy of the database), then over HTTP
(``lamina.AsyncClient`` against a real ``lamina serve`` subprocess on a free port, one worker,
then two workers on the same SQLite file). The users asked about hold ``--items`` raw turns each
(hashing embedder, sessions of 100 turns, each consolidated). Latency is measured by the client,
around each awaited call, so the HTTP figures include the client's own work (building the
request, parsing the JSON back into ``lamina.Context``): what a Python caller sees. The client
runs on the same cores as the server.

    python bench/bench_serve.py                       # 10k items per user, 1/8/64 clients
    python bench/bench_serve.py --items 2000 --duration 1 --workers 1   # quick

Done-when bar (issue 15): context p50 over HTTP within 2 ms of in process at 10k items per user
(1 client), and >= 500 context requests/s with 64 concurrent clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

import lamina
from lamina import AsyncClient, AsyncMemory, Memory

WORDS = (
    "coffee hiking paris berlin garden piano dinner movie weekend trip sister dog cat job office meeting "
    "concert marathon beach mountain recipe book novel train flight museum birthday party gym yoga"
).split()
QUERIES = [
    "where did I move last week",
    "coffee with my sister in paris",
    "the marathon in berlin",
    "piano concert on the weekend",
    "what book am I reading",
    "the trip to the mountain",
    "birthday party at the museum",
    "my dog and the beach",
]
T0 = 1.6e9


def turn(rng: random.Random, i: int) -> str:
    if i % 37 == 0:
        return f"I moved to {rng.choice(['Paris', 'Berlin', 'Oslo', 'Lima', 'Kyoto'])} last week."
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + f" number {i}."


def fill(path: Path, users: int, items: int, session_len: int = 100, seed: int = 0) -> float:
    """Write ``items`` turns for each of ``users`` users (sessions of ``session_len``, each ended)."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    with Memory(path, embedder="hashing") as m:
        for u in range(users):
            for s in range(items // session_len):
                base = s * session_len
                msgs = [
                    {
                        "speaker": "Ann" if i % 2 else "Ben",
                        "text": turn(rng, base + i),
                        "timestamp": T0 + (base + i) * 60,
                    }
                    for i in range(session_len)
                ]
                m.add(msgs, user_id=f"u{u}", session_id=f"s{s}")
                m.end_session(user_id=f"u{u}", session_id=f"s{s}")
    return time.perf_counter() - t0


@dataclass
class Row:
    route: str
    mode: str
    workers: int
    clients: int
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


async def phase(
    route: str, call: Callable[[int, int], Awaitable[Any]], clients: int, duration: float
) -> tuple[int, int, float, list[float]]:
    """``clients`` tasks calling ``call(task, i)`` back to back for ``duration`` seconds (after a
    short warm-up); returns (requests, errors, seconds, latencies)."""
    lat: list[float] = []
    errors = 0
    stop = False

    async def worker(k: int) -> None:
        nonlocal errors
        i = 0
        while not stop:
            t = time.perf_counter()
            try:
                await call(k, i)
            except lamina.LaminaError:
                errors += 1
            lat.append(time.perf_counter() - t)
            i += 1

    tasks = [asyncio.create_task(worker(k)) for k in range(clients)]
    await asyncio.sleep(min(0.3, duration / 4))  # warm-up: connections, caches
    lat.clear()
    errors = 0
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    n, e, lat_now = len(lat), errors, list(lat)
    elapsed = time.perf_counter() - t0
    stop = True
    await asyncio.gather(*tasks)
    return n, e, elapsed, lat_now


async def run_phases(api: Any, mode: str, workers: int, args: argparse.Namespace, tag: str) -> list[Row]:
    rows = []
    users = [f"u{u}" for u in range(args.users)]

    async def context(k: int, i: int) -> Any:
        q = QUERIES[(k + i) % len(QUERIES)]
        return await api(k).context(q, user_id=users[(k + i) % len(users)], budget=args.budget)

    async def add(k: int, i: int) -> Any:
        msg = [
            {"speaker": "Ann", "text": f"note {i} of writer {k}: {WORDS[i % len(WORDS)]} plans", "timestamp": T0 + i}
        ]
        return await api(k).add(msg, user_id=f"writer-{tag}-{k}", session_id="s")

    for route, call in (("context", context), ("add", add)):
        for c in args.clients:
            n, e, secs, lat = await phase(route, call, c, args.duration)
            rows.append(Row(route, mode, workers, c, n, e, n / secs, _pct(lat, 0.5), _pct(lat, 0.99)))
            r = rows[-1]
            print(
                f"  {route:<8}{mode:<11}{workers:>3} workers {c:>3} clients: {r.rps:8.0f} req/s  "
                f"p50 {r.p50_ms:6.2f} ms  p99 {r.p99_ms:7.2f} ms  errors {e}",
                flush=True,
            )
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(db: Path, workers: int, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "lamina", "serve", "--db", str(db)]
    cmd += ["--embedder", "hashing", "--port", str(port), "--workers", str(workers), "--threads", str(threads)]
    env = dict(os.environ)
    env.pop("LAMINA_API_KEYS", None)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"lamina serve exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("lamina serve did not get ready")
        time.sleep(0.1)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr:
        proc.stderr.close()


async def bench_in_process(db: Path, args: argparse.Namespace) -> list[Row]:
    am = await AsyncMemory.open(db, embedder="hashing", max_workers=args.threads)
    try:
        return await run_phases(lambda k: am, "in-process", 0, args, "mem")
    finally:
        await am.aclose()


async def bench_http(url: str, workers: int, args: argparse.Namespace) -> list[Row]:
    # one client (one keep-alive connection) per task, as N separate callers would have; one
    # httpx client pooling 64 connections spends several ms of CPU per request managing its pool
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [AsyncClient(url, limits=one) for _ in range(max(args.clients))]
    try:
        # warm every worker: fresh connections spread over the workers, each loads the users
        # (lazily, from SQLite) on its first request for them
        async def warm(k: int, i: int) -> Any:
            return await clients[k].context(QUERIES[i % len(QUERIES)], user_id=f"u{(k + i) % args.users}", budget=8)

        await phase("warm-up", warm, max(args.clients), 2.0)
        return await run_phases(lambda k: clients[k], "http", workers, args, f"http{workers}")
    finally:
        for c in clients:
            await c.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=10_000, help="raw turns per user asked about")
    p.add_argument("--users", type=int, default=2)
    p.add_argument("--budget", type=int, default=256, help="context budget (tokens)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per phase")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="uvicorn workers to bench")
    p.add_argument("--threads", type=int, default=4, help="memory threads (server and AsyncMemory)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="lamina-bench-serve-"))
    try:
        src = tmp / "src.db"
        print(f"filling {args.users} users x {args.items} turns (hashing embedder) ...", flush=True)
        secs = fill(src, args.users, args.items)
        with Memory(src, embedder="hashing") as m:
            per_user = m.stats(user_id="u0").items
        print(f"  {secs:.1f} s; {per_user} stored items per user (turns and what consolidation derived)", flush=True)
        rows: list[Row] = []
        mem_db = tmp / "mem.db"
        shutil.copy(src, mem_db)
        rows += asyncio.run(bench_in_process(mem_db, args))
        for w in args.workers:
            db = tmp / f"served-{w}.db"
            shutil.copy(src, db)
            proc, url = start_server(db, w, args.threads)
            try:
                rows += asyncio.run(bench_http(url, w, args))
            finally:
                stop_server(proc)
        report(rows, args, per_user)
        if args.json is not None:
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(rows: list[Row], args: argparse.Namespace, per_user: int) -> None:
    print()
    print(
        f"lamina {lamina.__version__} serve bench — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {args.users} users x {args.items} turns ({per_user} items/user), "
        f"budget {args.budget}, {args.duration:g} s per phase"
    )
    print(
        f"{'route':<9}{'mode':<12}{'workers':>8}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'vs in-proc p50':>16}"
    )
    base = {(r.route, r.clients): r for r in rows if r.mode == "in-process"}
    for r in rows:
        b = base.get((r.route, r.clients))
        rel = (
            "" if r.mode == "in-process" or b is None else f"+{r.p50_ms - b.p50_ms:.2f} ms ({r.p50_ms / b.p50_ms:.1f}x)"
        )
        w = "-" if r.mode == "in-process" else str(r.workers)
        print(f"{r.route:<9}{r.mode:<12}{w:>8}{r.clients:>8}{r.rps:>9.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{rel:>16}")
    c1 = [r for r in rows if r.route == "context" and r.clients == min(args.clients)]
    mem1 = next((r for r in c1 if r.mode == "in-process"), None)
    http1 = [r for r in c1 if r.mode == "http"]
    if mem1 is not None and http1:
        best = min(http1, key=lambda r: r.p50_ms)
        d = best.p50_ms - mem1.p50_ms
        print(
            f"context p50 overhead, {mem1.clients} client: +{d:.2f} ms ({'meets' if d <= 2 else 'misses'} the 2 ms bar)"
        )
    top = [r for r in rows if r.route == "context" and r.mode == "http" and r.clients == max(args.clients)]
    if top:
        best = max(top, key=lambda r: r.rps)
        print(
            f"context throughput, {best.clients} clients: {best.rps:.0f} req/s with {best.workers} worker(s) "
            f"({'meets' if best.rps >= 500 else 'misses'} the 500 req/s bar)"
        )


if __name__ == "__main__":
    main()
