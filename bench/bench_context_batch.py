"""Memory.context_batch vs a loop of Memory.context: per-query time of each, side by side on one
Memory, and their ratio.

The queries are the first ``--queries`` (256) LoCoMo questions of the development split's first
conversations when ``../shared/data/locomo`` exists (each conversation one user), else synthetic
questions over synthetic users. Both sides embed their queries (the memory's embedding cache is
cleared before each timed run): the loop one query a call, the batch all in one call. Each side
runs ``--reps`` times, alternating; the medians are reported (wall clock, and the process's CPU
time, steadier when other processes share the cores). ``--given-vectors``: the queries
are embedded once before timing and both sides get their vectors (the read path alone, bit for
bit the same contexts). ``--profile`` prints where the batch's time goes (cProfile, by own time);
``--stages`` the process CPU time of each stage of the batch per query, the query vectors given
(the read path's stage functions timed in place; "rest": the items, the contexts, the young
collection that ends the batch and the glue between the stages).

    python bench/bench_context_batch.py                   # hashing embedder
    python bench/bench_context_batch.py --embedder minilm
    python bench/bench_context_batch.py --embedder minilm --given-vectors
    python bench/bench_context_batch.py --stages
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lamina import Memory
from lamina.memory.read import batch as batch_stage
from lamina.memory.read import candidates as retrieve
from lamina.memory.read import fill, ranking

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
WORDS = (
    "coffee hiking paris berlin garden piano dinner movie weekend trip sister dog cat job office meeting "
    "concert marathon beach mountain recipe book novel train flight museum birthday party gym yoga"
).split()


def locomo(mem: Memory, n: int) -> tuple[list[str], list[str], float]:
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(SHARED)
    qs: list[str] = []
    us: list[str] = []
    for c in convs:
        if len(qs) >= n:
            break
        for s in c.sessions:
            if s.turns:
                sid = f"session_{s.number}"
                msgs = [
                    {"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns
                ]
                mem.add(msgs, user_id=c.sample_id, session_id=sid)
                mem.end_session(user_id=c.sample_id, session_id=sid, now=s.turns[-1].timestamp)
        qs += [q.question for q in c.questions]
        us += [c.sample_id] * len(c.questions)
    now = max(r.timestamp or 0.0 for r in mem._st.recs.values()) + 86_400.0
    return qs[:n], us[:n], now


def synthetic(mem: Memory, n: int) -> tuple[list[str], list[str], float]:
    rng = random.Random(0)
    t = 1_683_550_000.0
    users = [f"user{i}" for i in range(4)]
    for s in range(12):
        for u in users:
            lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(30)]
            msgs = [{"speaker": ("A", "B")[i % 2], "text": x, "timestamp": t + 60 * i} for i, x in enumerate(lines)]
            mem.add(msgs, user_id=u, session_id=f"s{s}")
            mem.end_session(user_id=u, session_id=f"s{s}")
        t += 86_400.0
    qs = [f"what about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}?" for _ in range(n)]
    return qs, [users[i % len(users)] for i in range(n)], t


#: The batch's stages: (module or class, function name, label), each timed where it is called.
STAGES: list[tuple[Any, str, str]] = [
    (retrieve, "search", "native searches (vectors, BM25)"),
    (retrieve, "Lookup", "records found (Lookup)"),
    (retrieve, "fused_turns_many", "episodic fusion"),
    (ranking, "rank_many", "ranking"),
    (fill, "gate_rows", "gates"),
    (ranking.Ranked, "pools", "fill order (pools)"),
    (fill, "take", "budget fill (take)"),
    (fill, "lost_in_the_middle", "context order"),
    (batch_stage, "bump", "visits"),
]


@contextmanager
def timed_stages(spent: dict[str, float]) -> Iterator[None]:
    """Adds each stage's process CPU time to ``spent`` while the block runs (the stage
    functions wrapped in place, restored after)."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in STAGES]

    def timer(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - t

        return run

    try:
        for owner, name, label in STAGES:
            setattr(owner, name, timer(getattr(owner, name), label))
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--embedder", default="hashing", choices=["hashing", "minilm"])
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--synthetic", action="store_true", help="synthetic users and questions even with LoCoMo data")
    ap.add_argument("--profile", action="store_true", help="cProfile one batch (own time per function)")
    ap.add_argument("--stages", action="store_true", help="process CPU time of each stage of the batch")
    ap.add_argument(
        "--given-vectors",
        action="store_true",
        help="both sides get the query vectors (embedded once before timing): the read path alone",
    )
    args = ap.parse_args()

    mem = Memory(None, embedder=args.embedder)
    t0 = time.perf_counter()
    source = "synthetic" if args.synthetic or not SHARED.exists() else "LoCoMo dev"
    qs, us, now = (synthetic if source == "synthetic" else locomo)(mem, args.queries)
    n = len(qs)
    print(f"{source}: {n} queries over {len(set(us))} users, {len(mem._st.recs)} items, embedder {mem.embedder.name}")
    given = "query vectors given to both sides (no embedding timed)" if args.given_vectors else "both sides embed"
    print(f"(built in {time.perf_counter() - t0:.1f} s; budget {args.budget}; {given})")

    Q = mem.embedder.embed(qs) if args.given_vectors else None

    def loop() -> list[object]:
        if Q is not None:
            return [
                mem.context(q, user_id=u, budget=args.budget, now=now, query_embedding=Q[i])
                for i, (q, u) in enumerate(zip(qs, us))
            ]
        return [mem.context(q, user_id=u, budget=args.budget, now=now) for q, u in zip(qs, us)]

    def batch() -> list[object]:
        return list(mem.context_batch(qs, user_ids=us, budget=args.budget, now=now, query_embeddings=Q))

    # warm-up (and the check that both give the same contexts up to the visits they count)
    mem._embed.clear()
    a = loop()
    mem._embed.clear()
    b = batch()
    same = sum([it.id for it in x.items] == [it.id for it in y.items] for x, y in zip(a, b))  # type: ignore[attr-defined]
    exact = sum([it.score for it in x.items] == [it.score for it in y.items] for x, y in zip(a, b))  # type: ignore[attr-defined]
    diff = max((abs(p.score - q.score) for x, y in zip(a, b) for p, q in zip(x.items, y.items)), default=0.0)  # type: ignore[attr-defined]
    print(f"as the loop: same items in {same} / {n} contexts, same scores in {exact} (largest difference {diff:.1e})")
    t_loop: list[float] = []
    t_batch: list[float] = []
    c_loop: list[float] = []
    c_batch: list[float] = []
    for _ in range(args.reps):
        for fn, out, cpu in ((loop, t_loop, c_loop), (batch, t_batch, c_batch)):
            mem._embed.clear()
            c, t = time.process_time(), time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    ml, mb = statistics.median(t_loop), statistics.median(t_batch)
    print(
        f"loop of context():   {ml / n * 1e3:7.3f} ms per query (median of {args.reps}; best {min(t_loop) / n * 1e3:.3f})"
    )
    print(
        f"one context_batch(): {mb / n * 1e3:7.3f} ms per query (median of {args.reps}; best {min(t_batch) / n * 1e3:.3f})"
    )
    print(f"ratio (loop / batch): {ml / mb:.2f}x (best: {min(t_loop) / min(t_batch):.2f}x)")
    cl, cb = statistics.median(c_loop), statistics.median(c_batch)
    print(
        f"(process CPU time, steadier on a shared machine: {cl / n * 1e3:.3f} vs {cb / n * 1e3:.3f} ms per query, "
        f"{cl / cb:.2f}x; best {min(c_loop) / min(c_batch):.2f}x)"
    )
    mem._embed.clear()
    t = time.perf_counter()
    mem._embed(qs)
    print(f"(of which embedding the {n} queries in one call: {(time.perf_counter() - t) / n * 1e3:.3f} ms per query)")
    if args.stages:
        spent = {label: 0.0 for _, _, label in STAGES}
        total = 0.0
        vectors = mem.embedder.embed(qs)  # (the read path alone)
        for _ in range(args.reps):
            with timed_stages(spent):
                t = time.process_time()
                mem.context_batch(qs, user_ids=us, budget=args.budget, now=now, query_embeddings=vectors)
                total += time.process_time() - t
        per = args.reps * n
        print(f"stages of one context_batch, query vectors given (process CPU, ms per query, {args.reps} runs):")
        for _, _, label in STAGES:
            print(f"  {label:32s} {spent[label] / per * 1e3:7.3f}")
        rest = "rest (items, contexts, glue, gc)"
        print(f"  {rest:32s} {(total - sum(spent.values())) / per * 1e3:7.3f}")
        print(f"  {'total':32s} {total / per * 1e3:7.3f}")
    if args.profile:
        mem._embed.clear()
        prof = cProfile.Profile()
        prof.enable()
        batch()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue())
    mem.close()


if __name__ == "__main__":
    main()
