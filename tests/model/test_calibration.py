"""Single-channel hidden-state scaling (lamina.model.calibration, cpp/model.cpp): the native
forward against the numpy reference of the same rule (reference_llama.ChannelRule) on the
prefill, chunked and decode paths; its identities (factor 1 gives the plain logits bit for
bit, last-tokens mode leaves the earlier rows' logits bit for bit); the per-layer hidden
states; the channel statistics on a planted channel; the calibration file (round trip, another
model rejected) and the argument checks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reference_llama import ChannelRule
from test_forward import agreement

import lamina.model
from conftest import TEXTS
from lamina.errors import InvalidInput
from lamina.model.calibration import (
    Calibration,
    Candidate,
    ChannelScaling,
    calibrate,
    calibration_set,
    candidate_channels,
    middle_layers,
    monotonic_layers,
    random_string_corpus,
    smoothness,
)

#: A channel whose scaling moves SmolLM2-135M's logits well beyond rounding (checked below).
CHANNEL = 100
FIRST, LAST = 9, 24


@pytest.fixture(scope="module")
def f32(model: Any) -> Any:
    """Its own float32 model (the session's is shared: its channel setting must not leak)."""
    return lamina.model.load(model.path, threads=2, q8_decode=False, q8_prefill=False)


@pytest.fixture(scope="module")
def ids(model: Any) -> list[int]:
    return list(model.tokenize(TEXTS[1]))


@pytest.fixture(scope="module")
def plain_ref(reference: Any, ids: list[int]) -> Any:
    return reference.logits(ids)


def _set(m: Any, factor: float, last_tokens: int, channel: int = CHANNEL) -> None:
    m.set_channel(ChannelScaling(channel, factor, FIRST, LAST, last_tokens))


@pytest.mark.parametrize("last_tokens", [0, 1, 5], ids=["all", "last", "last5"])
@pytest.mark.parametrize("factor", [-1.0, 0.0])
def test_scaled_prefill_matches_reference(
    f32: Any, reference: Any, ids: list[int], plain_ref: Any, factor: float, last_tokens: int
) -> None:
    _set(f32, factor, last_tokens)
    try:
        got = f32.logits(ids)
    finally:
        f32.set_channel(None)
    want = reference.logits(ids, channel=ChannelRule(FIRST, LAST, CHANNEL, factor, last_tokens))
    kl, agree, _ = agreement(want, got)
    moved = agreement(plain_ref, got)[0]
    assert kl < 1e-6 and agree == 1.0
    # the scaling is visible far beyond the tolerance, so a misplaced one would fail
    assert moved > 1e3 * max(kl, 1e-9), (kl, moved)


def test_last_tokens_mode_leaves_earlier_rows_bit_for_bit(model: Any, ids: list[int]) -> None:
    m = lamina.model.load(model.path, threads=2)  # int8 paths, the runtime's default
    plain = m.logits(ids)
    _set(m, -1.0, 3)
    got = m.logits(ids)
    assert np.array_equal(got[:-3], plain[:-3])
    assert all(not np.allclose(got[t], plain[t], atol=1e-3) for t in (-3, -2, -1))
    _set(m, -1.0, 0)
    every = m.logits(ids)
    assert not np.allclose(every[:-3], plain[:-3], atol=1e-3)  # all positions: every row moves


@pytest.mark.parametrize("last_tokens", [0, 1])
def test_factor_one_gives_the_plain_logits(model: Any, ids: list[int], last_tokens: int) -> None:
    m = lamina.model.load(model.path, threads=2)
    plain = m.logits(ids)
    cache0 = m.new_cache()
    p0, _ = m.forward(ids[:-2], cache0, logits="last")
    d0 = [m.forward([t], cache0)[0] for t in ids[-2:]]
    _set(m, 1.0, last_tokens)
    assert np.array_equal(m.logits(ids), plain)
    cache = m.new_cache()
    p1, _ = m.forward(ids[:-2], cache, logits="last")
    d1 = [m.forward([t], cache)[0] for t in ids[-2:]]
    assert np.array_equal(p0, p1) and all(np.array_equal(a, b) for a, b in zip(d0, d1, strict=True))


def test_decode_steps_match_reference(f32: Any, reference: Any, ids: list[int]) -> None:
    """Prefill then two decode steps (the GEMV path): in last-tokens mode each call's last
    query is scaled — the prefill's last row and both steps — over the scaled keys of every
    entry, the earlier queries plain; with every position scaled, chunks equal one call."""
    P = len(ids) - 2
    for last_tokens, rows in ((1, (P - 1, P, P + 1)), (0, None)):
        _set(f32, -1.0, last_tokens)
        try:
            cache = f32.new_cache()
            first, _ = f32.forward(ids[:P], cache, logits="all")
            steps = [f32.forward([t], cache)[0] for t in ids[P:]]
        finally:
            f32.set_channel(None)
        got = np.vstack([first, *steps])
        want = reference.logits(ids, channel=ChannelRule(FIRST, LAST, CHANNEL, -1.0, last_tokens, rows))
        kl, agree, _ = agreement(want, got)
        assert kl < 1e-6 and agree == 1.0, (last_tokens, kl)


def test_hidden_states_match_reference(f32: Any, reference: Any, ids: list[int]) -> None:
    hidden: list[Any] = []
    reference.logits(ids, hidden=hidden)
    want = np.stack(hidden)
    got = f32.hidden_states(ids)
    assert got.shape == (f32.config.n_layers, len(ids), f32.config.d_model) and got.dtype == np.float32
    scale = np.abs(want).max(axis=(1, 2), keepdims=True)
    assert np.abs(got - want).max() / scale.max() < 1e-5
    assert np.all(np.abs(got - want) <= 1e-4 * scale + 1e-3)


def test_bad_settings_are_rejected(model: Any) -> None:
    m = lamina.model.load(model.path, threads=2)
    c = m.config
    for bad in (
        ChannelScaling(c.d_model, -1.0, 1, 2),
        ChannelScaling(-1, -1.0, 1, 2),
        ChannelScaling(0, -1.0, 5, 5),
        ChannelScaling(0, -1.0, -1, 3),
        ChannelScaling(0, -1.0, 1, c.n_layers + 1),
        ChannelScaling(0, float("nan"), 1, 2),
        ChannelScaling(0, -1.0, 1, 2, last_tokens=-1),
    ):
        with pytest.raises(InvalidInput):
            m.set_channel(bad)
    assert m.channel is None
    with pytest.raises(TypeError):
        m.set_channel({"channel": 0})  # type: ignore[arg-type]
    # a cache filled without the scaled key copy cannot continue under last-tokens scaling
    cache = m.new_cache()
    m.forward([1, 2, 3, 4], cache)
    m.set_channel(ChannelScaling(0, -1.0, 1, 2, last_tokens=1))
    with pytest.raises(ValueError, match="new cache"):
        m.forward([5], cache)
    with pytest.raises(InvalidInput):
        lamina.model.Model(m._file, ms_poe=lamina.model.MsPoE(), channel=ChannelScaling(0, -1.0, 1, 2))


# ---- statistics ------------------------------------------------------------------------------
def _planted(seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    L, T, d = 12, 400, 24
    h = rng.normal(0.0, 1.0, (L, T, d))
    t = np.arange(T) / T
    for layer in range(L):
        h[layer, :, 5] = 3.0 * t + 0.002 * rng.normal(size=T)  # smooth, rising in every layer
        h[layer, :, 11] = 3.0 * t + 0.3 * rng.normal(size=T)  # rising trend, rough
        if layer in (3, 4):
            h[layer, :, 17] = 2.0 * t  # monotonic in only 2 of 12 layers: not a candidate
    return h


def test_statistics_find_a_planted_channel() -> None:
    h = _planted()
    mono = monotonic_layers(h, skip_first=20)
    assert mono[5] == list(range(2, 11))  # layers 2 .. L-2 are examined
    assert len(mono[17]) <= 3
    cands = candidate_channels(h, top=3, skip_first=20)
    assert cands[0].channel == 5
    assert 17 not in [c.channel for c in cands]
    assert [c.smoothness for c in cands] == sorted(c.smoothness for c in cands)
    # the same array with the channels permuted finds the same channel, moved
    perm = np.random.default_rng(1).permutation(h.shape[2])
    assert candidate_channels(h[:, :, perm], top=1, skip_first=20)[0].channel == int(np.flatnonzero(perm == 5)[0])


def test_smoothness_orders_curves() -> None:
    t = np.linspace(0.0, 1.0, 300)
    rng = np.random.default_rng(0)
    smooth, rough = smoothness(t**2), smoothness(t + 0.2 * rng.normal(size=t.size))
    assert float(smooth) < float(rough)
    both = smoothness(np.stack([t**2, t + 0.2 * rng.normal(size=t.size)], axis=1))
    assert both.shape == (2,) and both[0] < both[1]


def test_corpus_and_calibration_set_are_seeded(model: Any) -> None:
    assert random_string_corpus(2, 100, seed=3) == random_string_corpus(2, 100, seed=3)
    assert random_string_corpus(1, 100, seed=3) != random_string_corpus(1, 100, seed=4)

    def count(text: str) -> int:
        return len(model.tokenize(model.chat_prompt(text)))

    a = calibration_set(5, count=count, length=256)
    assert [x.position for x in a] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(count(x.prompt) <= 256 for x in a) and all(x.answer.endswith('"') for x in a)
    assert a == calibration_set(5, count=count, length=256)
    assert middle_layers(32) == (10, 26) and middle_layers(30) == (9, 24)


# ---- the calibration and its file ------------------------------------------------------------
@pytest.fixture(scope="module")
def small_calibration(model: Any) -> Calibration:
    m = lamina.model.load(model.path, threads=2)
    return calibrate(m, samples=2, corpus_texts=1, corpus_tokens=160, length=160, top=2, skip_first=16)


def test_calibrate_picks_the_lowest_loss(small_calibration: Calibration, model: Any) -> None:
    cal = small_calibration
    assert 1 <= len(cal.candidates) <= 2
    losses = {(c.channel, float(f)): v for c in cal.candidates for f, v in c.losses.items()}
    assert len(losses) == 4 * len(cal.candidates)
    s = cal.scaling
    assert min(losses.values()) == cal.loss == losses[(s.channel, s.factor)]
    assert s.last_tokens == (0 if cal.all_positions_loss < cal.loss else 1)
    assert (s.first_layer, s.last_layer) == middle_layers(model.config.n_layers)
    assert np.isfinite(cal.baseline_loss) and cal.baseline_loss > 0


def test_calibration_file_round_trip(small_calibration: Calibration, model: Any, tmp_path: Path) -> None:
    path = tmp_path / "cal.json"
    small_calibration.save(path)
    assert Calibration.load(path) == small_calibration
    m = lamina.model.load(model.path, calibration=path, threads=2)
    assert m.channel == small_calibration.scaling
    assert m._native.channel_scaling == {**small_calibration.scaling.native()}
    # applied: the same logits as setting the scaling by hand
    ids = model.tokenize(TEXTS[0])[:40]
    by_hand = lamina.model.load(model.path, threads=2)
    by_hand.set_channel(small_calibration.scaling)
    assert np.array_equal(m.logits(ids), by_hand.logits(ids))


def test_calibration_for_another_model_is_rejected(small_calibration: Calibration, model: Any, tmp_path: Path) -> None:
    other = replace(small_calibration, model={**small_calibration.model, "checksum": "0" * 64})
    path = tmp_path / "other.json"
    other.save(path)
    with pytest.raises(InvalidInput, match="lamina model calibrate"):
        lamina.model.load(model.path, calibration=path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 1, "model": {}}))
    with pytest.raises(InvalidInput, match="malformed"):
        lamina.model.load(model.path, calibration=bad)
    bad.write_text("not json")
    with pytest.raises(InvalidInput):
        Calibration.load(bad)
    with pytest.raises(FileNotFoundError):
        lamina.model.load(model.path, calibration=tmp_path / "missing.json")
    with pytest.raises(InvalidInput, match="rope"):
        lamina.model.load(model.path, position="ms-poe", calibration=path)


def test_candidate_defaults() -> None:
    c = Candidate(3, [2, 3], 0.5)
    assert c.losses == {}
