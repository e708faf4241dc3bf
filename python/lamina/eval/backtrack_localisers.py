"""``lamina eval backtrack``: backtracking on the local model, per mistake localiser.

For a seeded sample of BIG-Bench Mistake traces of one task, each localiser names the first
wrong step k of a chain (or None); where it names one, the local model rolls the chain back to
the end of step k−1 (a cache truncation), samples step k 8 times at T = 1, drops samples equal
to the original step, keeps the one of highest mean log-probability and completes the chain
greedily (:func:`lamina.model.backtrack.backtrack`). The answer the chain then states is
scored against the trace's target, beside the answer of the chain without backtracking.

Localisers: ``none`` (no backtracking: the chain as it is), ``gold`` (the annotated
location: the upper bound), ``checkers`` (the exact checkers alone), ``locator``
(:class:`lamina.reasoning.MistakeLocator` fitted on the other task files: the task under test
is held out), ``stepcheck`` (the three error classes of :mod:`lamina.reasoning.stepcheck`)
and ``random`` (a uniformly drawn step of every chain: Tyen et al.'s control).

With ``--source model`` the chains are the local model's own (greedy, after one solved
example of the task): the step check's pass over a finished chain, then the rewrite of the
first failing step through backtracking. ``gold`` does not exist there.

The same (trace, k) is corrected once and shared by every localiser that names it, so the
localisers differ only where their locations do.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..reasoning import Chain, MistakeLocator, read_chains
from ..reasoning.checkers import first_wrong, step_verdicts
from ..reasoning.stepcheck import first_failing_step
from .commands import add_mistake_data_arg, documented_command, write_json, write_jsonl
from .scoring import wilson_interval

__all__ = [
    "LOCALISERS",
    "BacktrackRow",
    "answers_match",
    "make_localisers",
    "run_backtrack",
    "step_pairs",
    "format_rows",
    "add_backtrack_parser",
]

LOCALISERS: tuple[str, ...] = ("none", "gold", "checkers", "locator", "stepcheck", "random")

Localiser = Callable[[int, Chain], int | None]


def answers_match(answer: str | None, target: str) -> bool:
    """The stated answer equals the target: numbers by value, text case- and
    whitespace-insensitively (a trailing period and surrounding quotes ignored)."""
    if answer is None:
        return False

    def norm(s: str) -> str:
        return " ".join(s.strip().strip(".").strip('"').split()).lower()

    a, t = norm(answer), norm(target)
    try:
        return abs(float(a) - float(t)) < 1e-9
    except ValueError:
        return a == t


def make_localisers(
    names: Sequence[str], task_file: str, other_files: Sequence[str], *, seed: int = 0
) -> dict[str, Localiser]:
    """The localisers named, each a function (trace number, chain) -> step index or None.

    Raises
    ------
    ValueError
        An unknown name, or ``locator`` without other task files to fit it on.
    """
    out: dict[str, Localiser] = {}
    for name in names:
        if name not in LOCALISERS:
            raise ValueError(f"unknown localiser {name!r} (one of {', '.join(LOCALISERS)})")
        if name == "none":
            out[name] = lambda i, c: None
        elif name == "gold":
            out[name] = lambda i, c: c.mistake
        elif name == "checkers":
            out[name] = lambda i, c: first_wrong(step_verdicts(c.question, c.steps))
        elif name == "stepcheck":

            def sc(i: int, c: Chain) -> int | None:
                f = first_failing_step(c.question, c.steps)
                return None if f is None else f.step

            out[name] = sc
        elif name == "random":
            out[name] = lambda i, c: random.Random(f"{seed}:{i}").randrange(len(c.steps))
        else:
            if not other_files:
                raise ValueError(f"the locator is fitted on the other task files; none besides {task_file!r}")
            loc = MistakeLocator.train(list(other_files))
            out[name] = lambda i, c, loc=loc: loc.locate(c.question, c.steps)  # type: ignore[misc]
    return out


@dataclass(frozen=True)
class BacktrackRow:
    """Answer accuracy of one localiser over the sample, with what changed against no backtracking."""

    localiser: str
    n: int
    located: int
    location_exact: float | None
    accuracy: float
    low: float
    high: float
    fixed: int
    broken: int
    no_answer: int


def run_backtrack(
    model: Any,
    chains: Sequence[Chain],
    targets: Sequence[str],
    localisers: dict[str, Localiser],
    *,
    source: str = "traces",
    demonstration: tuple[str, Sequence[str]] | None = None,
    candidates: int = 8,
    seed: int = 0,
    progress: Any = None,
) -> tuple[list[BacktrackRow], list[dict[str, Any]]]:
    """Backtrack every chain with every localiser; (one row per localiser, one record per chain).

    ``source="traces"`` corrects the given chains; ``"model"`` has the model write its own chain
    for each question first (``chains`` then supply the questions only)."""
    from ..model.backtrack import ChainSession, chain_answer, correct_at

    if source not in ("traces", "model"):
        raise ValueError(f"source must be 'traces' or 'model', got {source!r}")
    records: list[dict[str, Any]] = []
    for i, (c0, target) in enumerate(zip(chains, targets, strict=True)):
        t0 = time.perf_counter()
        session = ChainSession(model, c0.question, demonstration=demonstration)
        if source == "traces":
            session.extend(c0.steps)
            c = c0
        else:
            session.complete(max_steps=24)
            c = Chain(c0.question, tuple(session.steps) or ("",), None)
        base_answer = chain_answer(c.steps)
        done: dict[int, Any] = {}
        rec: dict[str, Any] = {
            "trace": i,
            "question": c.question,
            "target": target,
            "gold": c0.mistake if source == "traces" else None,
            "steps": list(c.steps),
            "answer": base_answer,
            "correct": answers_match(base_answer, target),
            "by": {},
        }
        for name, loc in localisers.items():
            k = loc(i, c) if c.steps != ("",) else None
            if k is None:
                rec["by"][name] = {"k": None, "answer": base_answer, "correct": rec["correct"]}
                continue
            if k not in done:
                r = correct_at(session.fork(), k, candidates=candidates, seed=seed + i)
                done[k] = {
                    "k": k,
                    "answer": r.answer,
                    "correct": answers_match(r.answer, target),
                    "steps": r.steps[k:],
                    "candidates": [asdict(x) for x in r.candidates],
                    "chosen": r.chosen,
                    "rolled_back_tokens": r.rolled_back_tokens,
                }
            rec["by"][name] = done[k]
        rec["seconds"] = time.perf_counter() - t0
        records.append(rec)
        if progress is not None:
            progress.write(f"\rbacktrack {i + 1}/{len(chains)} ({rec['seconds']:.0f} s)   ")
            progress.flush()
    if progress is not None:
        progress.write("\n")
    rows = []
    for name in localisers:
        n = len(records)
        ok = sum(r["by"][name]["correct"] for r in records)
        acc = ok / n if n else 0.0
        lo, hi = wilson_interval(acc, n)
        exact = None
        if source == "traces" and n:
            exact = sum(r["by"][name]["k"] == r["gold"] for r in records) / n
        rows.append(
            BacktrackRow(
                name,
                n,
                sum(r["by"][name]["k"] is not None for r in records),
                exact,
                acc,
                lo,
                hi,
                sum(r["by"][name]["correct"] and not r["correct"] for r in records),
                sum(r["correct"] and not r["by"][name]["correct"] for r in records),
                sum(r["by"][name]["answer"] is None for r in records),
            )
        )
    return rows, records


def step_pairs(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step-level candidate lessons from :func:`run_backtrack`'s records: for every chain and
    every step k some localiser rolled back to, the prefix (steps before k), the original
    step (``rejected``), the kept candidate (``chosen``, None when every sample repeated the
    original), every candidate with its mean log-probability, which localisers named k, and
    whether the answer was right before and after. ``verified`` marks a pair whose rewrite
    turned a wrong answer right — the only ones with outcome evidence; none is applied to any
    weights here."""
    out: list[dict[str, Any]] = []
    for r in records:
        seen: dict[int, dict[str, Any]] = {}
        for name, b in r["by"].items():
            k = b["k"]
            if k is None:
                continue
            if k not in seen:
                chosen = b["chosen"]
                seen[k] = {
                    "question": r["question"],
                    "target": r["target"],
                    "prefix": r["steps"][:k],
                    "rejected": r["steps"][k],
                    "chosen": None if chosen is None else b["candidates"][chosen]["text"],
                    "candidates": b["candidates"],
                    "completion": b["steps"],
                    "gold_k": r["gold"],
                    "k": k,
                    "localisers": [],
                    "correct_before": r["correct"],
                    "correct_after": b["correct"],
                    "verified": bool(b["correct"] and not r["correct"]),
                }
            seen[k]["localisers"].append(name)
        out.extend(seen[k] for k in sorted(seen))
    return out


def format_rows(rows: Sequence[BacktrackRow]) -> str:
    """A table: one line per localiser."""
    head = f"{'localiser':<11}{'n':>4}{'located':>9}{'exact loc':>11}{'answer acc':>12}{'95% CI':>15}"
    head += f"{'fixed':>7}{'broken':>8}{'no answer':>11}"
    lines = [head]
    for r in rows:
        ex = "-" if r.location_exact is None else f"{r.location_exact:.2f}"
        ci = f"{r.low:.2f}-{r.high:.2f}"
        lines.append(
            f"{r.localiser:<11}{r.n:>4}{r.located:>9}{ex:>11}{r.accuracy:>12.3f}{ci:>15}"
            f"{r.fixed:>7}{r.broken:>8}{r.no_answer:>11}"
        )
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    from ..model import load

    folder = args.data
    path = os.path.join(folder, f"{args.task}.jsonl")
    if not os.path.isfile(path):
        print(f"lamina eval backtrack: no {args.task}.jsonl in {folder!r} (--data, --task)", file=sys.stderr)
        return 2
    others = sorted(
        os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".jsonl") and f != f"{args.task}.jsonl"
    )
    names = [x for x in args.localisers.split(",") if x]
    if args.source == "model" and "gold" in names:
        print("lamina eval backtrack: gold locations exist only for --source traces", file=sys.stderr)
        return 2
    if "none" not in names:
        names.insert(0, "none")
    try:
        locs = make_localisers(names, path, others, seed=args.seed)
    except ValueError as e:
        print(f"lamina eval backtrack: {e}", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        raw = [json.loads(line) for line in f if line.strip()]
    chains = read_chains(path)
    demo_i = next((j for j, d in enumerate(raw) if d["mistake_index"] is None and d["answer"] == d["target"]), None)
    demo = None if demo_i is None else (chains[demo_i].question, chains[demo_i].steps)
    pool = [j for j in range(len(chains)) if j != demo_i and (not args.with_mistake or chains[j].mistake is not None)]
    pick = sorted(random.Random(args.seed).sample(pool, min(args.n, len(pool))))
    model = load(args.model, threads=args.threads)
    t0 = time.perf_counter()
    rows, records = run_backtrack(
        model,
        [chains[j] for j in pick],
        [str(raw[j]["target"]) for j in pick],
        locs,
        source=args.source,
        demonstration=demo,
        candidates=args.candidates,
        seed=args.seed,
        progress=None if args.quiet else sys.stderr,
    )
    secs = time.perf_counter() - t0
    print(f"{args.task}, {len(pick)} traces (seed {args.seed}), source {args.source}, {args.candidates} candidates")
    print(format_rows(rows))
    print(f"\n{secs:.0f} s")
    if args.out:
        write_json(
            args.out,
            {"task": args.task, "traces": pick, "seconds": secs, "rows": [asdict(r) for r in rows], "records": records},
        )
    if args.pairs:
        pairs = step_pairs(records)
        write_jsonl(args.pairs, pairs)
        print(f"wrote {len(pairs)} step pairs ({sum(p['verified'] for p in pairs)} verified) to {args.pairs}")
    return 0


def add_backtrack_parser(esub: Any) -> None:
    """Register ``lamina eval backtrack``."""
    p = documented_command(
        esub,
        "backtrack",
        help="backtracking on the local model per mistake localiser (BIG-Bench Mistake traces)",
        doc=__doc__,
        func=_cmd,
    )
    add_mistake_data_arg(p)
    p.add_argument("--task", default="multistep_arithmetic", help="the task file to run (without .jsonl)")
    p.add_argument("--n", type=int, default=12, help="traces in the seeded sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--with-mistake", action="store_true", help="sample only traces annotated with a mistake")
    p.add_argument("--localisers", default="none,gold,checkers,locator,stepcheck", help=", ".join(LOCALISERS))
    p.add_argument("--source", choices=("traces", "model"), default="traces")
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--model", default=None, help="a llama-architecture .gguf (default: packaged SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default=None, help="write rows and every chain as JSON here")
    p.add_argument(
        "--pairs", default=None, help="write step-level candidate lessons (original vs kept step) as JSONL here"
    )
    p.add_argument("--quiet", action="store_true")
