"""Bounded memos (``functools.lru_cache``) that the cyclic garbage collector does not walk.

An ``lru_cache`` wrapper is a tracked object whose traversal visits every cached key and result:
a cache of per-text results (one entry per stored turn and day) grows with the store, and at
100k turns two such caches made each full collection read a few hundred thousand references.
:func:`quiet_lru_cache` is ``lru_cache`` with its wrapper untracked: the memoised functions here
are pure functions of atomic values returning atomic values or tuples of immutable records, so
nothing in a cache can be part of a reference cycle (untracking never frees anything early: what
the wrapper holds counts as referenced from outside). Lookups stay in C.

The cache's own dict is a second tracked object: CPython untracks it in a collection once its keys
are (tuples of atomic values, untracked by the collector), and the next insertion of a new key
tuple tracks it again *in the youngest generation*, where every young collection then visits all
its entries (at 100k turns, a few 10 ms pauses landing in whichever call allocated). So the
cache dicts are untracked again at the start of every collection (:func:`keep_untracked`).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from functools import _lru_cache_wrapper, lru_cache, wraps
from typing import Any, TypeVar

from .._core import _gc_untrack

__all__ = ["quiet_lru_cache", "keep_untracked", "frozen"]

R = TypeVar("R")

_always: list[object] = []  # containers untracked at the start of every collection


def _before_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        for c in _always:
            _gc_untrack(c)


def keep_untracked(container: object) -> None:
    """Untrack ``container`` at the start of every collection, young ones included, for the life
    of the process (it is held): for a long-lived container that can never be part of a reference
    cycle but that CPython tracks again on insertions, into the youngest generation.

    Parameters
    ----------
    container : object
        A dict, list, set or tuple holding no reference cycle.
    """
    if not _always:
        gc.callbacks.append(_before_collection)
    _always.append(container)
    _gc_untrack(container)


T = TypeVar("T")


def frozen(value: T) -> T:
    """``value`` with every tuple in it (nested tuples included) untracked, returned as is.

    For long-lived tuples of atomic values that a cache keeps (a record's memoised token count,
    a memo's result): CPython untracks such a tuple only in a collection of the generation it is
    in, inner tuples first, so many reach the oldest generation still tracked, where each counts
    toward the next full collection and is visited by it. Only tuples are touched; the caller
    knows the tuple holds no reference cycle.
    """
    if isinstance(value, tuple) and type(value) is tuple:
        for x in value:
            if type(x) is tuple:
                frozen(x)
        _gc_untrack(value)
    return value


def quiet_lru_cache(maxsize: int) -> Callable[[Callable[..., R]], _lru_cache_wrapper[R]]:
    """``functools.lru_cache(maxsize)`` whose wrapper the cyclic collector does not traverse.

    Parameters
    ----------
    maxsize : int
        Results kept, >= 1 (least recently used first out).
    """
    if maxsize < 1:
        raise ValueError(f"maxsize must be >= 1, got {maxsize}")

    def wrap(fn: Callable[..., R]) -> _lru_cache_wrapper[R]:
        @wraps(fn)
        def miss(*args: Any, **kwargs: Any) -> R:  # (a result kept in the cache: see frozen)
            return frozen(fn(*args, **kwargs))

        cached = lru_cache(maxsize=maxsize)(miss)
        _gc_untrack(cached)
        for d in gc.get_referents(cached):  # the cache dict (not the wrapper's attribute dict)
            if type(d) is dict and d is not getattr(cached, "__dict__", None):
                keep_untracked(d)
        return cached

    return wrap
