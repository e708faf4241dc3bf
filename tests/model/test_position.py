"""Ms-PoE on the native forward (lamina.model.position, cpp/model.cpp) against the numpy
reference of the same rule (reference_llama.MsPoERule), its identities (ratios of 1 give the
plain logits; a cached assignment gives the same logits chunked as in one call), the copy-head
probe and the argument checks of ``lamina.model.load``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from reference_llama import MsPoERule
from test_forward import agreement, prefill_and_compact

import lamina.model
from conftest import TEXTS
from lamina.errors import InvalidInput
from lamina.model.position import MsPoE, copy_head_scores, probe_ids, select_copy_heads


def _load(model: Any, *, q8_decode: bool = True, **ms: Any) -> Any:
    # float32 prefill: the numpy reference's numbers (and head ranking) up to rounding
    return lamina.model.load(
        model.path, position="ms-poe", ms_poe=MsPoE(**ms), threads=2, q8_decode=q8_decode, q8_prefill=False
    )


def _native_logits(m: Any, ids: list[int]) -> tuple[np.ndarray[Any, Any], Any]:
    cache = m.new_cache()
    out, _ = m.forward(ids, cache, logits="all")
    return out, cache


def test_unit_ratios_give_the_plain_logits(model_f32_decode: Any) -> None:
    model = model_f32_decode  # float32 activations, as _load's
    ids = model.tokenize(TEXTS[0])
    plain = model.logits(ids)
    same = _load(model, ratio_min=1.0, ratio_max=1.0)
    got, cache = _native_logits(same, ids)
    assert np.array_equal(got, plain)
    assert cache.ratio_index() is not None  # it did rank the heads
    # the window variant merges two softmaxes: equal up to rounding
    win = _load(model, ratio_min=1.0, ratio_max=1.0, window=8)
    assert np.allclose(_native_logits(win, ids)[0], plain, atol=2e-3)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"order": "gather"},
        {"order": "normal"},
        {"window": 8},
        {"copy_heads": frozenset({(2, 0), (5, 4), (10, 4), (17, 3)})},
    ],
    ids=["rank", "gather", "normal", "window", "copy-heads"],
)
def test_rescaled_forward_matches_reference(model: Any, reference: Any, options: dict[str, Any]) -> None:
    m = _load(model, **options)
    rule = MsPoERule(
        order=options.get("order", "rank"),
        window=options.get("window", 0),
        plain_heads=options.get("copy_heads", frozenset()),
    )
    ids = model.tokenize(TEXTS[1])
    ref = reference.logits(ids, ms_poe=rule)
    got, cache = _native_logits(m, ids)
    idx = cache.ratio_index()
    assert idx is not None
    L = model.config.n_layers
    assert (idx[:2] == -1).all()
    assert [list(idx[li]) for li in range(2, L)] == [rule.assigned[li] for li in range(2, L)]
    kl, agree, sure = agreement(ref, got)
    assert sure > 20 and kl <= 0.01 and agree >= 0.99, (kl, agree)
    # and the rescaling does change the model: far from the plain reference
    plain_kl, _, _ = agreement(reference.logits(ids), got)
    assert plain_kl > 10 * kl


def test_rank_is_the_inverse_of_the_gathered_permutation(model: Any) -> None:
    """On the first rescaled layer (same input for both) rank assigns index k to the group of
    rank k, gather hands group g the index order[g]: rank[gather[k]] == k."""
    ids = model.tokenize(TEXTS[2])
    r = _native_logits(_load(model, order="rank"), ids)[1].ratio_index()
    g = _native_logits(_load(model, order="gather"), ids)[1].ratio_index()
    assert r is not None and g is not None
    n = model.config.n_kv_heads
    for idx in (r, g):
        assert all(sorted(row) == list(range(n)) for row in idx[2:])
    assert [int(r[2][int(j)]) for j in g[2]] == list(range(n))


@pytest.mark.parametrize("window", [0, 8])
def test_cached_assignment_decodes_like_one_call(model: Any, window: int) -> None:
    """With the fixed order the assignment does not depend on the prompt: prefill + chunk +
    decode steps on one cache equal one full forward."""
    m = _load(model, order="normal", window=window, q8_decode=False)
    ids = model.tokenize(TEXTS[1])
    assert len(ids) >= 66
    full, _ = _native_logits(m, ids)
    cache = m.new_cache()
    m.forward(ids[:40], cache, logits="none")
    chunk, _ = m.forward(ids[40:60], cache, logits="all")
    steps = [m.forward([t], cache)[0] for t in ids[60:66]]
    assert chunk is not None and all(s is not None for s in steps)
    assert np.allclose(chunk, full[40:60], atol=1e-3)
    assert np.allclose(np.stack(steps), full[60:66], atol=1e-3)  # type: ignore[arg-type]


def test_a_plain_cache_cannot_be_rescaled(model: Any) -> None:
    m = _load(model)
    cache = model.new_cache()
    model.forward(model.tokenize("Hello"), cache)
    with pytest.raises(ValueError, match="ranked on its first call"):
        m.forward(model.tokenize(" world"), cache)


def test_copy_heads_found_on_the_probe(model: Any) -> None:
    m = _load(model, copy_heads=True)
    assert m.copy_heads and all(0 <= li < model.config.n_layers for li, _ in m.copy_heads)
    ids = probe_ids(model.config.vocab_size, half=64)
    assert ids.shape == (128,) and np.array_equal(ids[:64], ids[64:]) and ids.min() >= 256
    # the found heads do what they are named for on a fresh probe
    cache = model.new_cache()
    _, att = model.forward(probe_ids(model.config.vocab_size, half=64, seed=7), cache, logits="none", record_window=128)
    prev, ind = copy_head_scores(att, 64)
    scores = np.maximum(prev, ind)
    found = np.array([scores[li, h] for li, h in m.copy_heads])
    rest = np.delete(scores.ravel(), [li * model.config.n_heads + h for li, h in m.copy_heads])
    assert found.mean() > 0.4 > rest.mean()


def test_copy_head_scores_on_a_made_up_pattern() -> None:
    half, T = 4, 8
    att = np.zeros((1, 2, T, T), dtype=np.float32)
    att[0, 0, 0, 0] = 1.0
    for t in range(1, T):
        att[0, 0, t, t - 1] = 1.0  # head 0: previous token
        att[0, 1, t, 0] = 1.0  # head 1: the first token
    for t in range(half, T - 1):
        att[0, 1, t, 0] = 0.0
        att[0, 1, t, t - half + 1] = 1.0  # head 1: induction in the second copy
    prev, ind = copy_head_scores(att, half)
    assert prev[0, 0] == 1.0 and ind[0, 0] == 0.0
    assert ind[0, 1] == 1.0 and prev[0, 1] < 0.5
    assert select_copy_heads(prev, ind, 0.9) == frozenset({(0, 0), (0, 1)})
    with pytest.raises(InvalidInput, match="attention must be"):
        copy_head_scores(att[:, :, :4], half)


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"order": "random"}, InvalidInput, "order must be one of"),
        ({"ratio_min": 2.0, "ratio_max": 1.5}, InvalidInput, "ratio_min <= ratio_max"),
        ({"ratio_min": 0.0}, InvalidInput, "0 < ratio_min"),
        ({"ratio_max": float("inf")}, InvalidInput, "ratio_max must be finite"),
        ({"window": -1}, InvalidInput, "window must be >= 0"),
        ({"window": 2.5}, TypeError, "window must be an int"),
        ({"first_layer": True}, TypeError, "first_layer must be an int"),
        ({"copy_threshold": 1.0}, InvalidInput, "copy_threshold"),
        ({"copy_heads": [(1, 2)]}, TypeError, "copy_heads must be"),
        ({"copy_heads": frozenset({(1, -2)})}, InvalidInput, "copy_heads entries"),
    ],
)
def test_ms_poe_options_are_validated(kwargs: dict[str, Any], err: type[Exception], match: str) -> None:
    with pytest.raises(err, match=match):
        MsPoE(**kwargs)


def test_load_checks_position_arguments(model: Any) -> None:
    with pytest.raises(InvalidInput, match="position must be one of rope, ms-poe"):
        lamina.model.load(model.path, position="alibi")
    with pytest.raises(FileNotFoundError):
        lamina.model.load(model.path, calibration="no-such-channels.json")
    with pytest.raises(InvalidInput, match="need position='ms-poe'"):
        lamina.model.load(model.path, ms_poe=MsPoE())
    with pytest.raises(TypeError, match="must be a lamina.model.position.MsPoE"):
        lamina.model.load(model.path, position="ms-poe", ms_poe={"window": 4})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="exceeds the model's 30 layers"):
        lamina.model.load(model.path, position="ms-poe", ms_poe=MsPoE(first_layer=31))
    with pytest.raises(InvalidInput, match="outside"):
        lamina.model.load(model.path, position="ms-poe", ms_poe=MsPoE(copy_heads=frozenset({(30, 0)})))
    m = lamina.model.load(model.path, position="ms-poe")
    assert m.position == "ms-poe" and m.ms_poe == MsPoE() and model.position == "rope"
    assert MsPoE().ratios(3) == pytest.approx([1.2, 1.4, 1.6])


@pytest.mark.parametrize("window", [0, 8])
def test_compacted_rescaled_cache_matches_reference(model: Any, reference: Any, window: int) -> None:
    """A decode step after head-wise compaction of a rescaled cache (its scaled keys compacted
    with the plain ones) attends exactly the kept entries, as the reference masks them."""
    m = _load(model, order="normal", window=window, q8_decode=False)
    ids, cache, keeps = prefill_and_compact(m, TEXTS[1], seed=3)
    got, _ = m.forward(ids[-1:], cache)
    ref = reference.logits(ids, last_keeps=keeps, ms_poe=MsPoERule(order="normal", window=window))[-1]
    assert got is not None
    np.testing.assert_allclose(got, ref, atol=2e-3, rtol=0)
    full = reference.logits(ids, ms_poe=MsPoERule(order="normal", window=window))[-1]
    assert np.abs(full - ref).max() > 0.1  # the compaction changed the answer
