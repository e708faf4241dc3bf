"""pytest-benchmark micro-benchmarks for exact search (not part of the test suite).

    python -m pytest bench/test_bench_search.py --benchmark-only
    python -m pytest bench/test_bench_search.py --benchmark-only -k "100000"   # one size

Sizes: n in {10k, 100k, 1M}, d = 384, batch 1 and 64, k = 10; lamina.topk on a plain matrix,
numpy (GEMM + argpartition) beside it, and arena search with/without a 10% namespace filter.
"""

from __future__ import annotations

import numpy as np
import pytest

import lamina

D = 384
K = 10
SIZES = [10_000, 100_000, 1_000_000]
BATCHES = [1, 64]

_cache: dict[int, tuple[np.ndarray, lamina.VectorArena]] = {}


def data(n: int) -> tuple[np.ndarray, lamina.VectorArena]:
    if n not in _cache:
        _cache.clear()
        rng = np.random.default_rng(n)
        X = rng.standard_normal((n, D), dtype=np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        arena = lamina.VectorArena(D, capacity=n)
        arena.add(X, namespace=(np.arange(n) % 10).astype(np.uint64))
        _cache[n] = (X, arena)
    return _cache[n]


def queries(b: int) -> np.ndarray:
    return np.random.default_rng(b).standard_normal((b, D), dtype=np.float32)


@pytest.fixture(params=[(n, b) for n in SIZES for b in BATCHES], ids=lambda p: f"n={p[0]}-b={p[1]}")
def topk_case(request: pytest.FixtureRequest, benchmark) -> tuple[np.ndarray, np.ndarray]:
    """(X, Q) of one (n, b) case, in that case's benchmark group (lamina and numpy side by side)."""
    n, b = request.param
    benchmark.group = f"topk n={n} b={b}"
    return data(n)[0], queries(b)


def test_topk_lamina(benchmark, topk_case):
    X, Q = topk_case
    s, i = benchmark(lamina.topk, Q, X, K)
    assert i.shape == (len(Q), K)


def test_topk_numpy(benchmark, topk_case):
    X, Q = topk_case

    def run() -> np.ndarray:
        S = Q @ X.T
        return np.argpartition(-S, K - 1, axis=1)[:, :K]

    benchmark(run)


@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("b", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_arena_search(benchmark, n, b, filtered):
    _, arena = data(n)
    Q = queries(b)
    benchmark.group = f"arena n={n} b={b}"
    ns = 3 if filtered else None
    s, i = benchmark(arena.search, Q, K, "ip", ns)
    assert (i >= 0).all()
