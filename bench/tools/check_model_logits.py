"""lamina.model's logits against the independent float32 numpy reference, over >= 2,000 positions.

The issue's bar: top-1 agreement >= 99 % wherever the reference's top-2 margin exceeds 0.5
logit, and mean KL(reference || lamina) <= 0.01. Texts: chunks of this repository's own files
(English prose, Python, C++, Markdown) rendered as they are, plus one ChatML conversation.
Paths: the prefill (``Model.logits``) as an integer GEMM on int8 activations (the default) and
with float32 activations on dequantised panels (``q8_prefill=False``); with ``--decode`` also
token-by-token decode with int8 activations (the default) and with float32 activations.

    PYTHONPATH=python:tests/model python bench/tools/check_model_logits.py --positions 2000 --decode
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "model"))

SOURCES = [
    "README.md",
    "python/lamina/kv/__init__.py",
    "cpp/model.cpp",
    "python/lamina/memory/memory.py",
    "python/lamina/model/runtime.py",
]
CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat are three good habits for writing maintainable software?<|im_end|>\n"
    "<|im_start|>assistant\nWrite small functions with clear names, test the behaviour that matters, "
    "and review changes with a colleague before they are merged.<|im_end|>\n"
)


def _log_softmax(z: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    z = z.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))  # type: ignore[no-any-return]


def compare(ref: np.ndarray[Any, Any], got: np.ndarray[Any, Any]) -> dict[str, float]:
    lp, lq = _log_softmax(ref), _log_softmax(got)
    kl = (np.exp(lp) * (lp - lq)).sum(-1)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    sure = (top2[:, 1] - top2[:, 0]) > 0.5
    agree = ref.argmax(-1) == got.argmax(-1)
    return {
        "positions": int(len(ref)),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "top1_all": float(agree.mean()),
        "confident_positions": int(sure.sum()),
        "top1_confident": float(agree[sure].mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--positions", type=int, default=2000)
    ap.add_argument("--chunk", type=int, default=400, help="tokens per text (one forward each)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode", action="store_true", help="also check token-by-token decode (slow)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    from reference_llama import ReferenceLlama

    import lamina.model as lm

    m = lm.load(threads=args.threads)
    m_f32 = lm.load(threads=args.threads, q8_decode=False, q8_prefill=False)
    ref_model = ReferenceLlama.open(m.path)
    texts: list[list[int]] = [m.tokenize(CHAT)]
    for src in SOURCES:
        ids = m.tokenize((ROOT / src).read_text(encoding="utf-8"))
        texts.extend(ids[i : i + args.chunk] for i in range(0, len(ids) - args.chunk + 1, args.chunk))
    chosen, n = [], 0
    for ids in texts:
        if n >= args.positions:
            break
        chosen.append(ids)
        n += len(ids)
    refs, gots, gots_f32, dec_q8, dec_f32 = [], [], [], [], []
    t0 = time.perf_counter()
    for ids in chosen:
        refs.append(ref_model.logits(ids))
        gots.append(m.logits(ids))
        gots_f32.append(m_f32.logits(ids))
        if args.decode:
            for mm, acc in ((m, dec_q8), (m_f32, dec_f32)):
                cache = mm.new_cache()
                acc.append(np.stack([mm.forward([i], cache)[0] for i in ids]))
    ref = np.concatenate(refs)
    result: dict[str, Any] = {
        "model": str(m.path.name),
        "kernel_isa": m.kernel_isa,
        "machine": platform.processor() or platform.machine(),
        "texts": len(chosen),
        "prefill": compare(ref, np.concatenate(gots)),
        "prefill_f32": compare(ref, np.concatenate(gots_f32)),
    }
    if args.decode:
        result["decode_q8"] = compare(ref, np.concatenate(dec_q8))
        result["decode_f32"] = compare(ref, np.concatenate(dec_f32))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    for k in ("prefill", "prefill_f32", "decode_q8", "decode_f32"):
        if k in result:
            r = result[k]
            ok = r["mean_kl"] <= 0.01 and r["top1_confident"] >= 0.99
            print(
                f"{k:11s} positions {r['positions']}  mean KL {r['mean_kl']:.2e}  max KL {r['max_kl']:.3f}  "
                f"top-1 {r['top1_all']:.4f}  top-1 where margin>0.5 {r['top1_confident']:.4f} "
                f"({r['confident_positions']})  bar {'met' if ok else 'NOT met'}"
            )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
