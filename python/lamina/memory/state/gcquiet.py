"""Keeps CPython's cyclic garbage collector off the long-lived containers of memory states.

A full (generation-2) collection visits every element of every tracked container. A memory's
indexes are few containers with many elements (at 100k turns: a dict of 150k records, sets and
lists of 100k ids, ...), so each full collection of a process holding one read about a million
references spread over the heap — 80–300 ms at 100k turns on a 2-core machine — and it landed
in whichever call happened to allocate at that moment (an ``end_session``, a ``delete``).

These containers hold only ids, strings, numbers, tuples of those, lists of ids and
:class:`~lamina.memory.state.records.Record` objects (themselves untracked: they hold only such
values), and nothing in them refers back to a container: they can never be part of a reference
cycle, so the collector has nothing to find in them. Before each full collection, the
containers of every live :class:`~lamina.memory.state.memstate.MemoryState` (see its ``gc_containers``) are untracked (CPython's own
rule for dicts and tuples of atomic values, applied by the owner that knows its values). Untracking
never frees anything early — an untracked container's elements count as referenced from outside
— and reference counting still frees the containers. A dict is tracked again by CPython when a
tracked object (a new tuple, a record) is put in it, so the walk is repeated before every full
collection; it costs one call per container, not one per element. CPython tracks it again into
the *youngest* generation, where each young collection would visit all its entries: the few maps
that grow with every write (the records, the vector locations, a user's derived items) are
untracked again where they are written, right after the write.

:func:`collector_paused` keeps the collector off a call that allocates much and keeps little
(``Memory.end_session``): its temporaries are freed by reference counting before any young
collection visits them or promotes them to the oldest generation (where each promoted object
brings the next full collection nearer, even once freed); what it keeps is visited once, by a
young collection at its end.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ..._core import _gc_untrack

__all__ = ["Quiet", "quiet", "untrack_now", "collector_paused"]


class Quiet(Protocol):
    """An owner of long-lived containers that can never be part of a reference cycle."""

    def gc_containers(self) -> Iterator[object]:
        """Every such container (a dict, set, list or tuple) the owner holds now."""
        ...


_owners: weakref.WeakSet[Quiet] = weakref.WeakSet()
_lock = threading.Lock()
_registered = False


def quiet(owner: Quiet) -> None:
    """Untrack ``owner``'s containers before every full collection from now on (while it lives).

    Parameters
    ----------
    owner : Quiet
        Held weakly.
    """
    global _registered
    with _lock:
        _owners.add(owner)
        if not _registered:
            gc.callbacks.append(_before_full_collection)
            _registered = True


def _before_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start" and info.get("generation") == 2:
        for owner in list(_owners):
            untrack_now(owner)


def untrack_now(owner: Quiet) -> int:
    """Untrack every container of ``owner`` now; returns how many containers were visited."""
    n = 0
    for c in owner.gc_containers():
        _gc_untrack(c)
        n += 1
    return n


_pause = threading.RLock()
_pausing = 0  # calls inside collector_paused now (any thread)
_paused_here = False  # whether the collector was on when the first of them began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause CPython's cyclic collector (``gc.disable``) while the block runs.

    The block's temporaries are freed by reference counting, unvisited; at its end one young
    collection (generation 0) visits what it left, and the collector is on again. Older
    generations are collected where their thresholds fall, as always — but the block's
    allocations no longer bring them nearer. Re-entrant and shared among threads: the collector
    is turned back on when the last block open in the process ends, and only if it was on when
    the first began (a process that turned it off keeps it off).
    """
    global _pausing, _paused_here
    with _pause:
        if _pausing == 0:
            _paused_here = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause:
            _pausing -= 1
            if _pausing == 0 and _paused_here:
                gc.collect(0)
                gc.enable()
