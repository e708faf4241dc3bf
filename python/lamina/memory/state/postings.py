"""The posting lists of :class:`~lamina.memory.state.memstate.MemoryState`: id-ordered lists, tuple-valued
maps and list / set-valued maps of item ids, kept without empty keys."""

from __future__ import annotations

import bisect
from typing import Any

from ..._core import _gc_untrack

__all__ = ["insert_id", "tuple_add", "tuple_discard", "discard_id"]


def insert_id(lst: list[int], i: int) -> None:
    """Insert an id into an id-ordered list (appending in the usual case)."""
    if not lst or lst[-1] < i:
        lst.append(i)
    elif i not in lst:
        bisect.insort(lst, i)


def tuple_add(index: dict[str, tuple[int, ...]], key: str, i: int) -> None:
    """Add an id to the tuple ``index[key]`` (once)."""
    cur = index.get(key, ())
    if i not in cur:
        index[key] = (*cur, i)
        _gc_untrack(index)  # (a new tuple tracks the map again: see lamina.memory.state.gcquiet)


def tuple_discard(index: dict[str, tuple[int, ...]], key: str, i: int) -> None:
    """Remove an id from the tuple ``index[key]``; a key left empty goes."""
    cur = index.get(key)
    if cur is None or i not in cur:
        return
    rest = tuple(j for j in cur if j != i)
    if rest:
        index[key] = rest
        _gc_untrack(index)
    else:
        del index[key]


def discard_id(index: dict[Any, Any], key: Any, i: int, keep: Any = None) -> None:
    """Remove an id from ``index[key]`` (a list or set); a key left empty goes (but ``keep``)."""
    coll = index.get(key)
    if coll is None or i not in coll:
        return
    coll.remove(i)
    if not coll and key != keep:
        del index[key]
