"""The ``lamina`` command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import numpy.typing as npt

from ..eval.pamqa_data import add_pamqa_parser
from ..native import _info
from ..native.search import VectorArena, topk
from .eval_commands import add_eval_parser
from .io_commands import add_io_parsers
from .model_commands import add_model_parser
from .serve_commands import add_serve_parsers
from .tenant_commands import add_tenant_parser

__all__ = ["main"]


def _time(fn: Callable[[], object], min_time: float = 0.5) -> float:
    fn()  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n


def _np_topk(Q: npt.NDArray[np.float32], X: npt.NDArray[np.float32], k: int) -> None:
    S = Q @ X.T
    idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
    np.take_along_axis(S, idx, axis=1)


def _cmd_bench_search(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    n, d = args.rows, args.dim
    print(
        f"lamina {_info.build_info()['version']} — exact top-{args.k} search, {n} x {d} float32, "
        f"SIMD {_info.build_info()['simd_active']}, {_info.get_num_threads()} threads"
    )
    X = rng.standard_normal((n, d), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    arena = VectorArena(d, capacity=n)
    ns = (np.arange(n) % 10).astype(np.uint64)
    arena.add(X, namespace=ns)
    print(f"{'case':<28}{'lamina ms':>11}{'numpy ms':>11}{'ratio':>8}")
    for b in args.batches:
        Q = rng.standard_normal((b, d), dtype=np.float32)
        t_l = _time(partial(topk, Q, X, args.k))
        t_n = _time(partial(_np_topk, Q, X, args.k))
        print(f"{'topk batch ' + str(b):<28}{t_l * 1e3:>11.2f}{t_n * 1e3:>11.2f}{t_n / t_l:>7.2f}x")
        t_f = _time(partial(arena.search, Q, args.k, namespace=3))
        print(f"{'arena 10% namespace b=' + str(b):<28}{t_f * 1e3:>11.2f}{'':>11}{'':>8}")
    # correctness spot check against numpy
    Q = rng.standard_normal((4, d), dtype=np.float32)
    _, idx = topk(Q, X, args.k)
    ref = np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, : args.k]
    print(f"agreement with numpy: {float((idx == ref).mean()):.3f}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(
        db_path=args.db,
        users=args.users,
        sessions=args.sessions,
        turns=args.turns,
        budget=args.budget,
        seed=args.seed,
        embedder=args.embedder,
        progress=not args.quiet,
    )
    return 0


class _OneLineHelp(argparse.HelpFormatter):
    """Help wide enough that every command's summary fits on one line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=200)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            # argparse measures the command names at the section's indent, then prints them
            # two columns deeper: widen by that, so no summary wraps onto a line of its own
            self._action_max_length += 4


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lamina",
        description="lamina: long-term memory engine for LLM agents",
        epilog="`lamina COMMAND --help` shows a command's options.",
        formatter_class=_OneLineHelp,
    )
    p.add_argument("--version", action="version", version=f"lamina {_info.build_info()['version']}")
    sub = p.add_subparsers(dest="cmd", required=True, title="commands", metavar="COMMAND")
    b = sub.add_parser("bench-search", help="time exact top-k search against numpy")
    b.add_argument("--rows", type=int, default=100_000)
    b.add_argument("--dim", type=int, default=384)
    b.add_argument("--k", type=int, default=10)
    b.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    b.add_argument("--seed", type=int, default=0)
    b.set_defaults(func=_cmd_bench_search)
    d = sub.add_parser("demo", help="run the memory loop on a bundled multi-user conversation and report")
    d.add_argument("--db", default="lamina-demo.db", help="SQLite file to write (replaced if it exists)")
    d.add_argument("--users", type=int, default=6)
    d.add_argument("--sessions", type=int, default=20)
    d.add_argument("--turns", type=int, default=30, help="turns per session")
    d.add_argument("--budget", type=int, default=256, help="context budget in tokens")
    d.add_argument(
        "--embedder",
        default="hashing",
        help="hashing (default: the embedded, deterministic one — same numbers on every machine) "
        "| auto (MiniLM: float32 when installed, else int8) | minilm | minilm-int8 | mpnet (stronger, ~6x slower)",
    )
    d.add_argument("--seed", type=int, default=7)
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)
    add_eval_parser(sub)
    add_pamqa_parser(sub)
    add_io_parsers(sub)
    add_tenant_parser(sub)
    add_serve_parsers(sub)
    add_model_parser(sub)  # after serve's: `lamina model calibrate` joins its `model` group
    i = sub.add_parser("info", help="print build facts")
    i.set_defaults(func=lambda a: print(_info.build_info()) or 0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lamina`` command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
