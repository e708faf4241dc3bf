"""``lamina eval longmemeval``: the command-line front of :mod:`lamina.eval.lme_harness`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .eval_args import shared_data

__all__ = ["add_longmemeval_parser"]

_DEFAULT_DATA = shared_data("longmemeval")


def _types(s: str) -> list[str]:
    from ..eval.longmemeval import LME_TYPES

    out = [t.strip() for t in s.split(",") if t.strip()]
    bad = [t for t in out if t not in LME_TYPES]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"unknown type(s) {bad or s!r}; valid: {', '.join(LME_TYPES)}")
    return out


def _cmd(args: argparse.Namespace) -> int:
    from ..embedders import Embedder, get_embedder
    from ..eval.lme_harness import LME_CHOICES, LME_SYSTEMS, format_lme_tables, plot_lme, run_longmemeval
    from ..eval.longmemeval import load_longmemeval
    from ..eval.systems import CachedEmbedder
    from .eval_args import default_cache, json_safe, write_outputs

    try:
        data = load_longmemeval(args.data, limit=args.limit, types=args.types, per_type=args.per_type)
    except (FileNotFoundError, ValueError) as e:
        print(f"lamina eval longmemeval: {e}", file=sys.stderr)
        return 2
    systems = list(LME_SYSTEMS) if not args.systems else [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if s not in LME_CHOICES]
    if bad or not systems:
        print(f"lamina eval longmemeval: unknown system(s) {bad}; valid: {', '.join(LME_CHOICES)}", file=sys.stderr)
        return 2
    inner: Embedder = get_embedder(args.embedder)
    cache = None if args.no_cache else (args.cache or default_cache())
    emb = CachedEmbedder(inner, cache)
    rep = data.report
    print(
        f"LongMemEval: {rep.questions} questions ({', '.join(f'{k} {v}' for k, v in rep.per_type.items())}; "
        f"{rep.abstention} abstention), {rep.sessions} distinct sessions, {rep.turns} turns, "
        f"{rep.evidence_turns} evidence turns"
    )
    print(
        f"embedder: {emb.name}; vector cache: {cache or 'off'}; systems: {', '.join(systems)}; budgets: {args.budgets}"
    )
    try:
        res = run_longmemeval(
            data, emb, budgets=args.budgets, systems=systems, progress=None if args.quiet else sys.stderr
        )
    finally:
        emb.close()
    print(format_lme_tables(res))
    st = res["embedder"]
    print(
        f"\nembedding: {st['texts_embedded']} texts embedded in {st['seconds']:.1f} s, {st['from_cache']} read from "
        f"the cache{f' {cache}' if cache else ''}; total {res['elapsed_seconds']:.0f} s"
    )
    drawn = f"wrote one plot per type to {args.plot}"
    return write_outputs(args, lambda: json_safe(res), lambda folder: plot_lme(res, folder), drawn)


def add_longmemeval_parser(esub: Any) -> None:
    """Register ``eval longmemeval`` on the ``lamina eval`` subparsers."""
    from .eval_args import add_cache_args, add_output_args, budgets_arg

    p = esub.add_parser(
        "longmemeval",
        help="LongMemEval retrieval metrics: lamina against BM25, cosine and a chunk hybrid",
        description="Replays each LongMemEval question's history into a fresh memory per system (roles and "
        "texts only) and scores the budgeted contexts (evidence recall) and the rankings (recall_any/all@k, "
        "ndcg@k at session and turn granularity).",
    )
    p.add_argument("--data", default=_DEFAULT_DATA, help="longmemeval_s_dev.json (compact format) or its folder")
    p.add_argument("--embedder", default="hashing", help="hashing | minilm | minilm-int8 | mpnet | auto")
    p.add_argument("--limit", type=int, default=None, help="first N questions (after --types)")
    p.add_argument("--per-type", type=int, default=None, help="first N questions of each type (a stratified subset)")
    p.add_argument("--types", type=_types, default=None, help="comma-separated question types")
    p.add_argument("--budgets", type=budgets_arg, default=[1024, 4096], help="e.g. 1024,4096")
    p.add_argument(
        "--systems",
        default="",
        help="comma-separated: lamina,bm25,dense-rag,chunk-hybrid (default: these) or lamina's ablations ('lamina late', ...)",
    )
    add_output_args(
        p, out="write every number as JSON here", plot="folder for one PNG per question type (needs matplotlib)"
    )
    add_cache_args(p)
    p.set_defaults(func=_cmd)
