"""The exact step checkers on chains written here (right, wrong, and unreadable steps)."""

from __future__ import annotations

from lamina.reasoning import RIGHT, UNCHECKED, WRONG, check_step
from lamina.reasoning.checkers import check_arithmetic, check_order, check_stack, check_swap


def test_arithmetic_chains() -> None:
    assert check_arithmetic("So A = (3 + 4 * 2) = (3 + 8) = 11.") == RIGHT
    assert check_arithmetic("So A = (3 + 4 * 2) = (7 * 2) = 14.") == WRONG  # precedence slip
    assert check_arithmetic("B = (7 - -7 * 4) = (7 - 28) = -21.") == WRONG  # sign slip
    assert check_arithmetic("B = (7 - -7 * 4) = (7 + 28) = 35.") == RIGHT
    assert check_arithmetic("where A = (1 + 2), B = (3 + 4)") == UNCHECKED  # definitions, nothing compared
    assert check_arithmetic("x = y for every case") == UNCHECKED
    assert check_arithmetic("(8 / 0) = 3") == UNCHECKED  # not evaluable, not judged


def test_order_chains() -> None:
    assert check_order('"apple" < "Banana" < "cherry"') == RIGHT
    assert check_order('"pear" < "apple"') == WRONG
    assert check_order("(2) < (3) < (1)") == UNCHECKED
    assert check_order("2 < 3 < 1") == WRONG


def test_stack_traces() -> None:
    q = "( [ ] )"
    steps = ["stack: empty", "( ; stack: (", "[ ; stack: ( [", "] ; stack: ("]
    assert [check_stack(q, steps[:i], s) for i, s in enumerate(steps)] == [UNCHECKED, RIGHT, RIGHT, RIGHT]
    assert check_stack(q, steps[:3], "] ; stack: ( [") == WRONG  # nothing popped
    assert check_stack(q, steps[:3], ") ; stack: (") == WRONG  # not the next input symbol
    assert check_stack(q, steps, ") ; stack: empty") == RIGHT


def test_swap_tracking() -> None:
    start = "At the start: Ann: red, Bo: blue, Cy: green."
    assert check_swap([start], "Ann and Cy swap: Ann: green, Bo: blue, Cy: red.") == RIGHT
    assert check_swap([start], "Ann and Cy swap: Ann: green, Bo: red, Cy: blue.") == WRONG
    assert check_swap([], "Ann and Cy swap: Ann: green, Cy: red.") == UNCHECKED


def test_check_step_combines() -> None:
    assert check_step("", [], "Then 2 + 2 = 5.") == WRONG
    assert check_step("", [], "Then 2 + 2 = 4.") == RIGHT
    assert check_step("", [], "We think about it.") == UNCHECKED
