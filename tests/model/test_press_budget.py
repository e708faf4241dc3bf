"""Presses on the real cache beyond one-shot prefill: KeyDiff and value-norm re-scoring
(CriticalKV), a fixed KV budget kept while decoding, chunked prefill, cache clones."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina.kv
import lamina.model.press
from lamina.model.press import press_to_budget

CONTEXT = (
    "Maria keeps her spare house key under the blue flower pot next to the garage door. "
    "Her neighbour Tom waters the garden on Tuesdays and Fridays while she travels. "
) * 6


@pytest.mark.parametrize("press", ["keydiff", "criticalkv", "adakv_criticalkv"])
def test_new_presses_free_memory(model: Any, press: str) -> None:
    full = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=3)
    half = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=3, press=press, compression=0.5)
    assert 0.45 < half.kept_fraction < 0.6
    assert half.kv_bytes < 0.7 * full.kv_bytes


def test_headwise_criticalkv_is_ragged_and_bytes_follow(model: Any) -> None:
    ids = model.prompt_parts(CONTEXT).context
    cache = model.new_cache()
    pre = model.prefill(ids, cache, record_window=32)
    full_bytes = cache.nbytes
    c = cache.clone()
    assert c.nbytes == full_bytes and np.array_equal(c.keys(3, 1), cache.keys(3, 1))
    keep = lamina.model.press.apply_press(c, pre.attention, lamina.kv.AdaCriticalKV(), 0.5)
    lengths = c.lengths()
    assert len(set(lengths.ravel().tolist())) > 1  # head-wise budgets: heads hold different lengths
    assert int(lengths.sum()) == keep.total
    # the bytes held fall with the entries kept (ragged storage, not a mask)
    assert abs(c.nbytes / full_bytes - keep.total / (len(ids) * lengths.size)) < 0.02
    assert cache.lengths().min() == len(ids)  # the clone was compressed, not the original


def test_keydiff_scores_prefer_outlying_keys() -> None:
    rng = np.random.default_rng(0)
    keys = np.tile(rng.standard_normal(8).astype(np.float32), (1, 1, 20, 1))
    keys += 0.01 * rng.standard_normal(keys.shape).astype(np.float32)
    keys[0, 0, 7] = -keys[0, 0, 7]  # the one key pointing away from the others
    s = lamina.kv.keydiff_scores(keys)
    assert int(np.argmax(s[0, 0])) == 7
    keep = lamina.kv.KeyDiff().select(s, 4, n_kv_heads=1)
    assert 7 in keep.head(0, 0).tolist() and keep.total == 4


def _budget_bytes(model: Any, b: int) -> int:
    cfg = model.config
    return int(b * cfg.n_layers * cfg.n_kv_heads * (2 * cfg.head_dim * 4 + 4))


def test_kv_budget_after_a_long_context(model: Any) -> None:
    b = 96
    g = model.generate(
        CONTEXT, question="Where is the spare key?", max_tokens=40, press="keydiff", kv_budget=b, press_every=16
    )
    assert g.prompt_tokens > b and (len(g.tokens) == 40 or g.finish_reason == "eos")
    # the cache ends holding the budget's allocation exactly (room reserved once, no growth step)
    assert g.kv_bytes == _budget_bytes(model, b)
    assert g.kept_fraction <= b / (g.prompt_tokens + len(g.tokens))


@pytest.mark.parametrize("press", ["keydiff", "streaming"])
def test_kv_budget_holds_during_decoding(model: Any, press: str) -> None:
    # a short prompt, then many more generated tokens than the budget: the cache passes the
    # budget only while decoding, and is pressed again and again as it grows
    b = 48
    g = model.generate(
        "Count from 1 to 200, separated by commas.", max_tokens=150, press=press, kv_budget=b, press_every=8
    )
    assert g.prompt_tokens < b and len(g.tokens) > 2 * b  # it ran well past the budget
    assert g.peak_kv_bytes <= _budget_bytes(model, b)  # never above it, at any step
    assert g.kept_fraction <= b / (g.prompt_tokens + len(g.tokens))
    free = model.generate("Count from 1 to 200, separated by commas.", max_tokens=150)
    assert free.peak_kv_bytes > 2 * _budget_bytes(model, b)  # without the budget the cache grows


def test_chunked_prefill_compresses_as_it_reads(model: Any) -> None:
    long = CONTEXT * 3
    q = "Where is the spare key?"
    for press in ("streaming", "keydiff"):
        g = model.generate(long, question=q, max_tokens=8, press=press, kv_budget=128, prefill_chunk=64)
        assert g.kept_fraction < 0.5
        assert g.kv_bytes == _budget_bytes(model, 128)
        # while it was read, the cache never held more than the budget plus one chunk
        assert g.peak_kv_bytes <= _budget_bytes(model, 128 + 64)
        # one prefill then one press holds the whole context first
        one = model.generate(long, question=q, max_tokens=8, press=press, kv_budget=128)
        assert one.kv_bytes == g.kv_bytes
        assert one.peak_kv_bytes >= _budget_bytes(model, one.prompt_tokens - 16)


def test_press_to_budget_on_a_ragged_cache(model: Any) -> None:
    ids = model.prompt_parts(CONTEXT).context
    cache = model.new_cache()
    pre = model.prefill(ids, cache, record_window=32)
    lamina.model.press.apply_press(cache, pre.attention, lamina.kv.AdaKV(), 0.3)
    before = cache.lengths()
    dropped = press_to_budget(cache, lamina.kv.KeyDiff(), 100)
    after = cache.lengths()
    assert after.max() <= 100 and dropped == int((before - after).sum())
    assert np.array_equal(after, np.minimum(before, 100))


def test_budget_arguments_are_checked(model: Any) -> None:
    with pytest.raises(ValueError, match="needs a press"):
        model.generate(CONTEXT, kv_budget=64)
    with pytest.raises(ValueError, match="not both"):
        model.generate(CONTEXT, press="keydiff", compression=0.5, kv_budget=64)
    with pytest.raises(ValueError, match="chunked prefill"):
        model.generate(CONTEXT, press="snapkv", kv_budget=100, prefill_chunk=64, max_tokens=2)
    with pytest.raises(ValueError, match="prefill_chunk needs kv_budget"):
        model.generate(CONTEXT, press="keydiff", prefill_chunk=64)
    with pytest.raises(ValueError, match="scores from the cache alone"):
        press_to_budget(model.new_cache(), lamina.kv.SnapKV(), 10)


def test_attention_press_under_a_budget_leaves_room(model: Any) -> None:
    g = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=6, press="snapkv", kv_budget=120)
    assert g.kv_bytes == _budget_bytes(model, 120)
    assert int(round(g.kept_fraction * (g.prompt_tokens + len(g.tokens)))) <= 120


@pytest.fixture(scope="module")
def prefilled(model: Any) -> Any:
    ids = model.prompt_parts(CONTEXT * 2).context
    cache = model.new_cache()
    pre = model.prefill(ids, cache, record_window=64, accumulate=True)
    return ids, cache, pre


@pytest.mark.parametrize("ratio", [0.5, 0.75])
@pytest.mark.parametrize("press", sorted(lamina.kv.METHODS))
def test_bytes_fall_by_the_compression_ratio(model: Any, prefilled: Any, press: str, ratio: float) -> None:
    ids, cache, pre = prefilled
    c = cache.clone()
    m = lamina.kv.make_method(press)
    if press in lamina.model.press.RECONSTRUCTED:
        scores = model.reconstruction_scores(cache, ids)
    else:
        scores = pre.accumulated if press in lamina.model.press.ACCUMULATED else pre.attention
    keep = lamina.model.press.apply_press(c, scores, m, ratio)
    assert np.array_equal(c.lengths(), keep.lengths)
    # head-wise budgets (adakv, pyramidkv, lava, adakv_criticalkv) hold ragged heads; the bytes
    # still fall by the ratio: the storage is given back, not masked
    assert abs(c.nbytes / cache.nbytes - (1.0 - ratio)) <= 0.05 * (1.0 - ratio), (c.nbytes, cache.nbytes)


PASSKEY = (
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "
    + "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 12
    + "The pass key is 71432. Remember it. 71432 is the pass key. "
    + "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 12
)


def test_passkey_full_and_compressed(model: Any) -> None:
    q = "What is the pass key? Answer with the number only."
    assert "71432" in model.generate(PASSKEY, question=q, max_tokens=12).text
    # KeyDiff at half the cache keeps the needle, question in the window or asked afterwards
    aware = model.generate(PASSKEY + "\n\n" + q, max_tokens=12, press="keydiff", compression=0.5)
    assert "71432" in aware.text and 0.45 < aware.kept_fraction < 0.56
    agnostic = model.generate(PASSKEY, question=q, max_tokens=12, press="keydiff", compression=0.5)
    assert "71432" in agnostic.text
    # StreamingLLM at 90 % keeps only the start and the recent filler: the needle is gone
    lost = model.generate(PASSKEY, question=q, max_tokens=12, press="streaming", compression=0.9)
    assert "71432" not in lost.text


def test_max_accumulation_is_the_max_of_every_row(model: Any) -> None:
    ids = np.asarray(model.prompt_parts(CONTEXT[:300]).context, np.int32)
    T = len(ids)
    cache = model.new_cache()
    _, att, mx = model._native.forward(ids, cache, "none", 2, T, True, True, "max")
    np.testing.assert_array_equal(mx, att.max(axis=2))
    with pytest.raises(ValueError, match="accumulate_reduce"):
        model._native.forward(ids[:4], model.new_cache(), "none", 2, 0, True, True, "mean")


def test_reconstruction_scores_leave_the_cache_and_merge_pieces(model: Any) -> None:
    ids = model.prompt_parts(CONTEXT).context
    cache = model.new_cache()
    model.prefill(ids, cache)
    before = cache.keys(5, 1).copy()
    whole = model.reconstruction_scores(cache, ids)
    c = model.config
    assert whole.shape == (c.n_layers, c.n_heads, len(ids))
    assert cache.n_seen == len(ids) and np.array_equal(cache.keys(5, 1), before)
    # repeated in pieces of 64, every entry is still scored by some query of some piece
    pieces = model.reconstruction_scores(cache, ids, chunk=64)
    assert pieces.shape == whole.shape and (pieces > 0).all()
    with pytest.raises(ValueError, match="exactly"):
        model.reconstruction_scores(cache, ids[:-1])
    with pytest.raises(ValueError, match="reconstruction pass"):
        lamina.model.press.reconstruction_scores(
            model._native,
            cache,
            np.asarray(ids, np.int32),
            model.repeat_instruction,
            context_length=len(ids) + len(model.repeat_instruction) + 8,
        )


def test_kvzip_press_keeps_the_budget_head_wise(model: Any) -> None:
    q = "Where is the spare key?"
    full = model.generate(CONTEXT, question=q, max_tokens=3)
    half = model.generate(CONTEXT, question=q, max_tokens=3, press="kvzip", compression=0.5)
    assert 0.45 < half.kept_fraction < 0.6
    assert half.kv_bytes < 0.7 * full.kv_bytes
    ids = model.prompt_parts(CONTEXT).context
    cache = model.new_cache()
    model.prefill(ids, cache)
    keep = lamina.model.press.apply_press(cache, model.reconstruction_scores(cache, ids), lamina.kv.KVzip(), 0.5)
    lengths = cache.lengths()
    assert int(lengths.sum()) == keep.total == int(len(ids) * 0.5) * lengths.size
    assert len(set(lengths.ravel().tolist())) > 1  # global budgets: heads differ
    budgeted = model.generate(CONTEXT, question=q, max_tokens=3, press="kvzip", kv_budget=96)
    assert budgeted.kept_fraction < 0.7 and budgeted.peak_kv_bytes < full.kv_bytes
