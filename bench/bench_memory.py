"""Memory loop latency and footprint: add / context / end_session / delete p50 / p99 at 1k, 10k,
100k items per user, and the fill time per 1k turns as the user grows.

Embedding time is reported separately (context is timed with a precomputed query vector, and
the embedder alone is timed on the same texts). Context is timed in wall-clock time and in the
calling thread's CPU time ("cpu": on a shared machine, wall-clock outliers are mostly the process
waiting for a core, which CPU time does not count). Memory per item = growth of the process RSS
while filling, divided by the items stored (archive turns + derived items). "ctx+arch" also
searches the archive (hnswlib once it passes MemoryConfig.ann_threshold rows: the one-off graph
build, on the first such query, is reported as "ann build s" and not in the percentiles).

    python bench/bench_memory.py                # 1k, 10k, 100k
    python bench/bench_memory.py --sizes 1000 10000
    python bench/bench_memory.py --sizes 100000 --lend-capacity   # MemoryConfig(lend_capacity=True)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import time

import numpy as np

import lamina
from lamina import Memory, MemoryConfig

WORDS = (
    "coffee hiking paris berlin garden piano dinner movie weekend trip sister dog cat job office meeting "
    "concert marathon beach mountain recipe book novel train flight museum birthday party gym yoga"
).split()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def steal_ticks() -> int:
    """Ticks (USER_HZ) the hypervisor ran something else while this VM's CPUs wanted to run
    (/proc/stat's steal column, all CPUs; 0 where there is none). In a VM a thread's CPU time
    also counts the time its vCPU was taken away, so a CPU-time outlier with steal is the host's."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) if len(fields) > 8 else 0
    except OSError:
        return 0


def turn(rng: random.Random, i: int) -> str:
    if i % 37 == 0:
        return f"I moved to {rng.choice(['Paris', 'Berlin', 'Oslo', 'Lima', 'Kyoto'])} last week."
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + f" number {i}."


class FullCollections:
    """CPython's generation-2 (full) collections during the fill: how long each took and how many
    ran inside an ``end_session`` (a full collection visits every tracked object, so its pause
    grows with the heap; it lands in whichever call allocated at that moment)."""

    def __init__(self) -> None:
        self.pauses_ms: list[float] = []
        self.in_end = 0
        self.ending = False
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses_ms.append((time.perf_counter() - self._t0) * 1e3)
            self.in_end += self.ending


def run(n_items: int, session_len: int, n_queries: int, seed: int, lend: bool = False) -> dict[str, float]:
    rng = random.Random(seed)
    full = FullCollections()
    gc.callbacks.append(full)
    m = Memory(embedder="hashing", config=MemoryConfig(lend_capacity=lend))
    emb = m.embedder
    rss0 = rss_bytes()
    add_t: list[float] = []
    end_t: list[float] = []
    end_cpu: list[float] = []
    end_steal: list[int] = []  # steal ticks during each end_session
    ids: list[int] = []
    per_1k: list[tuple[int, float]] = []  # (turns so far, seconds for the last 1k turns)
    t = 1.6e9
    sess = 0
    t_fill = t_block = time.perf_counter()
    steal0 = steal_ticks()
    for i in range(n_items):
        msg = [{"speaker": "Ann" if i % 2 else "Ben", "text": turn(rng, i), "timestamp": t + i * 60}]
        t0 = time.perf_counter()
        ids += m.add(msg, user_id="u", session_id=f"s{sess}")
        add_t.append(time.perf_counter() - t0)
        if (i + 1) % session_len == 0:
            full.ending = True
            t0 = time.perf_counter()
            c0 = time.thread_time()
            s0 = steal_ticks()
            m.end_session(user_id="u", session_id=f"s{sess}")
            end_cpu.append(time.thread_time() - c0)
            end_steal.append(steal_ticks() - s0)
            end_t.append(time.perf_counter() - t0)
            full.ending = False
            sess += 1
        if (i + 1) % 1000 == 0:
            now = time.perf_counter()
            per_1k.append((i + 1, now - t_block))
            t_block = now
    fill_s = time.perf_counter() - t_fill
    steal_fill = steal_ticks() - steal0
    gc.callbacks.remove(full)
    st = m.stats(user_id="u").to_dict()
    rss1 = rss_bytes()
    texts = [turn(rng, i) for i in range(200)]
    t0 = time.perf_counter()
    for x in texts:
        emb.embed([x])
    embed_ms = (time.perf_counter() - t0) / len(texts) * 1e3
    queries = [f"where did Ann move {rng.choice(WORDS)}" for _ in range(n_queries)]
    qv = emb.embed(queries)
    t0 = time.perf_counter()
    m.context(queries[0], user_id="u", budget=512, query_embedding=qv[0], include_archive=True)
    ann_build_s = time.perf_counter() - t0 if m.stats(user_id="u").to_dict()["ann_layers"] else 0.0
    ctx_t, ctx_cpu, arch_t = [], [], []
    for i in range(n_queries):
        t0 = time.perf_counter()
        c0 = time.thread_time()
        m.context(queries[i], user_id="u", budget=512, query_embedding=qv[i])
        ctx_cpu.append(time.thread_time() - c0)
        ctx_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m.context(queries[i], user_id="u", budget=512, query_embedding=qv[i], include_archive=True)
        arch_t.append(time.perf_counter() - t0)
    del_t = []
    for rid in rng.sample(ids, min(100, len(ids))):  # (p99 of 100; the first write also flushes
        # the access statistics the contexts above left pending)
        t0 = time.perf_counter()
        m.delete(rid, user_id="u")
        del_t.append(time.perf_counter() - t0)
    m.close()
    e = np.array(end_t or [0.0]) * 1e3
    ec = np.array(end_cpu or [0.0]) * 1e3
    d = np.array(del_t) * 1e3
    a = np.array(add_t) * 1e3
    c = np.array(ctx_t) * 1e3
    cc = np.array(ctx_cpu) * 1e3
    ca = np.array(arch_t) * 1e3
    return {
        "items_per_user": st["items"],
        "turns": n_items,
        "active": sum(st["layers"][k] for k in ("working", "episodic", "semantic")),
        "add_p50_ms": float(np.percentile(a, 50)),
        "add_p99_ms": float(np.percentile(a, 99)),
        "embed_ms_per_text": embed_ms,
        "context_p50_ms": float(np.percentile(c, 50)),
        "context_p99_ms": float(np.percentile(c, 99)),
        "context_cpu_p50_ms": float(np.percentile(cc, 50)),
        "context_cpu_p99_ms": float(np.percentile(cc, 99)),
        "context_archive_p50_ms": float(np.percentile(ca, 50)),
        "context_archive_p99_ms": float(np.percentile(ca, 99)),
        "bytes_per_item": (rss1 - rss0) / max(1, st["items"]),
        "fill_s": fill_s,
        "end_session_p50_ms": float(np.percentile(e, 50)),
        "end_session_p99_ms": float(np.percentile(e, 99)),
        "end_session_cpu_p50_ms": float(np.percentile(ec, 50)),
        "end_session_cpu_p99_ms": float(np.percentile(ec, 99)),
        # the slowest sessions (CPU ms) with the steal ticks during each (1 tick = 1/USER_HZ s)
        "end_session_slowest": [
            (round(float(ec[i]), 1), end_steal[i]) for i in np.argsort(-ec)[:5].tolist() if i < len(end_steal)
        ],
        "steal_s_during_fill": steal_fill / float(os.sysconf("SC_CLK_TCK")),
        "delete_p50_ms": float(np.percentile(d, 50)),
        "delete_p99_ms": float(np.percentile(d, 99)),
        "fill_s_per_1k_turns": {str(n): round(sec, 3) for n, sec in per_1k if n in (1_000, 10_000, 50_000, 100_000)},
        "ann_build_s": ann_build_s,
        "full_gc_ms": [round(x, 1) for x in full.pauses_ms],
        "full_gc_in_end_session": full.in_end,
        "ann_layers": st["ann_layers"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="turns added per user")
    ap.add_argument("--session-len", type=int, default=500)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write JSON results here")
    ap.add_argument(
        "--lend-capacity",
        action="store_true",
        help="MemoryConfig(lend_capacity=True): each pool may use the capacity the other leaves unused",
    )
    args = ap.parse_args()
    info = lamina.build_info()
    print(
        f"lamina {info['version']} | {platform.processor() or platform.machine()} | {os.cpu_count()} cpus | "
        f"SIMD {info['simd_active']} | threads {lamina.get_num_threads()} | load {os.getloadavg()[0]:.1f} | "
        f"embedder hashing-384 | ann_threshold {MemoryConfig().ann_threshold} | lend_capacity {args.lend_capacity}"
    )
    hdr = (
        "turns",
        "items",
        "active",
        "add p50",
        "add p99",
        "embed/txt",
        "ctx p50",
        "ctx p99",
        "cpu p50",
        "cpu p99",
        "ctx+arch p50",
        "ctx+arch p99",
        "B/item",
        "fill s",
        "ann build s",
        "end p50",
        "end p99",
        "del p50",
        "del p99",
    )
    print(
        ("{:>10}" * (len(hdr) - 5) + "{:>12}" + "{:>10}" * 4).format(*hdr)
        + "   (ms unless noted; ctx excludes embedding)"
    )
    res = []
    for n in args.sizes:
        r = run(n, min(args.session_len, n), args.queries, args.seed, args.lend_capacity)
        res.append(r)
        print(
            f"{r['turns']:>10}{r['items_per_user']:>10}{r['active']:>10}{r['add_p50_ms']:>10.3f}{r['add_p99_ms']:>10.2f}"
            f"{r['embed_ms_per_text']:>10.3f}{r['context_p50_ms']:>10.3f}{r['context_p99_ms']:>10.3f}"
            f"{r['context_cpu_p50_ms']:>10.3f}{r['context_cpu_p99_ms']:>10.3f}"
            f"{r['context_archive_p50_ms']:>10.2f}{r['context_archive_p99_ms']:>10.2f}{r['bytes_per_item']:>10.0f}"
            f"{r['fill_s']:>10.1f}{r['ann_build_s']:>12.2f}{r['end_session_p50_ms']:>10.1f}"
            f"{r['end_session_p99_ms']:>10.1f}{r['delete_p50_ms']:>10.1f}{r['delete_p99_ms']:>10.1f}",
            flush=True,
        )
        print(
            f"{'':>10}end_session in the calling thread's CPU time: p50 {r['end_session_cpu_p50_ms']:.1f} ms, "
            f"p99 {r['end_session_cpu_p99_ms']:.1f} ms (wall-clock outliers beyond it are waits for a core); "
            f"slowest (CPU ms, steal ticks): {r['end_session_slowest']}; steal during the fill "
            f"{r['steal_s_during_fill']:.1f} s"
        )
        print(f"{'':>10}fill seconds per 1k turns at 1k / 10k / 50k / 100k turns: {r['fill_s_per_1k_turns']}")
        pauses = r["full_gc_ms"]
        print(
            f"{'':>10}full GC collections during the fill: {len(pauses)}, largest "
            f"{max(pauses, default=0.0):.0f} ms, {r['full_gc_in_end_session']} inside end_session"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"build": info, "lend_capacity": args.lend_capacity, "results": res}, f, indent=2)


if __name__ == "__main__":
    main()
