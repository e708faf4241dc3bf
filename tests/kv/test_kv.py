"""lamina.kv against plain numpy references of each method, plus invariants and bad input.

The references below restate each method's formula (see the lamina.kv module docstrings) with
numpy, in the same float32 operation order as the native core, so scores match bitwise and
selections can be compared exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lamina
from lamina import _core, kv
from lamina.kv.method import apportion

F32 = np.float32

# ---------------------------------------------------------------------------------------------
# numpy references
# ---------------------------------------------------------------------------------------------


def ref_reduce(x, n, mode="mean", normalize=False):
    """Window reduction of (L,H,w,S) -> (L,H,n); (L,H,S) input is used as is."""
    if x.ndim == 3:
        return x[..., :n].copy()
    w, S = x.shape[2], x.shape[3]
    acc = x[:, :, 0, :n].copy()
    for t in range(1, w):
        acc = acc + x[:, :, t, :n]
    if mode == "mean":
        acc = acc / F32(w)
    elif normalize:
        acc = acc / np.minimum(w, S - np.arange(n)).astype(F32)
    return acc


def ref_pool(a, kind, k):
    if kind == "none" or k == 1 or a.shape[-1] == 0:
        return a
    r, n = k // 2, a.shape[-1]
    fill = -np.inf if kind == "max" else 0.0
    pad = np.full(a.shape[:-1] + (n + 2 * r,), fill, dtype=F32)
    pad[..., r : r + n] = a
    out = pad[..., 0:n].copy()
    for d in range(1, k):
        out = np.maximum(out, pad[..., d : d + n]) if kind == "max" else out + pad[..., d : d + n]
    if kind == "avg":
        out = out / F32(k)
    return out


def ref_gqa(p, hkv, kind):
    L, H, n = p.shape
    G = H // hkv
    p4 = p.reshape(L, hkv, G, n)
    acc = p4[:, :, 0].copy()
    for q in range(1, G):
        acc = np.maximum(acc, p4[:, :, q]) if kind == "max" else acc + p4[:, :, q]
    if kind == "mean" and G > 1:
        acc = acc / F32(G)
    return acc


def ref_rows(x, hkv, n, *, reduce="mean", normalize=False, pool="none", k=1, gqa="mean", nu=None):
    rows = ref_gqa(ref_pool(ref_reduce(x, n, reduce, normalize), pool, k), hkv, gqa)
    if nu is not None:
        rows = rows * nu[:, :, None]
    return rows


def ref_top(row, k):
    """Positions of the k best of a row (ties: smaller position), ascending."""
    order = np.lexsort((np.arange(row.size), -row.astype(np.float64)))
    return np.sort(order[:k])


def ref_counts(rows_l, total, floor=0):
    """Cross-head top-`total` of one layer's (Hkv, n) block, each head's top `floor` pinned."""
    hkv, n = rows_l.shape
    pinned = np.zeros((hkv, n), dtype=bool)
    for g in range(hkv):
        pinned[g, ref_top(rows_l[g], floor)] = True
    head, pos = np.meshgrid(np.arange(hkv), np.arange(n), indexing="ij")
    order = np.lexsort((pos.ravel(), head.ravel(), -rows_l.astype(np.float64).ravel(), ~pinned.ravel()))
    return np.bincount(head.ravel()[order[:total]], minlength=hkv)


def ref_apportion(weights, total, cap):
    """Water-filled, largest-remainder split (the rule documented in lamina.kv.method.apportion)."""
    w = np.where(np.asarray(weights, dtype=np.float64) > 0, weights, 0.0)
    m = w.size
    x = np.zeros(m)
    free = list(range(m))
    remaining = float(total)
    while free:
        wf = w[free]
        s = wf.sum()
        share = remaining * (wf / s if s > 0 else np.full(len(free), 1.0 / len(free)))
        over = [i for i, v in zip(free, share) if v > cap]
        if not over:
            x[free] = share
            break
        for i in over:
            x[i] = cap
        remaining -= cap * len(over)
        free = [i for i in free if i not in over]
    near = np.round(x)
    x = np.where(np.abs(x - near) < 1e-9, near, x)
    base = np.floor(x).astype(np.int64)
    rem = np.round(x - base, 9)
    d = total - int(base.sum())
    for i in sorted(range(m), key=lambda i: (-rem[i], i)):
        if d <= 0:
            break
        if base[i] < cap:
            base[i] += 1
            d -= 1
    return base


def rows_to_keepset(rows_list, L, hkv):
    return [[np.asarray(rows_list[l][g]) for g in range(hkv)] for l in range(L)]


def ref_keep_all(L, hkv, S):
    """Every position of every (layer, KV head): the budget covers the prompt."""
    return [[np.arange(S)] * hkv for _ in range(L)]


def ref_top_and_window(rows_l, counts, n, S):
    """One layer: per KV head g, the counts[g] best positions of rows_l[g] and the window n..S-1."""
    return [np.concatenate([ref_top(rows_l[g], counts[g]), np.arange(n, S)]) for g in range(len(rows_l))]


def ref_windowed(x, b, hkv, w, k, pool, gqa, counts, nu=None):
    """Keep sets of the observation-window methods: per (layer, KV head), the window (the last w
    positions) and the counts(rows, n, bp)[l][g] best of the n = S - w positions before it (rows:
    ref_rows' scores, bp = b - w); everything when the budget b covers the prompt."""
    L, S = x.shape[0], x.shape[-1]
    if b >= S:
        return ref_keep_all(L, hkv, S)
    n, bp = S - w, b - w
    rows = ref_rows(x, hkv, n, pool=pool, k=k, gqa=gqa, nu=nu)
    per_layer = counts(rows, n, bp)
    return [ref_top_and_window(rows[l], per_layer[l], n, S) for l in range(L)]


def ref_snapkv(x, b, hkv, w, k, pool, gqa, nu=None):
    return ref_windowed(x, b, hkv, w, k, pool, gqa, lambda rows, n, bp: [[bp] * hkv] * len(rows), nu)


def ref_streaming(L, hkv, S, b, n_sink):
    if b >= S:
        return ref_keep_all(L, hkv, S)
    row = np.concatenate([np.arange(n_sink), np.arange(S - (b - n_sink), S)])
    return [[row] * hkv for _ in range(L)]


def ref_h2o(x, b, hkv, recent_ratio, normalize, gqa):
    L, S = x.shape[0], x.shape[-1]
    if b >= S:
        return ref_keep_all(L, hkv, S)
    recent = int(b * recent_ratio)
    n = S - recent
    rows = ref_rows(x, hkv, n, reduce="sum", normalize=normalize, gqa=gqa)
    return [ref_top_and_window(rows[l], [b - recent] * hkv, n, S) for l in range(L)]


def ref_adakv(x, b, hkv, w, k, pool, gqa, alpha):
    def counts(rows, n, bp):
        return [ref_counts(rows_l, hkv * bp, int(bp * alpha)) for rows_l in rows]

    return ref_windowed(x, b, hkv, w, k, pool, gqa, counts)


def ref_pyramid_budgets(L, bp, n, beta):
    if L == 1:
        return np.array([bp])
    mn = bp / beta
    mx = 2 * bp - mn
    if mx >= n:
        mx = n
        mn = 2 * bp - mx
    real = np.array([mx - l * (mx - mn) / (L - 1) for l in range(L)])
    return ref_apportion(real, L * bp, n)


def ref_pyramidkv(x, b, hkv, w, k, pool, gqa, beta):
    def counts(rows, n, bp):
        return [[lb] * hkv for lb in ref_pyramid_budgets(len(rows), bp, n, beta)]

    return ref_windowed(x, b, hkv, w, k, pool, gqa, counts)


def ref_entropy(rows):
    L = rows.shape[0]
    out = np.zeros(L)
    for l in range(L):
        s = rows[l].astype(np.float64).ravel()
        z = s.sum()
        if s.size <= 1 or z <= 0:
            continue
        p = s[s > 0] / z
        out[l] = -(p * np.log(p)).sum() / math.log(s.size)
    return out


def ref_lava(x, b, hkv, w, k, pool, gqa, alpha, norms, entropy=None):
    """LAVa reference; `entropy` (if given) replaces the reference entropies for the budget
    split so that float noise in logarithms cannot move a rounding boundary."""
    L, S = x.shape[0], x.shape[-1]
    if b >= S:
        return ref_keep_all(L, hkv, S), None
    n, bp = S - w, b - w
    nu = norms[:, :, :n].max(axis=2) if norms.ndim == 3 else norms
    if n == 0:
        nu = np.zeros((L, hkv), F32)
    rows = ref_rows(x, hkv, n, pool=pool, k=k, gqa=gqa, nu=nu.astype(F32))
    e_ref = ref_entropy(rows)
    e = e_ref if entropy is None else entropy
    lb = ref_apportion(e, L * bp, n)
    out = []
    for l in range(L):
        cnt = ref_counts(rows[l], hkv * lb[l])
        mixed = (1 - alpha) * cnt + alpha * float(lb[l])
        out.append(ref_top_and_window(rows[l], ref_apportion(mixed, hkv * int(lb[l]), n), n, S))
    return out, e_ref


def assert_keepset(ks, ref, L, hkv, S):
    assert ks.lengths.shape == (L, hkv)
    assert ks.seq_len == S
    for l in range(L):
        for g in range(hkv):
            np.testing.assert_array_equal(ks.head(l, g), ref[l][g], err_msg=f"layer {l} head {g}")


def check_invariants(ks):
    """Unique, ascending, in-range positions; offsets consistent."""
    assert ks.indices.dtype == np.int64
    assert ks.offsets[0] == 0 and ks.offsets[-1] == ks.indices.size
    for l in range(ks.n_layers):
        for g in range(ks.n_heads):
            h = ks.head(l, g)
            assert h.size == ks.lengths[l, g]
            assert np.all(np.diff(h) > 0), "positions must be unique and ascending"
            if h.size:
                assert 0 <= h[0] and h[-1] < ks.seq_len


# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------


def make_data(seed, L, H, S, w, integer):
    assert w <= S
    rng = np.random.default_rng(seed)
    shape = (L, H, S) if w == 0 else (L, H, w, S)
    if integer:  # many exact ties
        return rng.integers(0, 4, size=shape).astype(F32)
    return rng.random(shape, dtype=F32)


shapes = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**31),
        "L": st.integers(1, 3),
        "hkv": st.integers(1, 3),
        "G": st.sampled_from([1, 2, 3]),
        "S": st.integers(1, 60),
        "wrows": st.integers(0, 6),  # 0: (L, H, S) input
        "integer": st.booleans(),
    }
)


def budget_for(data, S, w):
    """An int budget (mostly >= w, sometimes below it) or a compression ratio."""
    if data.draw(st.booleans()):
        lo = data.draw(st.sampled_from([1, max(1, min(w, S + 2))]))
        return data.draw(st.integers(lo, S + 2))
    return data.draw(st.floats(0.01, 0.99))


def resolved(budget, S):
    return min(budget, S) if isinstance(budget, int) else int(S * (1 - budget))


# ---------------------------------------------------------------------------------------------
# selection core
# ---------------------------------------------------------------------------------------------


# (the `isa` fixture, one run per SIMD path of the selection kernels, is in conftest.py)


def check_cut(x, k):
    value, greater, take_equal = _core.kv_kth_largest(x, k)
    kth = np.sort(x.astype(np.float64))[::-1][k - 1]
    assert value == kth
    assert greater == int((x > kth).sum())
    assert greater + take_equal == k
    assert 1 <= take_equal <= int((x == kth).sum())


@given(
    st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, 1e-30, -3e38, 3e38, 0.5]), min_size=1, max_size=200)
    | st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=300),
    st.data(),
)
def test_kth_largest_matches_sort(values, data):
    x = np.array(values, dtype=F32)
    check_cut(x, data.draw(st.integers(1, x.size)))


@pytest.mark.parametrize("n", [2049, 5000, 70000])
@pytest.mark.parametrize("kind", ["uniform", "few_values", "lognormal", "sorted", "spike"])
def test_kth_largest_long_rows(isa, n, kind):
    # rows longer than 2048 take the sampled-bracket path; the shapes try to fool the sample
    rng = np.random.default_rng(n)
    if kind == "uniform":
        x = rng.random(n, dtype=F32)
    elif kind == "few_values":
        x = rng.integers(0, 3, n).astype(F32)
    elif kind == "lognormal":
        x = np.exp(rng.standard_normal(n) * 3).astype(F32)
    elif kind == "sorted":
        x = np.sort(rng.random(n, dtype=F32))
    else:  # one tall run hidden between sample points
        x = np.zeros(n, F32)
        x[n // 3 : n // 3 + 40] = 1.0
    for k in (1, 17, 40, n // 30, n // 3, n - 1, n):
        check_cut(x, k)


@given(
    shapes,
    st.sampled_from(["avg", "max", "none"]),
    st.sampled_from([1, 3, 5, 7]),
    st.sampled_from(["mean", "max"]),
    st.data(),
)
def test_snapkv_scores_match_reference(p, pool, k, gqa, data):
    H = p["hkv"] * p["G"]
    w = p["wrows"] if p["wrows"] else data.draw(st.integers(1, 8))
    S = max(p["S"], w + 1)
    x = make_data(p["seed"], p["L"], H, S, p["wrows"] and w, p["integer"])
    m = kv.SnapKV(window_size=None if p["wrows"] else w, kernel_size=k, pooling=pool, gqa=gqa)
    got = m.score(x, n_kv_heads=p["hkv"])
    want = ref_rows(x, p["hkv"], S - w, pool=pool, k=k, gqa=gqa)
    assert got.shape == (p["L"], p["hkv"], S - w)
    np.testing.assert_array_equal(got, want)


def awkward_floats(rng, shape):
    """Float32 values over the whole finite range a quotient can hit: subnormals, tiny,
    ordinary and huge magnitudes (small enough that sums of 9 stay finite), both signs, +-0."""
    e = rng.integers(-149, 122, size=shape)
    x = (rng.random(shape) + 1.0) * np.exp2(e.astype(np.float64))
    x = np.where(rng.random(shape) < 0.5, -x, x).astype(F32)
    x[rng.random(shape) < 0.05] = F32(0.0)
    x[rng.random(shape) < 0.05] = F32(-0.0)
    return x


@pytest.mark.parametrize("k,G,w", [(3, 3, 5), (5, 6, 6), (7, 3, 4), (9, 10, 5), (11, 2, 12)])
def test_avg_pool_and_means_divide_exactly(isa, k, G, w):
    """Avg pooling, the window mean and the GQA mean divide by small integers; the native
    core may do that as a multiply plus a correction (kv_score.cpp div_by): the quotients must
    be the IEEE ones bit for bit, also for subnormal, huge and signed-zero inputs."""
    rng = np.random.default_rng(k)
    L, hkv, S = 2, 2, 700
    r = k // 2
    x = awkward_floats(rng, (L, hkv * G, S))
    n = S - 4
    got = kv.SnapKV(window_size=4, kernel_size=k, pooling="avg", gqa="mean").score(x, n_kv_heads=hkv)
    want = ref_rows(x, hkv, n, pool="avg", k=k, gqa="mean")
    np.testing.assert_array_equal(got, want)
    # interior positions: the same bits (the reference's zero padding can flip the sign of a
    # zero at the edges only)
    np.testing.assert_array_equal(got[..., r : n - r].view(np.uint32), want[..., r : n - r].view(np.uint32))
    xw = awkward_floats(rng, (L, hkv * G, w, S)) / F32(w)
    got = kv.SnapKV(kernel_size=k, pooling="avg", gqa="mean").score(xw, n_kv_heads=hkv)
    want = ref_rows(xw, hkv, S - w, pool="avg", k=k, gqa="mean")
    np.testing.assert_array_equal(got, want)
    # the divisor alone, every sign and magnitude: window mean, no pooling, no GQA
    got = kv.SnapKV(kernel_size=1, pooling="none", gqa="mean").score(xw, n_kv_heads=hkv * G)
    want = ref_reduce(xw, S - w)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ---------------------------------------------------------------------------------------------
# methods vs references
# ---------------------------------------------------------------------------------------------


def _select_or_raise(x, budget, method, hkv, invalid, **params):
    """``kv.select``'s keep set, its invariants checked; where ``invalid``, None after checking
    that the call raises ValueError."""
    if invalid:
        with pytest.raises(ValueError):
            kv.select(x, budget, method, n_kv_heads=hkv, **params)
        return None
    ks = kv.select(x, budget, method, n_kv_heads=hkv, **params)
    check_invariants(ks)
    return ks


@given(shapes, st.integers(0, 6), st.data())
def test_streaming_matches_reference(p, n_sink, data):
    H = p["hkv"] * p["G"]
    S = max(p["S"], p["wrows"])
    x = make_data(p["seed"], p["L"], H, S, p["wrows"], p["integer"])
    budget = budget_for(data, S, n_sink)
    b = resolved(budget, S)
    ks = _select_or_raise(x, budget, "streaming", p["hkv"], b < 1 or (b < S and b < n_sink), n_sink=n_sink)
    if ks is None:
        return
    assert_keepset(ks, ref_streaming(p["L"], p["hkv"], S, b, n_sink), p["L"], p["hkv"], S)
    assert np.all(ks.lengths == b)
    if b < S:  # sinks and the recent window are always kept
        m = ks.mask()
        assert m[:, :, :n_sink].all() and m[:, :, S - (b - n_sink) :].all()


@given(shapes, st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.booleans(), st.sampled_from(["mean", "max"]), st.data())
def test_h2o_matches_reference(p, ratio, normalize, gqa, data):
    H = p["hkv"] * p["G"]
    S = max(p["S"], p["wrows"])
    x = make_data(p["seed"], p["L"], H, S, p["wrows"], p["integer"])
    normalize = normalize and x.ndim == 4
    budget = budget_for(data, S, 1)
    b = resolved(budget, S)
    ks = _select_or_raise(x, budget, "h2o", p["hkv"], b < 1, recent_ratio=ratio, normalize=normalize, gqa=gqa)
    if ks is None:
        return
    assert_keepset(ks, ref_h2o(x, b, p["hkv"], ratio, normalize, gqa), p["L"], p["hkv"], S)
    assert np.all(ks.lengths == b)
    if b < S:
        recent = int(b * ratio)
        assert ks.mask()[:, :, S - recent :].all()


def _window_case(p, data):
    H = p["hkv"] * p["G"]
    w = p["wrows"] if p["wrows"] else data.draw(st.integers(1, 8))
    S = max(p["S"], w)
    x = make_data(p["seed"], p["L"], H, S, p["wrows"] and w, p["integer"])
    budget = budget_for(data, S, w)
    return x, w, S, budget, resolved(budget, S)


def _expect_window_error(b, S, w):
    return b < 1 or (b < S and b < w)


@given(shapes, st.sampled_from(["avg", "max"]), st.sampled_from([1, 3, 5]), st.sampled_from(["mean", "max"]), st.data())
def test_snapkv_matches_reference(p, pool, k, gqa, data):
    x, w, S, budget, b = _window_case(p, data)
    params = dict(kernel_size=k, pooling=pool, gqa=gqa, window_size=None if x.ndim == 4 else w)
    ks = _select_or_raise(x, budget, "snapkv", p["hkv"], _expect_window_error(b, S, w), **params)
    if ks is None:
        return
    assert_keepset(ks, ref_snapkv(x, b, p["hkv"], w, k, pool, gqa), p["L"], p["hkv"], S)
    assert np.all(ks.lengths == b)
    if b < S:
        assert ks.mask()[:, :, S - w :].all(), "the observation window is always kept"


@given(shapes, st.sampled_from([0.0, 0.2, 0.5, 1.0]), st.sampled_from(["avg", "max"]), st.data())
def test_adakv_matches_reference(p, alpha, pool, data):
    x, w, S, budget, b = _window_case(p, data)
    params = dict(kernel_size=3, pooling=pool, alpha_safeguard=alpha, window_size=None if x.ndim == 4 else w)
    ks = _select_or_raise(x, budget, "adakv", p["hkv"], _expect_window_error(b, S, w), **params)
    if ks is None:
        return
    assert_keepset(ks, ref_adakv(x, b, p["hkv"], w, 3, pool, "mean", alpha), p["L"], p["hkv"], S)
    assert np.all(ks.lengths.sum(axis=1) == p["hkv"] * b), "each layer keeps H_kv * budget"
    if b < S:
        assert np.all(ks.lengths >= int((b - w) * alpha) + w), "floor respected"
        assert ks.mask()[:, :, S - w :].all()


@given(shapes, st.sampled_from([1.0, 2.0, 20.0]), st.data())
def test_pyramidkv_matches_reference(p, beta, data):
    x, w, S, budget, b = _window_case(p, data)
    params = dict(beta=beta, window_size=None if x.ndim == 4 else w)
    ks = _select_or_raise(x, budget, "pyramidkv", p["hkv"], _expect_window_error(b, S, w), **params)
    if ks is None:
        return
    assert_keepset(ks, ref_pyramidkv(x, b, p["hkv"], w, 5, "avg", "mean", beta), p["L"], p["hkv"], S)
    L = p["L"]
    assert int(ks.lengths.sum()) == L * p["hkv"] * b, "the model keeps L * H_kv * budget"
    assert np.all(np.diff(ks.lengths[:, 0]) <= 0), "budgets do not grow with depth"
    assert np.all(ks.lengths == ks.lengths[:, :1]), "uniform within a layer"
    if b < S:
        assert ks.mask()[:, :, S - w :].all()


@given(shapes, st.sampled_from([0.0, 0.2, 1.0]), st.booleans(), st.sampled_from(["max", "avg"]), st.data())
def test_lava_matches_reference(p, alpha, per_head_norms, pool, data):
    x, w, S, budget, b = _window_case(p, data)
    rng = np.random.default_rng(p["seed"] + 1)
    norms = rng.random((p["L"], p["hkv"], S), dtype=F32) * 4
    if per_head_norms:
        norms = np.ascontiguousarray(norms[:, :, : max(S - w, 1)].max(axis=2))
    params = dict(floor_alpha=alpha, pooling=pool, window_size=None if x.ndim == 4 else w)
    ks = _select_or_raise(x, budget, "lava", p["hkv"], _expect_window_error(b, S, w), value_norms=norms, **params)
    if ks is None:
        return
    ref, e_ref = ref_lava(x, b, p["hkv"], w, 7, pool, "max", alpha, norms, ks.info.get("entropy"))
    assert_keepset(ks, ref, p["L"], p["hkv"], S)
    assert int(ks.lengths.sum()) == p["L"] * p["hkv"] * b, "the model keeps L * H_kv * budget"
    if b < S:
        np.testing.assert_allclose(ks.info["entropy"], e_ref, rtol=1e-5, atol=1e-6)  # float32 logs
        assert np.all((ks.info["entropy"] >= 0) & (ks.info["entropy"] <= 1))
        lb = ks.info["layer_budgets"]
        np.testing.assert_array_equal(ks.lengths.sum(axis=1), p["hkv"] * (lb + w))
        assert np.all(ks.lengths <= S) and ks.mask()[:, :, S - w :].all()


@pytest.mark.parametrize("method", ["h2o", "snapkv", "adakv", "pyramidkv", "lava"])
def test_long_rows_match_reference(isa, method):
    """S > 2048 (sampled thresholds, SIMD packing) on every SIMD path, with many ties."""
    rng = np.random.default_rng(11)
    L, hkv, G, w, S = 2, 2, 2, 4, 3000
    x = rng.integers(0, 50, size=(L, hkv * G, w, S)).astype(F32)
    norms = rng.random((L, hkv, S), dtype=F32)
    b = 200
    ks = kv.select(x, b, method, value_norms=norms if method == "lava" else None, n_kv_heads=hkv)
    check_invariants(ks)
    if method == "h2o":
        ref = ref_h2o(x, b, hkv, 0.5, False, "mean")
    elif method == "snapkv":
        ref = ref_snapkv(x, b, hkv, w, 5, "avg", "mean")
    elif method == "adakv":
        ref = ref_adakv(x, b, hkv, w, 5, "avg", "mean", 0.2)
    elif method == "pyramidkv":
        ref = ref_pyramidkv(x, b, hkv, w, 5, "avg", "mean", 20.0)
    else:
        ref, _ = ref_lava(x, b, hkv, w, 7, "max", "max", 0.2, norms, ks.info["entropy"])
    assert_keepset(ks, ref, L, hkv, S)


def test_lava_budgets_follow_entropy():
    # layer 0: flat scores (entropy ~1); layer 1: one spike per head (entropy ~0)
    L, H, S, w = 2, 2, 200, 8
    x = np.full((L, H, S), 1.0, F32)
    x[1] = 1e-6
    x[1, :, 17] = 1.0
    norms = np.ones((L, H, S), F32)
    ks = kv.select(x, 40, "lava", value_norms=norms, window_size=w, kernel_size=1)
    lb = ks.info["layer_budgets"]
    assert lb[0] > lb[1] and lb.sum() == 2 * (40 - w)
    assert ks.info["entropy"][0] > 0.99 and ks.info["entropy"][1] < 0.5


def test_lava_value_norms_weight_heads():
    # identical attention in both heads; head 1's values are 10x larger -> it gets the tokens
    L, H, S, w = 1, 2, 300, 4
    rng = np.random.default_rng(3)
    x = np.repeat(rng.random((L, 1, S), dtype=F32), H, axis=1)
    norms = np.ones((L, H), F32)
    norms[0, 1] = 10.0
    ks = kv.select(x, 50, "lava", value_norms=norms, window_size=w, floor_alpha=0.0)
    assert ks.lengths[0, 1] > ks.lengths[0, 0]
    assert ks.lengths.sum() == 2 * 50


# ---------------------------------------------------------------------------------------------
# GQA, ties, threads, budgets
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["h2o", "snapkv", "adakv", "pyramidkv", "lava"])
@pytest.mark.parametrize("G", [2, 4])
def test_gqa_groups_consistent(method, G):
    """A group of identical query heads selects what the lone head selects (mean and max)."""
    rng = np.random.default_rng(G)
    L, hkv, w, S = 3, 2, 4, 90
    x = rng.random((L, hkv, w, S), dtype=F32)
    xr = np.repeat(x, G, axis=1)  # query head h -> KV head h // G
    norms = rng.random((L, hkv, S), dtype=F32) if method == "lava" else None
    a = kv.select(x, 30, method, value_norms=norms)
    b = kv.select(xr, 30, method, value_norms=norms, n_kv_heads=hkv)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert b.n_heads == hkv


def test_ties_keep_smaller_positions():
    L, H, S = 2, 3, 50
    x = np.zeros((L, H, S), F32)
    ks = kv.select(x, 20, "snapkv", window_size=5)
    for l in range(L):
        for h in range(H):
            np.testing.assert_array_equal(ks.head(l, h), np.r_[0:15, 45:50])
    # cross-head ties: lower heads win (alpha = 0: no floor)
    ks = kv.select(x, 20, "adakv", window_size=5, alpha_safeguard=0.0)
    np.testing.assert_array_equal(ks.lengths, [[50, 5, 5]] * L)  # head 0 takes all 45 non-window slots
    # -0.0 ties with +0.0
    y = np.zeros((1, 1, 10), F32)
    y[0, 0, ::2] = -0.0
    ks = kv.select(y, 4, "snapkv", window_size=1, kernel_size=1)
    np.testing.assert_array_equal(ks.head(0, 0), [0, 1, 2, 9])


@pytest.mark.parametrize("method", ["h2o", "snapkv", "adakv", "pyramidkv", "lava"])
def test_thread_count_does_not_change_results(method):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 3, size=(6, 4, 8, 700)).astype(F32)
    norms = rng.random((6, 2, 700), dtype=F32) if method == "lava" else None
    one = kv.select(x, 100, method, value_norms=norms, n_kv_heads=2, threads=1)
    two = kv.select(x, 100, method, value_norms=norms, n_kv_heads=2, threads=2)
    np.testing.assert_array_equal(one.indices, two.indices)
    np.testing.assert_array_equal(one.offsets, two.offsets)


def test_budget_semantics():
    rng = np.random.default_rng(0)
    x = rng.random((2, 2, 100), dtype=F32)
    assert kv.select(x, 0.75, "snapkv", window_size=8).budget == 25
    assert np.all(kv.select(x, 0.75, "snapkv", window_size=8).lengths == 25)
    assert kv.select(x, np.int64(30), "snapkv", window_size=8).budget == 30
    ks = kv.select(x, 500, "adakv", window_size=8)  # longer than the cache: kept whole
    assert np.all(ks.lengths == 100) and ks.budget == 100
    np.testing.assert_array_equal(ks.head(1, 1), np.arange(100))
    ks = kv.select(x, 8, "snapkv", window_size=8)  # budget == window
    np.testing.assert_array_equal(ks.head(0, 0), np.arange(92, 100))


@given(
    st.lists(st.floats(0, 100), min_size=1, max_size=12),
    st.integers(0, 10),
    st.data(),
)
def test_apportion_properties(weights, cap, data):
    m = len(weights)
    total = data.draw(st.integers(0, m * cap))
    a = apportion(weights, total, cap)
    assert a.sum() == total and np.all((a >= 0) & (a <= cap))
    np.testing.assert_array_equal(a, ref_apportion(np.array(weights), total, cap))
    w = np.array(weights)
    if w.sum() > 0 and np.all(total * w / w.sum() <= cap):
        assert np.all(np.abs(a - total * w / w.sum()) < 1 + 1e-9)


def test_pyramid_budgets_formula():
    m = kv.PyramidKV(beta=20)
    b = m.layer_budgets(32, 448, 32704)
    assert b.sum() == 32 * 448 and b[0] > b[-1]
    # KVCache-Factory's sequence: max = 2b' - b'/beta, min = b'/beta
    assert abs(b[0] - (2 * 448 - 448 / 20)) <= 1 and abs(b[-1] - 448 / 20) <= 1
    b = m.layer_budgets(4, 90, 100)  # max_num clamps to n
    assert b[0] == 100 and b.sum() == 360


# ---------------------------------------------------------------------------------------------
# KeepSet, compress, value norms
# ---------------------------------------------------------------------------------------------


def test_keepset_views():
    rng = np.random.default_rng(1)
    ks = kv.select(rng.random((2, 2, 40), dtype=F32), 12, "adakv", window_size=4)
    m = ks.mask()
    assert m.shape == (2, 2, 40) and np.array_equal(m.sum(-1), ks.lengths)
    pad = ks.padded()
    for l in range(2):
        for g in range(2):
            n = ks.lengths[l, g]
            np.testing.assert_array_equal(pad[l, g, :n], ks.head(l, g))
            assert np.all(pad[l, g, n:] == -1)
    assert "adakv" in repr(ks) and ks.total == 48
    with pytest.raises(IndexError):
        ks.head(2, 0)
    with pytest.raises(ValueError):
        ks.indices[0] = 5  # read-only
    with pytest.raises(ValueError):
        kv.KeepSet(np.zeros(3, np.int64), np.array([0, 2], np.int64), np.ones((1, 1), np.int64), 5)
    with pytest.raises(TypeError):
        kv.KeepSet(np.zeros(3, np.int32), np.array([0, 3], np.int64), np.full((1, 1), 3, np.int64), 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("padded", [False, True])
def test_compress_matches_gather(dtype, padded):
    rng = np.random.default_rng(2)
    L, hkv, G, S, D = 2, 2, 2, 64, 8
    keys = rng.standard_normal((L, hkv, S, D)).astype(dtype)
    values = rng.standard_normal((L, hkv, S, D)).astype(dtype)
    att = rng.random((L, hkv * G, 4, S), dtype=F32)
    ks = kv.select(att, 20, "lava", value_norms=kv.value_norms(values.astype(F32)), n_kv_heads=hkv)
    c = kv.compress(keys, values, ks, padded=padded)
    assert c.padded is padded and c.keys.dtype == dtype
    np.testing.assert_array_equal(c.lengths, ks.lengths)
    for l in range(L):
        for g in range(hkv):
            idx = ks.head(l, g)
            if padded:
                got_k, got_v = c.keys[l, g, : idx.size], c.values[l, g, : idx.size]
                assert np.all(c.keys[l, g, idx.size :] == 0)
            else:
                r = l * hkv + g
                got_k = c.keys[c.offsets[r] : c.offsets[r + 1]]
                got_v = c.values[c.offsets[r] : c.offsets[r + 1]]
            np.testing.assert_array_equal(got_k, keys[l, g, idx])
            np.testing.assert_array_equal(got_v, values[l, g, idx])


def test_value_norms_match_numpy():
    rng = np.random.default_rng(4)
    v = rng.standard_normal((2, 3, 50, 16)).astype(F32)
    np.testing.assert_allclose(kv.value_norms(v), np.abs(v).sum(-1), rtol=1e-6)
    bad = v.copy()
    bad[1, 2, 3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kv.value_norms(bad)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def x3():
    return np.random.default_rng(0).random((2, 4, 64), dtype=F32)


def test_rejects_bad_scores(x3):
    with pytest.raises(TypeError, match="float32"):
        kv.select(x3.astype(np.float64), 16, "snapkv", window_size=4)
    with pytest.raises(TypeError, match="ndarray"):
        kv.select(x3.tolist(), 16, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="shape"):
        kv.select(x3[0], 16, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="C-contiguous"):
        kv.select(x3[:, :, ::2], 16, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="non-empty"):
        kv.select(x3[:, :0], 16, "snapkv", window_size=4)
    for bad in (np.nan, np.inf, -np.inf):
        y = x3.copy()
        y[1, 2, 3] = bad
        for m, params in (("snapkv", {"window_size": 4}), ("h2o", {}), ("adakv", {"window_size": 4})):
            with pytest.raises(ValueError, match="NaN or Inf"):
                kv.select(y, 16, m, **params)
    y = np.random.default_rng(0).random((2, 4, 3, 64), dtype=F32)
    y[0, 1, 2, 63] = np.nan  # inside the always-kept window: still rejected
    with pytest.raises(ValueError, match="NaN or Inf"):
        kv.select(y, 16, "snapkv")


def test_rejects_bad_budget(x3):
    for b in (0, -3):
        with pytest.raises(ValueError, match="budget"):
            kv.select(x3, b, "snapkv", window_size=4)
    for b in (0.0, 1.0, 1.5, -0.2, 16.0):
        with pytest.raises(ValueError, match="compression_ratio"):
            kv.select(x3, b, "snapkv", window_size=4)
    for b in (True, "16", None):
        with pytest.raises(TypeError, match="budget"):
            kv.select(x3, b, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="keeps 0"):
        kv.select(x3, 0.999, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="window_size"):
        kv.select(x3, 3, "snapkv", window_size=4)
    with pytest.raises(ValueError, match="n_sink"):
        kv.select(x3, 3, "streaming", n_sink=4)


def test_rejects_bad_method_and_params(x3):
    with pytest.raises(
        ValueError, match="adakv, adakv_criticalkv, criticalkv, h2o, keydiff, kvzip, lava, pyramidkv, snapkv, streaming"
    ):
        kv.select(x3, 16, "snapkv2")
    with pytest.raises(TypeError, match="unknown parameter.*window_sizes.*valid: window_size"):
        kv.select(x3, 16, "snapkv", window_sizes=4)
    with pytest.raises(TypeError, match="either"):
        kv.select(x3, 16, kv.SnapKV(), kernel_size=3)
    with pytest.raises(ValueError, match="odd"):
        kv.select(x3, 16, "snapkv", window_size=4, kernel_size=4)
    with pytest.raises(ValueError, match="pooling"):
        kv.select(x3, 16, "snapkv", window_size=4, pooling="median")
    with pytest.raises(ValueError, match="gqa"):
        kv.select(x3, 16, "h2o", gqa="sum")
    with pytest.raises(ValueError, match="recent_ratio"):
        kv.select(x3, 16, "h2o", recent_ratio=1.5)
    with pytest.raises(ValueError, match="alpha_safeguard"):
        kv.select(x3, 16, "adakv", window_size=4, alpha_safeguard=-0.1)
    with pytest.raises(ValueError, match="beta"):
        kv.select(x3, 16, "pyramidkv", window_size=4, beta=0.5)
    with pytest.raises(ValueError, match="normalize"):
        kv.select(x3, 16, "h2o", normalize=True)
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv.select(x3, 16, "snapkv", window_size=4, n_kv_heads=3)
    with pytest.raises(TypeError, match="n_kv_heads"):
        kv.select(x3, 16, "snapkv", window_size=4, n_kv_heads=2.0)
    with pytest.raises(ValueError, match="threads"):
        kv.select(x3, 16, "snapkv", window_size=4, threads=-1)
    w4 = np.random.default_rng(0).random((2, 4, 3, 64), dtype=F32)
    with pytest.raises(ValueError, match="rows"):
        kv.select(w4, 16, "snapkv", window_size=8)


def test_rejects_bad_value_norms(x3):
    ok = np.ones((2, 4, 64), F32)
    with pytest.raises(ValueError, match="needs value_norms"):
        kv.select(x3, 16, "lava", window_size=4)
    with pytest.raises(ValueError, match="does not use value_norms"):
        kv.select(x3, 16, "snapkv", value_norms=ok, window_size=4)
    with pytest.raises(TypeError, match="float32"):
        kv.select(x3, 16, "lava", value_norms=ok.astype(np.float64), window_size=4)
    with pytest.raises(ValueError, match="shape"):
        kv.select(x3, 16, "lava", value_norms=ok[:, :2], window_size=4)
    neg = ok.copy()
    neg[0, 0, 5] = -1
    with pytest.raises(ValueError, match=">= 0"):
        kv.select(x3, 16, "lava", value_norms=neg, window_size=4)
    nan = ok.copy()
    nan[1, 3, 60] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kv.select(x3, 16, "lava", value_norms=nan, window_size=4)
    with pytest.raises(ValueError, match="finite"):
        kv.select(x3, 16, "lava", value_norms=np.full((2, 4), -1.0, F32), window_size=4)
    with pytest.raises(ValueError, match="negative"):
        kv.select(x3 - 0.5, 16, "lava", value_norms=ok, window_size=4)


def test_rejects_bad_compress_input(x3):
    ks = kv.select(x3, 16, "snapkv", window_size=4)
    k = np.zeros((2, 4, 64, 8), F32)
    with pytest.raises(ValueError, match="match"):
        kv.compress(k, k.astype(np.float16), ks)
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv.compress(k[:, :2].copy(), k[:, :2].copy(), ks)
    with pytest.raises(ValueError, match="L, H_kv, S, D"):
        kv.compress(k[0], k[0], ks)
    with pytest.raises(TypeError, match="KeepSet"):
        kv.compress(k, k, ks.indices)
    with pytest.raises(TypeError, match="numeric"):
        kv.compress(k.astype(object), k.astype(object), ks)
    hand = kv.KeepSet(
        np.array([70], np.int64),
        np.r_[0, np.ones(8, np.int64)].cumsum().clip(0, 1).astype(np.int64),
        np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.int64),
        64,
    )
    with pytest.raises(IndexError, match="outside"):
        kv.compress(k, k, hand)


def test_package_exports():
    assert lamina.kv is kv
    for name in kv.__all__:
        assert hasattr(kv, name)
    assert set(kv.METHODS) == {
        "streaming",
        "h2o",
        "snapkv",
        "adakv",
        "pyramidkv",
        "lava",
        "keydiff",
        "criticalkv",
        "adakv_criticalkv",
        "kvzip",
    }


# ---------------------------------------------------------------------------------------------
# long rows: the collect-based selection paths (rows > 2048, budgets a small share)
# ---------------------------------------------------------------------------------------------


def _long_rows(kind, R, n, seed):
    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        return np.exp(rng.standard_normal((R, n)) * 2).astype(F32)
    if kind == "few_values":  # heavy ties at every cut
        return rng.integers(0, 4, (R, n)).astype(F32)
    x = np.zeros((R, n), F32)  # a tall run hidden between sample points, plus ties
    x[:, n // 3 : n // 3 + 40] = 1.0
    x[:, -5:] = 1.0
    return x


@pytest.mark.parametrize("kind", ["lognormal", "few_values", "spike"])
def test_select_rows_long_rows(isa, kind):
    R, n = 3, 5000
    x = _long_rows(kind, R, n, 7)
    k = np.array([[1, 45, 300], [17, 2500, 4999]], dtype=np.int64)
    rows = np.concatenate([x, x[::-1]])
    idx, off = _core.kv_select_rows(np.ascontiguousarray(rows.reshape(2, 3, n)), k, n, 3)
    for r in range(6):
        kr = int(k.ravel()[r])
        got = idx[off[r] : off[r + 1]]
        np.testing.assert_array_equal(got[kr:], np.arange(n, n + 3))
        np.testing.assert_array_equal(got[:kr], ref_top(rows[r], kr), err_msg=f"row {r}")


@pytest.mark.parametrize("kind", ["lognormal", "few_values", "spike"])
@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0])
@pytest.mark.parametrize("budget", [80, 200])  # layer cut from the collected candidates / band
def test_lava_long_rows_matches_reference(isa, kind, alpha, budget):
    L, H, hkv, S, w = 3, 4, 2, 3000, 16
    x = _long_rows(kind, L * H, S, 11).reshape(L, H, S)
    norms = np.random.default_rng(3).random((L, hkv, S), dtype=F32) * 4 + 0.5
    ks = kv.select(
        x, budget, "lava", value_norms=norms, n_kv_heads=hkv, window_size=w, floor_alpha=alpha, pooling="max"
    )
    check_invariants(ks)
    ref, _ = ref_lava(x, budget, hkv, w, 7, "max", "max", alpha, norms, ks.info["entropy"])
    assert_keepset(ks, ref, L, hkv, S)
    lb = ks.info["layer_budgets"]
    np.testing.assert_array_equal(lb, apportion(ks.info["entropy"], L * (budget - w), S - w))
    assert int(ks.lengths.sum()) == L * hkv * budget


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_lava_candidate_paths_and_threads(isa, alpha):
    """LAVa keeps each row's best entries between its two passes; layers or rows whose kept
    entries do not suffice (a dominant head, a layer budget well above the mean, ties) are
    scored again. Every path must give the reference's result, on any thread count."""
    L, H, hkv, S, w, budget = 6, 4, 4, 4200, 16, 600
    rng = np.random.default_rng(7)
    x = np.exp(rng.standard_normal((L, H, S), dtype=F32) * F32(1.5))
    x[1] = np.exp(rng.standard_normal((H, S), dtype=F32) * F32(0.2))  # flat: larger budget
    x[2, 0] *= F32(50.0)  # one dominant head
    x[3] = np.floor(x[3] * F32(2.0))  # heavy ties
    x[4:] = np.exp(rng.standard_normal((2, H, S), dtype=F32) * F32(6.0))  # sharp: small budgets
    x /= x.sum(axis=-1, keepdims=True)
    norms = rng.random((L, hkv, S), dtype=F32) * 4 + 0.5
    got = [
        kv.select(x, budget, "lava", value_norms=norms, n_kv_heads=hkv, window_size=w, floor_alpha=alpha, threads=t)
        for t in (1, 2)
    ]
    for ks in got:
        check_invariants(ks)
        ref, _ = ref_lava(x, budget, hkv, w, 7, "max", "max", alpha, norms, ks.info["entropy"])
        assert_keepset(ks, ref, L, hkv, S)
    np.testing.assert_array_equal(got[0].indices, got[1].indices)
    np.testing.assert_array_equal(got[0].offsets, got[1].offsets)
    lb = got[0].info["layer_budgets"]
    assert lb.max() > 2 * lb.min()  # the layers differ as intended


@given(st.lists(st.floats(0, 10), min_size=1, max_size=12), st.data())
def test_native_apportion_matches_python(weights, data):
    # the native LAVa pass splits head budgets with a C++ port of base.apportion
    m = len(weights)
    cap = data.draw(st.integers(0, 50))
    total = data.draw(st.integers(0, m * cap))
    py = apportion(np.array(weights), total, cap)
    nat = _core.kv_apportion(np.array(weights, dtype=np.float64), total, cap)
    np.testing.assert_array_equal(nat, py)


# ---------------------------------------------------------------------------------------------
# value-norm re-scoring (CriticalKV) and key diversity (KeyDiff)
# ---------------------------------------------------------------------------------------------


def test_criticalkv_drops_what_has_no_value():
    """Uniform attention: SnapKV cannot tell the positions apart; CriticalKV keeps those whose
    value vectors are largest (a zero value contributes nothing to the output)."""
    L, H, Hk, w, S = 2, 4, 2, 8, 64
    att = np.full((L, H, w, S), 1.0 / S, F32)
    rng = np.random.default_rng(1)
    vals = rng.standard_normal((L, Hk, S, 16)).astype(F32)
    big = rng.choice(S - w, 12, replace=False)
    vals[:, :, :, :] *= 0.01
    vals[:, :, big, :] *= 100.0
    norms = kv.value_l2_norms(vals)
    assert norms.shape == (L, Hk, S)
    for method in (kv.CriticalKV(window_size=w, kernel_size=1), kv.AdaCriticalKV(window_size=w, kernel_size=1)):
        keep = method.select(att, 12 + w, value_norms=norms, n_kv_heads=Hk)
        for l in range(L):
            for h in range(Hk):
                got = set(keep.head(l, h).tolist())
                assert set(big.tolist()) <= got and set(range(S - w, S)) <= got
    with pytest.raises(ValueError, match="value_norms"):
        kv.CriticalKV(window_size=w).select(att, 20, n_kv_heads=Hk)


def test_keydiff_is_kvpress_formula():
    rng = np.random.default_rng(2)
    keys = rng.standard_normal((2, 3, 40, 8)).astype(F32)
    unit = keys / np.linalg.norm(keys, axis=-1, keepdims=True)
    anchor = unit.mean(axis=-2, keepdims=True)
    cos = (keys * anchor).sum(-1) / (np.linalg.norm(keys, axis=-1) * np.linalg.norm(anchor, axis=-1))
    np.testing.assert_allclose(kv.keydiff_scores(keys), -cos, rtol=1e-5, atol=1e-6)
    keep = kv.KeyDiff(n_sink=2).select(kv.KeyDiff.key_scores(keys), 10, n_kv_heads=3)
    for l in range(2):
        for h in range(3):
            idx = keep.head(l, h)
            s = -cos[l, h].copy()
            s[:2] = np.inf
            assert set(idx.tolist()) == set(np.argsort(-s, kind="stable")[:10].tolist())
