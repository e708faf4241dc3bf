"""Backtracking on the packaged model: KVCache.truncate against a recompute, step-wise chains
with rollback, and Tyen et al.'s resample-and-complete at a located step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina.model
from lamina import _core
from lamina.errors import InvalidInput
from lamina.model.backtrack import ChainSession, backtrack, chain_answer, correct_at

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat. " * 5
QUESTION = "(3 + 4) * 2 ="
STEPS = ["Let's calculate (3 + 4) = 7.", "Then 7 * 2 = 15.", "So the answer is 15"]


def test_truncate_continues_exactly_as_a_recompute(model: Any) -> None:
    ids = model.tokenize(TEXT)
    n = 37
    rolled = model.new_cache()
    model.forward(ids, rolled, logits="none")
    before = rolled.nbytes
    rolled.truncate(n)
    assert rolled.n_seen == n and (rolled.lengths() == n).all()
    assert rolled.nbytes == before  # storage kept for the tokens to come
    assert (rolled.positions(3, 1) == np.arange(n)).all()
    fresh = model.new_cache()
    model.forward(ids[:n], fresh, logits="none")
    for layer, head in ((0, 0), (29, 2)):
        np.testing.assert_allclose(rolled.keys(layer, head), fresh.keys(layer, head), atol=1e-5)
    a, _ = model.forward(ids[n : n + 6], rolled, logits="all")
    b, _ = model.forward(ids[n : n + 6], fresh, logits="all")
    np.testing.assert_allclose(a, b, atol=1e-3)
    assert int(np.argmax(a[-1])) == int(np.argmax(b[-1]))


def test_truncate_drops_by_position_on_a_compacted_cache(model: Any) -> None:
    ids = model.tokenize(TEXT)
    cache = model.new_cache()
    model.forward(ids, cache, logits="none")
    keep = np.arange(0, len(ids), 3, dtype=np.int64)  # a press left every third entry of one head
    cache.keep(5, 1, keep)
    cache.truncate(40)
    assert cache.n_seen == 40
    assert (cache.positions(5, 1) == keep[keep < 40]).all()
    assert cache.lengths()[5, 1] == (keep < 40).sum() and cache.lengths()[0, 0] == 40
    cache.truncate(40)  # idempotent at the same length
    cache.truncate(0)
    assert cache.n_seen == 0 and int(cache.lengths().sum()) == 0


def test_truncate_rejects_lengths_outside_what_was_seen(model: Any) -> None:
    cache = model.new_cache()
    model.forward(model.tokenize("hello there"), cache, logits="none")
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(cache.n_seen + 1)
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(-1)


def test_rollback_leaves_the_session_where_a_shorter_chain_would_be(model: Any) -> None:
    long = ChainSession(model, QUESTION)
    long.extend(STEPS)
    dropped = long.rollback(1)
    short = ChainSession(model, QUESTION)
    short.append(STEPS[0])
    assert long.steps == short.steps == STEPS[:1]
    assert long.cache.n_seen == short.cache.n_seen == long.boundary(1)
    assert dropped > 0
    a, b = long.generate_step(), short.generate_step()  # the same greedy step follows
    assert a.text == b.text and a.tokens == b.tokens
    with pytest.raises(InvalidInput):
        long.rollback(5)


def test_backtrack_resamples_the_located_step_and_completes(model: Any) -> None:
    r = backtrack(model, QUESTION, STEPS, 1, candidates=4, seed=3, max_steps=5)
    assert r.mistake == 1 and r.steps[:1] == STEPS[:1] and len(r.candidates) == 4
    assert r.rolled_back_tokens > 0 and 2 <= len(r.steps) <= 5
    ok = [c for c in r.candidates if not c.same_as_original and c.text]
    if r.chosen is None:
        assert not ok and r.steps[1] == STEPS[1]
    else:
        best = r.candidates[r.chosen]
        assert not best.same_as_original and r.steps[1] == best.text
        assert best.mean_logprob == max(c.mean_logprob for c in ok)
    assert r.answer == chain_answer(r.steps)
    again = backtrack(model, QUESTION, STEPS, 1, candidates=4, seed=3, max_steps=5)
    assert again.steps == r.steps and again.candidates == r.candidates  # seeded


def test_backtrack_without_a_mistake_keeps_the_chain(model: Any) -> None:
    r = backtrack(model, QUESTION, STEPS, None)
    assert r.steps == STEPS and r.answer == "15" and r.candidates == [] and r.rolled_back_tokens == 0


def test_backtrack_rejects_bad_input(model: Any) -> None:
    with pytest.raises(InvalidInput, match="mistake"):
        backtrack(model, QUESTION, STEPS, 3)
    with pytest.raises(InvalidInput, match="steps"):
        backtrack(model, QUESTION, [], 0)
    with pytest.raises(InvalidInput, match="question"):
        ChainSession(model, "  ")
    s = ChainSession(model, QUESTION)
    with pytest.raises(InvalidInput, match="one line"):
        s.append("two\nlines")
    s.append(STEPS[0])
    with pytest.raises(InvalidInput, match="candidates"):
        s.resample(STEPS[0], candidates=0)
    with pytest.raises(InvalidInput, match="mistake"):
        correct_at(s, 1)


def test_fork_is_independent(model: Any) -> None:
    s = ChainSession(model, QUESTION)
    s.extend(STEPS[:2])
    f = s.fork()
    f.rollback(0)
    assert s.steps == STEPS[:2] and f.steps == [] and s.cache.n_seen > f.cache.n_seen


def test_chain_answer_reads_the_last_stated_answer() -> None:
    assert chain_answer(["x = 1", "So the answer is -12."]) == "-12"
    assert chain_answer(["So the answer is (B)", "nothing"]) == "(B)"
    assert chain_answer(["no answer here"]) is None
    assert chain_answer(["So the answer is 3 * 4 = 12. So the answer is 12."]) == "12"
    assert chain_answer(["So the answer is = 218."]) == "218"


def test_truncate_on_an_empty_native_cache() -> None:
    c = _core.KVCache(2, 1, 4)
    c.truncate(0)
    assert c.n_seen == 0 and c.nbytes == 0
    with pytest.raises(ValueError, match=r"\[0, 0\]"):
        c.truncate(1)


def test_generation_starts_on_the_token_boundary_of_a_forced_step(model: Any) -> None:
    from lamina.model.backtrack import STEP_HEADER

    enc = lambda s: model.tokenizer.encode(s, add_bos=False)  # noqa: E731
    header = enc(STEP_HEADER.format(n=2))
    for text in STEPS:
        assert enc(STEP_HEADER.format(n=2) + " " + text)[: len(header)] == header


def test_forward_batch_matches_one_forward_per_cache(model_f32_decode: Any) -> None:
    m = model_f32_decode
    ids = m.tokenize(TEXT * 3)
    base = m.new_cache()
    m.forward(ids[:150], base, logits="none")
    for B in (1, 3, 8):  # GEMV rows (fewer than 4) and the GEMM path
        caches = [base.clone() for _ in range(B)]
        for b, c in enumerate(caches):
            c.truncate(150 - 7 * b)  # every sequence at its own length and position
        caches[-1].keep(4, 1, np.arange(0, int(caches[-1].n_seen), 2, dtype=np.int64))  # a ragged head
        twins = [c.clone() for c in caches]
        toks = ids[150 : 150 + B]
        got = m.forward_batch(toks, caches)
        ref = np.stack([m.forward([t], c)[0] for t, c in zip(toks, twins, strict=True)])
        assert got.shape == (B, m.config.vocab_size) and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, atol=2e-3, rtol=0)
        assert np.array_equal(got.argmax(-1), ref.argmax(-1))
        if B > 1:  # row b is its own cache's, not a neighbour's (the check can fail)
            assert np.abs(got[0] - ref[1]).max() > 0.1
        for c, tw in zip(caches, twins, strict=True):
            assert c.n_seen == tw.n_seen and np.array_equal(c.lengths(), tw.lengths())
            assert np.array_equal(c.positions(7, 1), tw.positions(7, 1))
            np.testing.assert_allclose(c.keys(29, 2), tw.keys(29, 2), atol=1e-4)
            np.testing.assert_allclose(c.values(3, 0), tw.values(3, 0), atol=1e-4)
        # the caches go on decoding as the one-by-one ones do
        a = m.forward([ids[160]], caches[-1])[0]
        b = m.forward([ids[160]], twins[-1])[0]
        np.testing.assert_allclose(a, b, atol=2e-3, rtol=0)


def test_forward_batch_rejects_bad_input(model: Any) -> None:
    c = model.new_cache()
    model.forward(model.tokenize(TEXT)[:5], c, logits="none")
    with pytest.raises(InvalidInput, match="same cache"):
        model.forward_batch([1, 2], [c, c])
    with pytest.raises(InvalidInput, match="one cache per id"):
        model.forward_batch([1], [c, c.clone()])
    with pytest.raises(InvalidInput, match="one cache per id"):
        model.forward_batch([], [])
    with pytest.raises(InvalidInput, match="vocabulary"):
        model.forward_batch([10**7], [c])
    assert c.n_seen == 5  # nothing was appended
    ms = lamina.model.load(model.path, position="ms-poe")
    assert model.batched_decode and not ms.batched_decode
    with pytest.raises(NotImplementedError, match="batched decode"):
        ms.forward_batch([1], [ms.new_cache()])


def test_resample_in_one_batch_draws_the_sequential_candidates(model_f32_decode: Any) -> None:
    s = ChainSession(model_f32_decode, QUESTION)
    s.extend(STEPS[:1])
    t = s.fork()
    a, ia = s.resample(STEPS[1], candidates=8, seed=3)
    b, ib = t.resample(STEPS[1], candidates=8, seed=3, batched=False)
    assert [c.text for c in a] == [c.text for c in b]
    np.testing.assert_allclose([c.mean_logprob for c in a], [c.mean_logprob for c in b], atol=1e-3)
    assert ia == ib and s.steps == t.steps and s.cache.n_seen == t.cache.n_seen
    assert len({c.text for c in a}) > 1  # T = 1 draws differ between candidates
    # another seed draws other candidates
    u = t.fork()
    u.rollback(1)
    c, _ = u.resample(STEPS[1], candidates=8, seed=4)
    assert [x.text for x in c] != [x.text for x in a]
