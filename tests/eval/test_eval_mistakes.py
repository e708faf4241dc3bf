"""``lamina eval mistakes`` end to end on chains written here."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from lamina.cli.entry import main
from lamina.reasoning import MistakeLocator


def _write(path: Path, seed: int, op: str) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(40):
            bad = rng.choice([None, 0, 1, 2])
            steps = []
            for i in range(3):
                a, b = rng.randint(2, 20), rng.randint(2, 20)
                c = (a + b if op == "+" else a * b) + (1 if i == bad else 0)
                steps.append(f"We get {a} {op} {b} = {c}.")
            f.write(json.dumps({"input": "compute", "steps": steps, "mistake_index": bad}) + "\n")


def test_eval_mistakes_cli(tmp_path: Path, capsys: Any) -> None:
    _write(tmp_path / "adding.jsonl", 1, "+")
    _write(tmp_path / "multiplying.jsonl", 2, "*")
    out, saved = tmp_path / "m.json", tmp_path / "loc.json"
    assert main(["eval", "mistakes", "--data", str(tmp_path), "--out", str(out), "--save", str(saved)]) == 0
    text = capsys.readouterr().out
    assert "adding" in text and "majority" in text
    rows = json.loads(out.read_text())
    assert [r["task"] for r in rows] == ["adding", "multiplying"]
    assert all(r["locator"] == 1.0 and r["locator"] > r["majority"] for r in rows)  # checkable chains
    assert MistakeLocator.load(saved).locate("q", ["So 2 + 2 = 5."]) == 0


def test_eval_mistakes_needs_data(tmp_path: Path, capsys: Any) -> None:
    assert main(["eval", "mistakes", "--data", str(tmp_path)]) == 2
    assert "need >= 2" in capsys.readouterr().err
