"""``lamina eval locomo --reader local --orders ...`` end to end with the packaged SmolLM2-135M:
one answer per context order from the same items, scored and aggregated."""

from __future__ import annotations

import json
from pathlib import Path

from lamina.cli.entry import main

_TURNS = [
    ("Alice", "I adopted a golden retriever puppy named Biscuit."),
    ("Bob", "I started learning to play the cello last week."),
    ("Alice", "My sister Dana moved to Lisbon for work."),
    ("Bob", "I ran the Berlin marathon in three hours yesterday."),
]


def _data(tmp: Path) -> Path:
    conv: dict[str, object] = {"speaker_a": "Alice", "speaker_b": "Bob"}
    for i, (sp, text) in enumerate(_TURNS, start=1):
        conv[f"session_{i}_date_time"] = f"{i}:00 pm on {i} May, 2023"
        conv[f"session_{i}"] = [{"speaker": sp, "dia_id": f"D{i}:1", "text": text}]
    qa = [
        {"question": "What is the name of Alice's puppy?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
        {"question": "Where did Dana move?", "answer": "Lisbon", "evidence": ["D3:1"], "category": 4},
    ]
    path = tmp / "locomo_dev.json"
    path.write_text(json.dumps([{"sample_id": "syn-o", "conversation": conv, "qa": qa}]))
    return path


def test_local_reader_answers_each_order(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "res.json"
    argv = ["eval", "locomo", "--data", str(_data(tmp_path)), "--embedder", "hashing", "--budgets", "64",
            "--no-retention", "--quiet", "--no-cache", "--audit", "none", "--reader", "local",
            "--reader-budget", "64", "--orders", "lost-in-the-middle,score,reversed", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "reader: local:SmolLM2-135M-Instruct.Q4_1.gguf at budget 64; context orders:" in text
    assert "by context order" in text and "score - lost-in-the-middle (paired, points)" in text
    res = json.loads(out.read_text())
    assert res["systems"] == ["lamina"] and res["reader"]["orders"] == ["lost-in-the-middle", "score", "reversed"]
    recs = res["per_question"]["lamina"]["64"]
    assert len(recs) == 2
    for r in recs:
        for o in ("lost-in-the-middle", "score", "reversed"):
            a = r["orders"][o]
            assert isinstance(a["pred"], str) and a["pred"] and 0.0 <= a["f1"] <= 1.0
    st = res["results"]["lamina"]["64"]["reader_orders"]
    assert st["questions"] == 2 and st["n"]["single-hop"] == 2
    assert set(st["f1"]) == {"lost-in-the-middle", "score", "reversed"} and set(st["diff"]) == {"score", "reversed"}
