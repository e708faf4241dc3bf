"""Exact top-k search: lamina vs numpy, FAISS IndexFlatIP and hnswlib BFIndex, in one run.

For every (n, batch, threads) case each system searches the same data for the same queries
(k = 10, inner product, unit-norm float32 rows). Reported per system: time per batch, queries
per second, achieved GB/s (bytes of the matrix streamed per batch / time) and that as a
fraction of this machine's streaming bandwidth (a large numpy copy, bytes read + written,
measured in the same run), plus lamina's ratio to each peer (> 1: lamina is faster).
Also: lamina's filtered search (a namespace holding 10% of the rows) against its own
unfiltered search.

    python bench/compare_search.py                      # n = 10k, 100k, 1M; batch 1, 64
    python bench/compare_search.py --rows 100000 --out bench/results/search.json
    FAISS_SIMD_LEVEL=AVX2 LAMINA_SIMD=avx2 python bench/compare_search.py --rows 100000 --batches 1 --threads 1
                                                        # both on their AVX2 paths

Peers that are not installed are reported as missing (pip install ".[bench]").
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import blas_threads, machine_facts, print_table, stream_bandwidth, timeit, write_json  # noqa: E402


def numpy_topk(Q: np.ndarray, X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best plain-numpy formulation: one GEMM, argpartition, sort of the k winners."""
    S = Q @ X.T
    idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
    sc = np.take_along_axis(S, idx, axis=1)
    order = np.argsort(-sc, axis=1, kind="stable")
    return np.take_along_axis(sc, order, axis=1), np.take_along_axis(idx, order, axis=1)


def faiss_simd_level() -> str:
    """The instruction set FAISS dispatches to (FAISS >= 1.12 picks it at run time; set
    ``FAISS_SIMD_LEVEL=AVX2`` beside ``LAMINA_SIMD=avx2`` to compare the AVX2 paths of both on
    an AVX-512 machine), or why it is unknown."""
    try:
        import faiss
    except ImportError:
        return "not installed"
    config = getattr(faiss, "SIMDConfig", None)
    if config is None:
        return "unknown (no faiss.SIMDConfig)"
    return str(config.get_level_name())


def build_systems(X: np.ndarray, threads: int) -> dict[str, Callable[[np.ndarray, int], Any]]:
    systems: dict[str, Callable[[np.ndarray, int], Any]] = {}
    t_arg = 1 if threads == 1 else 0
    systems["lamina"] = lambda Q, k: lamina.topk(Q, X, k, "ip", threads=t_arg)
    systems["numpy"] = lambda Q, k: numpy_topk(Q, X, k)
    try:
        import faiss

        index = faiss.IndexFlatIP(X.shape[1])
        index.add(X)

        def faiss_search(Q: np.ndarray, k: int) -> Any:
            faiss.omp_set_num_threads(threads)
            return index.search(Q, k)

        systems["faiss"] = faiss_search
    except ImportError:
        print("faiss not installed: skipped (pip install faiss-cpu)")
    try:
        import hnswlib

        bf = hnswlib.BFIndex(space="ip", dim=X.shape[1])
        bf.init_index(max_elements=X.shape[0])
        bf.add_items(X, np.arange(X.shape[0]))
        systems["hnswlib-bf"] = lambda Q, k: bf.knn_query(Q, k=k, num_threads=threads)
    except ImportError:
        print("hnswlib not installed: skipped (pip install hnswlib)")
    return systems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--min-time", type=float, default=0.4, help="seconds per measurement")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write JSON here")
    args = ap.parse_args(argv)

    facts = machine_facts()
    facts["faiss_simd"] = faiss_simd_level()
    print(
        f"machine: {facts.get('cpu')} x{facts['cpu_count']}, lamina SIMD {facts['lamina']['simd_active']}, "
        f"faiss SIMD {facts['faiss_simd']}"
    )
    bw1 = stream_bandwidth(threads=1)
    bwn = stream_bandwidth(threads=os.cpu_count() or 1)
    print(f"streaming bandwidth (numpy copy, read+write): 1 thread {bw1:.1f} GB/s, all threads {bwn:.1f} GB/s")

    rng = np.random.default_rng(args.seed)
    rows_out: list[dict[str, Any]] = []
    for n in args.rows:
        X = rng.standard_normal((n, args.dim), dtype=np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        nbytes = X.nbytes
        for threads in args.threads:
            bw = bw1 if threads == 1 else bwn
            with blas_threads(threads):
                systems = build_systems(X, threads)
                for b in args.batches:
                    Q = rng.standard_normal((b, args.dim), dtype=np.float32)
                    ref_idx = numpy_topk(Q, X, args.k)[1]
                    times: dict[str, float] = {}
                    for name, fn in systems.items():
                        got = fn(Q, args.k)
                        idx = np.asarray(got[1] if name != "hnswlib-bf" else got[0])
                        agree = float(np.mean([len(set(a) & set(r)) / args.k for a, r in zip(idx, ref_idx)]))
                        t = timeit(partial(fn, Q, args.k), min_time=args.min_time)
                        times[name] = t
                        rows_out.append(
                            {
                                "n": n,
                                "batch": b,
                                "threads": threads,
                                "system": name,
                                "ms": t * 1e3,
                                "qps": b / t,
                                "gbps": nbytes / t / 1e9,
                                "bw_frac": nbytes / t / 1e9 / bw,
                                "recall_vs_numpy": agree,
                            }
                        )
                    for r in rows_out[-len(systems) :]:
                        r["lamina_speedup"] = r["ms"] / (times["lamina"] * 1e3)
        # filtered search: a namespace holding 10% of the rows, vs unfiltered, in one arena
        arena = lamina.VectorArena(args.dim, capacity=n)
        arena.add(X, namespace=(np.arange(n) % 10).astype(np.uint64))
        for b in args.batches:
            Q = rng.standard_normal((b, args.dim), dtype=np.float32)
            for threads in args.threads:
                t_arg = 1 if threads == 1 else 0
                tu = timeit(partial(arena.search, Q, args.k, threads=t_arg), min_time=args.min_time)
                tf = timeit(partial(arena.search, Q, args.k, namespace=3, threads=t_arg), min_time=args.min_time)
                rows_out.append(
                    {
                        "n": n,
                        "batch": b,
                        "threads": threads,
                        "system": "lamina-arena-unfiltered",
                        "ms": tu * 1e3,
                        "qps": b / tu,
                        "gbps": nbytes / tu / 1e9,
                    }
                )
                rows_out.append(
                    {
                        "n": n,
                        "batch": b,
                        "threads": threads,
                        "system": "lamina-arena-ns10%",
                        "ms": tf * 1e3,
                        "qps": b / tf,
                        "filtered_vs_unfiltered_throughput": tu / tf,
                    }
                )
        del X

    print()
    print_table(
        rows_out,
        [
            "n",
            "batch",
            "threads",
            ("system", "system", ">24"),
            ("ms", "ms/batch", ".2f"),
            ("qps", "queries/s", ".1f"),
            ("gbps", "GB/s", ".1f"),
            ("bw_frac", "of stream", ".2f"),
            ("lamina_speedup", "lamina x", ".2f"),
            ("filtered_vs_unfiltered_throughput", "filt/unf", ".2f"),
            ("recall_vs_numpy", "agree", ".2f"),
        ],
    )
    write_json(
        args.out, {"machine": facts, "stream_gbps": {"1": bw1, "all": bwn}, "results": rows_out, "args": vars(args)}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
