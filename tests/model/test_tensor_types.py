"""Every tensor encoding the runtime reads (F32, F16, Q4_0, Q4_1, Q8_0) through every path of
the forward — float32 prefill (GEMM on dequantised panels), int8 prefill (the packed integer
GEMM, several token blocks and a cut one), float32 decode and int8-activation decode (the
packed integer GEMV) — on a small random model quantised by ``gguf`` itself, against the
float32 numpy reference on the same (dequantised) weights. The vocabulary (90 rows) is not a
multiple of the 16-row groups of the packed layout, so the padding rows are exercised too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from reference_llama import ReferenceLlama

from lamina import _core

CFG = {
    "n_layers": 2,
    "d_model": 64,
    "d_ff": 96,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 16,
    "vocab_size": 90,
    "rope_base": 10000.0,
    "rms_eps": 1e-5,
}
NAMES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def _shapes() -> dict[str, tuple[int, int]]:
    d, f, qd, kd = CFG["d_model"], CFG["d_ff"], CFG["n_heads"] * CFG["head_dim"], CFG["n_kv_heads"] * CFG["head_dim"]
    return {
        "attn_q": (qd, d),
        "attn_k": (kd, d),
        "attn_v": (kd, d),
        "attn_output": (d, qd),
        "ffn_gate": (f, d),
        "ffn_up": (f, d),
        "ffn_down": (d, f),
    }


def _build(qtype: str, seed: int = 0) -> tuple[Any, ReferenceLlama]:
    """(native model, reference) with every matrix stored as ``qtype``."""
    tensors, ref = model_tensors(qtype, seed)
    return _core.LlamaModel(CFG, tensors, None), ref


def model_tensors(qtype: str, seed: int = 0) -> tuple[dict[str, Any], ReferenceLlama]:
    """(the tensors dict the native models take, reference) of a random model with every
    matrix stored as ``qtype`` (tests/model/test_cuda_forward.py builds its CUDA twin)."""
    from gguf import GGMLQuantizationType, dequantize, quantize

    rng = np.random.default_rng(seed)
    t = GGMLQuantizationType[qtype]

    def mat(rows: int, cols: int) -> tuple[tuple[str, Any], np.ndarray[Any, Any]]:
        w = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        if qtype == "F32":
            return ("F32", w), w
        stored = quantize(w, t)
        return (qtype, stored), np.ascontiguousarray(dequantize(stored, t).reshape(rows, cols), np.float32)

    def norm(n: int) -> np.ndarray[Any, Any]:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    d = int(CFG["d_model"])
    tensors: dict[str, Any] = {}
    layers = []
    for i in range(int(CFG["n_layers"])):
        layer: dict[str, Any] = {}
        for name, (r, c) in _shapes().items():
            tensors[f"blk.{i}.{name}.weight"], layer[name] = mat(r, c)
        for name in ("attn_norm", "ffn_norm"):
            layer[name] = norm(d)
            tensors[f"blk.{i}.{name}.weight"] = ("F32", layer[name])
        layers.append(layer)
    tensors["token_embd.weight"], emb = mat(int(CFG["vocab_size"]), d)
    out_norm = norm(d)
    tensors["output_norm.weight"] = ("F32", out_norm)
    ref = ReferenceLlama(
        n_layers=int(CFG["n_layers"]),
        n_heads=int(CFG["n_heads"]),
        n_kv=int(CFG["n_kv_heads"]),
        head_dim=int(CFG["head_dim"]),
        rope_base=float(CFG["rope_base"]),
        eps=float(CFG["rms_eps"]),
        emb=emb,
        out=emb,  # tied output
        out_norm=out_norm,
        layers=layers,
    )
    return tensors, ref


def _kl(ref: np.ndarray[Any, Any], got: np.ndarray[Any, Any]) -> float:
    def lsm(z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        z = z.astype(np.float64) - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))  # type: ignore[no-any-return]

    lp, lq = lsm(ref), lsm(got)
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


def _cache() -> Any:
    return _core.KVCache(int(CFG["n_layers"]), int(CFG["n_kv_heads"]), int(CFG["head_dim"]))


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q4_0", "Q4_1", "Q8_0"])
def test_every_tensor_type_on_every_path(qtype: str) -> None:
    native, ref = _build(qtype)
    ids = [int(i) for i in np.random.default_rng(7).integers(0, int(CFG["vocab_size"]), 40)]
    expected = ref.logits(ids)
    native.q8_prefill = False  # float32 activations on dequantised panels
    prefill, _, _ = native.forward(np.asarray(ids, np.int32), _cache(), "all", 2, 0, True, False)
    np.testing.assert_allclose(prefill, expected, atol=2e-3, rtol=0)
    native.q8_prefill = True  # the integer GEMM (int8 activations), the default
    prefill, _, _ = native.forward(np.asarray(ids, np.int32), _cache(), "all", 2, 0, True, False)
    if qtype in ("F32", "F16"):  # float matrices always take the float path
        np.testing.assert_allclose(prefill, expected, atol=2e-3, rtol=0)
    else:
        assert _kl(expected, prefill) < 2e-3 and np.abs(prefill - expected).max() < 0.1
    for q8 in (False, True):
        native.q8_prefill = q8
        cache = _cache()
        native.forward(np.asarray(ids[:30], np.int32), cache, "none", 2, 0, q8, False)
        rows = np.stack(
            [native.forward(np.asarray([i], np.int32), cache, "last", 2, 0, q8, False)[0] for i in ids[30:]]
        )
        if not q8:  # float32 activations: the reference's numbers up to rounding
            np.testing.assert_allclose(rows, expected[30:], atol=2e-3, rtol=0)
        else:  # int8 activations (llama.cpp's scheme): close in distribution
            assert _kl(expected[30:], rows) < 2e-3
            assert np.abs(rows - expected[30:]).max() < 0.1


def test_rows_past_the_last_group_do_not_leak() -> None:
    # 90 vocabulary rows: the last 16-row group holds 10 real rows and 6 of padding. The
    # logits of a decode step must have exactly the vocabulary's length and the real rows'
    # values (the reference's) — a padding row written past the end would corrupt them.
    native, ref = _build("Q4_1", seed=3)
    ids = [5, 17, 89, 0, 42]
    expected = ref.logits(ids)[-1]
    cache = _cache()
    native.forward(np.asarray(ids[:-1], np.int32), cache, "none", 1, 0, True, False)
    last, _, _ = native.forward(np.asarray(ids[-1:], np.int32), cache, "last", 1, 0, True, False)
    assert last.shape == (90,)
    assert _kl(expected[None], last[None]) < 2e-3
