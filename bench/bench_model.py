"""lamina.model speed on a GGUF model: prefill and decode tokens/s, decode latency against KV
length with and without compression, peak resident memory — and llama.cpp on the same file and
thread count when llama-cpp-python is installed.

Bars (issue 22), same machine, GGUF and threads: prefill >= 2x llama.cpp's tokens/s, decode
>= 1.0x; decode at 8k tokens with 75 % of the cache removed >= 2.5x faster than with the full
cache. The machine may be shared: every number is the best of ``--repeat`` rounds, the script
prints the load average at start and end and the process CPU time beside every wall time.

    PYTHONPATH=python python bench/bench_model.py --threads 2 --out /tmp/model_bench.json

``--device cuda`` runs the same measurements on the fp16 CUDA forward (``load(device="cuda")``;
llama.cpp is not run then: its numbers here are CPU numbers) and ends with a short table;
bench/tools/gpu_check.sh runs it that way.

Backtracking's candidates (issue 23): ``--candidates 8`` also times B candidate
continuations of one rolled-back cache — B clones decoded one after another (B · steps
single-token forwards) against one batched decode per step (``Model.forward_batch``), the
same tokens teacher-forced in both — and the whole ``ChainSession.resample`` (8 candidates
at T = 1, same seeds, so the same candidates) batched and not. ``--only candidates`` runs
just that section.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - w0, _cpu() - c0


def _text_ids(m: Any, n: int) -> list[int]:
    """n token ids of real text (this repository's README, repeated)."""
    root = Path(__file__).resolve().parents[1]
    ids = m.tokenize((root / "README.md").read_text(encoding="utf-8"))
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]  # type: ignore[no-any-return]


def _best_decode(m: Any, cache: Any, ids: list[int], steps: int, repeat: int) -> tuple[float, float]:
    """Best (wall, CPU) seconds per token over ``repeat`` rounds of ``steps`` decode steps
    (ids supplies steps * repeat tokens; the cache grows by them)."""
    best = (float("inf"), float("inf"))
    for r in range(repeat):
        chunk = ids[r * steps : (r + 1) * steps]
        w, c = _timed(lambda chunk=chunk: [m.forward([i], cache) for i in chunk])
        best = min(best, (w / steps, c / steps))
    return best


def bench_lamina(m: Any, prefill: list[int], decode_steps: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for n in prefill:
        ids = _text_ids(m, n + decode_steps * repeat)
        wall, cpu = float("inf"), float("inf")
        for _ in range(repeat):
            cache = m.new_cache()
            w, c = _timed(lambda ids=ids, n=n, cache=cache: m.forward(ids[:n], cache, logits="last"))
            wall, cpu = min(wall, w), min(cpu, c)
        dw, dc = _best_decode(m, cache, ids[n:], decode_steps, repeat)
        rows.append(
            {
                "tokens": n,
                "prefill_tok_s": n / wall,
                "prefill_cpu_ms_per_tok": 1e3 * cpu / n,
                "decode_tok_s": 1.0 / dw,
                "decode_cpu_ms_per_tok": 1e3 * dc,
            }
        )
        print(
            f"lamina    prefill {n:5d}: {n / wall:7.1f} tok/s ({1e3 * cpu / n:.2f} CPU ms/tok)   "
            f"decode after {n}: {1.0 / dw:6.1f} tok/s ({1e3 * dc:.1f} CPU ms/tok)"
        )
    return rows


def bench_llama_cpp(path: Path, threads: int, prefill: list[int], decode_steps: int) -> list[dict[str, Any]] | None:
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        print(
            "llama.cpp: llama-cpp-python is not installed (it builds from source, ~30 min on 2 cores: "
            "pip install llama-cpp-python); printing lamina's numbers only"
        )
        return None
    llm = Llama(model_path=str(path), n_ctx=max(prefill) + decode_steps + 8, n_threads=threads, verbose=False)
    rows = []
    for n in prefill:
        rng = np.random.default_rng(0)
        ids = [int(i) for i in rng.integers(100, 40000, n + decode_steps)]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids[:n])
        pw = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in ids[n:]:
            llm.eval([i])
        dw = time.perf_counter() - t0
        rows.append({"tokens": n, "prefill_tok_s": n / pw, "decode_tok_s": decode_steps / dw})
        print(f"llama.cpp prefill {n:5d}: {n / pw:7.1f} tok/s   decode after {n}: {decode_steps / dw:6.1f} tok/s")
    return rows


def bench_kv_lengths(m: Any, lengths: list[int], compression: float, steps: int, repeat: int) -> list[dict[str, Any]]:
    import lamina.kv
    from lamina.model.press import apply_press

    rows = []
    for S in lengths:
        ids = _text_ids(m, S + 2 * steps * repeat)
        cache = m.new_cache()
        m.forward(ids[:S], cache, logits="none")
        for k, comp in enumerate((0.0, compression)):
            if comp > 0:
                # StreamingLLM needs no attention record; the decode cost depends only on what is kept
                apply_press(cache, None, lamina.kv.StreamingLLM(), comp)
            kv, held = cache.nbytes, int(cache.lengths()[0, 0])
            off = S + k * steps * repeat
            dw, dc = _best_decode(m, cache, ids[off : off + steps * repeat], steps, repeat)
            rows.append(
                {
                    "kv_tokens": S,
                    "compression": comp,
                    "held_per_head": held,
                    "kv_bytes": kv,
                    "step_ms": 1e3 * dw,
                    "cpu_ms": 1e3 * dc,
                }
            )
            print(
                f"decode step after {S:5d} tokens, {int(comp * 100):2d} % removed ({held:5d} held per head): "
                f"{1e3 * dw:6.1f} ms ({1e3 * dc:.1f} CPU ms), KV {kv / 2**20:7.1f} MiB"
            )
        full, comp_row = rows[-2], rows[-1]
        print(
            f"   -> at {S}: {full['step_ms'] / comp_row['step_ms']:.2f}x faster wall, "
            f"{full['cpu_ms'] / comp_row['cpu_ms']:.2f}x less CPU, KV bytes x{comp_row['kv_bytes'] / full['kv_bytes']:.3f}"
        )
    return rows


def bench_candidates(m: Any, prefix: int, candidates: int, steps: int, repeat: int) -> dict[str, Any]:
    """B continuations of one cache holding ``prefix`` tokens: one after another against one
    batched decode step per token (the same ids in both), then ``resample`` both ways."""
    from lamina.model.backtrack import ChainSession

    ids = _text_ids(m, prefix + candidates + steps)
    base = m.new_cache()
    m.forward(ids[:prefix], base, logits="none")
    # candidate b continues with ids[prefix + b :]: every sequence its own tokens
    conts = [ids[prefix + b : prefix + b + steps] for b in range(candidates)]

    def one_by_one() -> None:
        for b in range(candidates):
            c = base.clone()
            for t in conts[b]:
                m.forward([t], c)

    def batched() -> None:
        cs = [base.clone() for _ in range(candidates)]
        for k in range(steps):
            m.forward_batch([conts[b][k] for b in range(candidates)], cs)

    seq = min((_timed(one_by_one) for _ in range(repeat)), key=lambda x: x[0])
    bat = min((_timed(batched) for _ in range(repeat)), key=lambda x: x[0])
    session = ChainSession(m, "A shop sells pens at 3 dollars each. How much do 7 pens and a 5 dollar notebook cost?")
    session.extend(["7 pens cost 7 * 3 = 21 dollars."])

    def resample(batch: bool) -> None:
        s = session.fork()
        s.resample("The notebook costs 5 dollars.", candidates=candidates, temperature=1.0, seed=0, batched=batch)

    rs = min((_timed(lambda: resample(False)) for _ in range(repeat)), key=lambda x: x[0])
    rb = min((_timed(lambda: resample(True)) for _ in range(repeat)), key=lambda x: x[0])
    row = {
        "prefix_tokens": prefix,
        "candidates": candidates,
        "steps": steps,
        "sequential_s": seq[0],
        "sequential_cpu_s": seq[1],
        "batched_s": bat[0],
        "batched_cpu_s": bat[1],
        "speedup": seq[0] / bat[0],
        "resample_sequential_s": rs[0],
        "resample_sequential_cpu_s": rs[1],
        "resample_batched_s": rb[0],
        "resample_batched_cpu_s": rb[1],
        "resample_speedup": rs[0] / rb[0],
    }
    print(
        f"{candidates} candidates x {steps} tokens after {prefix}: one after another {seq[0]:.3f} s "
        f"({seq[1]:.3f} CPU s), one batch per step {bat[0]:.3f} s ({bat[1]:.3f} CPU s): {row['speedup']:.2f}x; "
        f"resample (T = 1, same seeds) {rs[0]:.3f} s ({rs[1]:.3f} CPU s) vs {rb[0]:.3f} s ({rb[1]:.3f} CPU s): "
        f"{row['resample_speedup']:.2f}x"
    )
    return row


def table(result: dict[str, Any]) -> str:
    """A short summary table of a run's results (prefill/decode tokens/s, decode step by KV length)."""
    lines = [f"model bench on {result['device']} ({Path(result['model']).name})", "| stage | value |", "|---|---|"]
    for r in result.get("lamina", []):
        lines.append(f"| prefill {r['tokens']} tokens | {r['prefill_tok_s']:.0f} tok/s |")
        lines.append(f"| decode after {r['tokens']} | {r['decode_tok_s']:.1f} tok/s |")
    for r in result.get("kv_lengths", []):
        lines.append(
            f"| decode step at {r['kv_tokens']}, {int(r['compression'] * 100)} % removed | "
            f"{r['step_ms']:.2f} ms (KV {r['kv_bytes'] / 2**20:.1f} MiB) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: packaged SmolLM2-135M)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many rounds (the machine may be shared)")
    ap.add_argument("--kv-lengths", type=int, nargs="+", default=[512, 2048, 8000])
    ap.add_argument("--compression", type=float, default=0.75)
    ap.add_argument("--q8-decode", type=int, default=1, help="1: int8 activations on decode steps (default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the forward runs")
    ap.add_argument("--candidates", type=int, default=0, help="also time B backtracking candidates (0: skip)")
    ap.add_argument("--candidate-steps", type=int, default=32, help="tokens per candidate")
    ap.add_argument("--candidate-prefix", type=int, default=400, help="tokens in the cache the candidates share")
    ap.add_argument("--only", choices=["candidates"], default=None, help="run only this section")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import lamina.model as lm

    load0 = os.getloadavg()
    m = lm.load(args.model, threads=args.threads, q8_decode=bool(args.q8_decode), device=args.device)
    print(f"{m}\nthreads {args.threads}, machine {platform.machine()} {platform.processor()}, load average {load0}")
    result: dict[str, Any] = {
        "model": str(m.path),
        "threads": args.threads,
        "kernel_isa": m.kernel_isa,
        "q8_decode": bool(args.q8_decode),
        "load_average_start": load0,
        "device": args.device,
    }
    if args.candidates > 0:
        result["candidates"] = bench_candidates(
            m, args.candidate_prefix, args.candidates, args.candidate_steps, args.repeat
        )
    if args.only == "candidates":
        result["load_average_end"] = os.getloadavg()
        print(f"load average at end {result['load_average_end']}")
        if args.out:
            args.out.write_text(json.dumps(result, indent=2))
        return
    result["lamina"] = bench_lamina(m, args.prefill, args.decode_steps, args.repeat)
    if args.device == "cpu":
        result["llama_cpp"] = bench_llama_cpp(m.path, args.threads, args.prefill, args.decode_steps)
    else:
        print("llama.cpp: not run with --device cuda (lamina's GPU numbers are not comparable to it)")
        result["llama_cpp"] = None
    if result["llama_cpp"]:
        for a, b in zip(result["lamina"], result["llama_cpp"]):
            print(
                f"ratio at {a['tokens']}: prefill {a['prefill_tok_s'] / b['prefill_tok_s']:.2f}x, "
                f"decode {a['decode_tok_s'] / b['decode_tok_s']:.2f}x"
            )
    result["kv_lengths"] = bench_kv_lengths(m, args.kv_lengths, args.compression, args.decode_steps, args.repeat)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["load_average_end"] = os.getloadavg()
    print(f"peak resident memory {result['peak_rss_mib']:.0f} MiB; load average at end {result['load_average_end']}")
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
