"""Command groups of the ``lamina`` command line: ``lamina GROUP COMMAND`` (``eval``, ``model``,
``keys``, ``tenant``), opened once and joined by every module that adds a command to them."""

from __future__ import annotations

import argparse

__all__ = ["command_group"]


def command_group(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str, dest: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The subcommands of ``lamina NAME``: a new group, or the one another module opened.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``lamina`` command's subparsers.
    name : str
        The group's name (``lamina NAME COMMAND``).
    help : str
        The group's one-line summary; the first module that opens the group gives it.
    dest : str
        The attribute of the parsed namespace that names the chosen command; one of them is required.

    Returns
    -------
    argparse._SubParsersAction
        Where the group's commands are added (``.add_parser(...)``).
    """
    group: argparse.ArgumentParser | None = sub.choices.get(name)
    if group is None:
        group = sub.add_parser(name, help=help)
        return group.add_subparsers(dest=dest, required=True)
    found: argparse._SubParsersAction[argparse.ArgumentParser] = next(
        a for a in group._actions if isinstance(a, argparse._SubParsersAction)
    )
    return found
