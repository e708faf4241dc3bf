"""Scale-out: ``lamina serve`` replicas on one PostgreSQL against one server on SQLite.

The same users (``--users`` × ``--items`` raw turns, hashing embedder, sessions of 100 turns,
each ended) are written once to a SQLite file and once to a PostgreSQL database. Then, in one
run: one ``lamina serve`` on the SQLite file, and 1, 2, 3 ``lamina serve`` replicas (one worker
each) on PostgreSQL, with the clients spread round-robin over the replicas (as a load balancer
would). Per setup and route (context, add): requests/s, p50 and p99 as the clients see them
(``lamina.AsyncClient``, one connection each), and each setup's cold first context: a fresh
server's first request for a user it has not loaded. The clients share the machine's cores
with the servers and PostgreSQL, so on a small machine more replicas add contention, not
capacity: read the ratios with ``cpu_count`` in mind.

PostgreSQL: ``--pg URL`` (an empty database), else one is started with pgserver's binaries
(``tests/pgkit.py``, as the tests do; ``pip install 'lamina[postgres]' pgserver==0.1.4``).

    python bench/bench_scaleout.py                          # 2k items per user, 1 / 8 clients
    python bench/bench_scaleout.py --items 10000 --clients 1 8 32 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lamina  # noqa: E402
from bench_serve import QUERIES, Row, fill, phase, run_phases, start_server, stop_server  # noqa: E402
from lamina import AsyncClient  # noqa: E402


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """The URL of an empty PostgreSQL database: ``url``, or one on a server started here."""
    if url:
        yield url
        return
    sys.path.insert(0, str(HERE.parent / "tests"))
    from pgkit import start_cluster

    cluster = start_cluster()
    try:
        yield str(cluster.new_database())
    finally:
        cluster.stop()


async def cold_first_context(url: str, users: int) -> float:
    """ms of a fresh server's first context for a user it has not loaded."""
    async with AsyncClient(url) as c:
        t = time.perf_counter()
        await c.context(QUERIES[0], user_id=f"u{users - 1}", budget=256)
        return (time.perf_counter() - t) * 1e3


async def bench_replicas(urls: list[str], tag: str, args: argparse.Namespace) -> list[Row]:
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [AsyncClient(urls[k % len(urls)], limits=one) for k in range(max(args.clients))]
    try:

        async def warm(k: int, i: int) -> Any:
            return await clients[k].context(QUERIES[i % len(QUERIES)], user_id=f"u{(k + i) % args.users}", budget=8)

        await phase("warm-up", warm, max(args.clients), 2.0)
        return await run_phases(lambda k: clients[k], tag, len(urls), args, tag)
    finally:
        for c in clients:
            await c.aclose()


def run_setup(db: str, replicas: int, tag: str, args: argparse.Namespace) -> tuple[list[Row], float]:
    procs = []
    try:
        procs.append(start_server(Path(db) if "://" not in db else db, 1, args.threads))  # type: ignore[arg-type]
        cold = asyncio.run(cold_first_context(procs[0][1], args.users))
        for _ in range(replicas - 1):
            procs.append(start_server(db, 1, args.threads))  # type: ignore[arg-type]
        print(f"{tag}: {replicas} replica(s), cold first context {cold:.1f} ms", flush=True)
        return asyncio.run(bench_replicas([u for _, u in procs], tag, args)), cold
    finally:
        for p, _ in procs:
            stop_server(p)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--items", type=int, default=2000, help="raw turns per user")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per phase")
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--threads", type=int, default=4, help="memory threads per server")
    p.add_argument("--pg", help="an empty PostgreSQL database's URL (default: start one)")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="lamina-bench-scaleout-"))
    rows: list[Row] = []
    colds: dict[str, float] = {}
    with postgres(args.pg) as pg:
        sqlite = tmp / "served.db"
        t = fill(sqlite, args.users, args.items)
        print(f"filled SQLite: {args.users} users x {args.items} turns in {t:.1f} s", flush=True)
        t = fill(pg, args.users, args.items)  # type: ignore[arg-type]
        print(f"filled PostgreSQL in {t:.1f} s", flush=True)
        r, colds["sqlite"] = run_setup(str(sqlite), 1, "sqlite", args)
        rows += r
        for n in args.replicas:
            r, colds[f"pg x{n}"] = run_setup(pg, n, f"pg x{n}", args)
            rows += r

    print(
        f"\nlamina {lamina.__version__} scale-out — {platform.machine()}, {os.cpu_count()} cores, "
        f"{args.users} users x {args.items} turns, budget {args.budget}, {args.duration:.0f} s per phase"
    )
    print(f"{'route':<8}{'setup':<10}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'x sqlite':>10}")
    base = {(r.route, r.clients): r for r in rows if r.mode == "sqlite"}
    for r in rows:
        b = base.get((r.route, r.clients))
        ratio = r.rps / b.rps if b and b.rps else float("nan")
        print(f"{r.route:<8}{r.mode:<10}{r.clients:>8}{r.rps:>9.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{ratio:>10.2f}")
    print("cold first context (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in colds.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": [asdict(r) for r in rows], "cold_ms": colds}, indent=1))


if __name__ == "__main__":
    main()
