"""Several processes writing one SQLite store: adds per second, errors, and the items found after.

Each process opens its own ``lamina.Memory`` on the same file and adds ``--adds`` turns, one
per ``add`` (users: one shared user, or one per process), ending a session every ``--session``
turns; every write catches up with the others' (the change log). Reported per process count:
wall time, adds per second over all processes, errors, and the turns a fresh handle finds.

    python bench/bench_processes.py                      # 1, 2, 4 processes x 500 adds
    python bench/bench_processes.py --procs 4 --adds 2000 --shared
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from lamina import Memory


def _writer(path: str, worker: int, n: int, shared: bool, session: int, start: Any, ready: Any, out: Any) -> None:
    errors = 0
    user = "shared" if shared else f"user-{worker}"
    with Memory(path, embedder="hashing") as m:
        ready.put(worker)
        start.wait()
        for i in range(n):
            sid = f"w{worker}-s{i // session}"
            try:
                m.add(
                    [{"speaker": f"P{worker}", "text": f"Process {worker} says line {i}."}],
                    user_id=user,
                    session_id=sid,
                )
                if (i + 1) % session == 0:
                    m.end_session(user_id=user, session_id=sid)
            except Exception:  # counted, not raised: the benchmark reports errors
                errors += 1
    out.put(errors)


def run(procs: int, adds: int, shared: bool, session: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "m.db")
        Memory(path, embedder="hashing").close()  # the schema, once
        ctx = mp.get_context("spawn")
        start, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
        workers = [
            ctx.Process(target=_writer, args=(path, w, adds, shared, session, start, ready, out)) for w in range(procs)
        ]
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=120)  # every handle is open
        t0 = time.perf_counter()
        start.set()
        errors = sum(out.get(timeout=1800) for _ in workers)
        wall = time.perf_counter() - t0
        for w in workers:
            w.join()
        with Memory(path, embedder="hashing") as m:
            turns = sum(m.stats(user_id=u).archive_turns for u in m.users())
    return {"procs": procs, "wall_s": wall, "adds_per_s": procs * adds / wall, "errors": errors, "turns": turns}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--adds", type=int, default=500, help="adds per process")
    ap.add_argument("--session", type=int, default=50, help="turns per session (end_session after them)")
    ap.add_argument("--shared", action="store_true", help="all processes write one user")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cpus | hashing embedder | {args.adds} adds per process | shared user: {args.shared}")
    print(f"{'procs':>6}{'wall s':>9}{'adds/s':>9}{'errors':>8}{'turns':>8}{'expected':>10}")
    for p in args.procs:
        r = run(p, args.adds, args.shared, args.session)
        print(
            f"{r['procs']:>6}{r['wall_s']:>9.2f}{r['adds_per_s']:>9.0f}{r['errors']:>8}{r['turns']:>8}"
            f"{p * args.adds:>10}",
            flush=True,
        )


if __name__ == "__main__":
    main()
