"""``lamina eval memcon``: outcomes precomputed from a real Memory, regret against fixed policies,
the contextual oracle's headroom on held-out conversations."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lamina.agent import default_actions
from lamina.eval.memcon_regret import (
    DEFAULT_THETAS,
    FEATURES,
    QuestionOutcomes,
    headroom,
    precompute,
    question_class,
    question_features,
    report,
    simulate,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"LoCoMo dev data not at {DATA}")


def test_question_class_and_features() -> None:
    assert question_class("When did she move?") == "when"
    assert question_class("How many kids does he have?") == "quantity"
    assert question_class("Did they meet again?") == "yes_no"
    assert question_class("Tell me more") == "other"
    f = question_features("What did Melanie and John do after the race?")
    assert f == {"date": 1.0, "names": 2.0, "qlen": 1.0}
    assert question_features("Who is it?") == {"date": 0.0, "names": 0.0, "qlen": 0.0}


def _synthetic(n: int, seed: int, convs: tuple[str, ...] = ("c",)) -> list[QuestionOutcomes]:
    """Two observable states whose best action differs: when the top hit is recent the window
    answers (noop is best: no tokens); otherwise the largest budget is."""
    rng = random.Random(seed)
    acts = default_actions()
    out = []
    for i in range(n):
        recent = i % 2 == 0
        rec = []
        for a in acts:
            if a.name == "noop":
                p = 0.9 if recent else 0.1
            elif a.name == "retrieve@1024":
                p = 0.95
            else:
                p = 0.5
            rec.append(1.0 if rng.random() < p else 0.0)
        toks = tuple(a.theta or (0 if a.name == "noop" else 512) for a in acts)
        feats = {"recent": float(recent), "top": rng.random(), "date": 0.0}
        out.append(QuestionOutcomes(convs[i % len(convs)], f"q{i}", tuple(rec), toks, feats))
    return out


def test_simulation_beats_every_fixed_policy_when_the_best_action_depends_on_the_state() -> None:
    res = simulate(default_actions(), _synthetic(400, 0), episodes=4000, state=("recent",), cost=0.25, seed=1)
    assert res["best_fixed"] == "retrieve@1024" and res["train_conversations"] == []
    assert res["memcon"]["final_regret"] < 0 and res["beats_all_fixed_from"] is not None
    greedy = res["memcon"]["greedy_policy"]
    assert greedy["(1,)"] == "noop"  # the answer is in the recent window: retrieve nothing
    assert greedy["(0,)"].startswith("retrieve@")  # otherwise: retrieve
    c = res["curve"]
    assert len(c["episode"]) == 50 and min(c["retrieve@1024"]) == 0.0 and min(c["noop"]) >= 0.0
    assert res["oracle"]["hindsight_minus_best_fixed"] > 0.05
    assert res["oracle_per_feature"]["recent"]["hindsight_minus_best_fixed"] > 0.05
    assert "below every fixed policy" in report(res)


def test_held_out_conversations_learned_first_elsewhere() -> None:
    outs = _synthetic(600, 2, convs=("a", "b", "c"))
    res = simulate(default_actions(), outs, episodes=3000, train=["a", "b"], train_episodes=3000, state=("recent",))
    assert res["train_conversations"] == ["a", "b"] and res["test_conversations"] == ["c"]
    assert res["test_questions"] == 200 and res["train_episodes"] == 3000
    assert res["oracle"]["fitted_minus_best_fixed"] > 0.05  # the policy fitted on a, b transfers to c
    # learned first: below every fixed policy from the first held-out episodes on
    assert res["beats_all_fixed_from"] is not None and res["beats_all_fixed_from"] < 300
    assert "held out: c" in report(res)


def test_headroom_fitted_and_in_hindsight() -> None:
    # two states; action 1 is best in state 0, action 0 in state 1; fitted on the first half
    R = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    phi = [(0,), (1,), (0,), (1,), (0,), (1,)]
    fit = np.array([True, True, True, True, False, False])
    h = headroom(R, phi, fit, ~fit)
    assert h["fitted"] == 0.0  # the last two questions reverse the pattern the first four set
    assert h["hindsight"] == 1.0 and h["fixed"] == [0.5, 0.5]
    assert h["fitted_minus_best_fixed"] == -0.5 and h["hindsight_minus_best_fixed"] == 0.5
    assert h["policy"] == {(0,): 1, (1,): 0}


def test_simulation_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="no questions"):
        simulate(default_actions(), [], episodes=10)
    outs = _synthetic(20, 0, convs=("a", "b"))
    with pytest.raises(ValueError, match="state features"):
        simulate(default_actions(), outs, episodes=10, state=("mood",))
    with pytest.raises(ValueError, match="not all"):
        simulate(default_actions(), outs, episodes=10, train=["a", "b"])
    with pytest.raises(ValueError, match="not all"):
        simulate(default_actions(), outs, episodes=10, train=["zz"])
    with pytest.raises(ValueError, match="episodes"):
        simulate(default_actions(), outs, episodes=0)


@needs_data
def test_precompute_on_one_development_conversation() -> None:
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(str(DATA), limit=1)
    actions, outs = precompute(convs, embedder="hashing")
    assert len(outs) > 100 and all(len(o.recall) == len(actions) == 9 for o in outs)
    names = [a.name for a in actions]
    assert names[: len(DEFAULT_THETAS)] == [f"retrieve@{t}" for t in DEFAULT_THETAS]
    j128, j1024, jnoop = names.index("retrieve@128"), names.index("retrieve@1024"), names.index("noop")
    for o in outs:  # noop costs nothing; every read is about its budget (words + 4 per item)
        assert o.tokens[jnoop] == 0 and o.recall[jnoop] <= o.recall[j128]
        assert o.tokens[j128] <= 1.25 * 128 and o.tokens[j1024] <= 1.25 * 1024
        assert set(o.features) == set(FEATURES)
    mean = lambda j: sum(o.recall[j] for o in outs) / len(outs)  # noqa: E731
    assert mean(j1024) > mean(j128) > mean(jnoop) + 0.2  # retrieval finds evidence the recent window lacks
    assert {o.features["size"] for o in outs} == {float(len([s for s in convs[0].sessions if s.turns]))}
    # asked after the evidence: the memory is smaller for some questions, never before the evidence
    _, later = precompute(convs, embedder="hashing", ask="after_evidence")
    assert len(later) == len(outs) and min(o.features["size"] for o in later) < max(o.features["size"] for o in outs)
    with pytest.raises(ValueError, match="ask"):
        precompute(convs, ask="never")


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
            "2",
            "--holdout",
            "1",
            "--episodes",
            "2000",
            "--train-episodes",
            "2000",
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
    assert res["episodes"] == 2000 and set(res["fixed"]) == set(res["actions"]) and "memcon" in res["curve"]
    assert res["train_conversations"] == ["conv-26"] and res["test_conversations"] == ["conv-30"]
    assert "MemCon" in r.stdout and "contextual oracle" in r.stdout
