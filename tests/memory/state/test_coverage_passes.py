"""The neighbour lists' two native row passes (``lamina._core._coverage_nearest`` /
``_coverage_remap``, behind ``TurnNeighbours.nearest`` and ``kill``) against the numpy steps
they replaced, on random lists with free slots, ties and renumbering; and their argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from lamina._core import _coverage_nearest, _coverage_remap

NEG = np.float32(-np.inf)


def _lists(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    I = rng.integers(-1, n, size=(n, k)).astype(np.int64)
    S = np.round(rng.standard_normal((n, k)), 1).astype(np.float32)  # (rounded: many ties)
    S[I < 0] = NEG
    return I, S


def _nearest_numpy(I, S, rows, on, group):  # type: ignore[no-untyped-def]
    Ir = I[rows]
    Ic = np.maximum(Ir, 0)
    ok = (Ir >= 0) & on[Ic] & (group[Ic] != group[rows][:, None])
    val = np.where(ok, S[rows], NEG)
    j = np.argmax(val, axis=1)
    ar = np.arange(len(rows))
    best = val[ar, j]
    return best, np.where(np.isfinite(best), Ir[ar, j], -1)


@pytest.mark.parametrize("seed", range(6))
def test_nearest_is_the_best_qualifying_entry(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 300)), int(rng.integers(1, 12))
    I, S = _lists(rng, n, k)
    on = rng.random(n) < 0.7
    group = rng.integers(0, max(1, n // 3), size=n).astype(np.int64)
    rows = rng.integers(0, n, size=int(rng.integers(0, 2 * n))).astype(np.int64)
    best, where = _coverage_nearest(I, S, rows, on, group)
    want_best, want_where = _nearest_numpy(I, S, rows, on, group)
    assert best.tolist() == want_best.tolist()
    assert where.tolist() == want_where.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_remap_renumbers_and_frees_like_numpy(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(2, 300)), int(rng.integers(1, 12))
    I, S = _lists(rng, n, k)
    kth = rng.standard_normal(n).astype(np.float32)
    remap = np.where(rng.random(n) < 0.2, -1, rng.integers(0, n, size=n)).astype(np.int64)
    m = int(rng.integers(0, n + 1))
    want_I, want_S, want_kth = I.copy(), S.copy(), kth.copy()
    J = np.where(want_I[:m] >= 0, remap[np.maximum(want_I[:m], 0)], -1)
    freed = (J < 0) & (want_I[:m] >= 0)
    want_I[:m] = J
    want_S[:m][freed] = NEG
    want_kth[:m][freed.any(axis=1)] = NEG
    _coverage_remap(I, S, kth, m, remap)
    assert I.tolist() == want_I.tolist()
    assert S.tolist() == want_S.tolist()
    assert kth.tolist() == want_kth.tolist()


def test_bad_arguments_raise_and_write_nothing() -> None:
    rng = np.random.default_rng(7)
    I, S = _lists(rng, 10, 4)
    on = np.ones(10, dtype=bool)
    group = np.arange(10, dtype=np.int64)
    with pytest.raises(IndexError, match="row 10"):
        _coverage_nearest(I, S, np.array([10], dtype=np.int64), on, group)
    with pytest.raises(IndexError, match="lists column 10"):
        bad = I.copy()
        bad[3, 1] = 10
        _coverage_nearest(bad, S, np.array([3], dtype=np.int64), on, group)
    with pytest.raises(TypeError, match="int64"):
        _coverage_nearest(I.astype(np.int32), S, np.array([0], dtype=np.int64), on, group)
    with pytest.raises(ValueError, match="columns"):
        _coverage_nearest(I, S[:, :3].copy(), np.array([0], dtype=np.int64), on, group)
    kth = np.zeros(10, dtype=np.float32)
    before = (I.copy(), S.copy(), kth.copy())
    short = np.arange(5, dtype=np.int64)  # entries name columns 5..9 that it does not cover
    with pytest.raises(IndexError, match="of 5"):
        _coverage_remap(I, S, kth, 10, short)
    assert (I.tolist(), S.tolist(), kth.tolist()) == tuple(a.tolist() for a in before)
    with pytest.raises(ValueError, match="m = 11"):
        _coverage_remap(I, S, kth, 11, np.arange(10, dtype=np.int64))
    with pytest.raises(ValueError, match="writable"):
        ro = I.copy()
        ro.flags.writeable = False
        _coverage_remap(ro, S, kth, 10, np.arange(10, dtype=np.int64))
