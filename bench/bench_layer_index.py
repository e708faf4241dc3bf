"""Exact native top-k vs hnswlib on one (user, layer) of Memory's index: where ANN starts to pay.

Rows are hashing embeddings (dim 384) of generated chat turns, as in bench_memory.py; queries are
other turns. For each size: per-query latency of the exact single-threaded search of one
namespace (among a second namespace of the same size, as the archive sits beside other users'),
of hnswlib (M, ef_construction, ef from MemoryConfig defaults), their ratio, recall@k of hnswlib
against exact, and the graph build time per item. MemoryConfig.ann_threshold is chosen from this.

    python bench/bench_layer_index.py
    python bench/bench_layer_index.py --sizes 5000 20000
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time

import numpy as np

import lamina
from lamina import MemoryConfig
from lamina.embedders import get_embedder
from lamina.native.layer_index import LayerIndex

sys.path.insert(0, os.path.dirname(__file__))
from bench_memory import turn  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2_000, 5_000, 10_000, 20_000, 50_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=32)
    args = ap.parse_args()
    c = MemoryConfig()
    emb = get_embedder("hashing")
    info = lamina.build_info()
    print(
        f"lamina {info['version']} | {platform.processor() or platform.machine()} | {os.cpu_count()} cpus | "
        f"SIMD {info['simd_active']} | load {os.getloadavg()[0]:.1f} | M={c.ann_m} efC={c.ann_ef_construction} "
        f"ef={c.ann_ef_search} k={args.k}"
    )
    hdr = ("rows", "exact ms", "hnsw ms", "exact/hnsw", "recall", "build us/row")
    print(("{:>13}" * len(hdr)).format(*hdr))
    rng = random.Random(0)
    for n in args.sizes:
        X = emb.embed([turn(rng, i) for i in range(n)])
        Q = emb.embed([f"where did Ann move {turn(rng, n + i)}" for i in range(args.queries)])
        idx = LayerIndex(
            emb.dim,
            ann_threshold=n - 1,
            ann_m=c.ann_m,
            ann_ef_construction=c.ann_ef_construction,
            ann_ef_search=c.ann_ef_search,
        )
        ns, other = (1 << 3) | 3, (2 << 3) | 3
        idx.add(ns, list(range(1, n + 1)), X)
        idx.add(other, list(range(n + 1, 2 * n + 1)), X[::-1].copy())
        t0 = time.perf_counter()
        exact = [idx.exact_search(q, ns, args.k)[1] for q in Q]
        t_exact = (time.perf_counter() - t0) / len(Q) * 1e3
        t0 = time.perf_counter()
        idx.search(Q[0], [ns], args.k)  # builds the graph
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = [idx.search(q, [ns], args.k)[0][1] for q in Q]
        t_ann = (time.perf_counter() - t0) / len(Q) * 1e3
        recall = float(np.mean([len(set(g) & set(e)) / len(e) for g, e in zip(got, exact)]))
        print(
            f"{n:>13}{t_exact:>13.3f}{t_ann:>13.3f}{t_exact / t_ann:>13.2f}{recall:>13.3f}{build / n * 1e6:>13.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
