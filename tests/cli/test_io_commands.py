"""``lamina export`` / ``lamina import``: a real pipe between two processes, user selection and
renaming, refusal of an existing user and ``--replace``, errors as messages and exit status 1."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lamina
from lamina import Memory
from lamina.cli.entry import main
from memkit import LINES

T0 = 1_683_550_000.0


def _lamina(*args: str) -> list[str]:
    return [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "lamina", *args]


def _env() -> dict[str, str]:
    pkg_root = str(Path(lamina.__file__).resolve().parents[1])
    path = [pkg_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _build(path: Path) -> None:
    with Memory(path, embedder="hashing-128") as m:
        for u, city in (("ann", "Oslo"), ("bob", "Lima")):
            m.add(
                [
                    {"speaker": u.title(), "text": f"I live in {city}.", "timestamp": T0},
                    {"speaker": u.title(), "text": "I work as a pilot.", "timestamp": T0 + 60},
                ],
                user_id=u,
                session_id="s1",
            )
            m.end_session(user_id=u, session_id="s1")


def test_export_pipe_import_between_processes(tmp_path: Path) -> None:
    _build(tmp_path / "a.db")
    env = _env()
    dump = tmp_path / "dump.jsonl"
    with open(dump, "w") as out:
        r = subprocess.run(
            _lamina("export", "--db", str(tmp_path / "a.db")), stdout=out, stderr=subprocess.PIPE, env=env
        )
    assert r.returncode == 0, r.stderr
    assert b"2 users" in r.stderr
    with open(dump) as src:
        r = subprocess.run(
            _lamina("import", "--db", str(tmp_path / "b.db")), stdin=src, capture_output=True, env=env, text=True
        )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "'ann' as 'ann'" in r.stderr and "'bob' as 'bob'" in r.stderr
    # the new database took the dump's embedder (hashing-128), so every derived vector was used
    with Memory(tmp_path / "b.db", embedder="hashing-128") as b, Memory(tmp_path / "a.db", embedder="hashing-128") as a:
        assert b.users() == ["ann", "bob"]
        for u in ("ann", "bob"):
            q = "Where does the pilot live?"
            assert b.context(q, user_id=u, now=T0 + 600).render() == a.context(q, user_id=u, now=T0 + 600).render()


def test_user_selection_renaming_and_replace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build(tmp_path / "a.db")
    assert main(["export", "--db", str(tmp_path / "a.db"), "--user", "bob", "--vectors"]) == 0
    text = capsys.readouterr().out
    assert text.count('"type": "user"') == 1 and '"vectors": "all"' in text
    (tmp_path / "bob.jsonl").write_text(text)
    db = str(tmp_path / "a.db")
    assert main(["import", "--db", db, str(tmp_path / "bob.jsonl")]) == 1  # bob exists
    assert "'bob' exist already" in capsys.readouterr().err
    assert main(["import", "--db", db, str(tmp_path / "bob.jsonl"), "--as", "carl"]) == 0
    assert main(["import", "--db", db, str(tmp_path / "bob.jsonl"), "--user-map", "bob=dora"]) == 0
    assert main(["import", "--db", db, str(tmp_path / "bob.jsonl"), "--replace"]) == 0
    assert "(replaced)" in capsys.readouterr().err
    with Memory(db, embedder="hashing-128") as m:
        assert m.users() == ["ann", "bob", "carl", "dora"]
        assert sorted(f.object for f in m.facts(user_id="dora")) == ["Lima", "pilot"]
    assert main(["import", "--db", db, str(tmp_path / "bob.jsonl"), "--user-map", "zed=x"]) == 1
    assert "does not hold" in capsys.readouterr().err


def test_errors_are_messages_with_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["export", "--db", str(tmp_path / "missing.db")]) == 1
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"type": "header"}\n'))
    assert main(["import", "--db", str(tmp_path / "b.db")]) == 1
    assert "line 1, field 'format': missing" in capsys.readouterr().err
    _build(tmp_path / "a.db")
    main(["export", "--db", str(tmp_path / "a.db")])
    text = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["import", "--db", str(tmp_path / "c.db"), "--as", "x"]) == 1  # two users
    assert "--as needs a dump of one user" in capsys.readouterr().err
    # a database of another embedder: the dump's vectors are not used, all are computed
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["import", "--db", str(tmp_path / "d.db"), "--embedder", "hashing-64"]) == 0
    err = capsys.readouterr().err
    with Memory(tmp_path / "d.db", embedder="hashing-64") as d:
        n = d.stats(user_id="ann").items
        turns = [it.id for it in d.list_items(user_id="ann", kinds=["turn"], limit=None).items]
        notes = sum(d.note(i) is not None for i in turns)
        links = sum(len(d.links(i)) for i in turns) // 2
    assert (
        f"'ann' as 'ann': {n} items, 1 sessions, 0 revisions, {notes} notes, {links} links, {n} vectors computed" in err
    )
    assert notes > 0


def test_a_file_that_is_no_database_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all, just some bytes" * 10)
    _build(tmp_path / "a.db")
    assert main(["export", "--db", str(tmp_path / "a.db"), "--user", "ann"]) == 0
    dump = capsys.readouterr().out
    for argv in (["export", "--db", str(junk)], ["import", "--db", str(junk)], ["mcp", "--db", str(junk)]):
        monkeypatch.setattr(sys, "stdin", io.StringIO(dump))
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert f"lamina {argv[0]}: error: cannot open {junk}: not a lamina database" in err, err
        assert "Traceback" not in err
    # the server: one line, exit 2 (it opens the memory before serving)
    r = subprocess.run(
        _lamina("serve", "--db", str(junk), "--port", "1"), env=_env(), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "cannot open" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_failed_export_leaves_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _build(tmp_path / "a.db")
    out = tmp_path / "out.jsonl"
    assert main(["export", "--db", str(tmp_path / "a.db"), "--user", "ghost", "-o", str(out)]) == 1
    assert "ghost" in capsys.readouterr().err
    assert not out.exists() and not any(p.name.startswith(".lamina-export-") for p in tmp_path.iterdir())
    # an existing file is left as it was
    out.write_text("keep me\n", encoding="utf-8")
    assert main(["export", "--db", str(tmp_path / "a.db"), "--user", "ghost", "-o", str(out)]) == 1
    assert out.read_text(encoding="utf-8") == "keep me\n"
    assert main(["export", "--db", str(tmp_path / "a.db"), "--user", "ann", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith('{"type": "header"')


_LINES = LINES[:6]
_QUERIES = ["Where does she live?", "What is the dog called?", "job", "weather"]


def _contexts(m: Memory, user: str) -> list[str]:
    return [m.context(q, user_id=user, budget=300, now=T0 + 30 * 86_400).render() for q in _QUERIES]


def test_migrate_a_sqlite_file_to_postgresql_serves_identical_contexts(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lamina migrate --from PATH.db --to postgresql://...`` moves every user through the export
    format (with every vector): the same contexts, searches, facts and counts before and after;
    a second run refuses the users that are there already (exit 1, nothing duplicated)."""
    src = tmp_path / "a.db"
    with Memory(src, embedder="hashing-128") as m:
        for u in ("ann", "bob"):
            for s in range(3):
                m.add(
                    [
                        {"speaker": u.title(), "text": _LINES[(s * 2 + j) % len(_LINES)], "timestamp": T0 + s * 86_400}
                        for j in range(4)
                    ],
                    user_id=u,
                    session_id=f"s{s}",
                )
                m.end_session(user_id=u, session_id=f"s{s}")
        m.add([{"speaker": "Ann", "text": "Still talking.", "timestamp": T0 + 9e5}], user_id="ann", session_id="live")
        before = {u: _contexts(m, u) for u in ("ann", "bob")}
        facts = {u: [(f.subject, f.predicate, f.object) for f in m.facts(user_id=u)] for u in ("ann", "bob")}
    assert main(["migrate", "--from", str(src), "--to", pg_url]) == 0
    err = capsys.readouterr().err
    assert "2 users from" in err and "'ann'" in err and "COUNTS DIFFER" not in err
    with Memory(pg_url, embedder="hashing-128") as dst, Memory(src, embedder="hashing-128") as again:
        assert dst.users() == ["ann", "bob"]
        for u in ("ann", "bob"):
            assert _contexts(dst, u) == before[u] == _contexts(again, u)
            assert [(f.subject, f.predicate, f.object) for f in dst.facts(user_id=u)] == facts[u]
            hits = [(h.text, round(h.score, 6)) for h in dst.search("dog", user_id=u, k=20, layers=["archive"])]
            assert hits == [
                (h.text, round(h.score, 6)) for h in again.search("dog", user_id=u, k=20, layers=["archive"])
            ]
        assert dst.stats(user_id="ann").open_sessions == 1
    assert main(["migrate", "--from", str(src), "--to", pg_url]) == 1
    assert "exist already" in capsys.readouterr().err
    with Memory(pg_url, embedder="hashing-128") as dst:
        assert dst.stats().archive_turns == 2 * 3 * 4 + 1
