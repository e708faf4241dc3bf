"""The bundled demo: deterministic generator, end-to-end run, CLI wiring."""

from __future__ import annotations

import io
from pathlib import Path

from lamina import Memory
from lamina.cli.demo import generate, run_demo
from lamina.cli.entry import build_parser


def test_generator_is_deterministic_and_consistent() -> None:
    a, b = generate(2, 5, 16, seed=3), generate(2, 5, 16, seed=3)
    assert [list(c.turns()) for c in a] == [list(c.turns()) for c in b]
    for c in a:
        ids = {m["id"]: m["text"] for m in c.turns()}
        ts = [m["timestamp"] for m in c.turns()]
        assert ts == sorted(ts)
        for q in c.questions:
            assert all(e in ids for e in q.evidence)
            if q.kind != "event":
                assert q.answer in " ".join(ids[e] for e in q.evidence)


def test_run_demo_small(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    buf = io.StringIO()
    res = run_demo(str(db), users=2, sessions=5, turns=16, budget=256, embedder="hashing", out=buf, progress=False)
    text = buf.getvalue()
    assert "evidence recall" in text and "supersession" in text and str(db) in text
    cur = [r for q, r in res["results"] if q.kind == "current"]
    assert sum(r["fact_current"] for r in cur) == len(cur)  # Resolve got every current value
    with Memory(str(db), embedder="hashing") as m:
        st = m.stats()
        assert st.archive_turns == 2 * 5 * 16 and st.users == 2 and st.sessions == 2 * 5


def test_cli_has_demo() -> None:
    args = build_parser().parse_args(["demo", "--users", "1", "--db", "x.db"])
    assert args.users == 1 and args.db == "x.db"
