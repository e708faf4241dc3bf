"""MistakeLocator: training, locating, persistence, bad input; leave-one-task-out on the
shared BIG-Bench Mistake tasks when they are present."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import numpy as np
import pytest

from lamina.reasoning import MistakeLocator, read_chains

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bigbench-mistake"
TASKS = ["dyck_languages", "multistep_arithmetic", "tracking_shuffled_objects", "word_sorting"]


def _chains(path: Path, seed: int, n: int = 80) -> Path:
    """Arithmetic chains, a third correct, the rest wrong at a random step."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            steps, total = [], 0
            bad = rng.choice([None, None] + list(range(4)))
            for i in range(4):
                a, b = rng.randint(1, 50), rng.randint(1, 50)
                c = a + b + (rng.randint(1, 5) if i == bad else 0)
                steps.append(f"Step: {a} + {b} = {c}.")
                total += c
            f.write(json.dumps({"input": "add them", "steps": steps, "mistake_index": bad}) + "\n")
    return path


def test_train_locate_save_load(tmp_path: Path) -> None:
    loc = MistakeLocator.train([_chains(tmp_path / "a.jsonl", 1), _chains(tmp_path / "b.jsonl", 2)])
    test = read_chains(_chains(tmp_path / "c.jsonl", 3))
    assert np.mean([loc.locate(c.question, c.steps) == c.mistake for c in test]) == 1.0  # checkable
    assert loc.locate("q", ["We think.", "Then we conclude."]) in (None, 0, 1)
    p = tmp_path / "loc.json"
    loc.save(p)
    back = MistakeLocator.load(p)
    steps = ["We think.", "Then 12 apples remain.", "So it is 12."]
    np.testing.assert_array_equal(back.step_probabilities("q", steps), loc.step_probabilities("q", steps))
    assert back.rule == loc.rule and back.threshold == loc.threshold


def test_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "q", "steps": ["a"], "mistake_index": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        MistakeLocator.train([bad])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a lamina mistake-locator"):
        MistakeLocator.load(tmp_path / "x.json")
    loc = MistakeLocator.train([_chains(tmp_path / "a.jsonl", 1)])
    with pytest.raises(ValueError, match="empty"):
        loc.locate("q", [])
    with pytest.raises(TypeError):
        loc.locate("q", "one step")


@pytest.mark.skipif(not DATA.is_dir(), reason=f"BIG-Bench Mistake not found at {DATA}")
def test_leave_one_task_out_beats_the_majority_index() -> None:
    data = {t: read_chains(DATA / f"{t}.jsonl") for t in TASKS}
    for held in TASKS:
        train = [data[t] for t in TASKS if t != held]
        loc = MistakeLocator.fit(train)
        majority = collections.Counter(c.mistake for g in train for c in g).most_common(1)[0][0]
        base = np.mean([c.mistake == majority for c in data[held]])
        acc = np.mean([loc.locate(c.question, c.steps) == c.mistake for c in data[held]])
        assert acc > base, (held, acc, base)
