"""MemCon's bandit: UCB selection, the reverse-discounted Q update, plan templates."""

from __future__ import annotations

import random

import pytest

from lamina.agent import Action, MemCon, PlanLibrary, default_actions, generalise


def test_update_is_reverse_discounted_with_constant_step() -> None:
    b = MemCon(3, alpha=0.15, gamma=0.5)
    b.update([("s", 0), ("s", 1), ("t", 2)], 1.0)  # |ep| = 3: gammas 0.25, 0.5, 1
    assert b.q["s"][0] == pytest.approx(0.15 * 0.25)
    assert b.q["s"][1] == pytest.approx(0.15 * 0.5)
    assert b.q["t"][2] == pytest.approx(0.15)
    b.update([("t", 2)], -0.5)
    assert b.q["t"][2] == pytest.approx(0.15 + 0.15 * (-0.5 - 0.15))
    assert b.n["t"][2] == 2


def test_ucb_tries_every_action_then_learns_a_state_dependent_best() -> None:
    rng = random.Random(1)
    b = MemCon(3, c=0.2, seed=3)
    best = {"a": 0, "b": 2}
    picks = {"a": [0, 0, 0], "b": [0, 0, 0]}
    for t in range(3000):
        s = "a" if t % 2 else "b"
        a = b.select(s)
        picks[s][a] += 1
        r = (1.0 if a == best[s] else 0.4) + rng.gauss(0, 0.1)
        b.update([(s, a)], r)
    assert b.greedy("a") == 0 and b.greedy("b") == 2
    assert picks["a"][0] > 0.8 * sum(picks["a"]) and picks["b"][2] > 0.8 * sum(picks["b"])


def test_untried_actions_come_first() -> None:
    b = MemCon(4, seed=0)
    seen = set()
    for _ in range(4):
        a = b.select("s")
        assert a not in seen
        seen.add(a)
        b.update([("s", a)], 1.0)
    assert seen == {0, 1, 2, 3}


def test_actions_and_validation() -> None:
    names = [a.name for a in default_actions()]
    assert names == [
        "retrieve@256",
        "retrieve@512",
        "retrieve@1024",
        "re_retrieve",
        "consolidate",
        "forget",
        "noop",
        "plan_inject",
    ]
    with pytest.raises(ValueError, match="unknown action"):
        Action("dream")
    with pytest.raises(ValueError, match="theta"):
        Action("noop", 5)
    with pytest.raises(ValueError, match="alpha"):
        MemCon(2, alpha=0)
    with pytest.raises(ValueError, match="out of range"):
        MemCon(2).update([("s", 5)], 1.0)


def test_plan_templates_generalise_entities() -> None:
    assert generalise("Go to shelf 3 and give the key to Maria Lopez on 7 May 2023.") == (
        "Go to shelf [number] and give the key to [entity] on [date]."
    )
    lib = PlanLibrary(max_templates=2)
    assert lib.best() is None
    lib.record("Ask Tom about shelf 3", success=True)
    lib.record("Ask Anna about shelf 9", success=True)
    lib.record("Open drawer 2", success=False)
    assert lib.best() == "Ask [entity] about shelf [number]" and lib.wins[lib.best()] == 2
