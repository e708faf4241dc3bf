"""The model's CUDA path (cuda/model_forward.cu, ``load(device="cuda")``) against its oracle,
the CPU forward with float32 activations, and against the float32 numpy reference on every
tensor encoding. Marked gpu: skipped (with the reason) without a CUDA build or device; with
both, a CUDA path that fails to load fails the run (tests/conftest.py).

The bar is the issue's: top-1 agreement >= 99 % wherever the CPU's top-2 margin exceeds 0.5
logit and mean KL(CPU || CUDA) <= 0.01, over >= 2,000 positions (fp16 weights and KV cache
against float32 activations on the quantised weights)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_forward import agreement
from test_tensor_types import CFG, model_tensors

import lamina.model
from conftest import TEXTS
from lamina import _core
from lamina.errors import InvalidInput
from lamina.model.calibration import ChannelScaling
from lamina.model.position import MsPoE

pytestmark = pytest.mark.gpu

DOC = Path(__file__).resolve().parents[2] / "docs" / "model-side.md"


@pytest.fixture(scope="module")
def cuda_model(model: Any) -> Any:
    m = lamina.model.load(model.path, device="cuda")
    assert m.device == "cuda" and isinstance(m.new_cache(), _core.CudaKVCache)
    return m


@pytest.fixture(scope="module")
def doc_ids(model: Any) -> list[int]:
    ids: list[int] = model.tokenize(DOC.read_text(encoding="utf-8"))
    return ids


def _kl(ref: np.ndarray[Any, Any], got: np.ndarray[Any, Any]) -> float:
    return agreement(np.atleast_2d(ref), np.atleast_2d(got))[0]


def test_logits_match_the_cpu_float32_path(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    # three long chunks (GEMM prefill, unsplit attention) and the short varied texts
    chunks = [doc_ids[i : i + 800] for i in range(0, len(doc_ids), 800)] + [model_f32_decode.tokenize(t) for t in TEXTS]
    refs, gots = [], []
    for ids in chunks:
        got = cuda_model.logits(ids)
        assert got.shape == (len(ids), cuda_model.config.vocab_size) and got.dtype == np.float32
        assert np.isfinite(got).all()
        refs.append(model_f32_decode.logits(ids))
        gots.append(got)
    ref, got = np.concatenate(refs), np.concatenate(gots)
    kl, agree, sure = agreement(ref, got)
    assert len(ref) >= 2000 and sure >= 1000, (len(ref), sure)
    assert kl <= 0.01 and agree >= 0.99, (kl, agree, sure)
    # and it is not trivially close: a shifted comparison is far off (the check can fail)
    assert agreement(ref[1:], got[:-1])[0] > 1.0


def test_decode_steps_equal_the_full_forward(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    ids = doc_ids[:300]
    full = cuda_model.logits(ids)
    cache = cuda_model.new_cache()
    first, _ = cuda_model.forward(ids[:260], cache, logits="all")  # tiled GEMM, one split
    mid, _ = cuda_model.forward(ids[260:265], cache, logits="all")  # 5 tokens: GEMV rows
    rows = [*first, *mid]
    for i in ids[265:]:  # one token over > 256 entries: split-K attention and the merge
        lg, _ = cuda_model.forward([i], cache)
        rows.append(lg)
    steps = np.stack(rows)
    # the same fp16 weights and cache, summed in another order (GEMV / GEMM, split / unsplit)
    np.testing.assert_allclose(steps, full, atol=0.1, rtol=0)
    assert _kl(full, steps) < 1e-4
    top2 = np.sort(full, axis=-1)[:, -2:]
    sure = top2[:, 1] - top2[:, 0] > 0.5
    assert np.array_equal(steps.argmax(-1)[sure], full.argmax(-1)[sure])
    assert cache.n_seen == len(ids) and (cache.lengths() == len(ids)).all()
    last, _ = cuda_model.forward(ids, cuda_model.new_cache(), logits="last")
    np.testing.assert_allclose(last, full[-1], atol=0.1, rtol=0)
    # a decode step after a 1,200-token prefill against the CPU's
    long = doc_ids[:1200]
    gc, cc = cuda_model.new_cache(), model_f32_decode.new_cache()
    cuda_model.forward(long, gc, logits="none")
    model_f32_decode.forward(long, cc, logits="none")
    g, _ = cuda_model.forward([doc_ids[1200]], gc)
    c, _ = model_f32_decode.forward([doc_ids[1200]], cc)
    # the CPU's top-2 margin at this position is 0.046 logit, and fp16 weights alone move the
    # logits by up to 0.017 there (the CPU forward with fp16-rounded weights): the top-1 is
    # compared only past the usual 0.5 margin, the logits themselves always
    assert _kl(c, g) < 0.01 and np.abs(g - c).max() < 0.25
    top2 = np.sort(c)[-2:]
    if top2[1] - top2[0] > 0.5:
        assert int(np.argmax(g)) == int(np.argmax(c))


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q4_0", "Q4_1", "Q8_0"])
def test_every_tensor_type(qtype: str) -> None:
    tensors, ref = model_tensors(qtype)
    m = _core.CudaLlamaModel(CFG, tensors, None)
    assert m.weight_bytes > 0
    ids = [int(i) for i in np.random.default_rng(7).integers(0, int(CFG["vocab_size"]), 40)]
    expected = ref.logits(ids)

    def cache() -> Any:
        return _core.CudaKVCache(int(CFG["n_layers"]), int(CFG["n_kv_heads"]), int(CFG["head_dim"]))

    full, _, _ = m.forward(np.asarray(ids, np.int32), cache(), "all")
    assert full is not None and full.shape == expected.shape
    assert _kl(expected, full) < 1e-3 and np.abs(full - expected).max() < 0.05
    c = cache()
    m.forward(np.asarray(ids[:30], np.int32), c, "none")
    rows = np.stack([m.forward(np.asarray([i], np.int32), c, "last")[0] for i in ids[30:]])
    assert _kl(expected[30:], rows) < 1e-3 and np.abs(rows - expected[30:]).max() < 0.05


def _ms_poe(model: Any, device: str, **ms: Any) -> Any:
    return lamina.model.load(
        model.path, position="ms-poe", ms_poe=MsPoE(**ms), threads=2, q8_decode=False, q8_prefill=False, device=device
    )


def _ranked(share: np.ndarray[Any, Any], n_kv: int, order: str) -> np.ndarray[Any, Any]:
    """The ratio index per (layer, KV head) that the forward assigns from the heads' outlier
    shares (cpp/model.cpp's rule, in float32 as there: a group's mean share, groups sorted by
    it, descending and stable)."""
    L, H = share.shape
    G = H // n_kv
    out = np.empty((L, n_kv), np.int32)
    for layer in range(L):
        score = []
        for g in range(n_kv):
            s = np.float32(0.0)
            for j in range(G):
                s = np.float32(s + np.float32(share[layer, g * G + j]))
            score.append(np.float32(s / np.float32(G)))
        ranked = sorted(range(n_kv), key=lambda g: -score[g])  # stable, as std::stable_sort
        for i, g in enumerate(ranked):
            if order == "rank":
                out[layer, g] = i
            elif order == "gather":
                out[layer, i] = g
            else:  # "normal"
                out[layer, i] = n_kv - 1 - i
    return out


@pytest.mark.parametrize(
    "options",
    [{}, {"order": "gather"}, {"order": "normal"}, {"copy_heads": frozenset({(2, 0), (5, 4), (10, 4), (17, 3)})}],
    ids=["rank", "gather", "normal", "copy-heads"],
)
def test_ms_poe_matches_the_cpu_model(model: Any, cuda_model: Any, options: dict[str, Any]) -> None:
    cpu, gpu = _ms_poe(model, "cpu", **options), _ms_poe(model, "cuda", **options)
    ids = model.tokenize(TEXTS[1])
    cc, gc = cpu.new_cache(), gpu.new_cache()
    ref, _ = cpu.forward(ids[:-4], cc, logits="all")
    got, _ = gpu.forward(ids[:-4], gc, logits="all")
    ri, rg = cc.ratio_index(), gc.ratio_index()
    sc, sg = cc.outlier_share(), gc.outlier_share()
    assert ri is not None and rg is not None and sc is not None and sg is not None
    # The shares are counts over T of probabilities above 3/T: fp16 weights move a few near
    # the threshold by one count, and a one-count change can reorder near-tied KV groups
    # (exact equality of the assignment with the CPU's is not a property of a correct kernel:
    # the CPU with fp16-rounded weights already assigns layer 27 differently with the copy
    # heads). So: the shares agree (max and mean), the device assigns the ratios from its own
    # shares by the rule, and the logits agree below.
    np.testing.assert_allclose(sg, sc, atol=0.05, rtol=0)
    assert np.abs(sg - sc).mean() < 0.005
    first = gpu.ms_poe.first_layer
    assert (rg[:first] == -1).all() and (ri[:first] == -1).all()
    order = options.get("order", "rank")
    assert np.array_equal(rg[first:], _ranked(sg, rg.shape[1], order)[first:]), order
    kl, agree, _ = agreement(ref, got)
    assert kl <= 0.01 and agree >= 0.99, (kl, agree)
    # decode steps keep the cache's assignment
    steps_c = np.stack([cpu.forward([i], cc)[0] for i in ids[-4:]])
    steps_g = np.stack([gpu.forward([i], gc)[0] for i in ids[-4:]])
    assert _kl(steps_c, steps_g) < 0.01
    # and the rescaling changes the model: far from the plain CUDA logits
    assert _kl(cuda_model.logits(ids[:-4]), got) > 10 * kl


def test_ms_poe_unit_ratios_give_the_plain_rope(model: Any, cuda_model: Any) -> None:
    same = _ms_poe(model, "cuda", ratio_min=1.0, ratio_max=1.0)
    ids = model.tokenize(TEXTS[0])
    cache = same.new_cache()
    got, _ = same.forward(ids, cache, logits="all")
    assert cache.ratio_index() is not None  # it did rank the heads
    assert np.array_equal(got, cuda_model.logits(ids))
    rescaled = _ms_poe(model, "cuda")
    assert _kl(cuda_model.logits(ids), rescaled.logits(ids)) > 1e-3


@pytest.mark.parametrize(
    "options",
    [
        {"order": "normal", "window": 8},
        {"order": "normal", "window": 32, "copy_heads": frozenset({(2, 0), (5, 4), (10, 4), (17, 3)})},
        {"window": 32},
    ],
    ids=["window-8", "window-32-copy-heads", "window-32-rank"],
)
def test_ms_poe_window_matches_the_cpu_model(
    model: Any, cuda_model: Any, doc_ids: list[int], options: dict[str, Any]
) -> None:
    """The window variant against its oracle, the CPU forward (same bar as the plain Ms-PoE
    test): a 300-token prefill (keys on both sides of the window in one softmax), decode steps
    over > 256 entries (split-K: the window's boundary inside a split), then a cache compacted
    head by head, where the far / near split is counted from the kept positions."""
    cpu, gpu = _ms_poe(model, "cpu", **options), _ms_poe(model, "cuda", **options)
    ids = doc_ids[:310]
    cc, gc = cpu.new_cache(), gpu.new_cache()
    ref, _ = cpu.forward(ids[:300], cc, logits="all")
    got, _ = gpu.forward(ids[:300], gc, logits="all")
    ri, rg = cc.ratio_index(), gc.ratio_index()
    sg = gc.outlier_share()
    assert ri is not None and rg is not None and sg is not None
    first = gpu.ms_poe.first_layer
    assert (rg[:first] == -1).all()
    order = options.get("order", "rank")
    if order == "normal":  # no scoring: the assignment is the CPU's exactly
        assert np.array_equal(rg, ri)
    else:  # the device assigns from its own shares by the rule (see the plain Ms-PoE test)
        assert np.array_equal(rg[first:], _ranked(sg, rg.shape[1], order)[first:])
    kl, agree, _ = agreement(ref, got)
    assert kl <= 0.01 and agree >= 0.99, (kl, agree)
    # the window changes the model: far from Ms-PoE without it (CPU: mean KL about 0.25)
    no_window = _ms_poe(model, "cuda", **{**options, "window": 0})
    assert _kl(no_window.logits(ids[:300]), got) > 10 * kl
    # decode steps over the 300 entries: one query, three (GEMV rows), one
    steps_c, steps_g = [], []
    for step in ([ids[300]], ids[301:304], [ids[304]]):
        steps_c.append(cpu.forward(step, cc, logits="all")[0])
        steps_g.append(gpu.forward(step, gc, logits="all")[0])
    assert _kl(np.concatenate(steps_c), np.concatenate(steps_g)) < 0.01
    # compacted head by head (ragged positions, some heads short of one key split)
    L, Hk = gpu.config.n_layers, gpu.config.n_kv_heads
    rng = np.random.default_rng(23)
    for layer in range(L):
        for h in range(Hk):
            idx = np.sort(rng.choice(305, size=int(rng.integers(60, 305)), replace=False)).astype(np.int64)
            gc.keep(layer, h, idx)
            cc.keep(layer, h, idx)
    assert np.array_equal(gc.lengths(), cc.lengths())
    steps_c, steps_g = [], []
    for step in ([ids[305]], ids[306:309], [ids[309]]):
        steps_c.append(cpu.forward(step, cc, logits="all")[0])
        steps_g.append(gpu.forward(step, gc, logits="all")[0])
    assert _kl(np.concatenate(steps_c), np.concatenate(steps_g)) < 0.01


def _channel(path: Any, device: str, **kw: Any) -> Any:
    opts: dict[str, Any] = {"channel": 8, "factor": -1.0, "first_layer": 9, "last_layer": 23, **kw}
    m = lamina.model.load(path, device=device, threads=2, q8_decode=False, q8_prefill=False)
    m.set_channel(ChannelScaling(**opts))
    return m


def test_channel_scaling_last_tokens_matches_the_cpu_model(
    cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]
) -> None:
    """The last query of each call scaled over a scaled key copy (the CPU's ``ChannelScaling``
    as oracle): the call's other rows are the plain model's bit for bit, the last row and the
    decode steps (each the last token of its call) follow the CPU's scaled forward. On the CPU
    factor -1 on channel 8 moves this last row by KL 0.14 (measured)."""
    cpu, gpu = _channel(model_f32_decode.path, "cpu"), _channel(model_f32_decode.path, "cuda")
    assert gpu.channel == cpu.channel and gpu.channel is not None
    ids = doc_ids[:300]
    plain = cuda_model.logits(ids[:296])
    cc, gc = cpu.new_cache(), gpu.new_cache()
    ref, _ = cpu.forward(ids[:296], cc, logits="all")
    got, _ = gpu.forward(ids[:296], gc, logits="all")
    assert np.array_equal(got[:-1], plain[:-1])  # plain queries over the plain keys
    assert _kl(ref[-1], got[-1]) < 0.02
    assert _kl(plain[-1], got[-1]) > 0.07  # the scaling is applied, not dropped
    # the cache holds the scaled copy beside the plain keys: fp16 keys, values, scaled keys
    L, Hk, D = gpu.config.n_layers, gpu.config.n_kv_heads, gpu.config.head_dim
    assert gc.nbytes >= 296 * D * 2 * 3 * L * Hk
    twin = gc.clone()
    steps_c = np.stack([cpu.forward([i], cc)[0] for i in ids[296:]])
    steps_g = np.stack([gpu.forward([i], gc)[0] for i in ids[296:]])
    assert _kl(steps_c, steps_g) < 0.02
    # a clone carries the scaled keys: the same steps again
    again = np.stack([gpu.forward([i], twin)[0] for i in ids[296:]])
    np.testing.assert_allclose(again, steps_g, atol=1e-4, rtol=0)
    # a truncated cache decodes as before from the cut
    gc.truncate(297)
    redo, _ = gpu.forward([ids[297]], gc)
    np.testing.assert_allclose(redo, steps_g[1], atol=1e-4, rtol=0)


def test_channel_scaling_every_position_matches_the_cpu_model(
    cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]
) -> None:
    cpu = _channel(model_f32_decode.path, "cpu", last_tokens=0)
    gpu = _channel(model_f32_decode.path, "cuda", last_tokens=0)
    ids = doc_ids[:300]
    ref, _ = cpu.forward(ids, cpu.new_cache(), logits="all")
    got, _ = gpu.forward(ids, gpu.new_cache(), logits="all")
    kl, agree, _ = agreement(ref, got)
    assert kl <= 0.01 and agree >= 0.99, (kl, agree)
    # CPU: KL 0.18 from the plain model over these rows (measured)
    assert _kl(cuda_model.logits(ids), got) > 0.09
    cache = gpu.new_cache()
    gpu.forward(ids[:296], cache, logits="none")
    steps = np.stack([gpu.forward([i], cache)[0] for i in ids[296:]])
    np.testing.assert_allclose(steps, got[296:], atol=0.1, rtol=0)


def test_channel_scaling_factor_one_is_the_plain_model(cuda_model: Any, doc_ids: list[int]) -> None:
    for last_tokens in (1, 0):
        same = _channel(cuda_model.path, "cuda", factor=1.0, last_tokens=last_tokens)
        ids = doc_ids[:120]
        cache = same.new_cache()
        got, _ = same.forward(ids[:118], cache, logits="all")
        assert np.array_equal(got, cuda_model.logits(ids[:118])), last_tokens
        plain_cache = cuda_model.new_cache()
        cuda_model.forward(ids[:118], plain_cache, logits="none")
        for i in ids[118:]:
            assert np.array_equal(same.forward([i], cache)[0], cuda_model.forward([i], plain_cache)[0])
        same.set_channel(None)
        assert same.channel is None


def test_channel_scaling_bad_settings_on_cuda(model: Any, doc_ids: list[int]) -> None:
    gpu = lamina.model.load(model.path, device="cuda")
    with pytest.raises(InvalidInput, match="outside \\[0, d_model"):
        gpu.set_channel(ChannelScaling(channel=100_000, factor=0.0, first_layer=9, last_layer=23))
    with pytest.raises(InvalidInput, match="must satisfy 0 <= first < last <= n_layers"):
        gpu.set_channel(ChannelScaling(channel=8, factor=0.0, first_layer=9, last_layer=99))
    assert gpu.channel is None
    gpu.set_channel(ChannelScaling(channel=8, factor=0.0, first_layer=9, last_layer=23))
    with pytest.raises(NotImplementedError, match="channel scaling"):
        gpu.forward(doc_ids[:16], gpu.new_cache(), record_window=2)
    filled = gpu.new_cache()
    gpu.set_channel(None)
    gpu.forward(doc_ids[:16], filled, logits="none")
    gpu.set_channel(ChannelScaling(channel=8, factor=0.0, first_layer=9, last_layer=23))
    with pytest.raises(ValueError, match="use a new cache"):
        gpu.forward(doc_ids[16:20], filled)
    with pytest.raises(NotImplementedError, match="CPU forward"):
        gpu.hidden_states(doc_ids[:8])


def test_cache_rows_keep_clone_truncate(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    ids = doc_ids[:100]
    L, Hk, D = cuda_model.config.n_layers, cuda_model.config.n_kv_heads, cuda_model.config.head_dim
    gc, cc = cuda_model.new_cache(), model_f32_decode.new_cache()
    cuda_model.forward(ids, gc, logits="none")
    model_f32_decode.forward(ids, cc, logits="none")
    assert gc.nbytes >= len(ids) * D * 2 * 2 * L * Hk
    for l, h in ((0, 0), (L // 2, 1), (L - 1, Hk - 1)):
        for what in ("keys", "values"):
            g, c = getattr(gc, what)(l, h), getattr(cc, what)(l, h)
            assert g.shape == c.shape == (len(ids), D) and g.dtype == np.float32
            scale = np.abs(c).max()
            assert np.abs(g - c).max() <= 0.05 * scale, (what, l, h)
        assert np.array_equal(gc.positions(l, h), np.arange(len(ids)))
    rng = np.random.default_rng(4)
    kept = 0
    before = {(l, h): gc.keys(l, h) for l in range(L) for h in range(Hk)}
    for l in range(L):
        for h in range(Hk):
            idx = np.sort(rng.choice(len(ids), size=int(rng.integers(1, len(ids))), replace=False)).astype(np.int64)
            gc.keep(l, h, idx)
            cc.keep(l, h, idx)
            kept += len(idx)
            assert np.array_equal(gc.keys(l, h), before[(l, h)][idx])
            assert np.array_equal(gc.positions(l, h), idx)
    assert gc.nbytes == kept * D * 2 * 2  # exactly the kept fp16 keys and values
    twin = gc.clone()
    assert twin.nbytes == gc.nbytes and np.array_equal(twin.lengths(), gc.lengths())
    g, _ = cuda_model.forward([doc_ids[100]], twin)
    c, _ = model_f32_decode.forward([doc_ids[100]], cc)
    assert _kl(c, g) < 0.01
    assert gc.n_seen == 100 and twin.n_seen == 101  # the clone is independent
    gc.truncate(50)
    assert gc.n_seen == 50
    for l in range(L):
        for h in range(Hk):
            assert (gc.positions(l, h) < 50).all() and len(gc.positions(l, h)) == int(gc.lengths()[l, h])
    gc.clear()
    assert gc.nbytes == 0 and gc.n_seen == 0


def test_ragged_heads_over_split_attention(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    """Decode steps over a cache compacted head by head to different lengths, some past one
    key split (> 256 entries) and some short of it: split-K attention with per-head lengths,
    empty splits and the merge, against the CPU on the same entries."""
    ids = doc_ids[:700]
    L, Hk = cuda_model.config.n_layers, cuda_model.config.n_kv_heads
    gc, cc = cuda_model.new_cache(), model_f32_decode.new_cache()
    cuda_model.forward(ids, gc, logits="none")
    model_f32_decode.forward(ids, cc, logits="none")
    rng = np.random.default_rng(11)
    for l in range(L):
        for h in range(Hk):
            idx = np.sort(rng.choice(len(ids), size=int(rng.integers(100, len(ids))), replace=False)).astype(np.int64)
            gc.keep(l, h, idx)
            cc.keep(l, h, idx)
    lengths = gc.lengths()
    assert np.array_equal(lengths, cc.lengths()) and lengths.max() > 512 and lengths.min() < 256
    refs, gots = [], []
    for step in ([doc_ids[700]], doc_ids[701:704], [doc_ids[704]]):  # 1 query, 3 (GEMV), 1
        g, _ = cuda_model.forward(step, gc, logits="all")
        c, _ = model_f32_decode.forward(step, cc, logits="all")
        refs.append(c)
        gots.append(g)
    ref, got = np.concatenate(refs), np.concatenate(gots)
    kl, agree, sure = agreement(ref, got)
    assert kl < 0.01 and (sure == 0 or agree == 1.0), (kl, agree, sure)
    assert np.array_equal(gc.lengths(), lengths + 5)


def test_generate_and_cache_scored_presses(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    prompt = "Name three colours of the rainbow."
    g = cuda_model.generate(prompt, max_tokens=12)
    assert g.tokens and g.text and len(g.logprobs) == len(g.tokens) and g.kv_bytes > 0
    ref = model_f32_decode.logits(model_f32_decode.tokenize(model_f32_decode.chat_prompt(prompt)))[-1]
    top2 = np.sort(ref)[-2:]
    if top2[1] - top2[0] > 0.5:
        assert g.tokens[0] == int(np.argmax(ref))
    ctx = cuda_model.detokenize(doc_ids[:600])
    full = cuda_model.generate(ctx, question="What is this page about?", max_tokens=4)
    half = cuda_model.generate(ctx, question="What is this page about?", press="keydiff", compression=0.5, max_tokens=4)
    assert half.kv_bytes < 0.6 * full.kv_bytes and 0.4 < half.kept_fraction < 0.6
    budget = cuda_model.generate(ctx, press="streaming", kv_budget=128, max_tokens=8)
    c = cuda_model.config
    assert budget.kv_bytes == 128 * c.head_dim * 2 * 2 * c.n_layers * c.n_kv_heads


def test_bad_inputs(cuda_model: Any, model: Any) -> None:
    native = cuda_model._native
    cache = cuda_model.new_cache()
    with pytest.raises(InvalidInput):
        cuda_model.logits([cuda_model.config.vocab_size])
    with pytest.raises(InvalidInput):
        cuda_model.logits([])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        native.forward(np.array([10**6], np.int32), cache, "last")
    with pytest.raises(ValueError, match="logits must be"):
        native.forward(np.array([1], np.int32), cache, "every")
    with pytest.raises(TypeError):
        native.forward(np.array([1], np.int32), model.new_cache(), "last")  # a CPU cache
    with pytest.raises(ValueError, match="another model shape"):
        native.forward(np.array([1], np.int32), _core.CudaKVCache(2, 3, 64), "last")
    with pytest.raises(TypeError, match="int32"):
        native.forward(np.array([1], np.int64), cache, "last")
    with pytest.raises(NotImplementedError, match="accumulated attention"):
        cuda_model.prefill([1, 2, 3], cache, accumulate=True)
    with pytest.raises(NotImplementedError, match="accumulated attention"):
        cuda_model.generate("Hello there", press="h2o", compression=0.5, max_tokens=2)
    with pytest.raises(ValueError, match="record_window"):
        native.forward(np.array([1, 2], np.int32), cache, "last", 0, 3)
    assert cache.n_seen == 0  # nothing was committed by the failed calls
    cuda_model.forward([1, 2, 3], cache)
    with pytest.raises(IndexError):
        cache.keys(99, 0)
    with pytest.raises(ValueError, match="strictly increasing"):
        cache.keep(0, 0, np.array([1, 0], np.int64))
    with pytest.raises(ValueError, match="outside the 3 entries"):
        cache.keep(0, 0, np.array([5], np.int64))
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(4)
    cache.keep(0, 0, np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="same number of entries"):
        cuda_model.forward([4, 5], cache, record_window=1)


def test_attention_record_and_window_presses(cuda_model: Any, model_f32_decode: Any, doc_ids: list[int]) -> None:
    """The record (device queries, host softmax over the device keys) against the CPU's, and
    the presses that read it run on CUDA and keep what the CPU keeps (up to near-ties)."""
    ids = doc_ids[:400]
    _, rg = cuda_model.forward(ids[:300], cuda_model.new_cache(), logits="none")
    assert rg is None
    gc, cc = cuda_model.new_cache(), model_f32_decode.new_cache()
    cuda_model.forward(ids[:300], gc, logits="none")
    model_f32_decode.forward(ids[:300], cc, logits="none")
    _, g = cuda_model.forward(ids[300:], gc, logits="none", record_window=16)
    _, c = model_f32_decode.forward(ids[300:], cc, logits="none", record_window=16)
    assert g is not None and c is not None and g.shape == c.shape == (30, 9, 16, 400)
    np.testing.assert_allclose(g.sum(-1), 1.0, atol=1e-4)
    assert (g[:, :, 0, 385:] == 0).all()  # the first window query sees 385 entries
    assert np.abs(g - c).max() < 0.05 and np.abs(g - c).mean() < 1e-3
    ctx = cuda_model.detokenize(doc_ids[:600])
    q = "What is this page about?"
    for press in ("snapkv", "adakv", "pyramidkv", "lava", "criticalkv"):
        gen = cuda_model.generate(ctx, question=q, press=press, compression=0.5, max_tokens=3)
        assert 0.4 < gen.kept_fraction < 0.6, press
    # the same SnapKV selection as the CPU, entry for entry up to near-ties
    from lamina.model.press import apply_press, prefill_for_press, resolve_press

    snap = resolve_press("snapkv")
    ctx_ids = np.asarray(model_f32_decode.tokenize(model_f32_decode.chat_prompt(ctx)), np.int32)
    kept = []
    for m in (cuda_model, model_f32_decode):
        cache = m.new_cache()
        _, scores = prefill_for_press(
            m._native, cache, ctx_ids, snap, 0.5, instruction=(), context_length=8192, threads=2, q8_decode=False
        )
        keep = apply_press(cache, scores, snap, 0.5)
        kept.append({(l, h): set(keep.head(l, h).tolist()) for l in range(30) for h in range(3)})
    same = sum(len(kept[0][k] & kept[1][k]) for k in kept[0]) / sum(len(v) for v in kept[1].values())
    assert same > 0.9, same  # random halves would share about 0.5


def test_ms_poe_record_is_not_implemented_on_cuda(model: Any) -> None:
    gpu = _ms_poe(model, "cuda")
    with pytest.raises(NotImplementedError, match="Ms-PoE"):
        gpu.forward(model.tokenize(TEXTS[0]), gpu.new_cache(), record_window=2)
