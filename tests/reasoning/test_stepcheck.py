"""The step check's three error classes on hand-made arithmetic chains, and its location on
BIG-Bench Mistake's multistep arithmetic against the annotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamina.reasoning import read_chains
from lamina.reasoning.stepcheck import (
    CALCULATION,
    MISSING_CONSTRAINT,
    UNDERSTANDING,
    first_failing_step,
    step_check,
)

Q = "((1 + 2) * (3 - 5)) ="
GOOD = [
    'This equation can be written as "A * B", where A = (1 + 2) and B = (3 - 5).',
    "Let's calculate A = (1 + 2) = 3.",
    "Let's calculate B = (3 - 5) = -2.",
    "Then, the final equation is A * B = 3 * -2 = -6. So the answer is -6",
]
_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "bigbench-mistake"


def test_a_consistent_chain_passes() -> None:
    assert step_check(Q, GOOD) == [] and first_failing_step(Q, GOOD) is None


def test_calculation() -> None:
    bad = GOOD[:2] + ["Let's calculate B = (3 - 5) = -3."] + GOOD[3:]
    f = first_failing_step(Q, bad)
    assert f is not None and (f.step, f.kind) == (2, CALCULATION)


def test_understanding_a_copied_expression_or_a_wrong_restatement() -> None:
    bad = ['This equation can be written as "A * B", where A = (1 + 4) and B = (3 - 5).'] + GOOD[1:]
    f = first_failing_step(Q, bad)
    assert f is not None and (f.step, f.kind) == (0, UNDERSTANDING) and "(1 + 4)" in f.detail
    bad = ['This equation can be written as "A + B", where A = (1 + 2) and B = (3 - 5).'] + GOOD[1:]
    f = first_failing_step(Q, bad)
    assert f is not None and (f.step, f.kind) == (0, UNDERSTANDING)
    bad = GOOD[:2] + ["Let's calculate B = (3 + 5) = 8."] + GOOD[3:]
    assert [(i.step, i.kind) for i in step_check(Q, bad)][0] == (2, UNDERSTANDING)


def test_missing_constraints() -> None:
    bad = GOOD[:3] + ["Then, the final equation is A * B = 3 * 2 = 6. So the answer is 6"]
    f = first_failing_step(Q, bad)
    assert f is not None and (f.step, f.kind) == (3, MISSING_CONSTRAINT) and "B is put in as 2" in f.detail
    bad = GOOD[:3] + ["Then, the final equation is A * B = 3 * -2 = -6. So the answer is 6"]
    f = first_failing_step(Q, bad)
    assert f is not None and (f.step, f.kind) == (3, MISSING_CONSTRAINT)


def test_classes_select_the_checks() -> None:
    bad = ['This equation can be written as "A + B", where A = (1 + 2) and B = (3 - 5).'] + GOOD[1:3]
    bad.append("Then, the final equation is A * B = 3 * 2 = 6. So the answer is 6")
    assert first_failing_step(Q, bad).step == 0  # type: ignore[union-attr]
    f = first_failing_step(Q, bad, classes=(CALCULATION, MISSING_CONSTRAINT))
    assert f is not None and (f.step, f.kind) == (3, MISSING_CONSTRAINT)
    assert first_failing_step(Q, bad, classes=(CALCULATION,)) is None
    with pytest.raises(ValueError, match="classes"):
        first_failing_step(Q, bad, classes=("spelling",))


def test_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        step_check(Q, "one string")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        step_check(3, GOOD)  # type: ignore[arg-type]


@pytest.mark.skipif(not _DATA.exists(), reason="needs ../shared/data/bigbench-mistake")
def test_locates_most_annotated_arithmetic_mistakes() -> None:
    chains = read_chains(_DATA / "multistep_arithmetic.jsonl")
    hits = 0
    for c in chains:
        f = first_failing_step(c.question, c.steps)
        hits += (None if f is None else f.step) == c.mistake
    assert hits / len(chains) > 0.85
