"""lamina._memo: a bounded memo whose storage the cyclic garbage collector does not walk."""

from __future__ import annotations

import gc
import threading

import pytest

from lamina._memo import Memo, memo


def test_results_are_the_function_s_and_computed_once() -> None:
    calls: list[tuple[str, int]] = []

    @memo(maxsize=8)
    def f(text: str, day: int) -> tuple[str, ...]:
        calls.append((text, day))
        return tuple(text.split()) + (str(day),)

    assert f("a b", 3) == ("a", "b", "3")
    assert f("a b", 3) == ("a", "b", "3")
    assert f("a b", 4) == ("a", "b", "4")
    assert calls == [("a b", 3), ("a b", 4)]
    assert len(f) == 2


def test_bounded_first_in_first_out() -> None:
    calls: list[int] = []
    m = Memo(lambda x: calls.append(x) or x * 2, maxsize=3)
    for x in (1, 2, 3, 4):
        assert m(x) == 2 * x
    assert len(m) == 3
    assert m(2) == 4 and m(3) == 6 and m(4) == 8  # kept
    assert calls == [1, 2, 3, 4]
    assert m(1) == 2  # the oldest went: computed again
    assert calls == [1, 2, 3, 4, 1]
    m.clear()
    assert len(m) == 0


def test_storage_untracked_after_inserts_of_tracked_values() -> None:
    m = Memo(lambda x: (x, [x]), maxsize=100)  # tracked keys (new tuples) and values (lists)
    for x in range(50):
        m(x)
    assert not gc.is_tracked(m._d)
    # untracking never frees early: every stored value is still alive and intact after a collection
    gc.collect()
    assert [m(x) for x in range(50)] == [(x, [x]) for x in range(50)]


def test_bad_maxsize() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        Memo(str, maxsize=0)


def test_threads() -> None:
    m = Memo(lambda x: x * x, maxsize=64)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                x = (i * 7 + seed) % 200
                assert m(x) == x * x
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(m) <= 64
