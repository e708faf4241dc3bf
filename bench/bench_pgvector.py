"""Archive search on PostgreSQL (#16): the handle's native arena (exact), its hnswlib graph (the
path past ``MemoryConfig.ann_threshold``) and pgvector's HNSW index in the database (the path
past ``MemoryConfig.pgvector_threshold``), at several archive sizes, on the same vectors and
queries.

Vectors (d = 384, seeded, one user's archive): ``--vectors random``: random unit vectors, the
hard case for HNSW (no structure: every dimension matters); ``--vectors lowrank``: unit vectors
of a random 32-dimensional subspace plus a little noise, MiniLM-like in that sentence embeddings
occupy far fewer directions than their 384 dimensions (no real embedding model is run). Queries:
a stored row plus Gaussian noise, renormalised (cosine ~0.8 to it) — a query near some rows, as
a question about a past turn is.

pgvector goes through lamina's own code: rows written by ``PostgresStore.insert_items`` (COPY,
the vector column beside the bytea), the per-user partial index built by
``PostgresStore.build_archive_index`` after the rows are loaded (bulk build), queries by
``PostgresStore.archive_search`` (one round trip on a unix socket, ``ef_search`` = the
configured ``ann_ef_search`` + 16, as ``lamina.Memory`` asks). Native: ``LayerIndex`` exact
(``exact_search``) and through hnswlib (M 16, ef_construction 100, ef 96, the defaults).
Latencies: median and p99 of one query at a time. Last, 100 more rows are written into the
indexed table (what the index costs each archive row written after it exists). Recall@10: the share of the exact top 10
(float64 numpy) found.

Run: ``python bench/bench_pgvector.py [--sizes 1000,10000,50000] [--queries 200]``; starts
PostgreSQL 16 with pgvector 0.6 from pgserver (``tests/pgkit.py``) unless ``--url`` names one.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lamina  # noqa: E402
from bench_scaleout import postgres  # noqa: E402
from lamina.memory.store.postgres import PostgresStore, archive_index_name  # noqa: E402
from lamina.memory.store.protocol import ITEM_COLUMNS, seq_of  # noqa: E402
from lamina.native.layer_index import LayerIndex  # noqa: E402

DIM = 384
K = 10
USER = "bench"


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make(n: int, n_q: int, seed: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        X = unit(rng.standard_normal((n, DIM)))
    else:  # (a 32-dimensional subspace, fixed across sizes, plus 10 % noise)
        basis = np.random.default_rng(0).standard_normal((32, DIM))
        X = unit(rng.standard_normal((n, 32)) @ basis + 0.1 * np.sqrt(32) * rng.standard_normal((n, DIM)))
    near = X[rng.integers(0, n, n_q)]
    Q = unit(near + 0.04 * rng.standard_normal((n_q, DIM)))
    return X, Q


def exact_top(X: np.ndarray, Q: np.ndarray, k: int) -> list[set[int]]:
    S = Q.astype(np.float64) @ X.astype(np.float64).T
    return [set(np.argsort(-s, kind="stable")[:k].tolist()) for s in S]


def timed(fn: Callable[[np.ndarray], list[int]], Q: np.ndarray) -> tuple[list[float], list[list[int]]]:
    fn(Q[0])  # (warm-up)
    lat, got = [], []
    for q in Q:
        t0 = time.perf_counter()
        ids = fn(q)
        lat.append(time.perf_counter() - t0)
        got.append(ids)
    return lat, got


def summary(lat: list[float], got: list[list[int]], want: list[set[int]], base: int) -> dict[str, float]:
    rec = [len({i - base for i in g[:K]} & w) / K for g, w in zip(got, want)]
    return {
        "p50_ms": round(1e3 * float(np.median(lat)), 3),
        "p99_ms": round(1e3 * float(np.percentile(lat, 99)), 3),
        "recall10": round(float(np.mean(rec)), 4),
    }


def rows(store: PostgresStore, X: np.ndarray) -> Iterator[dict[str, Any]]:
    ids = store.new_ids(len(X))
    for i, x in zip(ids, X):
        r: dict[str, Any] = dict.fromkeys(ITEM_COLUMNS)
        r.update(
            id=i,
            user_id=USER,
            layer="archive",
            kind="turn",
            status="active",
            text="",
            sources=(),
            members=(),
            embedding=x.tobytes(),
            access_count=0,
            interaction_len=1.0,
            strength=1.0,
            commitment="persist",
            depth=0,
            seq=seq_of(i),
        )
        yield r


def run_size(url: str, n: int, n_q: int, seed: int, kind: str) -> dict[str, Any]:
    X, Q = make(n, n_q, seed, kind)
    want = exact_top(X, Q, K)
    out: dict[str, Any] = {"rows": n, "vectors": kind}

    li = LayerIndex(DIM, ann_threshold=10**9)
    ns = 1 << 3 | 3  # (a user's archive namespace)
    li.add(ns, list(range(n)), X)
    lat, got = timed(lambda q: li.exact_search(q, ns, K)[1], Q)
    out["native_exact"] = summary(lat, got, want, 0)

    g = LayerIndex(DIM, ann_threshold=0)
    g.add(ns, list(range(n)), X)
    t0 = time.perf_counter()
    g.search(Q[0], [ns], K)  # (builds the graph)
    out["hnswlib_build_s"] = round(time.perf_counter() - t0, 2)
    lat, got = timed(lambda q: g.search(q, [ns], K)[0][1], Q)
    out["native_hnswlib"] = summary(lat, got, want, 0)

    store = PostgresStore(url)
    assert store.vectors, "the database has no pgvector column (migration 2 did not apply)"
    store.conn.execute(f"DROP INDEX IF EXISTS lamina.{archive_index_name(USER)}")  # (the previous size's)
    with store.tx():
        store.conn.execute("DELETE FROM lamina.items WHERE user_id=%s", (USER,))
    t0 = time.perf_counter()
    all_rows = list(rows(store, X))
    with store.tx():
        store.insert_items(all_rows)
    out["pg_copy_s"] = round(time.perf_counter() - t0, 2)
    base = all_rows[0]["id"]
    store.conn.execute("VACUUM ANALYZE lamina.items")

    def pg(q: np.ndarray) -> list[int]:
        return store.archive_search(USER, q, K + 16, 96 + 16)[1].tolist()

    lat, got = timed(pg, Q)  # (no index: PostgreSQL scans the user's rows exactly)
    out["pgvector_exact_scan"] = summary(lat, got, want, base)
    t0 = time.perf_counter()
    store.build_archive_index(USER, DIM, 16, 100)
    while store.building():
        time.sleep(0.05)
    out["pg_hnsw_build_s"] = round(time.perf_counter() - t0, 2)
    assert store.archive_index_ready(USER), "the index build failed (see the log)"
    plan = "\n".join(
        r[0]
        for r in store.conn.execute(
            "EXPLAIN SELECT id FROM lamina.items WHERE user_id = 'bench' AND layer = 'archive' AND status = 'active'"
            " ORDER BY vec::vector(384) <=> (SELECT vec FROM lamina.items LIMIT 1)::vector(384) LIMIT 26"
        )
    )
    out["pg_plan_uses_hnsw"] = "items_archive_" in plan
    lat, got = timed(pg, Q)
    out["pgvector_hnsw"] = summary(lat, got, want, base)
    # what the index costs a write once it exists: 100 more rows, one transaction
    more = list(rows(store, make(100, 1, seed + 1, kind)[0]))
    t0 = time.perf_counter()
    with store.tx():
        store.insert_items(more)
    out["pg_indexed_insert_ms_per_row"] = round(1e3 * (time.perf_counter() - t0) / len(more), 2)
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--vectors", choices=["random", "lowrank"], default="random")
    ap.add_argument("--url", default=None, help="a PostgreSQL database with pgvector (default: start one)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    info = {"machine": platform.processor() or platform.machine(), "lamina": lamina.build_info()["simd_active"]}
    print(f"# {info}; d = {DIM}, k = {K}, {args.queries} queries per size, {args.vectors} unit vectors")
    results = []
    with postgres(args.url) as url:
        for n in sizes:
            r = run_size(url, n, args.queries, n, args.vectors)
            results.append(r)
            print(json.dumps(r), flush=True)
    print()
    print(
        "| rows | native exact p50 / p99 | hnswlib p50 (recall@10) | pgvector scan p50 | pgvector HNSW p50 / p99 (recall@10) | HNSW build: hnswlib / pgvector |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        ne, nh, ps, ph = r["native_exact"], r["native_hnswlib"], r["pgvector_exact_scan"], r["pgvector_hnsw"]
        print(
            f"| {r['rows']:,} | {ne['p50_ms']} / {ne['p99_ms']} ms | {nh['p50_ms']} ms ({nh['recall10']}) "
            f"| {ps['p50_ms']} ms ({ps['recall10']}) | {ph['p50_ms']} / {ph['p99_ms']} ms ({ph['recall10']}) "
            f"| {r['hnswlib_build_s']} s / {r['pg_hnsw_build_s']} s |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
