"""The fleet step: one query per agent, each searching only its own memories, in one call.

For every (agents, memories per agent, dim) case the same rows are searched exactly (float
rows), through the binary codes + exact re-ranking and through the int8 codes + exact
re-ranking (``VectorArena(codec=...)``, ``search(namespace=<one per query>, oversample=r)``).
Printed per representation: the step time, the bytes the step must read (the codes of every
row of every agent, plus the re-ranked rows; or every float row), the time those bytes take at
this machine's measured streaming bandwidth (the bound), the step's share of that bound,
recall@10 against the exact step, and the speed-up over the exact step. With ``--device cuda``
(a CUDA build and a device) every representation also runs on the GPU with its own bound at
the device's measured copy bandwidth; "x exact cpu" is then the CPU/GPU ratio and "x exact gpu"
the speed-up over the GPU's exact step. The timed GPU step takes numpy queries and returns
numpy results (transfers included).

Vectors: recall must be measured on real embeddings, so each agent's memories are drawn from
MiniLM vectors of LoCoMo turns (and of 2- and 3-turn windows of them, for a pool larger than
one agent), and each agent's query from MiniLM vectors of the LoCoMo questions. They are
embedded once and cached (``--cache``, default ~/.cache/lamina/bench); ``--pool`` /
``--queries`` take .npy files instead. Without MiniLM or the data the bench falls back to
random unit vectors and says so (their recall says little about real embeddings).

    python bench/bench_fleet.py                                  # CPU sweep, float32
    python bench/bench_fleet.py --cases 10000x10000 --dtype float16 --device cuda   # the H200 case
    python bench/bench_fleet.py --oversample 2 4 8 --cases 100x10000
    python bench/bench_fleet.py --step-only --cases 1x1000 64x1000 1000x1000 --device cuda  # graph vs launches

``--step`` / ``--step-only`` time the whole fleet step of :mod:`lamina.native.fleet` (search over 3
layers, gate, heat bump): its CPU twin and, on the GPU, the same kernels as separate launches
against one CUDA graph launch; small batches show the fixed per-step cost the graph removes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import machine_facts, print_table, stream_bandwidth, timeit, write_json  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
K = 10


def _embedded_pool(cache: Path) -> tuple[np.ndarray, np.ndarray, str]:
    """MiniLM vectors of LoCoMo turns + 2/3-turn windows, and of the questions (cached)."""
    from lamina.embedders.minilm import MiniLM, find_minilm_dir
    from lamina.eval.locomo import load_locomo

    if find_minilm_dir() is None or not DATA.is_dir():
        raise FileNotFoundError("needs the MiniLM files and ../shared/data/locomo")
    digest = hashlib.sha256((DATA / "locomo_dev.json").read_bytes()).hexdigest()[:12]
    px, pq = cache / f"locomo-{digest}-pool.npy", cache / f"locomo-{digest}-questions.npy"
    if not (px.exists() and pq.exists()):
        convs, _ = load_locomo(DATA)
        texts: list[str] = []
        for c in convs:
            turns = [t.text for t in c.turns]
            texts += turns
            for w in (2, 3):
                texts += [" ".join(turns[i : i + w]) for i in range(len(turns) - w + 1)]
        questions = [q.question for c in convs for q in c.questions]
        print(f"embedding {len(texts)} LoCoMo texts and {len(questions)} questions with MiniLM (cached)")
        m = MiniLM()
        cache.mkdir(parents=True, exist_ok=True)
        np.save(pq, m.embed(questions))
        np.save(px, m.embed(texts))
    return np.load(px), np.load(pq), "MiniLM vectors of LoCoMo turns and questions"


def load_vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, str]:
    if args.pool:
        pool, qs = np.load(args.pool), np.load(args.queries or args.pool)
        return pool.astype(np.float32), qs.astype(np.float32), f"{args.pool}"
    try:
        return _embedded_pool(Path(args.cache).expanduser())
    except (FileNotFoundError, ImportError) as e:
        print(f"WARNING: {e}; using random unit vectors (recall on them says little)")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((20_000, args.dim)).astype(np.float32)
        q = rng.standard_normal((2_000, args.dim)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True), q / np.linalg.norm(q, axis=1, keepdims=True), "random"


def fleet_rows(pool: np.ndarray, agents: int, per: int, rng: np.random.Generator) -> np.ndarray:
    """agents x per rows: each agent a random subset of the pool (with replacement past it)."""
    rows = np.empty((agents * per, pool.shape[1]), np.float32)
    for a in range(agents):
        idx = rng.choice(len(pool), per, replace=per > len(pool))
        rows[a * per : (a + 1) * per] = pool[idx]
    return rows


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    hits = [len(set(f[f >= 0]) & set(e[e >= 0])) / max(1, int((e >= 0).sum())) for f, e in zip(found, exact)]
    return float(np.mean(hits))


def run_case(
    agents: int,
    per: int,
    pool: np.ndarray,
    qpool: np.ndarray,
    args: argparse.Namespace,
    bw: dict[str, float],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    d = pool.shape[1]
    X = fleet_rows(pool, agents, per, rng)
    ns = np.repeat(np.arange(agents, dtype=np.uint64), per)
    Q = np.ascontiguousarray(qpool[rng.choice(len(qpool), agents, replace=agents > len(qpool))])
    qns = np.arange(agents, dtype=np.uint64)
    elt = np.dtype(args.dtype).itemsize
    rows: list[dict[str, Any]] = []
    case = f"{agents}x{per}x{d}"
    threads = args.threads

    def row(rep: str, device: str, t: float, nbytes: float, gbs: float, rec: float | None, base: float) -> None:
        bound = nbytes / (gbs * 1e9)
        rows.append(
            {
                "case": case,
                "device": device,
                "rep": rep,
                "ms": t * 1e3,
                "bytes_gb": nbytes / 1e9,
                "bound_ms": bound * 1e3,
                "of_bound": bound / t,
                "recall10": rec,
                "vs_exact": base / t,
            }
        )

    arenas: dict[str, Any] = {}
    for codec in [None, *args.codecs]:
        a = lamina.VectorArena(d, dtype=args.dtype, capacity=len(X), codec=codec)
        a.add(X, namespace=ns)
        arenas[codec or "exact"] = a
    exact = arenas["exact"]
    _, ei = exact.search(Q, K, namespace=qns, threads=threads)
    t_exact = timeit(lambda: exact.search(Q, K, namespace=qns, threads=threads), min_time=args.min_time)
    row("exact", "cpu", t_exact, len(X) * d * elt, bw["cpu"], 1.0, t_exact)
    for codec in args.codecs:
        a = arenas[codec]
        for r in args.oversample or [lamina.native.search.DEFAULT_OVERSAMPLE[codec]]:
            _, ci = a.search(Q, K, namespace=qns, threads=threads, oversample=r)
            step = partial(a.search, Q, K, namespace=qns, threads=threads, oversample=r)
            t = timeit(step, min_time=args.min_time)
            nbytes = len(X) * a.code_bytes + agents * K * r * d * elt
            row(f"{codec}+rerank r={r}", "cpu", t, nbytes, bw["cpu"], recall(ci, ei), t_exact)
    del arenas
    if args.device == "cuda":
        t_gpu = 0.0
        for codec in [None, *args.codecs]:
            g = lamina.VectorArena(d, dtype=args.dtype, capacity=len(X), device="cuda", codec=codec)
            g.add(X, namespace=ns)
            for r in [0] if codec is None else args.oversample or [lamina.native.search.DEFAULT_OVERSAMPLE[codec]]:
                _, gi = g.search(Q, K, namespace=qns, oversample=r)
                t = timeit(partial(g.search, Q, K, namespace=qns, oversample=r), min_time=args.min_time)
                if codec is None:
                    t_gpu = t
                    row("exact", "cuda", t, len(X) * d * elt, bw["cuda"], recall(gi, ei), t_exact)
                else:
                    nbytes = len(X) * g.code_bytes + agents * K * r * d * elt
                    row(f"{codec}+rerank r={r}", "cuda", t, nbytes, bw["cuda"], recall(gi, ei), t_exact)
                rows[-1]["vs_exact_gpu"] = t_gpu / t
            del g
    return rows


def run_step_case(
    agents: int, per: int, pool: np.ndarray, qpool: np.ndarray, args: argparse.Namespace, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """The whole fleet step (lamina.native.fleet: search 3 layers -> gate -> heat bump): the exact CPU
    twin, and with --device cuda, for the exact scan and each codec (re-ranked, at its default
    oversampling), the same step as separate launches and as one CUDA graph launch (replayed:
    the same queries buffer, outputs and columns every step)."""
    from lamina.native.fleet import FleetConfig, FleetResult, FleetStep, HeatColumns

    d = pool.shape[1]
    X = fleet_rows(pool, agents, per, rng)
    ns = np.repeat(np.arange(agents, dtype=np.uint64), per)
    layer = rng.integers(0, 3, len(X)).astype(np.uint8)
    Q = np.ascontiguousarray(qpool[rng.choice(len(qpool), agents, replace=agents > len(qpool))])
    qns = np.arange(agents, dtype=np.uint64)
    cfg = FleetConfig(layers=(0, 1, 2), k=K, beta=5.0, max_entropy=0.5)
    case = f"{agents}x{per}x{d}"
    rows: list[dict[str, Any]] = []

    def cols(n: int) -> HeatColumns:
        return HeatColumns(np.zeros(n, np.int64), np.ones(n, np.int32), np.zeros(n), np.zeros(n, np.float32))

    a = lamina.VectorArena(d, dtype=args.dtype, capacity=len(X))
    a.add(X, namespace=ns, layer=layer)
    cpu = FleetStep(a, cfg)
    ccols = cols(a.high_water)
    clock = iter(range(1, 1 << 30))
    t_cpu = timeit(
        lambda s=cpu: s.run(Q, namespaces=qns, now=float(next(clock)), columns=ccols), min_time=args.min_time
    )
    rows.append({"case": case, "mode": "cpu twin exact", "ms": t_cpu * 1e3, "us_per_agent": t_cpu * 1e6 / agents})
    del a, cpu
    if args.device == "cuda":
        import cupy as cp

        gq = cp.asarray(Q)
        L = len(cfg.layers)
        out = FleetResult(
            cp.empty((agents, L, K), cp.float32),
            cp.empty((agents, L, K), cp.int64),
            cp.empty((agents, L), cp.float32),
            cp.empty((agents, L), cp.float32),
            cp.empty(agents, cp.float64),
        )
        for codec in [None, *args.codecs]:
            g = lamina.VectorArena(d, dtype=args.dtype, capacity=len(X), device="cuda", codec=codec)
            g.add(X, namespace=ns, layer=layer)
            h = cols(g.high_water)
            gcols = HeatColumns(*(cp.asarray(x) for x in (h.visits, h.interaction_len, h.last_access, h.heat)))
            rep = "exact" if codec is None else f"{codec}+rerank r={lamina.native.search.DEFAULT_OVERSAMPLE[codec]}"
            t_sep = 0.0
            for mode, graph in (("separate launches", False), ("graph", True)):
                step = FleetStep(g, cfg, graph=graph)
                step.run(gq, namespaces=qns, now=0.0, columns=gcols, out=out)  # warm-up / capture
                t = timeit(
                    lambda s=step, c=gcols: s.run(gq, namespaces=qns, now=float(next(clock)), columns=c, out=out),
                    min_time=args.min_time,
                )
                t_sep = t if not graph else t_sep
                st = step.stats
                rows.append(
                    {
                        "case": case,
                        "mode": f"cuda {rep} {mode}",
                        "ms": t * 1e3,
                        "us_per_agent": t * 1e6 / agents,
                        "vs_cpu": t_cpu / t,
                        "vs_separate": t_sep / t,
                        "note": f"captures {st.captures}, replays {st.replays}" if graph else "",
                    }
                )
            del g, gcols
        del gq, out
    return rows


def device_bandwidth() -> float:
    """GB/s of a large device-to-device copy (bytes read + written), with CuPy."""
    import cupy as cp

    src = cp.ones(1 << 28, cp.float32)
    dst = cp.empty_like(src)
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    cp.copyto(dst, src)
    ev0.record()
    for _ in range(10):
        cp.copyto(dst, src)
    ev1.record()
    ev1.synchronize()
    return 10 * 2 * src.nbytes / (cp.cuda.get_elapsed_time(ev0, ev1) / 1e3) / 1e9


def parse_case(s: str) -> tuple[int, int]:
    try:
        a, m = s.lower().split("x")[:2]
        return int(a), int(m)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a case is AGENTSxMEMORIES (e.g. 1000x1000), got {s!r}") from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=parse_case, nargs="+", default=[(1000, 1000), (256, 4096), (64, 10_000)])
    ap.add_argument("--dim", type=int, default=384, help="dimension of the random fallback vectors")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--codecs", nargs="*", default=["binary", "int8"], choices=["binary", "int8"])
    ap.add_argument("--oversample", type=int, nargs="*", help="default: each codec's DEFAULT_OVERSAMPLE")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--pool", help=".npy of memory vectors (default: MiniLM vectors of LoCoMo)")
    ap.add_argument("--queries", help=".npy of query vectors (with --pool)")
    ap.add_argument("--cache", default="~/.cache/lamina/bench")
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument(
        "--step",
        action="store_true",
        help="also time the whole fleet step (lamina.native.fleet: 3 layers -> gate -> heat bump): the CPU twin, "
        "and with --device cuda separate launches vs one CUDA graph launch",
    )
    ap.add_argument("--step-only", action="store_true", help="time only the whole fleet step (implies --step)")
    args = ap.parse_args(argv)

    pool, qpool, source = load_vectors(args)
    threads = args.threads or (os.cpu_count() or 1)
    bw = {"cpu": stream_bandwidth(threads=threads)}
    if args.device == "cuda":
        bw["cuda"] = device_bandwidth()
    facts = machine_facts()
    print(f"machine: {facts.get('cpu', '?')} x{os.cpu_count()}, lamina SIMD {lamina.build_info()['simd_active']}")
    print(f"vectors: {source} (pool {pool.shape}, queries {qpool.shape}); rows {args.dtype}; k={K}")
    print("bandwidth (copy, read+write): " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw.items()))
    rng = np.random.default_rng(args.seed)
    rows: list[dict[str, Any]] = []
    step_rows: list[dict[str, Any]] = []
    for agents, per in args.cases:
        if not args.step_only:
            rows += run_case(agents, per, pool, qpool, args, bw, rng)
        if args.step or args.step_only:
            step_rows += run_step_case(agents, per, pool, qpool, args, rng)
    if step_rows:
        print("the whole fleet step: search (3 layers) -> gate -> heat bump; graph = one CUDA graph launch")
        print_table(
            step_rows,
            [
                "case",
                "mode",
                ("ms", "step ms", ".3f"),
                ("us_per_agent", "us / agent", ".2f"),
                ("vs_cpu", "x cpu twin", ".2f"),
                ("vs_separate", "x separate", ".2f"),
                "note",
            ],
        )
    if not rows:
        write_json(args.out, {"machine": facts, "vectors": source, "bandwidth_gbs": bw, "step_rows": step_rows})
        return 0
    print_table(
        rows,
        [
            "case",
            "device",
            ("rep", "representation"),
            ("ms", "step ms", ".3f"),
            ("bytes_gb", "bytes GB", ".3f"),
            ("bound_ms", "bound ms", ".3f"),
            ("of_bound", "of bound", ".2f"),
            ("recall10", "recall@10", ".4f"),
            ("vs_exact", "x exact cpu", ".2f"),
            ("vs_exact_gpu", "x exact gpu", ".2f"),
        ],
    )
    write_json(
        args.out, {"machine": facts, "vectors": source, "bandwidth_gbs": bw, "rows": rows, "step_rows": step_rows}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
