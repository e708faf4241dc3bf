"""What the evaluation's commands share: a subcommand whose ``--help`` shows its module's
docstring as written (``lamina eval leakage``, ``mistakes``, ``backtrack``, ``lamina pamqa
build``), the default folders of the shared data sets and the JSON / JSONL files they write."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["add_mistake_data_arg", "documented_command", "shared_data", "write_json", "write_jsonl"]


def shared_data(name: str) -> str:
    """The default folder of a data set: ``../shared/data/<name>`` (relative to the working directory)."""
    return os.path.join("..", "shared", "data", name)


def add_mistake_data_arg(p: argparse.ArgumentParser) -> None:
    """``--data``: the folder of BIG-Bench Mistake ``.jsonl`` files."""
    p.add_argument("--data", default=shared_data("bigbench-mistake"), help="folder of BIG-Bench Mistake .jsonl files")


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON (indent 1) to ``path`` and print ``wrote <path>``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
    print(f"wrote {path}")


def write_jsonl(path: str, rows: Iterable[Any]) -> None:
    """Write each of ``rows`` as one line of JSON (non-ASCII kept) to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def documented_command(
    sub: Any, name: str, *, help: str, doc: str | None, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, run by ``func``, to ``sub``.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The group the command joins.
    name : str
        The command's name.
    help : str
        Its one-line summary in the group's listing.
    doc : str or None
        Its description, line breaks kept (the module's ``__doc__``).
    func : callable
        ``func(args) -> exit status``, stored as ``args.func``.

    Returns
    -------
    argparse.ArgumentParser
        The command's parser, for its options.
    """
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.set_defaults(func=func)
    return p
