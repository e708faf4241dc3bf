"""A bounded memo for pure functions of hashable values that the cyclic garbage collector does
not walk.

``functools.lru_cache`` keeps its entries in a linked list that every full collection visits:
a cache of per-text results (one entry per stored turn and day) grows with the store, and at
100k turns two such caches made each full collection read a few hundred thousand references.
:func:`memo` keeps the entries in one dict that is untracked after each insert (its keys and
values are tuples of atomic values and such results: nothing in it can be part of a reference
cycle). When full it drops its oldest entry (first in, first out).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from ._core import _gc_untrack

__all__ = ["memo", "Memo"]

R = TypeVar("R")


class Memo(Generic[R]):
    """``fn`` memoised by its positional arguments (at most ``maxsize`` results kept).

    Parameters
    ----------
    fn : callable
        A pure function of hashable positional arguments whose results hold no reference to a
        container that can reach the memo.
    maxsize : int
        Results kept, >= 1.

    Thread safety: thread-safe (two threads may compute the same new result at once; one is kept).
    """

    def __init__(self, fn: Callable[..., R], maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self._fn = fn
        self.maxsize = int(maxsize)
        self._d: dict[tuple[Hashable, ...], R] = {}
        self._lock = threading.Lock()
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "memo")

    def __call__(self, *args: Hashable) -> R:
        try:
            return self._d[args]
        except KeyError:
            pass
        v = self._fn(*args)
        with self._lock:
            d = self._d
            if args not in d:
                if len(d) >= self.maxsize:
                    del d[next(iter(d))]
                d[args] = v
            _gc_untrack(d)  # (re-tracked by CPython when a tracked key or value goes in)
        return v

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        """Drop every kept result."""
        with self._lock:
            self._d.clear()


def memo(maxsize: int) -> Callable[[Callable[..., R]], Memo[R]]:
    """Decorator form of :class:`Memo`."""

    def wrap(fn: Callable[..., R]) -> Memo[R]:
        return Memo(fn, maxsize)

    return wrap
