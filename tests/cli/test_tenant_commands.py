"""``lamina tenant adopt`` and what follows from it: the demo's database reopens as the demo
says, its users move into a tenant in one transaction (a bad request moves nothing), and
``lamina export --user`` finds an adopted user (``--tenant`` names the tenant)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from lamina import Memory
from lamina.cli.demo import run_demo
from lamina.cli.entry import main


@pytest.fixture
def demo_db(tmp_path: Path) -> str:
    path = str(tmp_path / "lamina-demo.db")
    out = io.StringIO()
    run_demo(db_path=path, users=3, sessions=3, turns=12, embedder="hashing", out=out, progress=False)
    assert "embedder hashing-384-3-4" in out.getvalue()
    assert f"reopen with lamina.Memory({path!r})" in out.getvalue()
    return path


def test_the_demo_database_reopens_as_the_demo_says(demo_db: str) -> None:
    with Memory(demo_db) as m:
        assert m.embedder.name == "hashing-384-3-4" and m.users() == ["user0", "user1", "user2"]


def test_adopt_moves_the_named_users_into_a_tenant(demo_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    with Memory(demo_db) as m:
        before = m.context("Where does the user live?", user_id="user0").render()
    assert main(["tenant", "adopt", "--db", demo_db, "--tenant", "acme", "--users", "user0,user1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tenant"] == "acme" and [u["user_id"] for u in report["users"]] == ["user0", "user1"]
    assert report["items"] == sum(u["items"] for u in report["users"]) > 0
    with Memory(demo_db) as m:
        assert m.users() == ["acme\x1fuser0", "acme\x1fuser1", "user2"]
        assert m.context("Where does the user live?", user_id="acme\x1fuser0").render() == before
    # a user the tenant has already, or an unknown one: an error, nothing moved
    assert main(["tenant", "adopt", "--db", demo_db, "--tenant", "acme", "--users", "user2,user0"]) == 1
    assert "unknown user_id 'user0'" in capsys.readouterr().err
    assert main(["tenant", "adopt", "--db", demo_db, "--tenant", "acme"]) == 0  # the rest: user2
    with Memory(demo_db) as m:
        assert m.users() == ["acme\x1fuser0", "acme\x1fuser1", "acme\x1fuser2"]


def test_export_reads_adopted_users(demo_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tenant", "adopt", "--db", demo_db, "--tenant", "acme", "--users", "user0"]) == 0
    out = tmp_path / "user0.jsonl"
    assert main(["export", "--db", demo_db, "--user", "user0", "-o", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[1]["type"] == "user" and lines[1]["user_id"] == "user0" and lines[-1]["users"] == 1
    assert main(["export", "--db", demo_db, "--tenant", "acme", "-o", str(out)]) == 0
    assert [x["user_id"] for x in map(json.loads, out.read_text().splitlines()) if x["type"] == "user"] == ["user0"]
    capsys.readouterr()
    assert main(["tenant", "adopt", "--db", demo_db, "--tenant", "bad tenant"]) == 1
    assert "tenant name 'bad tenant'" in capsys.readouterr().err
    assert main(["tenant", "adopt", "--db", str(tmp_path / "none.db"), "--tenant", "acme"]) == 1
    assert "no database at" in capsys.readouterr().err
