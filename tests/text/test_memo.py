"""lamina.text._memo: lru_cache memos that the cyclic garbage collector does not walk."""

from __future__ import annotations

import gc

import pytest

from lamina.text._memo import frozen, quiet_lru_cache


def test_results_are_the_function_s_and_computed_once() -> None:
    calls: list[tuple[str, int]] = []

    @quiet_lru_cache(maxsize=8)
    def f(text: str, day: int) -> tuple[str, ...]:
        calls.append((text, day))
        return (*text.split(), str(day))

    assert f("a b", 3) == ("a", "b", "3")
    assert f("a b", 3) == ("a", "b", "3")
    assert f("a b", 4) == ("a", "b", "4")
    assert calls == [("a b", 3), ("a b", 4)]
    assert f.cache_info().currsize == 2


def test_bounded() -> None:
    calls: list[int] = []

    @quiet_lru_cache(maxsize=3)
    def f(x: int) -> int:
        calls.append(x)
        return 2 * x

    for x in (1, 2, 3, 4):
        assert f(x) == 2 * x
    assert f.cache_info().currsize == 3
    assert f(1) == 2 and calls == [1, 2, 3, 4, 1]  # the least recently used went


def _collector_work() -> int:
    gc.collect()
    return sum(len(gc.get_referents(o)) for o in gc.get_objects())


def test_the_collector_does_not_walk_the_entries() -> None:
    @quiet_lru_cache(maxsize=100_000)
    def f(text: str, day: int) -> bool:
        return len(text) > day

    assert not gc.is_tracked(f)
    f("warm", 1)
    w0 = _collector_work()
    for i in range(20_000):
        f(f"text {i}", i % 7)
    w1 = _collector_work()
    # each entry is a key, a result and a list element that a tracked lru_cache visits
    assert w1 - w0 < 2_000, (w0, w1)
    # untracking never frees early: the cached results are intact after the collections
    assert all(f(f"text {i}", i % 7) == (len(f"text {i}") > i % 7) for i in range(0, 20_000, 997))
    assert f.cache_info().currsize == 20_001


def _cache_dict(f: object) -> dict[object, object]:
    (d,) = [o for o in gc.get_referents(f) if type(o) is dict and o is not getattr(f, "__dict__", None)]
    return d


def test_a_young_collection_does_not_walk_the_cache_dict() -> None:
    @quiet_lru_cache(maxsize=1_000)
    def f(t: float) -> float:
        return t / 2

    for i in range(500):
        f(i + 0.5)  # (a float argument: the key is a new, tracked tuple)
    d = _cache_dict(f)
    gc.collect()  # a full collection untracks the dict of untracked key tuples ...
    f(1e9)  # ... and a new key tuple tracks it again, into the youngest generation
    gc.collect(0)
    # (were it tracked, every young collection would visit its 501 entries)
    assert not gc.is_tracked(d)
    assert not any(o is d for g in (0, 1) for o in gc.get_objects(generation=g))
    assert f(1e9) == 5e8 and f.cache_info().currsize == 501


def test_frozen_untracks_every_tuple_in_a_tuple() -> None:
    inner = (float("nan"), "a")  # (tracked: built at run time)
    deep = (2, ("c", inner))
    lst = [1]
    t = (inner, deep, lst)
    assert gc.is_tracked(t) and gc.is_tracked(inner)
    assert frozen(t) is t
    assert not any(gc.is_tracked(x) for x in (t, inner, deep, deep[1]))
    assert gc.is_tracked(lst)  # (only tuples are touched)
    assert frozen(lst) is lst and gc.is_tracked(lst)


def test_cached_results_are_untracked() -> None:
    @quiet_lru_cache(maxsize=8)
    def f(text: str) -> tuple[tuple[str, ...], int]:
        return tuple(sorted(set(text.split()))), len(text)

    r = f("b a b")
    assert r == (("a", "b"), 5)
    assert not gc.is_tracked(r) and not gc.is_tracked(r[0])
    assert f("b a b") is r


def test_bad_maxsize() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        quiet_lru_cache(maxsize=0)
