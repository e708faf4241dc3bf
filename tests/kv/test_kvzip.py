"""KVzip's selection (lamina.kv.KVzip) against a direct numpy reading of its rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina import kv

F32 = np.float32


def _reference(x: np.ndarray, b: int, hkv: int, budgets: str, m: int, gqa: str) -> list[list[int]]:
    """Kept positions per row, from the rule in words: reduce each KV group; every row takes
    its m best (ties: smaller position); then the best of everything else in the model
    (ties: smaller layer, head, position) until b per row on average; or b per row."""
    L, H, S = x.shape
    g = x.reshape(L, hkv, H // hkv, S)
    s = (g.max(2) if gqa == "max" else g.mean(2)).reshape(L * hkv, S).astype(np.float64)
    R = s.shape[0]
    if b >= S:
        return [list(range(S)) for _ in range(R)]
    chosen: set[tuple[int, int]] = set()
    first = b if budgets == "uniform" else min(m, b)
    for r in range(R):
        for j in sorted(range(S), key=lambda j: (-s[r, j], j))[:first]:
            chosen.add((r, j))
    if budgets == "global":
        rest = sorted(((r, j) for r in range(R) for j in range(S) if (r, j) not in chosen), key=lambda t: (-s[t], t))
        chosen.update(rest[: b * R - len(chosen)])
    return [sorted(j for (rr, j) in chosen if rr == r) for r in range(R)]


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 3),
    hkv=st.sampled_from([1, 2]),
    G=st.sampled_from([1, 3]),
    S=st.integers(2, 40),
    frac=st.floats(0.05, 1.2),
    budgets=st.sampled_from(["global", "uniform"]),
    m=st.integers(1, 6),
    gqa=st.sampled_from(["max", "mean"]),
    ties=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_kvzip_matches_reference(L, hkv, G, S, frac, budgets, m, gqa, ties, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, (L, hkv * G, S)).astype(F32) if ties else rng.random((L, hkv * G, S), dtype=F32)
    b = max(1, int(S * frac))
    keep = kv.KVzip(budgets=budgets, min_per_head=m, gqa=gqa).select(x, b, n_kv_heads=hkv)
    want = _reference(x, b, hkv, budgets, m, gqa)
    got = [keep.head(l, h).tolist() for l in range(L) for h in range(hkv)]
    assert got == want
    assert keep.total == min(b, S) * L * hkv  # the model keeps exactly its budget


def test_global_budgets_follow_the_scores():
    # head 0 holds every large score: it keeps more than head 1, which keeps its minimum
    x = np.full((1, 2, 50), 0.01, F32)
    x[0, 0] = np.linspace(1.0, 2.0, 50, dtype=F32)
    keep = kv.KVzip(min_per_head=3).select(x, 20, n_kv_heads=2)
    assert keep.lengths.tolist() == [[37, 3]]
    uni = kv.KVzip(budgets="uniform").select(x, 20, n_kv_heads=2)
    assert uni.lengths.tolist() == [[20, 20]]


def test_kvzip_rejects_bad_input():
    x = np.random.default_rng(0).random((2, 4, 16), dtype=F32)
    with pytest.raises(ValueError, match="budgets"):
        kv.select(x, 4, "kvzip", budgets="layer")
    with pytest.raises(ValueError, match="min_per_head"):
        kv.select(x, 4, "kvzip", min_per_head=0)
    with pytest.raises(TypeError, match="min_per_head"):
        kv.select(x, 4, "kvzip", min_per_head=1.5)
    with pytest.raises(ValueError, match="gqa"):
        kv.select(x, 4, "kvzip", gqa="sum")
    with pytest.raises(ValueError, match=r"\(L, H, S\) reconstruction scores"):
        kv.select(np.ascontiguousarray(x[:, :, None, :]), 4, "kvzip")
