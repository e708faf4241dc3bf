"""BM25 lexical search: lamina.LexicalIndex (native) vs the pure-Python BM25 of lamina.eval, one run.

Corpus: synthetic LoCoMo-like chat lines (no data files are read): content words drawn from a
fixed vocabulary of 20k words with a Zipf-Mandelbrot distribution (P(rank r) ~ 1/(r + 8)),
mixed with stop words, capitalised and punctuated; ~12 index terms per line after
tokenization. Queries: 5-6 terms, two taken from one document (so queries have real matches),
the rest from the same distribution. Calibration: on the LoCoMo development split (4124 turns,
12.1 terms per turn, its most frequent term in 20% of turns) a question's terms have a summed
document frequency of 0.12 N on average (p90 0.21 N, max 0.52 N); the script prints the same
figure for its own queries, and the work of a query grows with it. Every system indexes the same token lists (tokenization is timed once,
separately, since every system needs it) and answers the same queries (k = 10), on one thread.

Reported per size: build time (and per document), the cost of one incremental add and remove
on the built index (through the Python API, tokens given), per-query latency for one query at a
time (wall and CPU time of this process; the CPU time is the steadier figure on a shared
machine) and per query in a batch of 64 (CPU), and the ratios of the pure-Python baseline (and
rank_bm25's BM25Okapi when installed) to lamina (> 1: lamina is faster; query x uses CPU time).

    python bench/compare_lexical.py                 # n = 10k, 100k
    python bench/compare_lexical.py --sizes 100000 --out bench/results/lexical.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import machine_facts, print_table, write_json  # noqa: E402
from lamina.eval.systems import _BM25Index  # noqa: E402
from lamina.native.lexical import STOP_WORDS, tokenize  # noqa: E402

K = 10
VOCAB = 20_000
S, Q = 1.0, 8.0  # Zipf-Mandelbrot exponent and offset (see the module docs)
STOPS = sorted(w for w in STOP_WORDS if len(w) > 2)


def make_vocab(rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < VOCAB:
        w = "".join(rng.choice(letters, size=int(rng.integers(3, 10))))
        if w not in STOP_WORDS:
            words.add(w)
    return sorted(words)


def zipf_words(rng: np.random.Generator, vocab: list[str], n: int) -> list[str]:
    """Zipf-Mandelbrot: P(rank r) proportional to 1 / (r + Q) ** S."""
    p = 1.0 / (np.arange(1, len(vocab) + 1) + Q) ** S
    cdf = np.cumsum(p / p.sum())
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), len(vocab) - 1)
    return [vocab[r] for r in ranks]


def make_lines(rng: np.random.Generator, vocab: list[str], n: int) -> list[str]:
    lens = np.clip(rng.poisson(12, size=n), 3, 40)
    content = zipf_words(rng, vocab, int(lens.sum()))
    lines, at = [], 0
    for m in lens:
        words = content[at : at + m]
        at += m
        out = []
        for w in words:
            if rng.random() < 0.6:
                out.append(STOPS[int(rng.integers(len(STOPS)))])
            out.append(w)
        out[0] = out[0].capitalize()
        lines.append(" ".join(out) + rng.choice([".", "!", "?", "..."]))
    return lines


def make_queries(rng: np.random.Generator, vocab: list[str], docs: list[list[str]], n: int) -> list[list[str]]:
    qs = []
    for _ in range(n):
        d = docs[int(rng.integers(len(docs)))]
        picked = list(rng.choice(d, size=min(len(d), 2), replace=False)) if d else []
        qs.append(picked + zipf_words(rng, vocab, int(rng.integers(3, 5))))
    return qs


def rss_bytes() -> int:
    """Resident set size of this process (Linux), 0 where unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def per_call(fn: Callable[[Any], Any], items: list[Any], reps: int = 3) -> tuple[float, float]:
    """(wall, CPU) seconds per item: medians over reps of one pass calling fn on every item.
    On a shared machine the CPU time (this process only) is the steadier of the two."""
    fn(items[0])
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        for it in items:
            fn(it)
        wall.append((time.perf_counter() - t0) / len(items))
        cpu.append((time.process_time() - c0) / len(items))
    return float(np.median(wall)), float(np.median(cpu))


def py_topk(ix: _BM25Index, q: list[str], k: int) -> np.ndarray:
    s = ix.scores(q)
    if len(s) <= k:
        return np.argsort(-s, kind="stable")
    idx = np.argpartition(-s, k - 1)[:k]
    return idx[np.argsort(-s[idx], kind="stable")]


def run(n: int, n_queries: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    vocab = make_vocab(rng)
    lines = make_lines(rng, vocab, n)
    t0 = time.perf_counter()
    docs = [tokenize(t) for t in lines]
    t_tok = (time.perf_counter() - t0) / n
    queries = make_queries(rng, vocab, docs, n_queries)
    mean_terms = float(np.mean([len(d) for d in docs]))
    df = Counter(w for d in docs for w in set(d))
    sum_df = np.array([sum(df[w] for w in set(q)) / n for q in queries])
    print(
        f"\nn = {n}: {mean_terms:.1f} terms per document, most frequent term in "
        f"{df.most_common(1)[0][1] / n:.0%} of documents; tokenize {t_tok * 1e6:.1f} us/line (same "
        f"for every system)\n{n_queries} queries of {np.mean([len(q) for q in queries]):.1f} terms, summed "
        f"df / N: mean {sum_df.mean():.2f}, p90 {np.percentile(sum_df, 90):.2f}, max {sum_df.max():.2f}"
    )

    rows: list[dict[str, Any]] = []

    # -- lamina
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    lx = lamina.LexicalIndex()
    lx.add(np.arange(n, dtype=np.int64), docs)
    t_build = time.perf_counter() - t0
    mem = (rss_bytes() - rss0) / n
    extra = [tokenize(t) for t in make_lines(rng, vocab, 1000)]
    keys = np.arange(n, n + len(extra))
    t0 = time.perf_counter()
    for key, d in zip(keys, extra):
        lx.add([int(key)], [d])
    t_add1 = (time.perf_counter() - t0) / len(extra)
    t0 = time.perf_counter()
    for key in keys:
        lx.remove(int(key))
    t_rm1 = (time.perf_counter() - t0) / len(extra)
    lx.compact()
    t_q, c_q = per_call(lambda q: lx.search(q, 0, K), queries)
    batches = [queries[i : i + 64] for i in range(0, len(queries) - 63, 64)]
    t_b = per_call(lambda b: lx.search_many(b, 0, K, threads=1), batches)[1] / 64
    st = lx.stats(0)
    rows.append(
        {
            "n": n,
            "system": "lamina",
            "build_s": t_build,
            "build_us_doc": t_build / n * 1e6,
            "add1_us": t_add1 * 1e6,
            "remove1_us": t_rm1 * 1e6,
            "query_us": t_q * 1e6,
            "query_cpu_us": c_q * 1e6,
            "batch64_us_q": t_b * 1e6,
            "postings": st["postings"],
            "rss_bytes_doc": mem,
        }
    )
    print(f"lamina index memory: ~{mem:.0f} bytes per document (resident set growth while building)")

    # -- pure-Python BM25 (lamina.eval's baseline): numpy scores over all docs + top-k
    t0 = time.perf_counter()
    px = _BM25Index(docs)
    t_build = time.perf_counter() - t0
    t_q, c_q = per_call(lambda q: py_topk(px, q, K), queries[: max(20, n_queries // 4)])
    rows.append(
        {
            "n": n,
            "system": "python-bm25",
            "build_s": t_build,
            "build_us_doc": t_build / n * 1e6,
            "query_us": t_q * 1e6,
            "query_cpu_us": c_q * 1e6,
        }
    )

    # agreement on the top-1 (a sanity check that both rank the same way)
    agree = 0
    for q in queries[:50]:
        s = px.scores(q)
        got = lx.search(q, 0, 1)
        if s.max() <= 0:
            agree += got[1].size == 0
        else:
            agree += bool(got[1].size) and abs(s[got[1][0]] - s.max()) <= 1e-5 * s.max()
    print(f"top-1 agreement with python-bm25 on 50 queries: {agree}/50")

    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        print("rank_bm25 is not installed: skipped (pip install rank-bm25)")
    else:
        t0 = time.perf_counter()
        rb = BM25Okapi(docs, k1=1.2, b=0.75)
        t_build = time.perf_counter() - t0
        t_q, c_q = per_call(lambda q: np.argsort(-rb.get_scores(q))[:K], queries[:20])
        rows.append(
            {
                "n": n,
                "system": "rank_bm25",
                "build_s": t_build,
                "build_us_doc": t_build / n * 1e6,
                "query_us": t_q * 1e6,
                "query_cpu_us": c_q * 1e6,
            }
        )

    base = rows[0]
    for r in rows:
        r["build_ratio"] = r["build_s"] / base["build_s"]
        r["query_ratio"] = r["query_cpu_us"] / base["query_cpu_us"]
    print_table(
        rows,
        [
            ("system", "system", ">12"),
            ("build_s", "build s", ".3f"),
            ("build_us_doc", "us/doc", ".2f"),
            ("add1_us", "add1 us", ".1f"),
            ("remove1_us", "rm1 us", ".1f"),
            ("query_us", "query us", ".1f"),
            ("query_cpu_us", "q cpu us", ".1f"),
            ("batch64_us_q", "b64 cpu/q", ".1f"),
            ("build_ratio", "build x", ".1f"),
            ("query_ratio", "query x", ".1f"),
        ],
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lamina.set_num_threads(1)
    facts = machine_facts()
    facts["loadavg"] = os.getloadavg()
    print(f"cpu: {facts.get('cpu')}, {facts['cpu_count']} cores, load {facts['loadavg']}, one thread")
    print("x columns: time of the system / time of lamina (> 1: lamina is faster; query x: CPU time)")
    rows: list[dict[str, Any]] = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows += run(n, args.queries, args.seed)
    write_json(args.out, {"machine": facts, "k": K, "rows": rows})


if __name__ == "__main__":
    main()
