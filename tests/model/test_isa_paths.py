"""Every compiled instruction-set path of the model kernels gives the active path's logits.

LAMINA_SIMD (read once per process) caps the ISA, so each path runs in a subprocess; the
prefill (GEMM), float32 decode (GEMV) and int8-activation decode are compared with this
process's results. Paths differ only in summation order: the float32 paths agree to a few
1e-3 logits; the int8-activation prefill and decode round activations to int8, which turns
those tiny differences into occasional one-step rounding flips, so they are compared by
distribution (KL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lamina

PROMPT = "<|im_start|>user\nName a prime number larger than 10.<|im_end|>"
SCRIPT = """
import sys, numpy as np, lamina.model as lm
from test_isa_paths import PROMPT, results
m = lm.load(threads=1)
np.savez(sys.argv[1], isa=np.array(m.kernel_isa), **results(m))
"""


def results(m: Any) -> dict[str, Any]:
    """Prefill logits of PROMPT and decode logits of its last 3 tokens, int8 and float32 modes."""
    ids = m.tokenize(PROMPT)
    res = {}
    for mode in (True, False):
        m._native.q8_prefill = mode
        res[f"prefill_q8_{mode}"] = m.logits(ids)
    q8 = m.q8_decode
    for mode in (True, False):  # each decode mode after a prefill in the same mode
        m.q8_decode = mode
        m._native.q8_prefill = mode
        c = m.new_cache()
        m.forward(ids[:-3], c, logits="none")
        res[f"decode_q8_{mode}"] = np.stack([m.forward([i], c)[0] for i in ids[-3:]])
    m.q8_decode = q8
    m._native.q8_prefill = True
    return res


def _run(isa: str | None, out: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("LAMINA_SIMD", None)
    if isa:
        env["LAMINA_SIMD"] = isa
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(lamina.__file__).parents[1]), here, *sys.path])
    # (-S only where this process runs without site: an editable install's finder is a site hook)
    flags = ["-S"] if sys.flags.no_site else []
    subprocess.run([sys.executable, *flags, "-c", SCRIPT, str(out)], env=env, check=True, timeout=300)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_isa_path_matches_active(isa: str, tmp_path: Path, model: Any) -> None:
    if isa not in lamina.build_info()["simd_available"]:
        pytest.skip(f"{isa} is not available on this CPU/build")
    if isa == model.kernel_isa:
        pytest.skip(f"{isa} is the active path (checked against the reference in test_forward)")
    base = results(model)
    got = _run(isa, tmp_path / f"{isa}.npz")
    assert str(got["isa"]) == isa
    for key in ("prefill_q8_False", "decode_q8_False"):
        np.testing.assert_allclose(got[key], base[key], atol=3e-3, rtol=0, err_msg=key)
    for key in ("prefill_q8_True", "decode_q8_True"):
        a, b = (x.astype(np.float64) for x in (got[key], base[key]))
        la = a - a.max(-1, keepdims=True)
        la -= np.log(np.exp(la).sum(-1, keepdims=True))
        lb = b - b.max(-1, keepdims=True)
        lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
        assert (np.exp(lb) * (lb - la)).sum(-1).max() < 0.05, key
        assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9, key
