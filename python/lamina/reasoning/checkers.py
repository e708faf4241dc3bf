"""Exact step checkers: a step whose claim can be recomputed is checked, not guessed.

Each checker reads one step (with the question and the earlier steps as context) and answers
:data:`WRONG`, :data:`RIGHT` or :data:`UNCHECKED`. They read common notations, not any task's
wording:

* :func:`check_arithmetic` — chains ``expr = expr = value``: every pair of neighbouring sides
  that are plain arithmetic (numbers, ``+ - * /``, parentheses) must evaluate equal.
* :func:`check_order` — chains ``a < b < c`` of quoted words or integers must be ascending
  (words case-insensitively).
* :func:`check_swap` — state-tracking traces ``X and Y swap: A: a, B: b, ...``: the state
  after the step must be the previous state (the last step listing ``Name: value`` pairs) with
  X's and Y's values exchanged and every other value unchanged.
* :func:`check_stack` — bracket-stack traces ``<symbol> ; stack: <stack>``: the stack must
  follow from the previous one (an opener pushed, a matching closer popped) and the symbol
  must be the next one of the input sequence.

Arithmetic is evaluated by a small recursive-descent parser over floats (no ``eval``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "WRONG",
    "RIGHT",
    "UNCHECKED",
    "check_arithmetic",
    "check_order",
    "check_stack",
    "check_swap",
    "check_step",
    "step_verdicts",
    "first_wrong",
]

WRONG, RIGHT, UNCHECKED = -1, 1, 0

_ARITH_RUN = re.compile(r"[\d\s.+\-*/()]*\d[\d\s.+\-*/()]*")
_ORDER = re.compile(r'(?:"[^"]+"|-?\d+)(?:\s*<\s*(?:"[^"]+"|-?\d+))+')
_STACK = re.compile(r"^\s*(\S)\s*;\s*stack:\s*(.*?)\s*\.?\s*$", re.IGNORECASE)
_PAIRS = {")": "(", "]": "[", "}": "{", ">": "<"}
_OPEN = set(_PAIRS.values())


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := ('-'|'+') factor | number | '(' expr ')'."""

    def __init__(self, text: str) -> None:
        self.toks: list[str] = re.findall(r"\d+(?:\.\d+)?|[()+\-*/]", text)
        self.i = 0

    def value(self) -> float | None:
        if not self.toks:
            return None
        try:
            v = self._expr()
        except (IndexError, ValueError, ZeroDivisionError):
            return None
        return v if self.i == len(self.toks) else None

    def _peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def _eat(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        return t

    def _expr(self) -> float:
        v = self._term()
        while self._peek() in ("+", "-"):
            v = v + self._term() if self._eat() == "+" else v - self._term()
        return v

    def _term(self) -> float:
        v = self._factor()
        while self._peek() in ("*", "/"):
            v = v * self._factor() if self._eat() == "*" else v / self._factor()
        return v

    def _factor(self) -> float:
        t = self._eat()
        if t == "-":
            return -self._factor()
        if t == "+":
            return self._factor()
        if t == "(":
            v = self._expr()
            if self._eat() != ")":
                raise ValueError("unbalanced")
            return v
        if t in (")", "*", "/"):
            raise ValueError(f"unexpected {t}")
        return float(t)


def _sides(part: str, last: bool) -> float | None:
    """The arithmetic of one side of '=' that touches the sign: the run that starts the text
    after it (``last``) or ends the text before it; None when words stand between."""
    text = part.strip()
    m = _ARITH_RUN.match(text) if last else None
    if not last:
        runs = list(_ARITH_RUN.finditer(text))
        m = runs[-1] if runs and runs[-1].end() == len(text) else None
    if m is None:
        return None
    run = m.group(0).strip()
    if last:
        run = run.rstrip(".")
    return _Parser(run).value()


def check_arithmetic(step: str) -> int:
    """WRONG when two neighbouring sides of an ``=`` chain evaluate differently."""
    parts = step.split("=")
    if len(parts) < 2:
        return UNCHECKED
    checked = False
    for a, b in zip(parts, parts[1:]):
        x, y = _sides(a, last=False), _sides(b, last=True)
        if x is None or y is None:
            continue
        checked = True
        if abs(x - y) > 1e-6 * max(1.0, abs(y)):
            return WRONG
    return RIGHT if checked else UNCHECKED


def check_order(step: str) -> int:
    """WRONG when a ``a < b < ...`` chain of quoted words or integers is not ascending."""
    checked = False
    for seg in _ORDER.findall(step):
        items = [x.strip().strip('"') for x in seg.split("<")]
        for a, b in zip(items, items[1:]):
            checked = True
            numeric = a.lstrip("-").isdigit() and b.lstrip("-").isdigit()
            if (int(a) >= int(b)) if numeric else (a.lower() > b.lower()):
                return WRONG
    return RIGHT if checked else UNCHECKED


def _stack_of(text: str) -> list[str] | None:
    t = text.strip().strip('"').strip()
    if t.lower() == "empty":
        return []
    syms = t.split()
    return syms if all(s in _OPEN for s in syms) else None


def check_stack(question: str, previous: Sequence[str], step: str) -> int:
    """WRONG when a ``<symbol> ; stack: ...`` step does not follow from the step before it."""
    m = _STACK.match(step)
    if m is None:
        return UNCHECKED
    sym, now = m.group(1), _stack_of(m.group(2))
    if now is None or (sym not in _OPEN and sym not in _PAIRS):
        return UNCHECKED
    before: list[str] | None = None
    consumed = 0
    for p in previous:
        pm = _STACK.match(p)
        if pm is not None:
            consumed += 1
            before = _stack_of(pm.group(2))
        elif re.match(r"^\s*stack:\s*empty", p, re.IGNORECASE):
            before = []
    if before is None:
        return UNCHECKED
    seq = [c for c in question if c in _OPEN or c in _PAIRS]
    if consumed >= len(seq) or seq[consumed] != sym:
        return WRONG
    if sym in _OPEN:
        want = before + [sym]
    else:
        if not before or before[-1] != _PAIRS[sym]:
            return WRONG
        want = before[:-1]
    return RIGHT if now == want else WRONG


_SWAP = re.compile(r"^\s*(.+?)\s+and\s+(.+?)\s+(?:swap|switch|trade)\b[^:]*:\s*(.*)$", re.IGNORECASE)
_PAIR = re.compile(r"([A-Z][\w' -]*?):\s*([^,:]+?)(?=,\s*[A-Z][\w' -]*?:|\.?\s*$)")


def _state(text: str) -> dict[str, str]:
    return {k.strip(): v.strip().rstrip(".").strip() for k, v in _PAIR.findall(text)}


def check_swap(previous: Sequence[str], step: str) -> int:
    """WRONG when a swap step's state is not the previous state with the two values exchanged."""
    m = _SWAP.match(step)
    if m is None:
        return UNCHECKED
    x, y, after = m.group(1).strip(), m.group(2).strip(), _state(m.group(3))
    before: dict[str, str] = {}
    for p in reversed(previous):
        sm = _SWAP.match(p)
        # a swap step's state follows its colon; a plain state line may carry a heading
        st = _state(sm.group(3)) if sm else _state(p.split(":", 1)[1]) if ":" in p else {}
        if not sm and len(st) < 2:
            st = _state(p)
        if len(st) >= 2:
            before = st
            break
    if not before or x not in before or y not in before or set(after) != set(before):
        return UNCHECKED
    want = dict(before)
    want[x], want[y] = before[y], before[x]
    return RIGHT if after == want else WRONG


def check_step(question: str, previous: Sequence[str], step: str) -> int:
    """WRONG if any checker finds the step wrong, RIGHT if one verified it, else UNCHECKED."""
    verdicts = (
        check_arithmetic(step),
        check_order(step),
        check_stack(question, previous, step),
        check_swap(previous, step),
    )
    if WRONG in verdicts:
        return WRONG
    return RIGHT if RIGHT in verdicts else UNCHECKED


def step_verdicts(question: str, steps: Sequence[str]) -> list[int]:
    """:func:`check_step` of every step, each with the steps before it."""
    return [check_step(question, steps[:i], s) for i, s in enumerate(steps)]


def first_wrong(verdicts: Sequence[int]) -> int | None:
    """Index of the first :data:`WRONG` verdict, or None."""
    return verdicts.index(WRONG) if WRONG in verdicts else None
