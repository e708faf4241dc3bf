"""Argument and output helpers shared by the evaluation commands (``lamina eval locomo``, ``kv``,
``memcon``, ``longmemeval``, ``position``)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any

from ..eval.commands import shared_data, write_json

__all__ = [
    "LOCOMO_DATA",
    "add_locomo_command",
    "shared_data",
    "add_cache_args",
    "add_model_args",
    "add_output_args",
    "budgets_arg",
    "default_cache",
    "json_safe",
    "write_outputs",
]


#: The default ``--data`` of the LoCoMo commands.
LOCOMO_DATA = shared_data("locomo")


def add_locomo_command(esub: Any, name: str, *, help: str, description: str, embedder: str) -> argparse.ArgumentParser:
    """``lamina eval NAME``, a command over LoCoMo: its parser, with ``--data`` (LoCoMo's file or
    folder) and ``--embedder`` (default ``embedder``) added."""
    p: argparse.ArgumentParser = esub.add_parser(name, help=help, description=description)
    p.add_argument("--data", default=LOCOMO_DATA, help="locomo_dev.json / locomo10.json or their folder")
    p.add_argument("--embedder", default=embedder, help="auto | minilm | minilm-int8 | mpnet | hashing")
    return p


def add_cache_args(p: argparse.ArgumentParser) -> None:
    """``--cache`` / ``--no-cache``: the SQLite file of embedded texts reused across runs."""
    p.add_argument(
        "--cache",
        default=None,
        help="SQLite file of embedded texts reused across runs "
        "(default $LAMINA_CACHE_DIR/eval-vectors.sqlite, ~/.cache/lamina)",
    )
    p.add_argument("--no-cache", action="store_true", help="embed everything afresh, keep nothing on disk")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model`` / ``--threads``: the local model a command runs on."""
    p.add_argument("--model", default=None, help="a llama-architecture .gguf (default: packaged SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=0, help="worker threads (0: lamina's default)")


def add_output_args(p: argparse.ArgumentParser, *, out: str, plot: str) -> None:
    """``--out`` / ``--plot`` (what :func:`write_outputs` writes; ``out`` and ``plot`` their
    help) and ``--quiet`` (no progress bar)."""
    p.add_argument("--out", default=None, help=out)
    p.add_argument("--plot", default=None, help=plot)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def budgets_arg(s: str) -> list[int]:
    """``--budgets``: comma-separated positive token budgets."""
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be comma-separated integers, got {s!r}") from None
    if not out or any(b < 1 for b in out):
        raise argparse.ArgumentTypeError(f"budgets must be positive, got {s!r}")
    return out


def default_cache() -> str:
    """``$LAMINA_CACHE_DIR/eval-vectors.sqlite`` (default ``~/.cache/lamina``)."""
    root = os.environ.get("LAMINA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lamina")
    return os.path.join(root, "eval-vectors.sqlite")


def json_safe(x: Any) -> Any:
    """``x`` with NaN / Inf floats as None (JSON has neither), containers converted throughout."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def write_outputs(
    args: argparse.Namespace, result: Callable[[], Any], draw: Callable[[str], str | None], drawn: str = ""
) -> int:
    """A command's ``--out`` and ``--plot``: ``result()`` as JSON there (indent 1), then
    ``draw(path)``, printing what it returns (why it drew nothing) or ``drawn`` (default ``wrote
    <path>``). Returns 0, the command's exit status."""
    if args.out:
        write_json(args.out, result())
    if args.plot:
        why = draw(args.plot)
        print(why if why else drawn or f"wrote {args.plot}")
    return 0
