"""VectorArena codecs: the compressed scan with exact re-ranking (binary, int8).

What is pinned: with enough candidates the two-stage search equals the exact search; with few,
the candidates are the best by the codec's estimate (numpy models below, from lamina/codec.hpp);
every SIMD path gives the same result; removed rows are never served; bad input is refused.
Recall on real embeddings: ``test_recall_on_minilm_locomo`` (where MiniLM and the data exist)
and ``bench/bench_fleet.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina import _core
from lamina.native.search import (
    DEFAULT_OVERSAMPLE,
    DEPTH_GROWTH,
    DEPTH_REFERENCE_ROWS,
    MAX_DEFAULT_DEPTH,
    rerank_oversample,
)

CODECS = ["binary", "int8"]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def estimate_ip(codec: str, q: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The codec's estimate of <q, x> for each row of X (the rule of lamina/codec.hpp)."""
    q = q.astype(np.float64)
    X = X.astype(np.float64)
    if codec == "binary":
        lo, hi = q.min(), q.max()
        delta = (hi - lo) / 15.0
        u = np.clip(np.rint((q - lo) / delta), 0, 15) if delta > 0 else np.zeros_like(q)
        qd = lo + delta * u  # the dequantised query
        s = np.where(X > 0, 1.0, -1.0)
        l1 = np.abs(X).sum(1)
        factor = np.where(l1 > 0, (X * X).sum(1) / np.where(l1 > 0, l1, 1), 0.0)
        return factor * (s @ qd)
    qs = np.abs(q).max() / 127.0
    cq = np.clip(np.rint(q / qs), -127, 127) if qs > 0 else np.zeros_like(q)
    xs = np.abs(X).max(1) / 127.0
    cx = np.clip(np.rint(X / np.where(xs > 0, xs, 1)[:, None]), -127, 127)
    return qs * xs * (cx @ cq)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_full_oversampling_equals_the_exact_search(codec, metric, dtype, codec_isa):
    rng = np.random.default_rng(3)
    d = 70  # not a multiple of 64: padded words and bytes
    X = (rng.standard_normal((500, d)) * rng.uniform(0.2, 3, (500, 1))).astype(dtype)
    Q = rng.standard_normal((9, d)).astype(np.float32)
    exact = lamina.VectorArena(d, dtype=dtype)
    coded = lamina.VectorArena(d, dtype=dtype, codec=codec)
    exact.add(X)
    coded.add(X)
    es, ei = exact.search(Q, 7, metric)
    cs, ci = coded.search(Q, 7, metric, oversample=100)  # 700 candidates >= 500 rows
    np.testing.assert_array_equal(ci, ei)
    np.testing.assert_allclose(cs, es, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    n=st.integers(1, 300),
    d=st.integers(1, 140),
    k=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    n_ns=st.integers(1, 4),
    remove=st.integers(0, 50),
)
def test_filters_and_removals_match_exact_with_full_oversampling(codec, n, d, k, seed, n_ns, remove):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    ns = rng.integers(0, n_ns, n).astype(np.uint64)
    layer = rng.integers(0, 3, n).astype(np.uint8)
    exact, coded = lamina.VectorArena(d), lamina.VectorArena(d, codec=codec)
    s1, s2 = exact.add(X, namespace=ns, layer=layer), coded.add(X, namespace=ns, layer=layer)
    assert np.array_equal(s1, s2)
    gone = rng.choice(n, size=min(remove, n - 1), replace=False)
    if len(gone):
        exact.remove(s1[gone])
        coded.remove(s2[gone])
        again = rng.standard_normal((len(gone) // 2, d)).astype(np.float32)
        if len(again):  # rows reused: their codes are the new rows'
            exact.add(again, namespace=1, layer=1)
            coded.add(again, namespace=1, layer=1)
    Q = rng.standard_normal((5, d)).astype(np.float32)
    qns = rng.integers(0, n_ns, 5).astype(np.uint64)
    for kwargs in ({}, {"namespace": qns}, {"namespace": 0, "layers": [0, 2]}):
        es, ei = exact.search(Q, k, **kwargs)
        cs, ci = coded.search(Q, k, oversample=n + 1, **kwargs)
        np.testing.assert_array_equal(ci, ei)
        np.testing.assert_allclose(cs, es, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("codec", CODECS)
def test_candidates_are_the_best_by_the_codec_estimate(codec, codec_isa):
    """oversample=1: the k rows kept are the top k by the estimate (up to float rounding), then
    returned with their exact scores, best first."""
    rng = np.random.default_rng(7)
    d, n, k = 96, 2000, 10
    X = _unit(rng, n, d)
    a = lamina.VectorArena(d, codec=codec)
    a.add(X)
    Q = _unit(rng, 6, d)
    s, ids = a.search(Q, k, oversample=1)
    for q in range(len(Q)):
        est = estimate_ip(codec, Q[q], X)
        kth = np.sort(est)[-k]
        assert (est[ids[q]] >= kth - 1e-4).all()
        np.testing.assert_allclose(s[q], X[ids[q]] @ Q[q], rtol=1e-5, atol=1e-6)
        assert (np.diff(s[q]) <= 1e-7).all()


@pytest.mark.parametrize("codec", CODECS)
def test_every_simd_path_gives_the_same_result(codec):
    rng = np.random.default_rng(11)
    d = 384
    X = _unit(rng, 3000, d)
    Q = _unit(rng, 20, d)
    a = lamina.VectorArena(d, codec=codec)
    a.add(X)
    results = {}
    try:
        for isa in lamina.build_info()["simd_available"]:
            _core.codec_isa(isa)
            results[isa] = a.search(Q, 10, oversample=1)
    finally:
        _core.codec_isa("")
    assert "scalar" in results
    for isa, (s, i) in results.items():
        np.testing.assert_array_equal(i, results["scalar"][1], err_msg=isa)
        np.testing.assert_array_equal(s, results["scalar"][0], err_msg=isa)


@pytest.mark.parametrize("codec", CODECS)
def test_code_memory_and_facts(codec):
    a = lamina.VectorArena(384, codec=codec)
    assert a.codec == codec
    assert a.code_bytes == (48 if codec == "binary" else 384)
    assert lamina.VectorArena(384).codec is None and lamina.VectorArena(384).code_bytes == 0


def test_zero_rows_and_constant_queries():
    """A zero row has a zero estimate; a constant query (delta 0 in the binary scan) still works."""
    for codec in CODECS:
        a = lamina.VectorArena(8, codec=codec)
        X = np.zeros((4, 8), np.float32)
        X[1] = 1.0
        a.add(X)
        s, i = a.search(np.ones((1, 8), np.float32), 2, oversample=1)
        assert i[0, 0] == 1 and s[0, 0] == pytest.approx(8.0)
        s, i = a.search(np.ones((1, 8), np.float32), 2, "cosine", oversample=1)
        assert i[0, 0] == 1 and s[0, 0] == pytest.approx(1.0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="codec"):
        lamina.VectorArena(8, codec="pq")  # type: ignore[arg-type]
    a = lamina.VectorArena(8, codec="int8")
    a.add(np.ones((3, 8), np.float32))
    q = np.ones((1, 8), np.float32)
    with pytest.raises(ValueError, match="oversample"):
        a.search(q, 2, oversample=-1)
    with pytest.raises(TypeError, match="oversample"):
        a.search(q, 2, oversample=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="oversample"):
        a.search(q, 1000, oversample=10_000)
    with pytest.raises(ValueError, match="zero norm"):
        a.search(np.zeros((1, 8), np.float32), 2, "cosine")
    with pytest.raises(ValueError, match="NaN|finite"):
        a.search(np.full((1, 8), np.nan, np.float32), 2)
    with pytest.raises(ValueError, match="codec"):
        _core.VectorArena(8, "float32", 16, "pq")
    assert len(a) == 3  # nothing broke


def test_oversample_zero_is_the_exact_scan():
    rng = np.random.default_rng(5)
    X = _unit(rng, 1000, 32)
    exact, coded = lamina.VectorArena(32), lamina.VectorArena(32, codec="binary")
    exact.add(X)
    coded.add(X)
    Q = _unit(rng, 4, 32)
    np.testing.assert_array_equal(coded.search(Q, 5, oversample=0)[1], exact.search(Q, 5)[1])


def test_default_oversampling_per_codec():
    assert set(DEFAULT_OVERSAMPLE) == set(CODECS)
    assert all(r >= 1 for r in DEFAULT_OVERSAMPLE.values())


@pytest.mark.parametrize("codec", CODECS)
def test_recall_on_minilm_locomo(codec, minilm_model):
    """Recall@10 >= 0.95 against the exact scan at the default oversampling, on real embeddings:
    MiniLM vectors of the turns of two LoCoMo conversations, queried with their questions."""
    from lamina.eval.locomo import load_locomo

    if not (SHARED_DATA / "locomo").is_dir():
        pytest.skip("needs ../shared/data/locomo")
    convs, _ = load_locomo(SHARED_DATA / "locomo", limit=2)
    m = minilm_model
    X = m.embed([t.text for c in convs for t in c.turns])
    Q = m.embed([q.question for c in convs for q in c.questions])
    exact, coded = lamina.VectorArena(X.shape[1]), lamina.VectorArena(X.shape[1], codec=codec)
    exact.add(X)
    coded.add(X)
    _, ei = exact.search(Q, 10)
    _, ci = coded.search(Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ci, ei)])
    assert recall >= 0.95, f"{codec}: recall@10 {recall:.3f}"


# ---- the default re-ranking depth grows with the scanned rows ----------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_default_depth_is_the_base_up_to_the_reference_rows_and_grows_past_them(codec):
    base = DEFAULT_OVERSAMPLE[codec]
    assert rerank_oversample(codec, rows=DEPTH_REFERENCE_ROWS) == base
    assert rerank_oversample(codec, rows=1000) == base
    depths = [rerank_oversample(codec, rows=n) for n in (10**4, 10**5, 2 * 10**5, 10**6, 10**7)]
    assert depths == sorted(depths) and depths[-1] > base  # never shrinks, grows past the reference
    # each doubling adds the same share of the base (log growth, not linear)
    grow = DEPTH_GROWTH[codec] * base
    for n in (DEPTH_REFERENCE_ROWS * 4, DEPTH_REFERENCE_ROWS * 64):
        assert rerank_oversample(codec, rows=n) == math.ceil(base + grow * math.log2(n / DEPTH_REFERENCE_ROWS))


@pytest.mark.parametrize("codec", CODECS)
def test_default_depth_never_exceeds_the_rows(codec):
    assert rerank_oversample(codec, rows=30, k=10) == min(DEFAULT_OVERSAMPLE[codec], 3)
    assert rerank_oversample(codec, rows=0, k=10) == 1
    assert rerank_oversample(codec, rows=5, k=10) == 1  # fewer rows than k: one pass is exact
    # nor past what the GPU scan keeps (k·r <= 1024), however large the store
    assert rerank_oversample(codec, rows=10**12, k=10) * 10 <= MAX_DEFAULT_DEPTH
    assert rerank_oversample(codec, rows=10**12, k=1000) == 1


def test_default_depth_refuses_bad_input():
    with pytest.raises(ValueError, match="codec"):
        rerank_oversample("pq", rows=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rows"):
        rerank_oversample("binary", rows=-1)
    with pytest.raises(ValueError, match="k must be"):
        rerank_oversample("binary", rows=10, k=0)


def test_search_uses_the_depth_of_the_rows_it_scans():
    """A search without ``oversample`` returns what ``oversample=rerank_oversample(rows)``
    returns, with rows the namespace's live rows (one namespace) or the arena's (all)."""
    rng = np.random.default_rng(11)
    n_small, n_big, d = 2_000, 40_000, 32
    a = lamina.VectorArena(d, codec="binary")
    a.add(_unit(rng, n_small, d), namespace=1)
    a.add(_unit(rng, n_big, d), namespace=2)
    Q = _unit(rng, 8, d)
    r_small, r_big = (rerank_oversample("binary", rows=n) for n in (n_small, n_big))
    r_all = rerank_oversample("binary", rows=n_small + n_big)
    assert r_small < r_big <= r_all
    # the depth changes the answer here (binary codes of 32 dims rank poorly), so the equalities
    # below say which depth each search used
    base = a.search(Q, 10, namespace=2, oversample=r_small)[1]
    assert not np.array_equal(base, a.search(Q, 10, namespace=2, oversample=r_big)[1])
    for ns, r in ((1, r_small), (2, r_big), (None, r_all)):
        np.testing.assert_array_equal(a.search(Q, 10, namespace=ns)[1], a.search(Q, 10, namespace=ns, oversample=r)[1])
    per_query = np.array([1, 2] * 4, dtype=np.uint64)  # the largest namespace of the batch decides
    np.testing.assert_array_equal(
        a.search(Q, 10, namespace=per_query)[1], a.search(Q, 10, namespace=per_query, oversample=r_big)[1]
    )
