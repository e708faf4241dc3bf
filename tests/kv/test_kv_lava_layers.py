"""LAVa's per-layer selection core (lamina::kv::lava_layers) and the sampled thresholds of the
selection kernels, against plain numpy references.

lava_layers is LAVa after the scores: global top-k counts per head (ties: smaller (head,
position)), head budgets split by lamina.kv.method.apportion, each row's top k_g (ties: smaller
position) followed by the tail. Rows longer than 2048 entries take the sampled candidate path
(a strided sample sets a threshold, one SIMD pass collects the entries above it, per-row
counts and cuts are taken among those); heavy ties, empty and full layer budgets and a
dominant head push layers onto the fallbacks.
"""

from __future__ import annotations

import numpy as np
import pytest

from lamina import _core
from lamina.kv.method import apportion

F32 = np.float32


def ref_top(row: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best of a row (ties: smaller position), ascending."""
    order = np.lexsort((np.arange(row.size), -row.astype(np.float64)))
    return np.sort(order[:k])


def ref_counts(block: np.ndarray, total: int) -> np.ndarray:
    """Entries of each head among the top `total` of a (H_kv, n) block (ties: flat order)."""
    hkv, n = block.shape
    order = np.lexsort((np.arange(hkv * n), -block.astype(np.float64).ravel()))
    return np.bincount(order[:total] // n, minlength=hkv)


def ref_lava_layers(s, layer_budget, alpha, tail):
    L, hkv, n = s.shape
    counts = np.zeros((L, hkv), np.int64)
    budgets = np.zeros((L, hkv), np.int64)
    rows = []
    for l in range(L):
        b = int(layer_budget[l])
        counts[l] = ref_counts(s[l], hkv * b)
        mixed = (1.0 - alpha) * counts[l] + alpha * float(b)
        budgets[l] = apportion(mixed, hkv * b, n)
        for g in range(hkv):
            rows.append(np.concatenate([ref_top(s[l, g], int(budgets[l, g])), np.arange(n, n + tail)]))
    return counts, budgets, rows


def make_scores(rng, kind, L, hkv, n):
    if kind == "lognormal":
        s = np.exp(rng.standard_normal((L, hkv, n)) * 1.5)
    elif kind == "ties":  # few distinct values: cuts fall inside runs of equal scores
        s = rng.integers(0, 4, (L, hkv, n)).astype(np.float64)
    elif kind == "dominant":  # one head holds most of the layer's mass
        s = np.exp(rng.standard_normal((L, hkv, n)))
        s[:, 0] *= 40.0
    else:  # sharp: the budget is decided by few large entries
        s = np.exp(rng.standard_normal((L, hkv, n)) * 6.0)
    return s.astype(F32)


@pytest.mark.parametrize("kind", ["lognormal", "ties", "dominant", "sharp"])
@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0])
def test_lava_layers_matches_reference(isa, kind, alpha):
    rng = np.random.default_rng(["lognormal", "ties", "dominant", "sharp"].index(kind))
    L, hkv, n, tail = 5, 4, 3000, 5
    s = make_scores(rng, kind, L, hkv, n)
    # small shares take the sampled candidate path, n // 3 and the edges the others
    layer_budget = np.array([n // 30, 0, n, n // 3, n // 50], dtype=np.int64)
    counts_r, budgets_r, rows_r = ref_lava_layers(s, layer_budget, alpha, tail)
    results = [_core.kv_lava_layers(s, layer_budget, alpha, tail, t) for t in (1, 2)]
    for idx, off, counts, budgets in results:
        np.testing.assert_array_equal(counts, counts_r)
        np.testing.assert_array_equal(budgets, budgets_r)
        assert off[0] == 0 and off[-1] == idx.size == L * hkv * tail + hkv * layer_budget.sum()
        for r, ref in enumerate(rows_r):
            np.testing.assert_array_equal(idx[off[r] : off[r + 1]], ref, err_msg=f"row {r}")
    np.testing.assert_array_equal(results[0][0], results[1][0])


@pytest.mark.parametrize("kind", ["lognormal", "ties", "zeros"])
def test_sampled_thresholds_exact(isa, kind):
    """The k-th largest of long rows (the sample brackets it; ranks below and above 64 take
    different selection code) matches a sort, with tie counts."""
    rng = np.random.default_rng(3)
    n = 20000
    if kind == "lognormal":
        x = np.exp(rng.standard_normal(n) * 2.0).astype(F32)
    elif kind == "ties":
        x = rng.integers(0, 6, n).astype(F32)
    else:  # mostly +0.0 and -0.0 (equal), a few positives
        x = np.where(rng.random(n) < 0.5, F32(-0.0), F32(0.0)).astype(F32)
        x[rng.choice(n, 300, replace=False)] = rng.random(300).astype(F32) + F32(1.0)
    srt = np.sort(x.astype(np.float64))[::-1]
    for k in (1, 40, 300, 600, 2500, 5000, n // 2, n - 1, n):
        value, greater, take_equal = _core.kv_kth_largest(x, k)
        assert value == srt[k - 1]
        assert greater == int((x > srt[k - 1]).sum())
        assert greater + take_equal == k
