"""Host side of the model's CUDA path, tested without a GPU: every GGUF encoding dequantised to
the fp16 weights the device forward uploads (lamina/model_f16.hpp) against ``gguf``'s own
dequantisation rounded by numpy, the float32 -> binary16 rounding on its edge cases, the
argument checks, and what ``load(device=...)`` says when it cannot run on CUDA."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina.model
from lamina import _core
from lamina.errors import InvalidInput


def _same_halves(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    assert got.dtype == np.float16 and got.shape == want.shape
    g, w = got.view(np.uint16), want.astype(np.float16).view(np.uint16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    bad = np.flatnonzero((g != w) & ~nan)
    assert bad.size == 0, (got.ravel()[bad[:5]], want.ravel()[bad[:5]])


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q4_0", "Q4_1", "Q8_0"])
def test_every_encoding_matches_gguf_rounded_to_half(qtype: str) -> None:
    from gguf import GGMLQuantizationType, dequantize, quantize

    rng = np.random.default_rng(11)
    rows, cols = 37, 160  # rows not a multiple of anything; 5 blocks of 32 per row
    w = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3.0, (rows, 1))).astype(np.float32)
    t = GGMLQuantizationType[qtype]
    if qtype == "F32":
        stored: np.ndarray[Any, Any] = w
        want = w
    elif qtype == "F16":
        stored = w.astype(np.float16)
        want = stored.astype(np.float32)
    else:
        stored = quantize(w, t)
        assert stored.dtype == np.uint8
        want = np.asarray(dequantize(stored, t), np.float32).reshape(rows, cols)
    got = _core.model_dequantize_f16(qtype, stored)
    _same_halves(got, want)
    # and the values are those of the weights (Q4_0 clips the side opposite its largest value at 7/8 of it: within 1/8 of the row's range)
    err = np.abs(got.astype(np.float32) - w)
    bound = (1e-3 if qtype in ("F32", "F16") else 0.13) * np.abs(w).max(axis=1, keepdims=True)
    assert (err <= bound).all()


def test_float32_to_half_rounding_edges() -> None:
    ulp = 2.0**-10
    edges = np.array(
        [
            0.0,
            -0.0,
            1.0 + ulp / 2,  # tie: to even (1.0)
            1.0 + 3 * ulp / 2,  # tie: to even (1 + 2 ulp)
            1.0 + ulp / 2 + 2.0**-20,  # just above the tie: up
            65504.0,  # the largest half
            65519.99,  # rounds down to 65504
            65520.0,  # rounds to inf
            1e30,
            -1e30,
            2.0**-14,  # the smallest normal
            2.0**-24,  # the smallest subnormal
            2.0**-25,  # half of it: tie to 0
            3 * 2.0**-25,  # tie between 1 and 2 subnormal units: to 2
            2.0**-26,
            1e-45,  # a float32 subnormal
            np.inf,
            -np.inf,
            np.nan,
            2.0**-15 + 2.0**-25,  # a subnormal half with a remainder
            (1 - 2.0**-11) * 2.0**-14,  # rounds up into the smallest normal
        ],
        dtype=np.float32,
    )
    with np.errstate(over="ignore"):
        _same_halves(_core.model_dequantize_f16("F32", edges[None, :]), edges[None, :])
    # a sweep of random bit patterns (NaNs compared as NaN)
    bits = np.random.default_rng(5).integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32).reshape(400, 500)
    with np.errstate(over="ignore", invalid="ignore"):
        _same_halves(_core.model_dequantize_f16("F32", x), x)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="not supported"):
        _core.model_dequantize_f16("Q5_K", np.zeros((2, 22), np.uint8))
    with pytest.raises(ValueError, match="whole number of Q4_0 blocks"):
        _core.model_dequantize_f16("Q4_0", np.zeros((2, 20), np.uint8))
    with pytest.raises(TypeError, match=r"\(F16\) must be a float16 numpy array"):
        _core.model_dequantize_f16("F16", np.zeros((2, 8), np.float32))
    with pytest.raises(TypeError, match="must have dtype float32"):
        _core.model_dequantize_f16("F32", np.zeros((2, 8), np.int32))
    with pytest.raises(ValueError, match="2-dimensional"):
        _core.model_dequantize_f16("F32", np.zeros(8, np.float32))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        _core.model_dequantize_f16("F32", [[1.0, 2.0]])


def test_load_says_why_cuda_cannot_run(model: Any) -> None:
    with pytest.raises(InvalidInput, match="device must be one of cpu, cuda"):
        lamina.model.load(model.path, device="tpu")
    if _core.has_cuda() and _core.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present: tests/model/test_cuda_forward.py runs the CUDA path")
    reason = "needs a CUDA build" if not _core.has_cuda() else "no usable CUDA device"
    with pytest.raises(RuntimeError, match=reason):
        lamina.model.load(model.path, device="cuda")


def test_window_attention_rows_match_numpy() -> None:
    """The CUDA path's attention record (computed on the host from the device's queries and
    keys) against a numpy softmax: grouped heads, causal rows, zeros past each row's end."""
    rng = np.random.default_rng(2)
    w, H, Hk, D, S = 5, 6, 2, 16, 23
    q = rng.standard_normal((w, H, D)).astype(np.float32)
    keys = rng.standard_normal((Hk, S, D)).astype(np.float32)
    got = _core.model_window_attention_rows(q, keys, threads=2)
    assert got.shape == (H, w, S) and got.dtype == np.float32
    for hh in range(H):
        for i in range(w):
            n = S - w + i + 1
            s = keys[hh // (H // Hk), :n] @ q[i, hh] / np.sqrt(D)
            p = np.exp(s - s.max())
            np.testing.assert_allclose(got[hh, i, :n], p / p.sum(), rtol=1e-5, atol=1e-7)
            assert (got[hh, i, n:] == 0).all()
    with pytest.raises(ValueError, match="window"):
        _core.model_window_attention_rows(np.zeros((S + 1, H, D), np.float32), keys)
    with pytest.raises(ValueError, match="head shape"):
        _core.model_window_attention_rows(np.zeros((w, 5, D), np.float32), keys)
    with pytest.raises(ValueError, match="head_dim"):
        _core.model_window_attention_rows(np.zeros((w, H, 8), np.float32), keys)
