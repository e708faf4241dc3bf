"""How a database is opened (:mod:`lamina.memory.opening`): with the embedder it records unless
told otherwise (``Memory``, ``AsyncMemory``; SQLite and PostgreSQL), an explicit other one is an
error naming both, a new one gets ``auto``; a path that holds no database is a lamina error
naming it. And :meth:`lamina.Memory.rename_users`, all or nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from lamina import AsyncMemory, InvalidInput, Memory, NotFoundError
from lamina.embedders import Hashing, find_minilm_dir
from lamina.memory.opening import database_embedder

T0 = 1_700_000_000.0


def _fill(m: Memory, user: str, job: str) -> None:
    m.add(
        [
            {"speaker": user.title(), "text": f"I work as a {job} these days.", "timestamp": T0},
            {"speaker": "Bo", "text": "That sounds like a good job.", "timestamp": T0 + 60},
        ],
        user_id=user,
        session_id="s1",
    )
    m.end_session(user_id=user, session_id="s1")


def test_a_database_opens_with_the_embedder_it_records(db: str) -> None:
    with Memory(db, embedder="hashing-256") as m:
        _fill(m, "ann", "pilot")
        before = m.context("What is Ann's job?", user_id="ann", now=T0 + 600).render()
    with Memory(db) as m:  # the default, "auto": the recorded one, whatever is installed
        assert m.embedder.name == "hashing-256-3-4" and m.stats().embedder == "hashing-256-3-4"
        assert m.context("What is Ann's job?", user_id="ann", now=T0 + 600).render() == before

    async def reopen() -> str:
        am = await AsyncMemory.open(db)
        try:
            return am.memory.embedder.name
        finally:
            await am.aclose()

    assert asyncio.run(reopen()) == "hashing-256-3-4"
    assert database_embedder(db).name == "hashing-256-3-4"


def test_an_explicit_other_embedder_is_an_error_naming_both(db: str) -> None:
    with Memory(db, embedder="hashing-256") as m:
        _fill(m, "ann", "pilot")
    with pytest.raises(
        InvalidInput, match=r"built with embedder 'hashing-256-3-4', not 'hashing-384-3-4'.*'hashing-256'"
    ):
        Memory(db, embedder="hashing")
    with pytest.raises(InvalidInput, match="hashing-256-3-4"):
        database_embedder(db, "hashing")
    with Memory(db, embedder="hashing-256") as m:  # the failed opens changed nothing
        assert m.users() == ["ann"]


class _Tiny:
    """A custom embedder (a stable name, no registry entry)."""

    name = "tiny-test-8"
    dim = 8

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        x = np.zeros((len(texts), 8), dtype=np.float32)
        for i, t in enumerate(texts):
            x[i, len(t) % 8] = 1.0
        return x


def test_a_custom_embedder_database_opens_only_with_that_embedder(tmp_path: Path) -> None:
    path = tmp_path / "custom.db"
    with Memory(path, embedder=_Tiny()) as m:
        _fill(m, "ann", "pilot")
    with pytest.raises(InvalidInput, match="custom embedder 'tiny-test-8'"):
        Memory(path)
    with Memory(path, embedder=_Tiny()) as m:
        assert m.users() == ["ann"]


def test_a_new_database_gets_the_best_installed_embedder() -> None:
    with Memory(None) as m:
        # the float32 MiniLM where its files are installed, else the int8 one every install carries
        want = "minilm-l6-v2-384" if find_minilm_dir() is not None else "minilm-l6-v2-int8-384"
        assert m.stats().embedder.startswith(want)


@pytest.mark.parametrize("case", ["missing folder", "a folder", "not a database"])
def test_a_bad_database_path_is_a_lamina_error_naming_it(tmp_path: Path, case: str) -> None:
    if case == "missing folder":
        path, hint = tmp_path / "nowhere" / "m.db", "does not exist"
    elif case == "a folder":
        path, hint = tmp_path, "it is a folder"
    else:
        path, hint = tmp_path / "notes.txt", "not a lamina database"
        path.write_text("not sqlite at all, just text\n" * 100)
    with pytest.raises(InvalidInput, match="cannot open") as e:
        Memory(path, embedder="hashing")
    assert str(path) in str(e.value) and hint in str(e.value)


def test_rename_users_moves_all_or_nothing(db: str) -> None:
    with Memory(db, embedder=Hashing()) as m:
        for u, job in (("ann", "pilot"), ("bob", "chef"), ("cy", "nurse")):
            _fill(m, u, job)
        q = "What is Ann's job?"
        before = m.context(q, user_id="ann", now=T0 + 600).render()
        with pytest.raises(InvalidInput, match="'cy' already exists"):
            m.rename_users({"ann": "t\x1fann", "bob": "cy"})
        with pytest.raises(NotFoundError, match="'zed'"):
            m.rename_users({"ann": "t\x1fann", "zed": "t\x1fzed"})
        with pytest.raises(InvalidInput, match="same id"):
            m.rename_users({"ann": "x", "bob": "x"})
        assert m.users() == ["ann", "bob", "cy"]  # nothing moved
        reports = m.rename_users({"ann": "t\x1fann", "bob": "t\x1fbob"})
        assert [(r.from_user_id, r.user_id) for r in reports] == [("ann", "t\x1fann"), ("bob", "t\x1fbob")]
        assert all(r.items > 0 and r.reembedded == 0 and len(r.ids) == r.items for r in reports)
        assert sorted(m.users()) == ["cy", "t\x1fann", "t\x1fbob"]
        assert m.context(q, user_id="t\x1fann", now=T0 + 600).render() == before
    with Memory(db) as m:  # as stored
        assert sorted(m.users()) == ["cy", "t\x1fann", "t\x1fbob"]
        assert m.context(q, user_id="t\x1fann", now=T0 + 600).render() == before
