"""``lamina.cli``: the ``lamina`` command line — every command and the one progress bar.

* :mod:`~lamina.cli.entry` — :func:`main`, the parser and the small commands (``info``, ``bench``,
  ``demo``);
* :mod:`~lamina.cli.demo` — ``lamina demo``;
* :mod:`~lamina.cli.io_commands` — ``lamina mcp``, ``export``, ``import``, ``migrate``;
* :mod:`~lamina.cli.model_commands` — ``lamina model``;
* :mod:`~lamina.cli.eval_commands`, :mod:`~lamina.cli.position_commands` — ``lamina eval``;
* :mod:`~lamina.cli.serve_commands` — ``lamina serve`` and ``lamina keys``;
* :mod:`~lamina.cli.progress` — the one-line progress bar (a leaf: the evaluation harness uses
  it too, and importing it loads no command).

This package's ``__init__`` imports no command: :func:`main` loads them when called."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lamina`` console script (:func:`lamina.cli.entry.main`)."""
    from .entry import main as run

    return run(argv)


__all__ = ["main"]
