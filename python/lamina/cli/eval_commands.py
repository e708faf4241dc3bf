"""``lamina eval locomo``, ``lamina eval memcon`` and ``lamina eval kv``: the command-line fronts
of :mod:`lamina.eval.harness`, :mod:`lamina.eval.memcon_regret` and :mod:`lamina.eval.kv` (``eval
position``: :mod:`lamina.cli.position_commands`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from .eval_args import (
    add_cache_args,
    add_locomo_command,
    add_model_args,
    add_output_args,
    budgets_arg,
    default_cache,
    json_safe,
    write_outputs,
)
from .groups import command_group

__all__ = ["add_eval_parser"]


def _orders(s: str) -> list[str]:
    """``--orders``: comma-separated context orders, each one of :data:`lamina.memory.types.CONTEXT_ORDERS`."""
    from ..memory.types import CONTEXT_ORDERS, context_order

    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"--orders needs at least one of {', '.join(CONTEXT_ORDERS)}")
    try:
        out = [context_order(x) for x in out]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"--orders repeats an order: {s!r}")
    return out


def _reader(args: argparse.Namespace) -> Any:
    if args.reader == "local":  # the packaged (or --reader-gguf) model in this process
        from ..eval.harness import Reader
        from ..llm.local_chat import LocalChat

        chat = LocalChat(path=args.reader_gguf)
        return Reader(chat, name=f"local:{chat.model.path.name}")
    model = args.reader_model or os.environ.get("LAMINA_READER_MODEL")
    url = args.reader_url or os.environ.get("LAMINA_READER_BASE_URL")
    if not model:
        return None
    from ..eval.harness import Reader
    from ..llm.openai_chat import OpenAIChat

    return Reader(
        OpenAIChat(
            base_url=url, model=model, api_key=os.environ.get("LAMINA_READER_API_KEY"), timeout=args.reader_timeout
        )
    )


def _cmd_eval_locomo(args: argparse.Namespace) -> int:
    from ..embedders import Embedder, get_embedder
    from ..eval.harness import ALL_SYSTEMS, run_locomo
    from ..eval.locomo import load_audit, load_locomo
    from ..eval.tables import format_tables, plot_recall

    data = args.data
    if not os.path.exists(data):
        print(
            f"lamina eval locomo: no data at {data!r}; pass --data PATH to locomo_dev.json (or its folder)",
            file=sys.stderr,
        )
        return 2
    convs, rep = load_locomo(data, captions=not args.no_captions, limit=args.limit_conversations)
    if args.questions_per_conversation is not None:
        n = args.questions_per_conversation
        if n < 1:
            print("lamina eval locomo: --questions-per-conversation must be >= 1", file=sys.stderr)
            return 2
        for c in convs:  # every len/n-th question: all categories keep their share
            qs = c.questions
            c.questions = [qs[i * len(qs) // n] for i in range(n)] if n < len(qs) else qs
        rep.questions = sum(len(c.questions) for c in convs)
    systems = ALL_SYSTEMS if not args.systems else [s.strip() for s in args.systems.split(",") if s.strip()]
    if args.orders is not None:
        from ..eval.systems import LAMINA_VARIANTS

        if not args.systems:  # the orders are lamina's: its contexts only
            systems = ["lamina"]
        raw = [s for s in systems if s not in LAMINA_VARIANTS]
        if raw:
            print(f"lamina eval locomo: --orders applies to lamina's contexts only, not {raw}", file=sys.stderr)
            return 2
        if args.reader != "local" and not (args.reader_model or os.environ.get("LAMINA_READER_MODEL")):
            print("lamina eval locomo: --orders needs a reader (--reader local or --reader-model)", file=sys.stderr)
            return 2
    embedder: Embedder = get_embedder(args.embedder)
    cache = None if args.no_cache else (args.cache or default_cache())
    cached = None
    if cache is not None:
        from ..eval.systems import CachedEmbedder

        embedder = cached = CachedEmbedder(embedder, cache)
    audit_path = args.audit
    if audit_path is None:  # the audit's list beside the data, when it is there
        near = os.path.join(data if os.path.isdir(data) else os.path.dirname(data), "audit_errors_dev.json")
        audit_path = near if os.path.isfile(near) else None
    audit = None
    if audit_path and audit_path != "none":
        audit = load_audit(audit_path, convs)
        print(
            f"audit: {audit_path}: {audit.corrected} questions with corrected evidence, {audit.dropped} dropped "
            f"(hallucinated / ambiguous), {len(audit.unmatched)} entries matching no loaded question"
        )
    else:
        print("audit: none (--audit PATH): the corrected-gold numbers equal the original")
    reader = _reader(args)
    print(
        f"LoCoMo: {rep.conversations} conversations, {rep.sessions} sessions, {rep.turns} turns, "
        f"{rep.questions} questions; evidence ids {rep.evidence_ids}: {len(rep.repaired_evidence)} repaired, "
        f"{len(rep.malformed_evidence)} unparseable, {len(rep.missing_evidence)} pointing at no turn"
    )
    print(
        f"embedder: {embedder.name}; vector cache: {cache or 'off'}; systems: {', '.join(systems)}; budgets: {args.budgets}"
    )
    if reader is None:
        print(
            "reader: skipped (no OpenAI-compatible endpoint: set --reader-model [--reader-url] or "
            "LAMINA_READER_MODEL [LAMINA_READER_BASE_URL]); F1 / BLEU-1 are not reported"
        )
    else:
        print(
            f"reader: {reader.model} at budget {args.reader_budget}"
            + (f"; context orders: {', '.join(args.orders)}" if args.orders else "")
        )
    res = run_locomo(
        convs,
        embedder,
        budgets=args.budgets,
        systems=systems,
        retention=not args.no_retention,
        reader=reader,
        reader_budget=args.reader_budget,
        progress=None if args.quiet else sys.stderr,
        load_report=rep,
        audit=audit,
        orders=args.orders,
    )
    print(format_tables(res))
    e = res["embedder"]
    if e["texts_per_s"]:
        print(
            f"\nembedding: {e['texts_embedded']} distinct texts in {e['seconds']:.1f} s "
            f"({e['texts_per_s']:.0f} texts/s); total {res['elapsed_seconds']:.0f} s"
        )
    if e.get("from_cache"):
        print(f"embedding: {e['from_cache']} vectors read from the cache {cache}")
    if cached is not None:
        cached.close()
    return write_outputs(args, lambda: json_safe(res), lambda path: plot_recall(res, path))


def _csv(kind: type, s: str) -> list[Any]:
    try:
        return [kind(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__} values, got {s!r}") from None


def _cmd_eval_kv(args: argparse.Namespace) -> int:
    from .. import model as lm
    from ..eval.kv import format_kv_tables, plot_kv, run_kv, summarize
    from ..eval.kv_suite import TASKS, make_suite
    from ..kv import METHODS

    tasks = _csv(str, args.tasks) if args.tasks else list(TASKS)
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        print(f"lamina eval kv: unknown task(s) {', '.join(bad)}; valid: {', '.join(TASKS)}", file=sys.stderr)
        return 2
    # by default every method but KVzip (its scores need a reconstruction pass of the model)
    methods = _csv(str, args.methods) if args.methods else [m for m in METHODS if m != "kvzip"]
    badm = [m for m in methods if m not in METHODS]
    if badm:
        print(f"lamina eval kv: unknown method(s) {', '.join(badm)}; valid: {', '.join(METHODS)}", file=sys.stderr)
        return 2
    modes = _csv(str, args.modes)
    comps = [c for c in _csv(float, args.compressions) if c > 0.0]
    m = lm.load(args.model, threads=args.threads)
    suite = make_suite(
        tasks=tasks,
        lengths=_csv(int, args.lengths),
        samples=args.samples,
        seed=args.seed,
        # a length holds the prompt and the answer: 64 tokens are left for the generation
        count_tokens=lambda t: len(m.tokenize(m.chat_prompt(t))) + 64,
    )
    print(
        f"model: {m!r}\nsuite: {len(suite)} prompts ({', '.join(tasks)}; lengths {args.lengths}; "
        f"{args.samples} per task, seed {args.seed}); methods: {', '.join(methods)}; "
        f"compressions: 0 (full), {', '.join(format(c, 'g') for c in comps)}; modes: {', '.join(modes)}"
    )
    t0 = time.perf_counter()
    recs = run_kv(
        m, suite, methods=methods, compressions=comps, modes=modes, progress=None if args.quiet else sys.stderr
    )
    summary = summarize(recs)
    summary["config"] = {
        "model": str(m.path.name),
        "tasks": tasks,
        "lengths": _csv(int, args.lengths),
        "samples": args.samples,
        "seed": args.seed,
        "methods": methods,
        "compressions": comps,
        "modes": modes,
        "seconds": time.perf_counter() - t0,
    }
    print(format_kv_tables(summary))
    print(f"\n{len(recs)} answers in {summary['config']['seconds']:.0f} s")
    return write_outputs(args, lambda: json_safe(summary), lambda path: plot_kv(summary, path))


def _cmd_eval_memcon(args: argparse.Namespace) -> int:
    from ..eval.locomo import load_locomo
    from ..eval.memcon_regret import plot_regret, report, simulate, timed_precompute

    if not os.path.exists(args.data):
        print(f"lamina eval memcon: no data at {args.data!r}; pass --data PATH to locomo_dev.json", file=sys.stderr)
        return 2
    state = [f.strip() for f in args.state.split(",") if f.strip()]
    convs, rep = load_locomo(args.data, limit=args.limit_conversations)
    if not 0 <= args.holdout < len(convs):
        print(f"lamina eval memcon: --holdout must be in 0..{len(convs) - 1}, got {args.holdout}", file=sys.stderr)
        return 2
    actions, outcomes, secs = timed_precompute(
        convs, embedder=args.embedder, ask=args.ask, progress=None if args.quiet else sys.stderr
    )
    print(
        f"MemCon on LoCoMo: {rep.conversations} conversations, {len(outcomes)} questions with evidence "
        f"(asked {args.ask.replace('_', ' ')}); outcomes of {len(actions)} actions precomputed in {secs:.1f} s"
    )
    train = [c.sample_id for c in convs[: len(convs) - args.holdout]] if args.holdout else []
    res = simulate(
        actions,
        outcomes,
        episodes=args.episodes,
        train=train,
        train_episodes=args.train_episodes,
        state=state,
        cost=args.cost,
        c=args.c,
        alpha=args.alpha,
        seed=args.seed,
    )
    res["precompute_seconds"] = secs
    res["embedder"] = args.embedder
    res["ask"] = args.ask
    print(report(res))
    return write_outputs(args, lambda: json_safe(res), lambda path: plot_regret(res, path))


def add_eval_parser(sub: Any) -> None:
    """Register ``eval locomo`` on the ``lamina`` command's subparsers."""
    esub = command_group(sub, "eval", help="evaluate lamina and baselines on a benchmark", dest="bench")
    lo = add_locomo_command(
        esub,
        "locomo",
        help="LoCoMo retrieval metrics: lamina, ablations and baselines",
        description="Replays each LoCoMo conversation into every system and scores the "
        "contexts (docs/design.md §4). Only turns are ingested.",
        embedder="auto",
    )
    lo.add_argument("--budgets", type=budgets_arg, default=[256, 512, 1024, 2048], help="e.g. 256,512,1024,2048")
    lo.add_argument("--systems", default="", help="comma-separated subset (default: all)")
    add_output_args(
        lo, out="write every number as JSON here", plot="write a PNG of recall vs budget (needs matplotlib)"
    )
    lo.add_argument("--limit-conversations", type=int, default=None, help="first N conversations only")
    lo.add_argument("--no-retention", action="store_true", help="skip the 6-period retention replays")
    lo.add_argument(
        "--audit",
        default=None,
        help="the audit's error list (default: audit_errors_dev.json beside the data when present; 'none': off)",
    )
    lo.add_argument("--no-captions", action="store_true", help="do not append shared-image captions to turns")
    lo.add_argument(
        "--reader",
        choices=("endpoint", "local"),
        default="endpoint",
        help="who answers for F1/BLEU-1: an OpenAI-compatible endpoint (--reader-model) or 'local', "
        "lamina's own model in this process (lamina[model]; the packaged SmolLM2-135M unless --reader-gguf)",
    )
    lo.add_argument("--reader-gguf", default=None, help="with --reader local: a llama-architecture .gguf")
    lo.add_argument(
        "--questions-per-conversation",
        type=int,
        default=None,
        help="an evenly spaced subset of N questions per conversation (a reader answers ~1 question/s locally)",
    )
    lo.add_argument("--reader-model", default=None, help="chat model for F1/BLEU-1 (OpenAI-compatible)")
    lo.add_argument("--reader-url", default=None, help="base URL of the endpoint (…/v1)")
    lo.add_argument("--reader-budget", type=int, default=1024, help="budget whose contexts the reader answers from")
    lo.add_argument("--reader-timeout", type=float, default=60.0)
    lo.add_argument(
        "--orders",
        type=_orders,
        default=None,
        help="comma-separated context orders the reader answers each question in: lost-in-the-middle "
        "(lamina's default), score, reversed — the same items, only their order changed (lamina systems "
        "only; default systems then: lamina)",
    )
    add_cache_args(lo)
    lo.set_defaults(func=_cmd_eval_locomo)

    kv = esub.add_parser(
        "kv",
        help="KV-cache presses on the local model: RULER-style accuracy vs compression",
        description="Generates the long-context suite (lamina.eval.kv_suite), prefills each prompt once "
        "and scores every method x compression x mode on a clone of the cache, beside the full cache.",
    )
    add_model_args(kv)
    kv.add_argument("--lengths", default="4096", help="prompt lengths in tokens, e.g. 1024,2048,4096,8192")
    kv.add_argument("--tasks", default="", help="comma-separated subset of the tasks (default: all six)")
    kv.add_argument("--n", "--samples", dest="samples", type=int, default=2, help="prompts per task and length")
    kv.add_argument("--seed", type=int, default=0)
    kv.add_argument("--methods", default="", help="comma-separated lamina.kv methods (default: all but kvzip)")
    kv.add_argument(
        "--compressions", default="0.25,0.5,0.75,0.9", help="fractions removed (0, the full cache, always runs)"
    )
    kv.add_argument("--modes", default="agnostic,aware", help="agnostic (kvpress's setting) and/or aware")
    add_output_args(
        kv, out="write the summary and every answer as JSON here", plot="write an SVG of score vs compression here"
    )
    kv.set_defaults(func=_cmd_eval_kv)
    mc = add_locomo_command(
        esub,
        "memcon",
        help="MemCon learning offline on LoCoMo: regret against fixed memory policies",
        description="Precomputes every memory action's outcome per question once (only turns are "
        "ingested; gold evidence is the reward), then runs MemCon and the fixed policies.",
        embedder="hashing",
    )
    mc.add_argument("--episodes", type=int, default=20000, help="reported episodes")
    mc.add_argument(
        "--holdout",
        type=int,
        default=3,
        help="the last K conversations are held out and reported; MemCon learns on the others "
        "first (default 3; 0: one stream over all, from scratch)",
    )
    mc.add_argument("--train-episodes", type=int, default=20000, help="episodes on the training conversations")
    mc.add_argument(
        "--state",
        default="date,names,top,conc",
        help="features of the state φ, from: date, names, qlen, qclass, top, gap, conc, spread, recent, size",
    )
    mc.add_argument(
        "--ask",
        choices=("end", "after_evidence"),
        default="end",
        help="ask each question after the last session, or after a (seeded) session at or after its evidence",
    )
    mc.add_argument("--cost", type=float, default=0.25, help="reward cost per 1,000 retrieved tokens")
    mc.add_argument("--c", type=float, default=0.3, help="UCB exploration weight")
    mc.add_argument("--alpha", type=float, default=0.15, help="constant step of the Q update")
    mc.add_argument("--seed", type=int, default=0)
    mc.add_argument("--limit-conversations", type=int, default=None)
    add_output_args(
        mc, out="write the result (curves included) as JSON", plot="write a PNG of the regret curves (needs matplotlib)"
    )
    mc.set_defaults(func=_cmd_eval_memcon)
    from ..eval.backtrack_localisers import add_backtrack_parser
    from ..eval.leakage import add_leakage_parser
    from ..eval.mistakes import add_mistakes_parser
    from .longmemeval_commands import add_longmemeval_parser
    from .position_commands import add_position_parser

    add_leakage_parser(esub)
    add_mistakes_parser(esub)
    add_backtrack_parser(esub)
    add_position_parser(esub)
    add_longmemeval_parser(esub)
