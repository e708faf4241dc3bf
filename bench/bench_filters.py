"""Filtered vs unfiltered context latency, side by side in one run (hashing embedder).

One user with ``--items`` turns (added ``--batch`` at a time, a session ended every
``--session`` turns), each with metadata ``category`` (one of 4: a filter on it admits 25%),
``bucket`` (0..99: ``{"bucket": 7}`` admits 1%) and ``priority`` (0..9). The same queries (precomputed
vectors: embedding is not timed) are asked unfiltered and with each filter, interleaved query by
query, so that the machine's load hits every variant alike; context p50 / p99 of each, and the
ratios filtered / unfiltered (the bar: filtered p99 within 1.5x unfiltered). The first call of
each filter (which computes the matching ids, then cached per user version) is reported apart.
Then ``--writes`` rounds of "add one turn, then ask every variant once" (in rotating order): the
context right after a write, when a filter's matching ids are brought up to date by the records
the write touched (``after write`` columns: p50 / p99 and their ratios to unfiltered's).

    python bench/bench_filters.py                     # 100k items
    python bench/bench_filters.py --items 20000 --queries 200
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

import numpy as np

from lamina import Memory

WORDS = (
    "coffee hiking paris berlin garden piano dinner movie weekend trip sister dog cat job office meeting "
    "concert marathon beach mountain recipe book novel train flight museum birthday party gym yoga"
).split()
CATS = ("work", "home", "health", "travel")
FILTERS: dict[str, dict[str, Any]] = {
    "category (25%)": {"category": "work"},
    "bucket (1%)": {"bucket": 7},
    "and/in/gte (15%)": {"and": [{"category": {"in": ["work", "home"]}}, {"priority": {"gte": 7}}]},
}


def fill(m: Memory, n: int, batch: int, session: int, rng: random.Random) -> float:
    """Add ``n`` turns; returns the seconds it took."""
    t0 = time.perf_counter()
    sess = 0
    for start in range(0, n, batch):
        msgs = []
        for i in range(start, min(n, start + batch)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + f" number {i}."
            md = {"category": CATS[i % 4], "bucket": i % 100, "priority": (i // 4) % 10}
            msgs.append(
                {"speaker": "Ann" if i % 2 else "Ben", "text": text, "timestamp": 1.6e9 + 60 * i, "metadata": md}
            )
        m.add(msgs, user_id="u", session_id=f"s{sess}")
        if (start + batch) // session > start // session:
            m.end_session(user_id="u", session_id=f"s{sess}")
            sess += 1
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--session", type=int, default=500)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--writes", type=int, default=60, help="rounds of one add, then every variant once")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with Memory(None, embedder="hashing") as m:
        fill_s = fill(m, args.items, args.batch, args.session, rng)
        queries = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.choice(WORDS)}" for _ in range(args.queries)]
        qv = m.embedder.embed(queries)
        variants: dict[str, dict[str, Any] | None] = {"unfiltered": None, **FILTERS}
        first: dict[str, float] = {}
        for name, f in variants.items():  # warm-up; a filter's first call builds its matching ids
            t0 = time.perf_counter()
            m.context(queries[0], user_id="u", budget=args.budget, query_embedding=qv[0], filters=f)
            first[name] = (time.perf_counter() - t0) * 1e3
        times: dict[str, list[float]] = {name: [] for name in variants}
        sizes: dict[str, list[int]] = {name: [] for name in variants}
        for q, v in zip(queries, qv):
            for name, f in variants.items():
                t0 = time.perf_counter()
                ctx = m.context(q, user_id="u", budget=args.budget, query_embedding=v, filters=f)
                times[name].append((time.perf_counter() - t0) * 1e3)
                sizes[name].append(len(ctx.items))
        after: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for w in range(args.writes):
            i = args.items + w
            md = {"category": CATS[i % 4], "bucket": i % 100, "priority": (i // 4) % 10}
            text = " ".join(rng.choice(WORDS) for _ in range(8)) + f" number {i}."
            m.add([{"speaker": "Ann", "text": text, "timestamp": 1.6e9 + 60 * i, "metadata": md}], user_id="u")
            q, v = queries[w % len(queries)], qv[w % len(queries)]
            for name in names[w % len(names) :] + names[: w % len(names)]:
                t0 = time.perf_counter()
                m.context(q, user_id="u", budget=args.budget, query_embedding=v, filters=variants[name])
                after[name].append((time.perf_counter() - t0) * 1e3)
        stats = m.stats(user_id="u").to_dict()
    base = times["unfiltered"]
    b50, b99 = float(np.percentile(base, 50)), float(np.percentile(base, 99))
    a50, a99 = float(np.percentile(after["unfiltered"], 50)), float(np.percentile(after["unfiltered"], 99))
    rows = []
    print(
        f"{args.items} turns (fill {fill_s:.0f} s; {stats.get('items', '?')} items stored), {args.queries} queries, budget {args.budget}"
    )
    print(
        f"{'variant':<18} {'p50 ms':>8} {'p99 ms':>8} {'p50 x':>7} {'p99 x':>7} {'first ms':>9} {'items':>6}"
        f" {'after write p50 / p99 ms':>25} {'x':>11}"
    )
    for name in variants:
        p50, p99 = float(np.percentile(times[name], 50)), float(np.percentile(times[name], 99))
        row = {
            "variant": name,
            "p50_ms": p50,
            "p99_ms": p99,
            "p50_ratio": p50 / b50,
            "p99_ratio": p99 / b99,
            "first_ms": first[name],
            "mean_items": float(np.mean(sizes[name])),
            "after_write_p50_ms": float(np.percentile(after[name], 50)),
            "after_write_p99_ms": float(np.percentile(after[name], 99)),
        }
        row["after_write_p50_ratio"] = row["after_write_p50_ms"] / a50
        row["after_write_p99_ratio"] = row["after_write_p99_ms"] / a99
        rows.append(row)
        print(
            f"{name:<18} {p50:8.2f} {p99:8.2f} {p50 / b50:7.2f} {p99 / b99:7.2f} {first[name]:9.1f} {row['mean_items']:6.1f}"
            f" {row['after_write_p50_ms']:12.2f} / {row['after_write_p99_ms']:8.2f}"
            f" {row['after_write_p50_ratio']:5.2f} / {row['after_write_p99_ratio']:4.2f}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"items": args.items, "queries": args.queries, "fill_s": fill_s, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
