"""pytest-benchmark micro-benchmarks of lamina.kv selection (issue 3).

L = 32 layers, H = 8 heads, S in {8k, 32k}, budget 1024 tokens per head, per-position
scores (L, H, S) shaped like window-mean attention. Run explicitly (not part of the test
suite):

    PYTHONPATH=python python -m pytest bench/test_bench_kv.py --benchmark-only

Speed-ups over numpy are measured side by side by ``bench/compare_kv.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from lamina import kv

L, H, BUDGET = 32, 8, 1024
METHODS = ["streaming", "h2o", "snapkv", "adakv", "pyramidkv", "lava"]


@pytest.fixture(scope="module", params=[8192, 32768], ids=lambda s: f"S{s // 1024}k")
def inputs(request):
    S = request.param
    rng = np.random.default_rng(0)
    x = np.exp(rng.standard_normal((L, H, S), dtype=np.float32) * np.float32(1.5))
    x /= x.sum(axis=-1, keepdims=True)
    norms = (rng.random((L, H, S), dtype=np.float32) * 20 + 1).astype(np.float32)
    return x, norms


@pytest.mark.parametrize("method", METHODS)
def test_select(benchmark, inputs, method):
    x, norms = inputs
    vn = norms if method == "lava" else None
    ks = benchmark(kv.select, x, BUDGET, method, value_norms=vn)
    assert ks.total == L * H * BUDGET


def test_compress(benchmark, inputs):
    x, norms = inputs
    S = x.shape[-1]
    keys = np.zeros((L, H, S, 64), dtype=np.float16)
    ks = kv.select(x, BUDGET, "snapkv")
    out = benchmark(kv.compress, keys, keys, ks)
    assert out.keys.shape == (L * H * BUDGET, 64)
