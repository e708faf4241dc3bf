"""Bounded memos (``functools.lru_cache``) that the cyclic garbage collector does not walk.

An ``lru_cache`` wrapper is a tracked object whose traversal visits every cached key and result:
a cache of per-text results (one entry per stored turn and day) grows with the store, and at
100k turns two such caches made each full collection read a few hundred thousand references.
:func:`quiet_lru_cache` is ``lru_cache`` with its wrapper untracked: the memoised functions here
are pure functions of atomic values returning atomic values or tuples of immutable records, so
nothing in a cache can be part of a reference cycle (untracking never frees anything early: what
the wrapper holds counts as referenced from outside). Lookups stay in C.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import _lru_cache_wrapper, lru_cache
from typing import TypeVar

from ._core import _gc_untrack

__all__ = ["quiet_lru_cache"]

R = TypeVar("R")


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
        cached = lru_cache(maxsize=maxsize)(fn)
        _gc_untrack(cached)
        return cached

    return wrap
