"""pytest-benchmark micro-benchmarks of lamina.native.kernels at 1M rows (d = 384 for the row updates),
each next to its numpy reference in the same benchmark group.

Collected only when bench/ is named explicitly (testpaths = tests):

    PYTHONPATH=python python -m pytest bench/test_bench_kernels.py --benchmark-group-by=group

Needs ~6 GB of RAM (two 1M x 384 float32 matrices plus numpy's scratch). For ratios and
bandwidth fractions in one table, run bench/compare_kernels.py instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from compare_kernels import (
    np_damped_update,
    np_ema_blend,
    np_evict,
    np_heat,
    np_select_hot,
    np_softmax_gate,
    np_softmax_gate_eps,
)
from lamina.native import kernels as K

pytestmark = pytest.mark.slow

N = 1_000_000
D = 384
NAMESPACES = 10_000


@pytest.fixture(scope="module")
def mats():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((N, D), dtype=np.float32)
    targets = rng.standard_normal((N, D), dtype=np.float32)
    return rows, targets, np.empty_like(rows), np.empty(N, np.float32)


@pytest.fixture(scope="module")
def cols():
    rng = np.random.default_rng(1)
    now = 1.7e9
    visits = rng.integers(0, 100, N).astype(np.int64)
    ilen = rng.integers(1, 20, N).astype(np.int64)
    last = now - rng.uniform(0, 3e7, N)
    heat = K.heat_scores(visits, ilen, last, now)
    ns = rng.integers(0, NAMESPACES, N).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    relevance = rng.standard_normal((N, 3), dtype=np.float32)
    return dict(
        now=now,
        visits=visits,
        ilen=ilen,
        last=last,
        heat=heat,
        ns=ns,
        relevance=relevance,
        thr=float(np.quantile(heat, 0.9)),
    )


@pytest.mark.parametrize(
    ("group", "update", "arg", "options"),
    [
        ("ema_blend 1M x 384", K.ema_blend, 0.9, {}),
        ("ema_blend renormalize 1M x 384", K.ema_blend, 0.9, {"renormalize": True}),
        ("damped_update 1M x 384", K.damped_update, 4.0, {}),
    ],
    ids=["ema_blend", "ema_blend_renorm", "damped_update"],
)
def test_row_update_lamina(benchmark, mats, group, update, arg, options):
    rows, targets, _, drift = mats
    benchmark.group = group
    benchmark(update, rows, targets, arg, out=drift, **options)


@pytest.mark.parametrize(
    ("group", "reference", "arg"),
    [("ema_blend 1M x 384", np_ema_blend, 0.9), ("damped_update 1M x 384", np_damped_update, 4.0)],
    ids=["ema_blend", "damped_update"],
)
def test_row_update_numpy(benchmark, mats, group, reference, arg):
    rows, targets, scratch, _ = mats
    benchmark.group = group
    benchmark(reference, rows, targets, arg, scratch)


@pytest.mark.benchmark(group="softmax_gate 1M x 3")
def test_softmax_gate_lamina(benchmark, cols):
    r = cols["relevance"]
    out = np.empty_like(r)
    benchmark(K.softmax_gate, r, 2.0, out=out)


@pytest.mark.benchmark(group="softmax_gate with max_entropy 1M x 3")
def test_softmax_gate_eps_lamina(benchmark, cols):
    r = cols["relevance"]
    out = np.empty_like(r)
    benchmark(K.softmax_gate, r, 2.0, max_entropy=0.5, out=out)


@pytest.mark.benchmark(group="softmax_gate 1M x 3")
def test_softmax_gate_numpy(benchmark, cols):
    r = cols["relevance"]
    benchmark(np_softmax_gate, r, 2.0, np.empty_like(r))


@pytest.mark.benchmark(group="softmax_gate with max_entropy 1M x 3")
def test_softmax_gate_eps_numpy(benchmark, cols):
    r = cols["relevance"]
    benchmark(np_softmax_gate_eps, r, 2.0, 0.5, 32, np.empty_like(r))


@pytest.mark.benchmark(group="heat_scores 1M")
def test_heat_scores_lamina(benchmark, cols):
    out = np.empty(N, np.float32)
    benchmark(K.heat_scores, cols["visits"], cols["ilen"], cols["last"], cols["now"], out=out)


@pytest.mark.benchmark(group="heat_scores 1M")
def test_heat_scores_numpy(benchmark, cols):
    benchmark(np_heat, cols["visits"], cols["ilen"], cols["last"], cols["now"], 1.0, 1.0, 1.0, 1e7, np.empty(N))


@pytest.mark.benchmark(group="select_hot 1M")
def test_select_hot_lamina(benchmark, cols):
    benchmark(K.select_hot, cols["heat"], cols["thr"], cols["ns"])


@pytest.mark.benchmark(group="select_hot 1M")
def test_select_hot_numpy(benchmark, cols):
    benchmark(np_select_hot, cols["heat"], cols["thr"], cols["ns"])


@pytest.mark.benchmark(group="evict_to_capacity 1M x 10k namespaces")
def test_evict_lamina(benchmark, cols):
    benchmark(K.evict_to_capacity, cols["heat"], cols["ns"], N // NAMESPACES // 2)


@pytest.mark.benchmark(group="evict_to_capacity 1M x 10k namespaces")
def test_evict_numpy(benchmark, cols):
    benchmark(np_evict, cols["heat"], cols["ns"], N // NAMESPACES // 2)
