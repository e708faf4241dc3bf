"""``lamina serve`` against the same memory in process: throughput and p50 / p99 per route.

N concurrent asyncio clients (default 16 and 64, side by side) ask for contexts and add turns for
a fixed time per phase, first in process (``lamina.AsyncMemory`` on a copy of the database), then
over HTTP (``lamina.AsyncClient`` against a real ``lamina serve`` subprocess on a free port, with
as many workers as the machine has cores by default, on the same SQLite file). The users asked about hold ``--items`` raw turns each
(hashing embedder, sessions of 100 turns, each consolidated). Latency is measured by the client,
around each awaited call, so the HTTP figures include the client's own work (building the
request, parsing the JSON back into ``lamina.Context``): what a Python caller sees. The client
runs on the same cores as the server.

Where a request's time goes (HTTP phases): the server's own ``/metrics`` are read before and
after each phase, from every worker (``lamina_worker{pid}``), and the phase's requests are split
into the server's time per request (``lamina_request_seconds``: from the request's arrival to its
answer), of which the wait for a thread of the work pool (``lamina_queue_seconds``), the memory
call on it (``lamina_call_seconds``) and, for adds, the embedder (``lamina_embed_seconds``, the
write path's embedding); the rest of the client's latency is the client, the connection and the
event loops. The last table sets each route's 64-client row against its 16-client row.

    python bench/bench_serve.py                       # 10k items per user, 16 and 64 clients
    python bench/bench_serve.py --items 2000 --duration 3   # quick

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

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
    mean_ms: float = float("nan")
    #: CPU time per request (ms) of the server's processes and of this (the client's) process:
    #: unlike the wall clock, not moved by other programs on the machine
    server_cpu_ms: float = float("nan")
    client_cpu_ms: float = float("nan")
    #: the server's mean per request (HTTP): total, queue wait, memory call, embedder (ms)
    server: dict[str, float] = field(default_factory=dict)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


async def phase(
    route: str, call: Callable[[int, int], Awaitable[Any]], clients: int, duration: float, server_pid: int | None = None
) -> tuple[int, int, float, list[float], tuple[float, float]]:
    """``clients`` tasks calling ``call(task, i)`` back to back for ``duration`` seconds (after a
    short warm-up); returns (requests, errors, seconds, latencies, (CPU seconds of the server
    ``server_pid`` and of this process) over the measured time)."""
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
    s0 = cpu_seconds(server_pid) if server_pid else float("nan")
    c0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    n, e, lat_now = len(lat), errors, list(lat)
    elapsed = time.perf_counter() - t0
    cpu = ((cpu_seconds(server_pid) if server_pid else float("nan")) - s0, time.process_time() - c0)
    stop = True
    await asyncio.gather(*tasks)
    return n, e, elapsed, lat_now, cpu


_SERVER_SERIES = {
    "request": "lamina_request_seconds",
    "queue": "lamina_queue_seconds",
    "call": "lamina_call_seconds",
    "embed": "lamina_embed_seconds",
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its descendants (Linux ``/proc``; NaN elsewhere)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        stats: dict[int, tuple[int, float]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat", encoding="ascii") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)  # (ppid, utime + stime)
    except (OSError, ValueError):
        return float("nan")
    tree, todo = set[int](), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, (pp, _) in stats.items() if pp == p and c not in tree]
    return sum(stats[p][1] for p in tree if p in stats)


def _scrape_once(url: str) -> tuple[str, dict[str, tuple[float, float]]]:
    """(the answering worker's pid, {series: (sum, count)}) of one ``/metrics`` (a fresh connection)."""
    text = httpx.get(url + "/metrics", timeout=30, headers={"Connection": "close"}).text
    pid, out = "?", dict[str, tuple[float, float]]()
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "lamina_worker":
                pid = smp.labels["pid"]
            for key, name in _SERVER_SERIES.items():
                if smp.name in (name + "_sum", name + "_count") and (
                    key != "request" or smp.labels.get("route", "").startswith(("/v1/context", "/v1/memories"))
                ):
                    s, n = out.get(key + ":" + smp.labels.get("route", ""), (0.0, 0.0))
                    add = smp.value
                    out[key + ":" + smp.labels.get("route", "")] = (
                        (s + add, n) if smp.name.endswith("_sum") else (s, n + add)
                    )
    return pid, out


def scrape(url: str, workers: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Every worker's series (scraped until each of ``workers`` pids answered, or 60 tries)."""
    seen: dict[str, dict[str, tuple[float, float]]] = {}
    for _ in range(60):
        pid, series = _scrape_once(url)
        seen.setdefault(pid, series)
        if len(seen) >= workers:
            break
    return seen


def server_split(
    before: dict[str, dict[str, tuple[float, float]]], after: dict[str, dict[str, tuple[float, float]]], route: str
) -> dict[str, float]:
    """The server's mean ms per request of ``route`` during a phase, summed over the workers."""
    path = "/v1/context" if route == "context" else "/v1/memories"
    tot: dict[str, list[float]] = {}
    for pid, a in after.items():
        b = before.get(pid, {})
        for key, (s, n) in a.items():
            s0, n0 = b.get(key, (0.0, 0.0))
            name, _, r = key.partition(":")
            if name == "request" and r != path:
                continue
            acc = tot.setdefault(name, [0.0, 0.0])
            acc[0] += s - s0
            acc[1] += n - n0
    n_req = tot.get("request", [0.0, 0.0])[1]
    if n_req <= 0:
        return {}
    # per request: the memory calls' and embedder's time over the route's requests
    return {k: 1e3 * v[0] / n_req for k, v in tot.items()} | {"requests": n_req}


async def run_phases(
    api: Any,
    mode: str,
    workers: int,
    args: argparse.Namespace,
    tag: str,
    url: str | None = None,
    server_pid: int | None = None,
) -> list[Row]:
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
            before = await asyncio.to_thread(scrape, url, workers) if url else {}
            n, e, secs, lat, cpu = await phase(route, call, c, args.duration, server_pid)
            after = await asyncio.to_thread(scrape, url, workers) if url else {}
            mean = 1e3 * sum(lat) / len(lat) if lat else float("nan")
            rows.append(Row(route, mode, workers, c, n, e, n / secs, _pct(lat, 0.5), _pct(lat, 0.99), mean))
            r = rows[-1]
            r.server = server_split(before, after, route) if url else {}
            if n:
                r.server_cpu_ms, r.client_cpu_ms = 1e3 * cpu[0] / n, 1e3 * cpu[1] / n
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


async def bench_http(url: str, workers: int, args: argparse.Namespace, server_pid: int) -> list[Row]:
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
        return await run_phases(lambda k: clients[k], "http", workers, args, f"http{workers}", url, server_pid)
    finally:
        for c in clients:
            await c.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=10_000, help="raw turns per user asked about")
    p.add_argument("--users", type=int, default=2)
    p.add_argument("--budget", type=int, default=256, help="context budget (tokens)")
    p.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per phase")
    p.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[os.cpu_count() or 1],
        help="uvicorn workers to bench (default: one per core)",
    )
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
                rows += asyncio.run(bench_http(url, w, args, proc.pid))
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
    http = [r for r in rows if r.mode == "http" and r.server]
    if http:
        print()
        print("where an HTTP request's time goes (means, ms): the server's time from arrival to answer, of it the")
        print("wait for a pool thread, the memory call and the embedder; the rest of the client's mean latency")
        print("and the CPU ms per request of the server's processes and of the client (robust to other load)")
        print(
            f"(ceiling: the req/s {os.cpu_count()} idle cores would serve at that CPU per request, server and client)"
        )
        head = ["client", "server", "queue", "call", "embed", "rest", "srv cpu", "cli cpu", "ceiling"]
        print(f"{'route':<9}{'workers':>8}{'clients':>8}" + "".join(f"{h:>9}" for h in head))
        for r in http:
            sv = r.server
            rest = r.mean_ms - sv.get("request", float("nan"))
            cols = [r.mean_ms, sv.get("request", float("nan")), sv.get("queue", 0.0), sv.get("call", 0.0)]
            ceiling = 1e3 * (os.cpu_count() or 1) / (r.server_cpu_ms + r.client_cpu_ms)
            cols += [sv.get("embed", 0.0), rest, r.server_cpu_ms, r.client_cpu_ms, ceiling]
            print(f"{r.route:<9}{r.workers:>8}{r.clients:>8}" + "".join(f"{x:>9.2f}" for x in cols))
    lo, hi = min(args.clients), max(args.clients)
    if lo != hi:
        print()
        print(f"{hi} clients against {lo} (same route, mode and workers): throughput ratio, p50 and p99")
        for r in rows:
            if r.clients != hi:
                continue
            b16 = next(
                (x for x in rows if (x.route, x.mode, x.workers, x.clients) == (r.route, r.mode, r.workers, lo)), None
            )
            if b16 is None:
                continue
            w = "-" if r.mode == "in-process" else str(r.workers)
            print(
                f"  {r.route:<8}{r.mode:<11}{w:>3} workers: {r.rps / b16.rps:5.2f}x req/s "
                f"({b16.rps:.0f} -> {r.rps:.0f}); p50 {b16.p50_ms:.1f} -> {r.p50_ms:.1f} ms; "
                f"p99 {b16.p99_ms:.1f} -> {r.p99_ms:.1f} ms"
            )
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
