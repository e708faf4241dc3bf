"""The two stores side by side: a SQLite file and a PostgreSQL database (``lamina[postgres]``).

One user with ``--items`` turns (added in batches of ``--batch``, a session ended after each),
then per backend, in one run:

* ``add``: one single-turn ``add`` (a write transaction and its catch-up), p50 / p99;
* ``context warm``: ``context`` on the handle that wrote (nobody else wrote: the version check
  only), p50 / p99;
* ``context after a write elsewhere``: another handle added a turn just before; the reader
  catches up from the change log, then answers, p50 / p99;
* ``cold open``: a new ``Memory`` on the database (it loads every row) plus its first context;
* ``delete``: one turn deleted, with the wipe after it (SQLite: checkpoint and truncate the
  log; PostgreSQL: ``VACUUM`` of the tables a delete touches), p50 / p99 over 20.

PostgreSQL is the server that pgserver ships, started for the run on a unix socket (tests/pgkit.py;
fsync off, as in the tests), or ``--pg-url``. Numbers depend on the machine: run both here.

    python bench/bench_backends.py                 # 2,000 turns
    python bench/bench_backends.py --items 10000 --queries 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lamina import Memory

T0 = 1_683_550_000.0
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
QUERIES = ["Where does she live?", "what about the dog", "golf hotel", "the trip to lima", "november plans"]


def _turn(i: int) -> str:
    w = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8)]
    return f"Line {i}: I talked about {w[0]} and {w[1]} near {w[2]}, then {' '.join(w[3:])}."


def _times(fn: Callable[[int], object], n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def _p(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def run(target: str, items: int, batch: int, queries: int) -> dict[str, tuple[float, float]]:
    res: dict[str, tuple[float, float]] = {}
    with Memory(target, embedder="hashing") as m:
        t = time.perf_counter()
        for b in range(0, items, batch):
            sid = f"s{b // batch}"
            msgs = [
                {"speaker": "Ann", "text": _turn(i), "timestamp": T0 + 60 * i} for i in range(b, min(items, b + batch))
            ]
            m.add(msgs, user_id="u", session_id=sid)
            m.end_session(user_id="u", session_id=sid)
        build = time.perf_counter() - t
        res["build (s, turns/s)"] = (build, items / build)
        now = T0 + 60 * items + 3600
        add = _times(
            lambda i: m.add([{"speaker": "Ann", "text": f"one more line {i}"}], user_id="u", session_id="live"), queries
        )
        res["add"] = (statistics.median(add), _p(add, 0.99))
        warm = _times(lambda i: m.context(QUERIES[i % len(QUERIES)], user_id="u", budget=512, now=now), queries)
        res["context warm"] = (statistics.median(warm), _p(warm, 0.99))
        t = time.perf_counter()
        with Memory(target, embedder="hashing") as other:
            other.context(QUERIES[0], user_id="u", budget=512, now=now)
            res["cold open + first context"] = ((time.perf_counter() - t) * 1e3, float("nan"))
            after: list[float] = []
            for i in range(queries):
                m.add([{"speaker": "Bob", "text": f"elsewhere {i}"}], user_id="u", session_id="live")
                t = time.perf_counter()
                other.context(QUERIES[i % len(QUERIES)], user_id="u", budget=512, now=now)
                after.append((time.perf_counter() - t) * 1e3)
            res["context after a write elsewhere"] = (statistics.median(after), _p(after, 0.99))
        doomed = [h.id for h in m.search("elsewhere", user_id="u", k=20, layers=["archive"])]
        dele = _times(lambda i: m.delete(doomed[i], user_id="u"), len(doomed))
        res["delete (+ wipe)"] = (statistics.median(dele), _p(dele, 0.99))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--pg-url", default=None, help="an empty PostgreSQL database (default: start pgserver's)")
    args = ap.parse_args()
    cluster = None
    if args.pg_url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from pgkit import start_cluster

        cluster = start_cluster()
        pg_url = cluster.new_database()
    else:
        pg_url = args.pg_url
    try:
        with tempfile.TemporaryDirectory() as d:
            sq = run(str(Path(d) / "bench.db"), args.items, args.batch, args.queries)
        pg = run(pg_url, args.items, args.batch, args.queries)
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"one user, {args.items:,} turns (batches of {args.batch}, a session ended after each); ms unless noted")
    print(f"{'':34s} {'SQLite p50':>11s} {'p99':>8s} {'PostgreSQL p50':>15s} {'p99':>8s} {'PG/SQLite p50':>14s}")
    for k in sq:
        a, b = sq[k], pg[k]
        print(f"{k:34s} {a[0]:11.2f} {a[1]:8.2f} {b[0]:15.2f} {b[1]:8.2f} {b[0] / a[0]:14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
