"""lamina.topk against a numpy reference (exact on integer data, tolerant on floats)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lamina
from reference import ref_scores, ref_topk

METRICS = ["ip", "cosine", "l2"]


def int_matrix(rng: np.random.Generator, n: int, d: int, lo: int = -2, hi: int = 2) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=(n, d)).astype(np.float32)


@given(
    n=st.integers(1, 700),
    d=st.integers(1, 70),
    b=st.integers(1, 9),
    k=st.integers(1, 40),
    metric=st.sampled_from(["ip", "l2"]),
    seed=st.integers(0, 2**32 - 1),
    threads=st.sampled_from([1, 2, 3]),
)
def test_exact_integer_data_matches_reference_with_ties(n, d, b, k, metric, seed, threads):
    # Small integers make every ip/l2 score exact in float32, so ties are frequent and the
    # documented tie rule (smaller index first) is checked exactly.
    rng = np.random.default_rng(seed)
    X = int_matrix(rng, n, d)
    Q = int_matrix(rng, b, d)
    s, i = lamina.topk(Q, X, k, metric, threads=threads)
    rs, ri = ref_topk(Q, X, k, metric)
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(s, rs.astype(np.float32))


@given(
    n=st.integers(1, 600),
    d=st.integers(1, 50),
    b=st.integers(1, 7),
    k=st.integers(1, 20),
    metric=st.sampled_from(METRICS),
    seed=st.integers(0, 2**32 - 1),
    f16=st.booleans(),
)
def test_float_data_scores_match_reference(n, d, b, k, metric, seed, f16):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float16 if f16 else np.float32)
    Q = rng.standard_normal((b, d)).astype(np.float32)
    s, i = lamina.topk(Q, X, k, metric)
    rs, _ = ref_topk(Q, X.astype(np.float32), k, metric)
    m = min(k, n)
    np.testing.assert_allclose(s[:, :m], rs[:, :m], rtol=1e-4, atol=1e-4)
    # every returned index really has the score reported for it
    S = ref_scores(Q, X.astype(np.float32), metric)
    got = np.take_along_axis(S, i[:, :m], axis=1)
    np.testing.assert_allclose(s[:, :m], got, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(s[:, :m], axis=1) <= 1e-6) if metric != "l2" else np.all(np.diff(s[:, :m], axis=1) >= -1e-6)
    # each row appears once
    for row in i:
        valid = row[row >= 0]
        assert len(np.unique(valid)) == len(valid)


@pytest.mark.parametrize("metric", METRICS)
def test_padding_when_k_exceeds_rows(metric):
    X = np.eye(3, 4, dtype=np.float32) + 0.5
    Q = np.ones((2, 4), np.float32)
    s, i = lamina.topk(Q, X, 5, metric)
    assert s.shape == (2, 5) and i.shape == (2, 5)
    assert np.all(i[:, 3:] == -1)
    assert np.all(np.isinf(s[:, 3:]))
    assert np.all(s[:, 3:] > 0) if metric == "l2" else np.all(s[:, 3:] < 0)
    assert sorted(i[0, :3].tolist()) == [0, 1, 2]


def test_thread_count_does_not_change_results():
    rng = np.random.default_rng(5)
    X = int_matrix(rng, 20_000, 32, -1, 1)
    Q = int_matrix(rng, 5, 32, -1, 1)
    a = lamina.topk(Q, X, 50, "ip", threads=1)
    b = lamina.topk(Q, X, 50, "ip", threads=2)
    c = lamina.topk(Q, X, 50, "ip", threads=7)
    for x, y in [(a, b), (a, c)]:
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[1], y[1])


def test_large_batch_and_blocks():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((5000, 384)).astype(np.float32)
    Q = rng.standard_normal((130, 384)).astype(np.float32)
    s, i = lamina.topk(Q, X, 10, "ip")
    ref = np.sort(Q @ X.T, axis=1)[:, ::-1][:, :10]
    np.testing.assert_allclose(s, ref, rtol=1e-4, atol=1e-3)


def test_zero_rows_score_zero_under_cosine():
    X = np.zeros((3, 4), np.float32)
    X[1] = [1, 0, 0, 0]
    s, i = lamina.topk(np.array([[1, 0, 0, 0]], np.float32), X, 3, "cosine")
    assert i[0, 0] == 1 and s[0, 0] == pytest.approx(1.0)
    assert s[0, 1] == 0.0 and s[0, 2] == 0.0


def test_empty_query_batch():
    X = np.ones((4, 3), np.float32)
    s, i = lamina.topk(np.zeros((0, 3), np.float32), X, 2)
    assert s.shape == (0, 2) and i.shape == (0, 2)


# ---- bad input -------------------------------------------------------------------------------

X = np.ones((10, 4), np.float32)
Q = np.ones((2, 4), np.float32)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((Q.astype(np.float64), X, 3), TypeError, "float32"),
        ((Q, X.astype(np.float64), 3), TypeError, "float32"),
        ((Q.tolist(), X, 3), TypeError, "numpy"),
        ((Q, X.tolist(), 3), TypeError, "numpy"),
        ((np.ones((2, 8), np.float32)[:, ::2], X, 3), ValueError, "contiguous"),
        ((Q, np.asfortranarray(np.ones((10, 4), np.float32)), 3), ValueError, "contiguous"),
        ((np.ones((2, 5), np.float32), X, 3), ValueError, "columns"),
        ((np.ones(4, np.float32), X, 3), ValueError, "2-dimensional"),
        ((Q, X, 0), ValueError, "k must be >= 1"),
        ((Q, X, -3), ValueError, "k must be >= 1"),
        ((Q, X, 2.5), TypeError, "k must be an int"),
        ((Q, np.ones((0, 4), np.float32), 3), ValueError, "empty"),
    ],
)
def test_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        lamina.topk(*args)


def test_unknown_metric():
    with pytest.raises(ValueError, match="unknown metric 'cos2'.*'ip', 'cosine', 'l2'"):
        lamina.topk(Q, X, 3, "cos2")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_queries_and_vectors(bad):
    q = Q.copy()
    q[1, 2] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        lamina.topk(q, X, 3)
    x = X.copy()
    x[7, 1] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        lamina.topk(Q, x, 3)


def test_zero_query_under_cosine():
    with pytest.raises(ValueError, match="zero norm"):
        lamina.topk(np.zeros((1, 4), np.float32), X, 3, "cosine")


def test_simd_paths_agree(monkeypatch):
    # Every compiled path must give identical exact results on integer data.
    import subprocess
    import sys

    code = (
        "import numpy as np, lamina;"
        "r=np.random.default_rng(3);X=r.integers(-3,4,(999,77)).astype(np.float32);"
        "Q=r.integers(-3,4,(9,77)).astype(np.float32);"
        "s,i=lamina.topk(Q,X,13,'l2');print(lamina.build_info()['simd_active']);"
        "print(i.tobytes().hex());print(s.tobytes().hex())"
    )
    outs = {}
    for isa in lamina.build_info()["simd_available"]:
        env = dict(__import__("os").environ, LAMINA_SIMD=isa)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        lines = out.stdout.split()[-3:]  # (an editable install may print a rebuild line first)
        assert lines[0] == isa
        outs[isa] = lines[1:]
    vals = list(outs.values())
    assert all(v == vals[0] for v in vals)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_a_rows_score_has_the_same_bits_in_every_tile(isa: str) -> None:
    """The score of a (query, row) pair does not depend on the batch it is in, the row's
    position among the others or which arena layout holds it, so replicas that loaded the same
    rows in another order rank exact ties alike. (Run in a subprocess per SIMD path.)"""
    import subprocess
    import sys

    code = """
import numpy as np, lamina
rng = np.random.default_rng(0)
X = rng.standard_normal((1003, 100)).astype(np.float32)
Q = rng.standard_normal((13, 100)).astype(np.float32)
together = lamina.topk(Q, X, 1003)
for q in range(len(Q)):
    s1, i1 = lamina.topk(Q[q : q + 1], X, 1003)
    s2, i2 = lamina.topk(Q[q : q + 1], X[1:], 1002)  # every row one place earlier
    a = dict(zip(i1[0].tolist(), s1[0].tolist()))
    b = {i + 1: s for i, s in zip(i2[0].tolist(), s2[0].tolist())}
    assert all(a[i] == b[i] for i in b), q
    c = dict(zip(together[1][q].tolist(), together[0][q].tolist()))
    assert a == c, q
print(lamina.build_info()["simd_active"])
"""
    env = dict(os.environ, LAMINA_SIMD=isa)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if r.stdout.strip() != isa:
        pytest.skip(f"{isa} is not available on this CPU")


def test_every_simd_path_gives_the_same_bits_on_float_data() -> None:
    """Scores of random float data (every dimension remainder mod 16, float32 and float16
    rows, every metric, every tile shape) have the same bits on every compiled SIMD path, so
    which items a memory ranks, keeps or evicts does not depend on the CPU."""
    import subprocess
    import sys

    code = """
import hashlib, numpy as np, lamina
from lamina.native.search import inner_products
rng = np.random.default_rng(7)
h = hashlib.sha256()
for d in (1, 7, 16, 17, 33, 100, 384):
    X = rng.standard_normal((301, d)).astype(np.float32)
    for nq in (1, 2, 3, 4, 5, 6, 7, 13):
        Q = rng.standard_normal((nq, d)).astype(np.float32)
        for rows in (X, X.astype(np.float16)):
            h.update(inner_products(Q, rows).tobytes())
            for metric in ("ip", "cosine", "l2"):
                s, i = lamina.topk(Q, rows, 9, metric)
                h.update(s.tobytes() + i.tobytes())
print(lamina.build_info()["simd_active"], h.hexdigest())
"""
    digests = {}
    for isa in lamina.build_info()["simd_available"]:
        env = dict(os.environ, LAMINA_SIMD=isa)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got_isa, digest = r.stdout.split()[-2:]
        assert got_isa == isa
        digests[isa] = digest
    assert len(set(digests.values())) == 1, digests


def test_inner_products_are_the_top_k_scores() -> None:
    """``inner_products`` gives every pair's ``"ip"`` score with the bits ``topk`` ranks by."""
    from lamina.native.search import inner_products

    rng = np.random.default_rng(11)
    for d in (3, 16, 40, 384):
        X = rng.standard_normal((517, d)).astype(np.float32)
        Q = rng.standard_normal((9, d)).astype(np.float32)
        B = inner_products(Q, X)
        s, i = lamina.topk(Q, X, len(X), "ip")
        assert np.array_equal(np.take_along_axis(B, i, axis=1), s)
        np.testing.assert_allclose(B, Q @ X.T, rtol=1e-4, atol=1e-4)
        out = np.empty((9, 517), dtype=np.float32)
        assert inner_products(Q, X, out=out) is out and np.array_equal(out, B)
    assert inner_products(Q, X[:0]).shape == (9, 0)


def test_inner_products_refuse_bad_input() -> None:
    from lamina.native.search import inner_products

    Q = np.ones((2, 4), np.float32)
    X = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="float32"):
        inner_products(Q.astype(np.float64), X)
    with pytest.raises(ValueError, match="queries"):
        inner_products(np.ones((2, 5), np.float32), X)
    with pytest.raises(ValueError, match="NaN"):
        inner_products(np.full((2, 4), np.nan, np.float32), X)
    with pytest.raises(ValueError, match="shape"):
        inner_products(Q, X, out=np.empty((3, 2), np.float32))
    with pytest.raises(ValueError, match="overlap"):
        buf = np.zeros((2, 4), np.float32)
        inner_products(buf, np.ones((4, 4), np.float32), out=buf[:, :4])
