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


def test_kv_budget_holds_during_decoding(model: Any) -> None:
    b = 96
    g = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=40, press="keydiff", kv_budget=b, press_every=16)
    cfg = model.config
    per_entry = 2 * cfg.head_dim * 4 + 4
    # every head holds at most the budget; the allocation stays within the growth slack of it
    assert g.kv_bytes <= 1.15 * b * cfg.n_layers * cfg.n_kv_heads * per_entry
    assert g.prompt_tokens > b and g.tokens


def test_chunked_prefill_compresses_as_it_reads(model: Any) -> None:
    long = CONTEXT * 3
    g = model.generate(long, question="Where is the spare key?", max_tokens=8, press="streaming", kv_budget=128, prefill_chunk=64)
    cfg = model.config
    assert g.kept_fraction < 0.5
    assert g.kv_bytes <= 1.15 * 128 * cfg.n_layers * cfg.n_kv_heads * (2 * cfg.head_dim * 4 + 4)
    # the same budget without chunks ends with the same cache size
    one = model.generate(long, question="Where is the spare key?", max_tokens=8, press="streaming", kv_budget=128)
    assert abs(one.kv_bytes - g.kv_bytes) <= 0.15 * one.kv_bytes


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
    cfg = model.config
    assert g.kv_bytes <= 1.15 * 120 * cfg.n_layers * cfg.n_kv_heads * (2 * cfg.head_dim * 4 + 4)
