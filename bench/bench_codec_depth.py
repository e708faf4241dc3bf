"""Compressed scans as the store grows: recall@10 and time of the binary and int8 code scans
(re-ranked exactly) against the exact scan, at fixed oversampling and at the default depth rule.

    python bench/bench_codec_depth.py                         # 10k / 100k / 200k rows
    python bench/bench_codec_depth.py --rows 10000 100000 1000000 --queries 300
    python bench/bench_codec_depth.py --oversample 4 8 16 32 --rows 200000

Rows: real MiniLM vectors of the LoCoMo development split's turns and their sentences (14,274
chat texts), read through the evaluation's embedding cache (``~/.cache/lamina/eval-vectors.sqlite``,
keyed by model and text; texts it lacks are embedded once and added), then filled up to the
row count with noisy near-copies of them: ``normalise(x + sigma * g / sqrt(d))``, g standard
normal, sigma uniform in ``--sigma`` (default 0.05..0.5: cosines ~0.89..0.999 to their original,
the near-duplicates that repeated chat lines make). Queries: MiniLM vectors of the LoCoMo
questions. The rows are generated in chunks of 100k so 1M rows need ~1.6 GB (float32) plus
the codes.

Printed per row count and representation (exact, int8, binary; the default depth and each
``--oversample``): the re-ranking depth k·r, recall@10 against the exact scan (all queries in
one batch), the median milliseconds of one query on one thread (``--timed`` queries searched one
at a time) and the speed-up over the exact scan measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import machine_facts, print_table, write_json  # noqa: E402
from lamina.native.search import CODECS, rerank_oversample  # noqa: E402

# ../shared/data/locomo from a checkout beside shared/ (or from a worktree one level deeper)
DATA = next(
    (p / "shared" / "data" / "locomo" for p in Path(__file__).resolve().parents[2:4] if (p / "shared").is_dir()),
    Path("../shared/data/locomo"),
)
CACHE = Path("~/.cache/lamina/eval-vectors.sqlite").expanduser()
K = 10
CHUNK = 100_000


def real_vectors() -> tuple[np.ndarray, np.ndarray]:
    """MiniLM vectors of LoCoMo turns and their sentences (what lamina embeds for a turn,
    :func:`lamina.memory.state.turnvec.turn_texts`), and of the questions (cached)."""
    from lamina.embedders.minilm import MiniLM
    from lamina.eval.locomo import load_locomo
    from lamina.eval.systems import CachedEmbedder
    from lamina.memory.state.turnvec import turn_texts

    convs, _ = load_locomo(DATA)
    texts = list(dict.fromkeys(x for c in convs for t in c.turns for x in turn_texts(t.text)))
    questions = list(dict.fromkeys(q.question for c in convs for q in c.questions))
    emb = CachedEmbedder(MiniLM(), str(CACHE))
    X, Q = emb.embed(texts), emb.embed(questions)
    print(f"{len(X)} chat texts, {len(Q)} questions (MiniLM; {emb.embedded} embedded now, {emb.from_disk} cached)")
    return np.ascontiguousarray(X, np.float32), np.ascontiguousarray(Q, np.float32)


def grown_rows(base: np.ndarray, n: int, sigma: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """``n`` rows: ``base`` first, then noisy near-copies of random base rows (unit norm)."""
    out = np.empty((n, base.shape[1]), np.float32)
    m = min(n, len(base))
    out[:m] = base[:m]
    d = base.shape[1]
    for s in range(m, n, CHUNK):
        e = min(n, s + CHUNK)
        src = base[rng.integers(0, len(base), e - s)]
        sig = rng.uniform(*sigma, size=(e - s, 1)).astype(np.float32)
        y = src + sig * rng.standard_normal((e - s, d), dtype=np.float32) / np.float32(np.sqrt(d))
        y /= np.linalg.norm(y, axis=1, keepdims=True)
        out[s:e] = y
    return out


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found.tolist(), exact.tolist())]))


def one_query_ms(search: Any, Q: np.ndarray, n: int) -> float:
    """Median milliseconds of one query (one thread) over the first ``n`` queries."""
    times = []
    for q in Q[:n]:
        q1 = q[None]
        t0 = time.perf_counter()
        search(q1)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def run(
    n: int, base: np.ndarray, Q: np.ndarray, args: argparse.Namespace, rng: np.random.Generator
) -> list[dict[str, Any]]:
    t0 = time.perf_counter()
    X = grown_rows(base, n, tuple(args.sigma), rng)
    print(f"{n} rows built in {time.perf_counter() - t0:.1f} s")

    def arena(codec: str | None) -> Any:  # one arena at a time: 1M rows stay near 2 GB
        a = lamina.VectorArena(X.shape[1], capacity=n, codec=codec)
        a.add(X)
        return a

    a = arena(None)
    _, exact = a.search(Q, K)
    t_exact = one_query_ms(partial(a.search, k=K, threads=1), Q, args.timed)
    del a
    rows: list[dict[str, Any]] = [
        {"rows": n, "rep": "exact", "depth": n, "recall10": 1.0, "ms": t_exact, "x_exact": 1.0}
    ]
    for codec in CODECS:
        a = arena(codec)
        for r in [None, *args.oversample]:
            _, got = a.search(Q, K, oversample=r)
            t = one_query_ms(partial(a.search, k=K, threads=1, oversample=r), Q, args.timed)
            depth = K * (rerank_oversample(codec, rows=n, k=K) if r is None else r)
            rows.append(
                {
                    "rows": n,
                    "rep": f"{codec} {'default' if r is None else f'r={r}'}",
                    "depth": depth,
                    "recall10": recall(got, exact),
                    "ms": t,
                    "x_exact": t_exact / t,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 200_000])
    ap.add_argument("--oversample", type=int, nargs="*", default=[8])
    ap.add_argument("--queries", type=int, default=0, help="questions used (0: all)")
    ap.add_argument("--sigma", type=float, nargs=2, default=[0.05, 0.5])
    ap.add_argument("--timed", type=int, default=200, help="queries timed one at a time (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    base, Q = real_vectors()
    if args.queries:
        Q = np.ascontiguousarray(Q[rng.choice(len(Q), min(args.queries, len(Q)), replace=False)])
    print(machine_facts())
    rows: list[dict[str, Any]] = []
    for n in args.rows:
        case = run(n, base, Q, args, rng)
        print_table(
            case,
            [
                "rows",
                ("rep", "representation"),
                ("depth", "k*r"),
                ("recall10", "recall@10", ".3f"),
                ("ms", "ms/query", ".3f"),
                ("x_exact", "x exact", ".2f"),
            ],
        )
        rows += case
    write_json(args.json, {"machine": machine_facts(), "queries": len(Q), "rows": rows})


if __name__ == "__main__":
    main()
