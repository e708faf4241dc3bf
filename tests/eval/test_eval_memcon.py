"""``lamina eval memcon``: outcomes precomputed from a real Memory, regret against fixed policies."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lamina.agent import default_actions
from lamina.eval.memcon import QuestionOutcomes, precompute, question_class, simulate

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"LoCoMo dev data not at {DATA}")


def test_question_class() -> None:
    assert question_class("When did she move?") == "when"
    assert question_class("How many kids does he have?") == "quantity"
    assert question_class("Did they meet again?") == "yes_no"
    assert question_class("Tell me more") == "other"


def _synthetic(n: int, seed: int) -> list[QuestionOutcomes]:
    """Two observable states whose best action differs (a cheap window answers state A; state B
    needs a large budget)."""
    rng = random.Random(seed)
    acts = default_actions()
    out = []
    for i in range(n):
        a_state = i % 2 == 0
        rec = []
        for a in acts:
            if a.name == "noop":
                p = 0.9 if a_state else 0.1
            elif a.name == "retrieve@1024":
                p = 0.95
            else:
                p = 0.5
            rec.append(1.0 if rng.random() < p else 0.0)
        toks = tuple(a.theta or (0 if a.name == "noop" else 512) for a in acts)
        out.append(QuestionOutcomes("c", f"q{i}", "what", 0.5, a_state, tuple(rec), toks, ("what", 0, a_state)))
    return out


def test_simulation_beats_every_fixed_policy_when_the_best_action_depends_on_the_state() -> None:
    res = simulate(default_actions(), _synthetic(400, 0), episodes=4000, cost=0.25, seed=1)
    assert res["best_fixed"] == "retrieve@1024"
    assert res["memcon"]["final_regret"] < 0 and res["beats_all_fixed_from"] is not None
    greedy = res["memcon"]["greedy_policy"]
    assert greedy["('what', 0, True)"] == "noop"  # the answer is in the recent window: retrieve nothing
    assert greedy["('what', 0, False)"].startswith("retrieve@")  # otherwise: retrieve
    c = res["curve"]
    assert len(c["episode"]) == 50 and min(c["retrieve@1024"]) == 0.0 and min(c["noop"]) >= 0.0


def test_simulation_refuses_empty_input() -> None:
    with pytest.raises(ValueError, match="no questions"):
        simulate(default_actions(), [], episodes=10)


@needs_data
def test_precompute_on_one_development_conversation() -> None:
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(str(DATA), limit=1)
    actions, outs = precompute(convs, embedder="hashing")
    assert len(outs) > 100 and all(len(o.recall) == len(actions) == 8 for o in outs)
    names = [a.name for a in actions]
    j256, j1024, jnoop = names.index("retrieve@256"), names.index("retrieve@1024"), names.index("noop")
    for o in outs:  # a larger budget never shows less; noop costs nothing
        assert o.recall[j1024] >= o.recall[j256] >= o.recall[jnoop] and o.tokens[jnoop] == 0
        assert o.tokens[j256] <= 256 and o.tokens[j1024] <= 1024
    mean = lambda j: sum(o.recall[j] for o in outs) / len(outs)  # noqa: E731
    assert mean(j1024) > mean(jnoop) + 0.2  # retrieval finds evidence the recent window lacks
    assert {o.phi[1] for o in outs} == {0, 1, 2}


@needs_data
def test_cli_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "mc.json"
    env = dict(os.environ)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "lamina",
            "eval",
            "memcon",
            "--data",
            str(DATA),
            "--limit-conversations",
            "1",
            "--episodes",
            "3000",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["episodes"] == 3000 and set(res["fixed"]) == set(res["actions"]) and "memcon" in res["curve"]
    assert "MemCon" in r.stdout
