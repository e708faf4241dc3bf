"""Step check: the design's three error classes as one checker pass over a finished chain.

* ``"calculation"`` — a step's own computation is wrong: an ``expr = value`` chain that does
  not evaluate, or any exact checker of :mod:`lamina.reasoning.checkers` (sorted order, a
  bracket stack, a swap) finding the step wrong.
* ``"understanding"`` — the question is restated or copied wrongly: a sub-expression named
  in a step (``A = (...)``) that is not in the question; a ``Let's calculate A = <expr>`` whose
  expression is not the one A was defined as; or the restated formula, with the definitions
  put in, not equal to the question's expression.
* ``"missing-constraint"`` — something the question or an earlier step fixed is dropped: a
  number of the question that no step uses before the answer; a value put in for a name that
  differs from the value computed for it earlier; or a stated answer that is not the value
  the step itself arrived at.

Every check is exact (recomputed arithmetic, string containment), so a reported issue is a
real inconsistency — but a chain can be wrong in ways none of them reads. The notation read
is the common ``A = (...)`` / ``Let's calculate`` / ``So the answer is`` of arithmetic
chains; steps in another notation come back unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .checkers import WRONG, _Parser, check_arithmetic, check_step

__all__ = [
    "CALCULATION",
    "UNDERSTANDING",
    "MISSING_CONSTRAINT",
    "CLASSES",
    "StepIssue",
    "step_check",
    "first_failing_step",
]

CALCULATION, UNDERSTANDING, MISSING_CONSTRAINT = "calculation", "understanding", "missing-constraint"

_DEF = re.compile(r"\b([A-Z])\s*=\s*([-\d\s.+*/()]+?)\s*(?=,|\band\b|\.\s*$|\.\s+[A-Z]|$)")
_CALC = re.compile(r"calculate\s+([A-Z])\s*=\s*(.+?)\s*=", re.IGNORECASE)
_RESULT = re.compile(r"=\s*(-?\d+(?:\.\d+)?)\s*\.?\s*$")
_FORMULA = re.compile(r'"([A-Z\s+\-*/()]+)"')
_FINAL = re.compile(r"([A-Z](?:\s*[-+*/()\s]\s*[A-Z(])*[A-Z)]?)\s*=\s*([^=]+?)\s*=")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_ANSWER = re.compile(r"answer is[:\s]*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class StepIssue:
    """One failed check: the 0-based step, its class and what was inconsistent."""

    step: int
    kind: str
    detail: str


def _compact(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _value(expr: str) -> float | None:
    return _Parser(expr).value()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def _question_expr(question: str) -> str:
    return question.strip().rstrip("=").strip()


def step_check(question: str, steps: Sequence[str]) -> list[StepIssue]:
    """Every issue the three checks find, in step order (several per step possible).

    Parameters
    ----------
    question : str
    steps : sequence of str

    Returns
    -------
    list of StepIssue

    Raises
    ------
    TypeError
        question not a str or steps not a sequence of str.
    """
    if not isinstance(question, str) or isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
        raise TypeError("question must be a str and steps a sequence of str")
    issues: list[StepIssue] = []
    qexpr = _question_expr(question)
    qcompact = _compact(qexpr)
    defs: dict[str, str] = {}
    values: dict[str, float] = {}
    used_numbers: set[str] = set()
    q_numbers = _NUMBER.findall(qexpr) if _value(qexpr) is not None else []
    for i, s in enumerate(steps):
        # ---- calculation ----
        if check_arithmetic(s) == WRONG:
            issues.append(StepIssue(i, CALCULATION, "an '=' chain does not evaluate"))
        elif check_step(question, steps[:i], s) == WRONG:
            issues.append(StepIssue(i, CALCULATION, "an exact checker (order, stack or swap) finds the step wrong"))
        # ---- understanding: definitions and what is calculated ----
        new_defs = {} if _CALC.search(s) else dict(_DEF.findall(s))
        for name, expr in new_defs.items():
            if qcompact and _compact(expr) not in qcompact and _compact(expr.strip("()")) not in qcompact:
                issues.append(StepIssue(i, UNDERSTANDING, f"{name} = {expr} is not part of the question"))
            defs.setdefault(name, expr)
        fm = _FORMULA.search(s)
        if fm and new_defs and _value(qexpr) is not None:
            formula = fm.group(1)
            sub = "".join(f"({defs[c].strip()})" if c in defs else c for c in formula)
            got, want = _value(sub), _value(qexpr)
            if got is not None and want is not None and not _close(got, want):
                issues.append(StepIssue(i, UNDERSTANDING, f'"{formula}" with the definitions is not the question'))
        cm = _CALC.search(s)
        if cm:
            name, expr = cm.group(1), cm.group(2)
            if name in defs and _compact(expr).strip("()") != _compact(defs[name]).strip("()"):
                a, b = _value(expr), _value(defs[name])
                if a is None or b is None or not _close(a, b):
                    issues.append(
                        StepIssue(i, UNDERSTANDING, f"{name} is calculated from {expr}, defined as {defs[name]}")
                    )
            rm = _RESULT.search(s.split("So the answer")[0])
            if rm:
                values[name] = float(rm.group(1))
        # ---- missing constraints ----
        for fin in _FINAL.finditer(s):
            names, subst = fin.group(1), fin.group(2)
            letters = [c for c in names if c.isalpha()]
            if len(letters) < 2 or not all(c in values for c in letters):
                continue
            nums = _NUMBER.findall(subst)
            if len(nums) == len(letters):
                for c, v in zip(letters, nums):
                    if not _close(float(v), values[c]):
                        issues.append(
                            StepIssue(i, MISSING_CONSTRAINT, f"{c} is put in as {v}, computed as {values[c]:g}")
                        )
                        break
        am = _ANSWER.search(s)
        if am:
            before = s[: am.start()]
            results = re.findall(r"=\s*(-?\d+(?:\.\d+)?)", before)
            if results and not _close(float(am.group(1)), float(results[-1])):
                issues.append(
                    StepIssue(i, MISSING_CONSTRAINT, f"answer {am.group(1)} but the step arrives at {results[-1]}")
                )
            missing = [n for n in q_numbers if n.lstrip("-") not in used_numbers and n not in _NUMBER.findall(s)]
            if missing and defs:
                issues.append(StepIssue(i, MISSING_CONSTRAINT, f"the question's {missing[0]} is never used"))
        for n in _NUMBER.findall(s):
            used_numbers.add(n.lstrip("-"))
    return issues


CLASSES: tuple[str, ...] = (CALCULATION, UNDERSTANDING, MISSING_CONSTRAINT)


def first_failing_step(question: str, steps: Sequence[str], classes: Sequence[str] = CLASSES) -> StepIssue | None:
    """The issue of the first step that fails a check of ``classes`` (default: all three), or
    None for a chain that passes them.

    Raises
    ------
    ValueError
        An unknown class name.
    """
    bad = [c for c in classes if c not in CLASSES]
    if bad or isinstance(classes, str):
        raise ValueError(f"classes must be among {', '.join(CLASSES)}, got {classes!r}")
    issues = [i for i in step_check(question, steps) if i.kind in classes]
    return min(issues, key=lambda x: x.step) if issues else None
