"""Sentences per second of lamina's torch-free MiniLM (or MPNet), side by side with
sentence-transformers.

    python bench/bench_minilm.py [--model minilm|mpnet] [--n 1000] [--batch 64] [--threads 2]

Encodes N short chat-like lines (about 15 word pieces each, like the reference measurement in
../shared/data/minilm/README.md) with batch size 64, after one warm-up call, three timed runs,
median reported. When torch and sentence-transformers are importable, the original model runs
in the same process on the same lines with the same thread count and the ratio is printed;
otherwise only lamina's numbers are printed (the reference figure, ~320 sentences/s under
torch on the project's 2-core machine, is quoted for orientation).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import run_times  # noqa: E402


def chat_lines(n: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    who = ["I", "My sister", "Caroline", "We", "My kids", "Melanie", "John", "Our team", "Tim"]
    did = [
        "went hiking",
        "painted a sunset",
        "started a new job",
        "adopted a puppy",
        "visited Paris",
        "ran a charity race",
        "baked sourdough bread",
        "joined a book club",
        "moved to Seattle",
        "fixed the old car",
        "learned to play guitar",
        "went camping",
    ]
    when = [
        "last weekend",
        "yesterday",
        "on 7 May 2023",
        "two weeks ago",
        "this morning",
        "after work",
        "during the summer break",
        "on my birthday",
    ]
    tail = [
        "and it was amazing!",
        "- so relaxing.",
        "with friends.",
        "haha",
        "!",
        "and took photos.",
        "so fun :)",
        "but it rained.",
    ]
    return [
        f"{rng.choice(['Hey!', 'Wow,', '', ''])} {rng.choice(who)} "
        f"{rng.choice(did)} {rng.choice(when)} {rng.choice(tail)}".strip()
        for _ in range(n)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["minilm", "mpnet"], default="minilm")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="BLAS / lamina / torch threads")
    args = ap.parse_args()
    # BLAS threads must be fixed before numpy loads.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LAMINA_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np

    from lamina.embedders import MiniLM, MPNet

    lines = chat_lines(args.n)
    m = (MPNet if args.model == "mpnet" else MiniLM)(batch_size=args.batch)
    mean_tok = float(np.mean([len(x) for x in m.tokenize(lines)]))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus visible, "
        f"{args.threads} threads, numpy {np.__version__}"
    )
    print(f"{m.name}: {args.n} chat lines, {mean_tok:.1f} word pieces on average, batch {args.batch}")
    t_l = run_times(lambda: m.embed(lines))
    sps_l = args.n / statistics.median(t_l)
    print(
        f"lamina {type(m).__name__} (numpy + native kernels): {sps_l:8.1f} sentences/s "
        f"(runs: {', '.join(f'{t:.2f}s' for t in t_l)})"
    )
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print(
            "sentence-transformers/torch not importable here: no side-by-side run. "
            "Reference for MiniLM (README of ../shared/data/minilm): ~320 sentences/s under torch, 2 threads."
        )
        return 0
    torch.set_num_threads(args.threads)
    st = SentenceTransformer(str(m.model_dir), device="cpu")
    t_s = run_times(lambda: st.encode(lines, batch_size=args.batch))
    sps_s = args.n / statistics.median(t_s)
    print(f"sentence-transformers (torch {torch.__version__}): {sps_s:8.1f} sentences/s")
    print(f"ratio lamina / torch: {sps_l / sps_s:.2f}x")
    a, b = m.embed(lines[:64]), st.encode(lines[:64], batch_size=args.batch)
    print(f"worst cosine lamina vs torch on 64 lines: {float((a * b).sum(1).min()):.7f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
