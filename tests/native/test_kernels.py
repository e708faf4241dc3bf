"""lamina.native.kernels against plain numpy references of the paper's formulas."""

from __future__ import annotations

import inspect
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lamina
from lamina.native import kernels as K

# ----------------------------------------------------------------------------- references


def ref_softmax(r: np.ndarray, beta: np.ndarray) -> np.ndarray:
    z = beta[:, None] * r.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def ref_entropy(g: np.ndarray) -> np.ndarray:
    g = g.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(g > 0, g * np.log(g), 0.0)
    return -t.sum(axis=1)


def ref_ema(rows, targets, alpha, index=None, renormalize=False):
    rows = rows.astype(np.float64)
    idx = np.arange(len(rows)) if index is None else index
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (len(idx),))[:, None]
    old = rows[idx]
    new = a * old + (1.0 - a) * targets.astype(np.float64)
    if renormalize:  # documented: the float32 blend, then scaled to unit norm
        a32 = a.astype(np.float32)
        new = (a32 * old.astype(np.float32) + (1.0 - a).astype(np.float32) * targets).astype(np.float64)
        nrm = np.linalg.norm(new, axis=1, keepdims=True)
        new = np.where(nrm > 0, new / np.where(nrm > 0, nrm, 1.0), new)
    rows[idx] = new
    return rows, ((new - old) ** 2).sum(axis=1)


def ref_damped(rows, targets, lam, index=None):
    rows = rows.astype(np.float64)
    idx = np.arange(len(rows)) if index is None else index
    lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), (len(idx),))[:, None]
    old = rows[idx]
    new = (targets.astype(np.float64) + lam * old) / (1.0 + lam)
    rows[idx] = new
    return rows, ((new - old) ** 2).sum(axis=1)


def ref_heat(visits, ilen, last, now, a=1.0, b=1.0, c=1.0, mu=1e7):
    v = visits.astype(np.float64)
    L = ilen.astype(np.float64)
    return a * v + b * L + c * np.exp(-(now - last) / mu)


def ref_select_hot(heat, threshold, namespaces=None):
    idx = np.flatnonzero(heat.astype(np.float64) > threshold)
    if namespaces is None:
        return idx
    return idx[np.argsort(namespaces[idx], kind="stable")]


def ref_evict(scores, namespaces, capacity, live=None):
    n = len(scores)
    idx = np.arange(n) if live is None else np.flatnonzero(live)
    # sort by namespace, then score ascending, then index descending (evicted first)
    order = idx[np.lexsort((-idx, scores[idx], namespaces[idx]))]
    out = []
    ns_sorted = namespaces[order]
    uniq, starts, counts = np.unique(ns_sorted, return_index=True, return_counts=True)
    for ns, s, c in zip(uniq, starts, counts):
        cap = capacity.get(int(ns)) if isinstance(capacity, dict) else capacity
        if cap is None or c <= cap:
            continue
        out.extend(order[s : s + c - cap].tolist())
    return np.sort(np.array(out, dtype=np.int64))


# ----------------------------------------------------------------------------- strategies

f32 = st.floats(-1e3, 1e3, width=32, allow_nan=False, allow_infinity=False)


@st.composite
def matrix(draw, max_rows=24, max_cols=24, min_cols=0, elements=f32):
    n = draw(st.integers(0, max_rows))
    d = draw(st.integers(min_cols, max_cols))
    return draw(hnp.arrays(np.float32, (n, d), elements=elements))


@st.composite
def blend_case(draw):
    rows = draw(matrix())
    n, d = rows.shape
    use_index = draw(st.booleans())
    if use_index and n > 0:
        m = draw(st.integers(0, n))
        index = np.array(draw(st.permutations(range(n)))[:m], dtype=np.int64)
    else:
        index, m = None, n
    targets = draw(hnp.arrays(np.float32, (m, d), elements=f32))
    return rows, targets, index


# ----------------------------------------------------------------------------- softmax_gate


@given(
    r=matrix(max_rows=40, max_cols=9, min_cols=1, elements=st.floats(-5, 5, width=32)),
    beta=st.one_of(st.just(0.0), st.floats(-20, 20)),
    per_row=st.booleans(),
)
def test_softmax_gate_matches_numpy(r, beta, per_row):
    b = r.shape[0]
    betas = (np.linspace(-3, 3, b) if per_row else np.full(b, beta)).astype(np.float64)
    g, used = K.softmax_gate(r, betas if per_row else beta)
    assert g.shape == r.shape and g.dtype == np.float32 and used.dtype == np.float64
    np.testing.assert_allclose(g, ref_softmax(r, betas), rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(used, betas)
    if b:
        np.testing.assert_allclose(g.sum(axis=1), 1.0, rtol=1e-5)


def test_softmax_gate_beta_zero_is_uniform_even_for_extreme_values():
    r = np.array([[-3e38, 3e38, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    g, _ = K.softmax_gate(r, 0.0)
    np.testing.assert_array_equal(g, np.full((2, 3), np.float32(1.0) / np.float32(3.0)))


def test_softmax_gate_large_beta_is_one_hot_without_overflow():
    r = np.array([[0.1, 0.9, 0.5]], dtype=np.float32)
    g, _ = K.softmax_gate(r, 1e30)
    np.testing.assert_array_equal(g, [[0.0, 1.0, 0.0]])
    g, _ = K.softmax_gate(r, -1e30)  # negative β favours the least relevant layer
    np.testing.assert_array_equal(g, [[1.0, 0.0, 0.0]])


@given(
    r=matrix(max_rows=30, max_cols=6, min_cols=1, elements=st.floats(-2, 2, width=32)),
    beta=st.floats(0.01, 10),
    eps=st.floats(0.0, 1.5),
    max_doublings=st.integers(0, 40),
)
def test_softmax_gate_entropy_bound(r, beta, eps, max_doublings):
    g, used = K.softmax_gate(r, beta, max_entropy=eps, max_doublings=max_doublings)
    k = np.log2(used / beta)
    np.testing.assert_array_equal(k, np.round(k))  # β_used = β·2^k exactly
    assert ((k >= 0) & (k <= max_doublings)).all()
    np.testing.assert_allclose(g, ref_softmax(r, used), rtol=2e-5, atol=1e-6)
    H = ref_entropy(g)
    done = H <= eps + 1e-5
    assert (done | (k == max_doublings)).all()  # stopped early only when the bound holds
    # minimal: one doubling fewer would not have met the bound
    prev = k > 0
    if prev.any():
        H_prev = ref_entropy(ref_softmax(r[prev], used[prev] / 2))
        assert (H_prev > eps - 1e-5).all()


def test_softmax_gate_ties_stop_at_the_bound():
    r = np.ones((3, 4), dtype=np.float32)  # H = ln 4 for every β
    g, used = K.softmax_gate(r, 1.0, max_entropy=0.5, max_doublings=7)
    np.testing.assert_array_equal(used, 2.0**7)
    np.testing.assert_allclose(g, 0.25)


def test_softmax_gate_out_and_threads():
    rng = np.random.default_rng(0)
    r = rng.standard_normal((70_000, 3)).astype(np.float32)
    out = np.empty_like(r)
    g1, u1 = K.softmax_gate(r, 4.0, max_entropy=0.3, threads=1)
    g2, u2 = K.softmax_gate(r, 4.0, max_entropy=0.3, out=out, threads=2)
    assert g2 is out or np.shares_memory(g2, out)
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(u1, u2)
    np.testing.assert_allclose(g1, ref_softmax(r, u1), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_softmax_gate_large_outputs_match_small_calls(L):
    # Outputs over the streaming threshold (half the last-level cache, at least 8 MiB;
    # LAMINA_GATE_STREAM_BYTES overrides it: see test_softmax_gate_streaming_path) take the
    # streaming-store path (γ written from a shifted, 64-byte aligned tile grid); small calls
    # do not. Same bits either way, for any `out` alignment.
    rng = np.random.default_rng(L)
    n = (8 << 20) // (4 * L + 8) + 1000
    r = rng.standard_normal((n, L)).astype(np.float32)
    r[::5, 1] = r[::5, 0]  # ties
    beta = rng.uniform(0.5, 4.0, n).astype(np.float32)
    beta[::97] = -1.5
    base = np.empty(n * L + 16, np.float32)
    # eps 0.75 > ln 2 - 1e-4: rows tied at the maximum are not sent straight to the cap by the
    # predictor (L = 2, 3) and fill its list, which is then settled in the middle of tasks
    r_tie = r.copy()
    r_tie[::4] = 0.5
    for off, eps, x in ((0, None, r), (1, None, r), (3, 0.4, r), (2, 0.75, r_tie)):
        out = base[off : off + n * L].reshape(n, L)
        b = np.where(beta > 0, beta, 1.0).astype(np.float32) if eps is not None else beta
        g, used = K.softmax_gate(x, b, max_entropy=eps, out=out)
        for lo in range(0, n, 50_000):
            gs, us = K.softmax_gate(x[lo : lo + 50_000], b[lo : lo + 50_000], max_entropy=eps)
            np.testing.assert_array_equal(g[lo : lo + 50_000], gs)
            np.testing.assert_array_equal(used[lo : lo + 50_000], us)
        np.testing.assert_allclose(g, ref_softmax(x, used), rtol=2e-5, atol=1e-6)


def test_softmax_gate_streaming_path():
    # the large-output test with the streaming threshold forced to 8 MiB (on a machine with a
    # large last-level cache the default threshold is far above what a test can allocate)
    import os
    import subprocess
    import sys

    code = (
        f"import sys; sys.path[:0] = [{os.path.dirname(os.path.abspath(__file__))!r}]\n"
        "import test_kernels as t\n"
        "for L in (2, 3, 4):\n"
        "    t.test_softmax_gate_large_outputs_match_small_calls(L)\n"
    )
    env = dict(os.environ, LAMINA_GATE_STREAM_BYTES=str(8 << 20))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def gate_exact(r, beta, eps, max_doublings, predict):
    """softmax_gate with the ε predictor forced on (1) or off (0): an internal switch of
    lamina._core (the public function picks by size; results must not depend on it)."""
    from lamina import _core

    return _core.softmax_gate(r, K._row_param(beta, "beta"), eps, max_doublings, None, 0, predict)


def doubling_oracle(r, beta, eps, max_doublings):
    """The ε bound one doubling at a time: each step asks the kernel (max_doublings=1, the
    predictor off) whether a row's H(γ) at its current β is over ε (it then returns 2β, or β at
    the FLT_MAX/2 cap); the final γ is the plain gate at the β reached. Exact, so the
    multi-round kernel must match it bit for bit."""
    used = np.broadcast_to(np.asarray(beta, np.float64), (len(r),)).copy()
    active = np.arange(len(r))
    for _ in range(max_doublings):
        if active.size == 0:
            break
        _, u1 = gate_exact(r[active], used[active], eps, 1, 0)
        active = active[u1 != used[active]]
        used[active] *= 2
    g, _ = K.softmax_gate(r, used)
    return g, used


@st.composite
def doubling_case(draw):
    L = draw(st.integers(1, 10))  # 1, 2..4 (register path), 5..8, and the generic L
    n = draw(st.integers(1, 80))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # rows scaled by 2^-u: each needs about u more doublings, so the lanes of one vector stop
    # at different rounds (some past the 12 compacted rounds, into the in-register loop)
    r = rng.standard_normal((n, L)) * 2.0 ** -rng.integers(0, 18, (n, 1))
    if draw(st.booleans()):
        r[:: draw(st.integers(2, 5))] = 0.25  # ties: H = ln L at every β, they run to the cap
    beta = rng.uniform(0.05, 4.0, n) if draw(st.booleans()) else draw(st.floats(0.05, 4.0))
    return r.astype(np.float32), beta, draw(st.floats(0.0, 1.2)), draw(st.integers(0, 24))


@given(case=doubling_case())
def test_softmax_gate_doubling_rounds_match_one_at_a_time(case):
    r, beta, eps, max_doublings = case
    g, used = K.softmax_gate(r, beta, max_entropy=eps, max_doublings=max_doublings)
    g_ref, used_ref = doubling_oracle(r, beta, eps, max_doublings)
    np.testing.assert_array_equal(used, used_ref)
    np.testing.assert_array_equal(g, g_ref)
    k = np.log2(used / np.asarray(beta, np.float64))
    assert ((k >= 0) & (k <= max_doublings)).all()


@pytest.mark.parametrize("L", [2, 3, 4, 6])
def test_softmax_gate_doubling_many_tiles(L):
    # more rows than one tile (1024), a ragged end, per-row β, every stopping round mixed
    rng = np.random.default_rng(L)
    n = 2600
    r = (rng.standard_normal((n, L)) * 2.0 ** -rng.integers(0, 16, (n, 1))).astype(np.float32)
    r[::11] = 1.0
    beta = rng.uniform(0.5, 3.0, n)
    for eps, maxd in ((0.5, 32), (0.2, 1), (0.7, 0), (0.05, 40)):
        g, used = K.softmax_gate(r, beta, max_entropy=eps, max_doublings=maxd)
        g_ref, used_ref = doubling_oracle(r, beta, eps, maxd)
        np.testing.assert_array_equal(used, used_ref)
        np.testing.assert_array_equal(g, g_ref)
        np.testing.assert_allclose(g, ref_softmax(r, used), rtol=2e-5, atol=1e-6)
        k = np.round(np.log2(used / beta)).astype(int)
        H = ref_entropy(g)
        assert ((H <= eps + 1e-5) | (k == maxd) | (r[:, :1] == r).all(axis=1)).all()


@st.composite
def predictor_case(draw):
    L = draw(st.sampled_from([2, 3]))
    n = draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    r = rng.standard_normal((n, L))
    kind = draw(st.sampled_from(["plain", "scaled", "ties", "tiny", "huge"]))
    if kind == "scaled":  # rows needing 0 .. ~30 doublings, lanes of a vector stopping apart
        r *= 2.0 ** -rng.integers(0, 30, (n, 1))
    elif kind == "ties":  # ties at the maximum (H >= ln 2 at every β) and constant rows
        r[::3, 1] = r[::3, 0]
        r[::7] = 0.5
    elif kind == "tiny":  # gaps that are subnormal after scaling by β
        r *= 1e-38
    elif kind == "huge":
        r *= 1e37
    if draw(st.booleans()):
        beta = rng.uniform(0.05, 4.0, n)
    else:
        beta = draw(st.sampled_from([1.0, 2.0, 0.3, 1e-30, 3e37, 1.7e38, 2.5e-38]))
    eps = draw(
        st.one_of(
            st.floats(0.0, 1.2),
            st.sampled_from(
                [0.0, 1e-6, np.log(2) - 1e-4, np.log(2), np.log(2) + 1e-4, np.log(3) - 1e-4, np.log(3), 1.5]
            ),
        )
    )
    return r.astype(np.float32), beta, float(eps), draw(st.integers(0, 200))


@given(case=predictor_case())
def test_softmax_gate_predictor_matches_the_rounds(case):
    # the predictor (L = 2, 3) starts each row's doublings where its proof ends; the rows it
    # cannot settle go through the exact rounds: the same bits as the rounds alone
    r, beta, eps, maxd = case
    g1, u1 = gate_exact(r, beta, eps, maxd, 1)
    g0, u0 = gate_exact(r, beta, eps, maxd, 0)
    np.testing.assert_array_equal(u1, u0)
    np.testing.assert_array_equal(g1, g0)


def _rows_near_the_bound(L, eps, n, rng):
    """Rows whose exact entropy at some β·2^k is within a relative 1e-9 .. 1e-3 of ε: the
    predictor's proofs are tightest there (and its tables' cells end there)."""

    def H(u, q):  # entropy of the logits (0, -u, -u/q); L = 2: q = 0
        ea = np.exp(-u)
        eb = np.where(q > 0, np.exp(-u / np.where(q > 0, q, 1.0)), 0.0)
        s = 1.0 + ea + eb
        w2 = np.where(q > 0, 1.0 / np.where(q > 0, q, 1.0), 0.0)
        return np.log(s) + u * (ea + eb * w2) / s

    if L == 2:
        q = np.zeros(n)
    else:  # random, and on the predictor's cell edges i/64
        q = np.where(np.arange(n) % 2 == 0, rng.random(n), (np.arange(n) % 65) / 64.0)
        q = np.clip(q, 1e-3, 1.0)
    lo, hi = np.zeros(n), np.full(n, 64.0)
    for _ in range(80):  # bisection for H(u, q) = ε
        mid = 0.5 * (lo + hi)
        over = H(mid, q) > eps
        lo = np.where(over, mid, lo)
        hi = np.where(over, hi, mid)
    u = lo * (1.0 + rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-9, -3, n))
    x1 = u * 2.0 ** -rng.integers(0, 12, n)  # the bound sits k doublings up
    cols = [np.zeros(n), -x1] + ([-x1 / np.maximum(q, 1e-3)] if L == 3 else [])
    r = np.stack(cols, axis=1) + rng.uniform(-3, 3, (n, 1))
    for i in range(n):  # the maximum in any column
        r[i] = np.roll(r[i], rng.integers(0, L))
    return r.astype(np.float32)


@pytest.mark.parametrize(  # (L = 2 has H < ln 2 for every row: no bound above it)
    "L,eps", [(2, 0.05), (2, 0.3), (2, 0.5), (2, 0.69), (3, 0.05), (3, 0.3), (3, 0.5), (3, 0.69), (3, 0.9)]
)
def test_softmax_gate_predictor_near_the_bound(L, eps):
    rng = np.random.default_rng(int(eps * 1000) + L)
    r = _rows_near_the_bound(L, eps, 20_000, rng)
    for beta in (1.0, rng.uniform(0.5, 2.0, len(r))):
        g1, u1 = gate_exact(r, beta, eps, 40, 1)
        g0, u0 = gate_exact(r, beta, eps, 40, 0)
        np.testing.assert_array_equal(u1, u0)
        np.testing.assert_array_equal(g1, g0)
    # and the public entry point (the predictor by size) on the same rows
    g, u = K.softmax_gate(r, 1.0, max_entropy=eps, max_doublings=40)
    g0, u0 = gate_exact(r, 1.0, eps, 40, 0)
    np.testing.assert_array_equal(u, u0)
    np.testing.assert_array_equal(g, g0)


def test_softmax_gate_predictor_reports_nonfinite_rows():
    r = np.random.default_rng(3).standard_normal((5000, 3)).astype(np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        x = r.copy()
        x[3111, 2] = bad
        with pytest.raises(ValueError, match=r"relevance\[3111\]"):
            gate_exact(x, 2.0, 0.5, 32, 1)
    x = np.clip(r, -1, 1) * np.float32(3e38)  # row sums overflow, rows finite: no error
    g1, u1 = gate_exact(x, 2.0, 0.5, 32, 1)
    g0, u0 = gate_exact(x, 2.0, 0.5, 32, 0)
    np.testing.assert_array_equal(g1, g0)
    np.testing.assert_array_equal(u1, u0)


def test_softmax_gate_doubling_stops_below_float_max():
    # ties never meet ε: β doubles while β <= FLT_MAX/2, so it ends in (FLT_MAX/2, FLT_MAX]
    fmax = float(np.finfo(np.float32).max)
    beta = np.array([fmax / 4, fmax / 2, fmax, fmax / 3, 1.5, 2.0**100] * 6)
    r = np.ones((len(beta), 3), np.float32)
    g, used = K.softmax_gate(r, beta, max_entropy=0.1, max_doublings=1024)
    want = beta.copy()
    while (m := want <= fmax / 2).any():
        want[m] *= 2
    np.testing.assert_array_equal(used, want)
    np.testing.assert_array_equal(g, np.float32(1.0) / np.float32(3.0))
    g, used = K.softmax_gate(r, beta, max_entropy=0.1, max_doublings=1)
    np.testing.assert_array_equal(used, np.where(beta <= fmax / 2, 2 * beta, beta))


@pytest.mark.parametrize("L", [3, 6])
def test_softmax_gate_doubling_reports_the_first_bad_row(L):
    # row 2047 ends a tile whose doubling rounds cover nearly all of its rows (the portable
    # loops, used for L > 4, once lost the tile's NaN flags to them)
    rng = np.random.default_rng(3)
    r = rng.standard_normal((3000, L)).astype(np.float32)
    r[2047, 2] = np.nan
    r[2900, 0] = np.inf
    with pytest.raises(ValueError, match=r"relevance\[2047\]"):
        K.softmax_gate(r, 1.0, max_entropy=0.3)


def test_softmax_gate_empty():
    g, used = K.softmax_gate(np.zeros((0, 3), np.float32), 1.0, max_entropy=0.1)
    assert g.shape == (0, 3) and used.shape == (0,)


# ----------------------------------------------------------------------------- ema_blend


@given(case=blend_case(), alpha=st.floats(0, 1), per_row=st.booleans(), renorm=st.booleans())
def test_ema_blend_matches_numpy(case, alpha, per_row, renorm):
    rows, targets, index = case
    m = len(targets)
    a = np.linspace(0, 1, m).astype(np.float32) if per_row else alpha
    want_rows, want_drift = ref_ema(rows, targets, a, index, renorm)
    got = rows.copy()
    drift = K.ema_blend(got, targets, a, index=index, renormalize=renorm)
    assert drift.shape == (m,) and drift.dtype == np.float32
    scale = max(1.0, float(np.abs(want_rows).max(initial=0)))
    np.testing.assert_allclose(got, want_rows, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(drift, want_drift, rtol=1e-4, atol=1e-4 * scale**2)


@given(case=blend_case(), alpha=st.sampled_from([0.0, 1.0]))
def test_ema_blend_alpha_endpoints_are_exact(case, alpha):
    rows, targets, index = case
    got = rows.copy()
    K.ema_blend(got, targets, alpha, index=index)
    want = rows.copy()
    idx = np.arange(len(rows)) if index is None else index
    if alpha == 0.0:
        want[idx] = targets
    np.testing.assert_array_equal(got, want)


def test_ema_blend_renormalize_tiny_and_huge_rows():
    rows = np.array([[3e-30, 0.0], [3e30, 4e30]], np.float32)
    K.ema_blend(rows, rows.copy() * 0, 1.0, renormalize=True)
    np.testing.assert_allclose(rows, [[1.0, 0.0], [0.6, 0.8]], rtol=1e-6)


def test_ema_blend_renormalize_zero_row_stays_zero():
    rows = np.array([[1.0, 0.0], [3.0, 4.0]], np.float32)
    targets = np.array([[-1.0, 0.0], [3.0, 4.0]], np.float32)
    drift = K.ema_blend(rows, targets, 0.5, renormalize=True)
    np.testing.assert_array_equal(rows[0], [0.0, 0.0])
    np.testing.assert_allclose(rows[1], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(drift, [1.0, (3 - 0.6) ** 2 + (4 - 0.8) ** 2], rtol=1e-5)


def test_ema_blend_threads_and_out_are_deterministic():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((9000, 65)).astype(np.float32)
    targets = rng.standard_normal((9000, 65)).astype(np.float32)
    alpha = rng.random(9000)
    r1, r2 = rows.copy(), rows.copy()
    d1 = K.ema_blend(r1, targets, alpha, renormalize=True, threads=1)
    out = np.empty(9000, np.float32)
    d2 = K.ema_blend(r2, targets, alpha, renormalize=True, out=out, threads=2)
    assert np.shares_memory(d2, out)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(d1, d2)
    want, wd = ref_ema(rows, targets, alpha, renormalize=True)
    np.testing.assert_allclose(r1, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d1, wd, rtol=1e-4, atol=1e-6)


def test_ema_blend_nan_rows_are_left_unchanged_and_reported():
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    targets = np.zeros((4, 3), np.float32)
    targets[2, 1] = np.nan
    rows[3, 0] = np.inf
    before = rows.copy()
    with pytest.raises(ValueError, match=r"2 updated row\(s\).*rows\[2\]"):
        K.ema_blend(rows, targets, 0.5)
    np.testing.assert_array_equal(rows[2:], before[2:])
    np.testing.assert_array_equal(rows[:2], before[:2] * np.float32(0.5))


# ----------------------------------------------------------------------------- damped_update


@given(case=blend_case(), lam=st.one_of(st.just(0.0), st.floats(0, 1e6)), per_row=st.booleans())
def test_damped_update_matches_numpy(case, lam, per_row):
    rows, targets, index = case
    m = len(targets)
    lv = np.linspace(0, 5, m) if per_row else lam
    want_rows, want_drift = ref_damped(rows, targets, lv, index)
    got = rows.copy()
    drift = K.damped_update(got, targets, lv, index=index)
    scale = max(1.0, float(np.abs(want_rows).max(initial=0)))
    np.testing.assert_allclose(got, want_rows, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(drift, want_drift, rtol=1e-4, atol=1e-4 * scale**2)


@given(case=blend_case())
def test_damped_update_lambda_zero_copies_targets(case):
    rows, targets, index = case
    got = rows.copy()
    drift = K.damped_update(got, targets, 0.0, index=index)
    idx = np.arange(len(rows)) if index is None else index
    np.testing.assert_array_equal(got[idx], targets)
    np.testing.assert_allclose(drift, ((targets.astype(np.float64) - rows[idx]) ** 2).sum(1), rtol=1e-4, atol=1e-3)


def test_damped_update_huge_lambda_keeps_rows():
    rows = np.array([[1e30, -2.0]], np.float32)
    targets = np.array([[5.0, 7.0]], np.float32)
    K.damped_update(rows, targets, 1e300)
    np.testing.assert_array_equal(rows, np.array([[1e30, -2.0]], np.float32))


# ----------------------------------------------------------------------------- heat


count_dtypes = st.sampled_from([np.float32, np.int32, np.int64])


@given(
    n=st.integers(0, 60),
    vd=count_dtypes,
    ld=count_dtypes,
    weights=st.tuples(st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5)),
    mu=st.floats(1.0, 1e9),
    seed=st.integers(0, 2**32 - 1),
)
def test_heat_scores_match_numpy(n, vd, ld, weights, mu, seed):
    rng = np.random.default_rng(seed)
    visits = rng.integers(0, 1000, n).astype(vd)
    ilen = rng.integers(0, 50, n).astype(ld)
    now = 1.7e9
    last = now - rng.uniform(-1e4, 1e9, n)
    a, b, c = weights
    h = K.heat_scores(visits, ilen, last, now, a=a, b=b, c=c, mu=mu)
    assert h.dtype == np.float32 and h.shape == (n,)
    want = ref_heat(visits, ilen, last, now, a, b, c, mu)
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5 * (1 + np.abs(want).max(initial=0)))


def test_heat_scores_defaults_and_worked_example():
    # MemoryOS worked example: new segment, 1 page, 0 visits, accessed now -> 0 + 1 + 1 = 2
    h = K.heat_scores(np.zeros(1, np.int64), np.ones(1, np.int64), np.array([5.0]), 5.0)
    np.testing.assert_array_equal(h, [2.0])
    h = K.heat_scores(np.zeros(1, np.int32), np.zeros(1, np.int32), np.array([0.0]), 1e7)
    np.testing.assert_allclose(h, [np.exp(-1.0)], rtol=1e-6)


@pytest.mark.parametrize("n", [4, 16, 37])  # the tail loop alone, one SIMD step, both
def test_heat_scores_large_int64_counts_round_like_numpy(n):
    rng = np.random.default_rng(n)
    v = rng.integers(-(2**53) + 1, 2**53, n)
    v[:4] = [2**40 + 12345, -(2**45) - 7, 2**52 + 1, 0]
    h = K.heat_scores(v, np.zeros(n, np.int64), np.zeros(n), 1e12, c=0.0)
    np.testing.assert_array_equal(h, v.astype(np.float32))
    h = K.heat_scores(np.zeros(n, np.float32), v, np.zeros(n), 1e12, c=0.0)
    np.testing.assert_array_equal(h, v.astype(np.float32))


def test_heat_scores_threads_and_out():
    rng = np.random.default_rng(2)
    n = 300_000
    visits = rng.integers(0, 100, n).astype(np.int32)
    ilen = rng.random(n).astype(np.float32)
    last = 1e9 - rng.uniform(0, 1e8, n)
    out = np.empty(n, np.float32)
    h1 = K.heat_scores(visits, ilen, last, 1e9, threads=1)
    h2 = K.heat_scores(visits, ilen, last, 1e9, out=out, threads=2)
    assert np.shares_memory(h2, out)
    np.testing.assert_array_equal(h1, h2)
    np.testing.assert_allclose(h1, ref_heat(visits, ilen, last, 1e9), rtol=1e-6)


# ----------------------------------------------------------------------------- select_hot


@given(
    heat=hnp.arrays(np.float32, st.integers(0, 80), elements=st.floats(-3, 3, width=32)),
    threshold=st.floats(-4, 4),
    with_ns=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_select_hot_matches_numpy(heat, threshold, with_ns, seed):
    rng = np.random.default_rng(seed)
    ns = rng.choice(np.array([0, 7, 2**63 + 5, 2**64 - 1], dtype=np.uint64), len(heat)) if with_ns else None
    got = K.select_hot(heat, threshold, ns)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref_select_hot(heat, threshold, ns))


def test_select_hot_threshold_between_floats_is_exact():
    h = np.array([1.0, np.nextafter(np.float32(1.0), np.float32(2.0))], np.float32)
    np.testing.assert_array_equal(K.select_hot(h, 1.0 + 1e-12), [1])
    np.testing.assert_array_equal(K.select_hot(h, 1.0), [1])
    np.testing.assert_array_equal(K.select_hot(h, np.nextafter(1.0, 0.0)), [0, 1])


def test_select_hot_parallel():
    rng = np.random.default_rng(3)
    h = rng.random(600_000).astype(np.float32)
    ns = rng.integers(0, 1000, h.size).astype(np.uint64)
    for t in (1, 2):
        np.testing.assert_array_equal(K.select_hot(h, 0.7, threads=t), ref_select_hot(h, 0.7))
        np.testing.assert_array_equal(K.select_hot(h, 0.7, ns, threads=t), ref_select_hot(h, 0.7, ns))


# ----------------------------------------------------------------------------- evict_to_capacity


@st.composite
def evict_case(draw):
    n = draw(st.integers(0, 120))
    n_ns = draw(st.integers(1, 6))
    keys = np.array([0, 1, 42, 2**40, 2**63, 2**64 - 1], dtype=np.uint64)[:n_ns]
    ns = keys[np.array(draw(st.lists(st.integers(0, n_ns - 1), min_size=n, max_size=n)), dtype=np.int64)]
    # few distinct scores -> many ties
    scores = np.array(draw(st.lists(st.sampled_from([-1.5, 0.0, 0.25, 3.0]), min_size=n, max_size=n)), np.float32)
    live = None
    if draw(st.booleans()):
        live = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=np.bool_)
    if draw(st.booleans()):
        cap: object = draw(st.integers(0, 30))
    else:
        cap = {int(k): draw(st.integers(0, 10)) for k in keys if draw(st.booleans())}
    return scores, ns, cap, live


@given(case=evict_case())
def test_evict_to_capacity_matches_numpy(case):
    scores, ns, cap, live = case
    got = K.evict_to_capacity(scores, ns, cap, live=live)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref_evict(scores, ns, cap, live))
    # invariant: after eviction every bounded namespace is within capacity
    keep = np.ones(len(scores), bool) if live is None else live.astype(bool).copy()
    keep[got] = False
    for k, c in zip(*np.unique(ns[keep], return_counts=True)):
        limit = cap.get(int(k)) if isinstance(cap, dict) else cap
        assert limit is None or c <= limit


def test_evict_tie_rule_keeps_smaller_index():
    scores = np.zeros(5, np.float32)
    ns = np.zeros(5, np.uint64)
    np.testing.assert_array_equal(K.evict_to_capacity(scores, ns, 2), [2, 3, 4])
    np.testing.assert_array_equal(K.evict_to_capacity(scores, ns, 0), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(K.evict_to_capacity(scores, ns, 10), [])


def test_evict_dead_rows_are_ignored_even_with_nan_scores():
    scores = np.array([np.nan, 1.0, 2.0, 0.5], np.float32)
    ns = np.zeros(4, np.uint64)
    live = np.array([0, 1, 1, 1], np.uint8)
    np.testing.assert_array_equal(K.evict_to_capacity(scores, ns, 1, live=live), [1, 3])
    with pytest.raises(ValueError, match=r"scores\[0\]"):
        K.evict_to_capacity(scores, ns, 1)


def test_evict_many_namespaces_parallel():
    rng = np.random.default_rng(4)
    n = 200_000
    ns = rng.integers(0, 5_000, n).astype(np.uint64) * np.uint64(2**40)
    scores = rng.integers(0, 50, n).astype(np.float32)
    want = ref_evict(scores, ns, 30)
    for t in (1, 2):
        np.testing.assert_array_equal(K.evict_to_capacity(scores, ns, 30, threads=t), want)


# ----------------------------------------------------------------------------- bad input


def test_bad_dtypes_raise_type_error():
    r32 = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match="float32"):
        K.softmax_gate(r32.astype(np.float64), 1.0)
    with pytest.raises(TypeError, match="beta"):
        K.softmax_gate(r32, [1.0, 2.0])
    with pytest.raises(TypeError, match="beta"):
        K.softmax_gate(r32, np.array([1, 2], np.int64))
    with pytest.raises(TypeError, match="rows"):
        K.ema_blend(r32.astype(np.float16), r32, 0.5)
    with pytest.raises(TypeError, match="index"):
        K.ema_blend(r32, r32, 0.5, index=np.array([0, 1], np.int32))
    with pytest.raises(TypeError, match="alpha"):
        K.ema_blend(r32, r32.copy(), True)
    with pytest.raises(TypeError, match="visits"):
        K.heat_scores(np.zeros(2), np.zeros(2, np.int64), np.zeros(2), 0.0)
    with pytest.raises(TypeError, match="last_access"):
        K.heat_scores(np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.float32), 0.0)
    with pytest.raises(TypeError, match="namespaces"):
        K.evict_to_capacity(np.zeros(2, np.float32), np.zeros(2, np.int64), 1)
    with pytest.raises(TypeError, match="live"):
        K.evict_to_capacity(np.zeros(2, np.float32), np.zeros(2, np.uint64), 1, live=np.ones(2, np.int32))
    with pytest.raises(TypeError, match="capacity"):
        K.evict_to_capacity(np.zeros(2, np.float32), np.zeros(2, np.uint64), 1.5)
    with pytest.raises(TypeError, match="capacity"):
        K.evict_to_capacity(np.zeros(2, np.float32), np.zeros(2, np.uint64), {0: 1.5})


def test_bad_shapes_and_layouts_raise_value_error():
    r = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="at least one column"):
        K.softmax_gate(np.zeros((2, 0), np.float32), 1.0)
    with pytest.raises(ValueError, match="beta has 3 values"):
        K.softmax_gate(r, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="out has shape"):
        K.softmax_gate(r, 1.0, out=np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.ema_blend(np.zeros((3, 4), np.float32).T, np.zeros((4, 3), np.float32), 0.5)
    ro = r.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        K.ema_blend(ro, r.copy(), 0.5)
    with pytest.raises(ValueError, match="columns"):
        K.ema_blend(r.copy(), np.zeros((4, 2), np.float32), 0.5)
    with pytest.raises(ValueError, match="without index"):
        K.ema_blend(r.copy(), np.zeros((3, 3), np.float32), 0.5)
    with pytest.raises(ValueError, match="one row per index entry"):
        K.ema_blend(r.copy(), np.zeros((3, 3), np.float32), 0.5, index=np.array([0, 1], np.int64))
    with pytest.raises(ValueError, match="shares memory"):
        K.ema_blend(r, r[::1], 0.5)
    with pytest.raises(ValueError, match="expected 3"):
        K.heat_scores(np.zeros(2, np.int64), np.zeros(3, np.int64), np.zeros(3), 0.0)
    with pytest.raises(ValueError, match="namespaces has"):
        K.select_hot(np.zeros(3, np.float32), 0.0, np.zeros(2, np.uint64))


def test_bad_values_raise():
    r = np.zeros((4, 3), np.float32)
    t = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="NaN or Inf"):
        K.softmax_gate(np.array([[0.0, np.nan]], np.float32), 1.0)
    with pytest.raises(ValueError, match="beta"):
        K.softmax_gate(r, np.inf)
    with pytest.raises(ValueError, match="beta"):
        K.softmax_gate(r, 1e39)
    with pytest.raises(ValueError, match="must be > 0 when max_entropy"):
        K.softmax_gate(r, 0.0, max_entropy=0.5)
    with pytest.raises(ValueError, match="max_entropy"):
        K.softmax_gate(r, 1.0, max_entropy=-0.1)
    with pytest.raises(ValueError, match="max_doublings"):
        K.softmax_gate(r, 1.0, max_entropy=0.1, max_doublings=-1)
    for bad in (-0.1, 1.5, np.nan):
        with pytest.raises(ValueError, match="alpha"):
            K.ema_blend(r, t, bad)
    with pytest.raises(ValueError, match=r"alpha\[1\]"):
        K.ema_blend(r, t, np.array([0.5, 2.0, 0.5, 0.5]))
    for bad in (-1.0, np.inf):
        with pytest.raises(ValueError, match="lam"):
            K.damped_update(r, t, bad)
    with pytest.raises(ValueError, match="more than once"):
        K.ema_blend(r, t[:2], 0.5, index=np.array([1, 1], np.int64))
    with pytest.raises(ValueError, match="more than once"):  # sparse path (m < n / 64)
        K.ema_blend(
            np.zeros((1000, 2), np.float32), np.zeros((2, 2), np.float32), 0.5, index=np.array([7, 7], np.int64)
        )
    with pytest.raises(IndexError, match="out of range"):
        K.ema_blend(r, t[:1], 0.5, index=np.array([4], np.int64))
    with pytest.raises(IndexError, match="negative"):
        K.damped_update(r, t[:1], 0.5, index=np.array([-1], np.int64))
    with pytest.raises(ValueError, match="NaN or Inf"):
        K.damped_update(r, np.full((4, 3), np.inf, np.float32), 1.0)
    z = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match=r"last_access\[1\]"):
        K.heat_scores(z, z, np.array([0.0, -np.inf]), 0.0)
    with pytest.raises(ValueError, match=r"visits\[0\]"):
        K.heat_scores(np.array([np.nan, 0], np.float32), z, np.zeros(2), 0.0)
    with pytest.raises(ValueError, match="overflows float32"):
        K.heat_scores(z, z, np.array([0.0, 1e12]), 0.0, mu=1.0)
    with pytest.raises(ValueError, match="mu"):
        K.heat_scores(z, z, np.zeros(2), 0.0, mu=0.0)
    with pytest.raises(ValueError, match="now"):
        K.heat_scores(z, z, np.zeros(2), np.nan)
    with pytest.raises(ValueError, match="not finite"):
        K.select_hot(np.array([0.0, np.inf], np.float32), 0.0)
    with pytest.raises(ValueError, match="NaN"):
        K.select_hot(np.zeros(2, np.float32), np.nan)
    s = np.zeros(2, np.float32)
    ns = np.zeros(2, np.uint64)
    with pytest.raises(ValueError, match="capacity"):
        K.evict_to_capacity(s, ns, -1)
    with pytest.raises(ValueError, match="capacity for namespace"):
        K.evict_to_capacity(s, ns, {0: -2})
    with pytest.raises(ValueError, match="not finite"):
        K.evict_to_capacity(np.array([0.0, -np.inf], np.float32), ns, 1)


def test_empty_inputs():
    e = np.zeros((0, 4), np.float32)
    assert K.ema_blend(e.copy(), e, 0.5).shape == (0,)
    assert K.damped_update(e.copy(), e, 0.5).shape == (0,)
    rows = np.ones((3, 4), np.float32)
    assert K.ema_blend(rows, e, 0.5, index=np.zeros(0, np.int64)).shape == (0,)
    np.testing.assert_array_equal(rows, 1.0)
    z = np.zeros(0, np.int64)
    assert K.heat_scores(z, z, np.zeros(0), 0.0).shape == (0,)
    assert K.select_hot(np.zeros(0, np.float32), 0.0).shape == (0,)
    assert K.evict_to_capacity(np.zeros(0, np.float32), np.zeros(0, np.uint64), 0).shape == (0,)


def test_exported():
    """``__all__`` is exactly the public functions the module defines (each tested above)."""
    assert lamina.native.kernels is K
    defined = {n for n, f in vars(K).items() if inspect.isfunction(f) and f.__module__ == K.__name__}
    assert set(K.__all__) == {n for n in defined if not n.startswith("_")}


def test_kernels_run_concurrently_from_python_threads():
    rows = np.ones((2000, 64), np.float32)
    targets = np.zeros((2000, 64), np.float32)
    start = threading.Barrier(4)  # four threads in the kernels at once

    def work(_: int) -> None:
        own = rows.copy()
        start.wait()
        for _ in range(20):
            K.ema_blend(own, targets, 0.5)
        np.testing.assert_array_equal(own, np.float32(0.5) ** 20)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, range(4)))  # re-raises a worker's exception


_ISA_SCRIPT = r"""
import hashlib, sys
import numpy as np
from lamina.native import kernels as K
rng = np.random.default_rng(5)
h = hashlib.sha256()
for L in (5, 2, 3, 4):  # L = 2..4 take the register-resident SIMD path
    r = rng.standard_normal((1000, L)).astype(np.float32)
    r[::7, 1] = r[::7, 0]  # ties
    for beta in (3.0, -2.0, 0.0, rng.uniform(-4, 4, 1000).astype(np.float32)):
        for part in K.softmax_gate(r, beta):
            h.update(part.tobytes())
    for part in K.softmax_gate(r, 3.0, max_entropy=0.4):
        h.update(part.tobytes())
    # the ε bound's rounds: per-row β, rows stopping at every round (some past the compacted
    # rounds), ties running to the cap, max_doublings 0 / 1 / 40, more rows than one tile
    r2 = (rng.standard_normal((2500, L)) * 2.0 ** -rng.integers(0, 18, (2500, 1))).astype(np.float32)
    r2[::13] = 0.5
    for beta, eps, maxd in ((rng.uniform(0.1, 4, 2500), 0.3, 40), (2.0, 0.5, 1),
                            (2.0, 0.5, 0), (1.7e38, 0.05, 1024)):
        for part in K.softmax_gate(r2, beta, max_entropy=eps, max_doublings=maxd):
            h.update(part.tobytes())
r = rng.standard_normal((450_000, 3)).astype(np.float32)  # over 8 MiB of output: streamed
out = np.empty(r.size + 1, np.float32)[1:].reshape(r.shape)
for part in K.softmax_gate(r, 2.0, out=out) + K.softmax_gate(r, 2.0, max_entropy=0.4):
    h.update(part.tobytes())
rows = rng.standard_normal((300, 77)).astype(np.float32)
t = rng.standard_normal((300, 77)).astype(np.float32)
h.update(K.ema_blend(rows, t, rng.random(300), renormalize=True).tobytes())
h.update(K.damped_update(rows, t, 2.5).tobytes())
h.update(rows.tobytes())
v = rng.integers(0, 99, 5000)
h.update(K.heat_scores(v, v.astype(np.int32), 1e9 - rng.uniform(0, 1e8, 5000), 1e9).tobytes())
# every count dtype pair, a ragged tail, recency arguments from underflow (< ln FLT_MIN) to
# e^40, and int64 counts beyond 2^53 (rounded to double first, then to float32, on every path)
big = rng.integers(-(2**62), 2**62, 1037)
big[:64:2] = 2**60 + 2**36 + 1  # just above a float32 midpoint: double rounding lands on it
big[1:64:2] = -(2**55) - 2**31 - 1
last = 1e9 + rng.uniform(-95.0, 40.0, 1037) * 1e6
for vd in (np.float32, np.int32, np.int64):
    for ld in (np.float32, np.int32, np.int64):
        vv = big.astype(vd) if vd is np.int64 else rng.integers(0, 1000, 1037).astype(vd)
        h.update(K.heat_scores(vv, rng.integers(0, 50, 1037).astype(ld), last, 1e9,
                               a=0.5, b=2.0, c=3.0, mu=1e6).tobytes())
sys.stdout.write(h.hexdigest())
"""


def test_all_isa_paths_give_identical_bits():
    import os
    import subprocess
    import sys

    isas = lamina.build_info()["simd_available"]
    digests = {}
    for isa in isas:
        # the 450k-row gate streams its outputs (threshold forced to 8 MiB)
        env = dict(os.environ, LAMINA_SIMD=isa, LAMINA_GATE_STREAM_BYTES=str(8 << 20))
        out = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], env=env, capture_output=True, text=True, check=True)
        digests[isa] = out.stdout
    assert len(set(digests.values())) == 1, digests
