"""Deletion that forgets: after ``delete`` / ``delete_user`` the deleted text is in no store
file (``.db``, ``-wal``, ``-shm``: secure delete and a WAL checkpoint), in no derived row, and
the remaining items are served as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lamina import DeleteReport, Memory, MemoryConfig
from lamina.memory.types import LAYERS
from memkit import DAY, FILLER, LINES, T0, chat, item_rows, rows

SECRET = "Zorblaxquine"  # a word nothing else in these memories contains
SECRET_USER = "user-Qwyxzzt"


@pytest.fixture(params=["build default", "secure_delete off by default"])
def sqlite_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both kinds of SQLite builds: some (Debian's) compile ``SQLITE_SECURE_DELETE`` in, most
    leave it off, so that deleted cells stay in the file's free space."""
    if request.param != "build default":
        real = sqlite3.connect

        def connect(*args: object, **kw: object) -> sqlite3.Connection:
            conn = real(*args, **kw)  # type: ignore[arg-type]
            conn.execute("PRAGMA secure_delete=OFF")
            return conn

        monkeypatch.setattr(sqlite3, "connect", connect)
    yield str(request.param)


def _files(path: Path) -> list[Path]:
    return [Path(f"{path}{sfx}") for sfx in ("", "-wal", "-shm")]


def _leaks(path: Path, *needles: str) -> list[str]:
    """The store files (and needles, UTF-8 bytes) in which some needle occurs."""
    out = []
    for f in _files(path):
        if f.exists():
            data = f.read_bytes()
            out += [f"{f.name}: {n}" for n in needles if n.encode() in data]
    return out


def _secret_session(m: Memory, user: str, session: str, t: float) -> list[int]:
    lines = [
        ("Alice", f"My dog is called {SECRET}."),
        ("Bob", "That is an unusual name."),
        ("Alice", f"I moved to {SECRET}ville last spring."),
        *FILLER,
    ]
    return chat(m, user, session, lines, t, f"{user}-{session}")


def _build(path: Path | str, config: MemoryConfig | None = None) -> tuple[Memory, list[int]]:
    m = Memory(path, embedder="hashing", config=config)
    for s in range(4):
        chat(m, "u", f"a{s}", [("Alice", LINES[(s + j) % len(LINES)]) for j in range(6)], T0 + s * DAY, f"a{s}")
        m.end_session(user_id="u", session_id=f"a{s}")
    ids = _secret_session(m, "u", "sec", T0 + 5 * DAY)
    m.end_session(user_id="u", session_id="sec")
    for s in range(3):
        chat(m, "u", f"b{s}", [("Bob", LINES[(s + 2 * j) % len(LINES)]) for j in range(6)], T0 + (6 + s) * DAY, f"b{s}")
        m.end_session(user_id="u", session_id=f"b{s}")
    m.context(f"what is the dog called {SECRET}", user_id="u", now=T0 + 10 * DAY)
    return m, ids


def test_delete_leaves_no_copy_in_the_store_files(tmp_path: Path, sqlite_build: str) -> None:
    path = tmp_path / "m.db"
    m, ids = _build(path)
    secret_turns = [i for i in ids if SECRET in m.get(i).text]
    assert len(secret_turns) == 2
    m.flush()
    assert _leaks(path, SECRET)  # it is there before
    reps = [m.delete(i) for i in secret_turns]
    # while the store is open: the WAL was checkpointed and truncated, the pages zeroed
    assert _leaks(path, SECRET) == []
    assert all(i in rep.ids and rep.deleted == len(rep.ids) for i, rep in zip(secret_turns, reps))
    assert not any(SECRET in (r["text"] + (r["summary"] or "")) for r in item_rows(path).values())
    m.close()
    assert _leaks(path, SECRET) == []
    with Memory(path, embedder="hashing") as m2:
        assert not any(SECRET in it.render() for it in m2.search("dog", user_id="u", k=100, layers=list(LAYERS)))


def test_delete_user_leaves_no_copy_in_the_store_files(tmp_path: Path, sqlite_build: str) -> None:
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing")
    chat(m, "other", "s", FILLER, T0, "o")
    _secret_session(m, SECRET_USER, "s1", T0)
    m.end_session(user_id=SECRET_USER, session_id="s1")
    m.update(m.search("unusual name", user_id=SECRET_USER, k=1)[0].id, f"{SECRET} is unusual.")
    assert _leaks(path, SECRET, SECRET_USER)
    n = m.stats(user_id=SECRET_USER).items
    rep = m.delete_user(user_id=SECRET_USER)
    assert _leaks(path, SECRET, SECRET_USER) == []
    assert rep.deleted == n == len(rep.ids)
    m.close()
    assert _leaks(path, SECRET, SECRET_USER) == []
    with Memory(path, embedder="hashing") as m2:
        assert m2.users() == ["other"]


def test_revisions_of_a_deleted_item_are_wiped(tmp_path: Path, sqlite_build: str) -> None:
    path = tmp_path / "m.db"
    with Memory(path, embedder="hashing") as m:
        (a, b) = chat(m, "u", "s", [("Alice", f"my code word is {SECRET}"), ("Bob", "ok")], T0, "r")
        m.update(a, "my code word is secret")
        m.update(a, "my code word is gone")
        assert [x["text"] for x in rows(path, "SELECT text FROM revisions")] == [
            f"my code word is {SECRET}",
            "my code word is secret",
        ]
        assert m.delete(a) == DeleteReport(deleted=1, ids=(a,))
        assert rows(path, "SELECT * FROM revisions") == []
        assert _leaks(path, SECRET, "code word") == []
        assert m.get(b).text == "ok"


def test_no_derived_row_quotes_a_deleted_turn(db: str) -> None:
    """Every stored row whose text or summary quotes the turn lists it among its sources (MemTree
    nodes, session summaries, facts, notes, profiles): deleting the turn leaves no quote. Small
    capacities make the tree deep, promote notes and evict."""
    path = db
    cfg = MemoryConfig(episodic_capacity=12, semantic_capacity=8, promote_threshold=0.0)
    m, ids = _build(path, cfg)
    quoted = {i for i, r in item_rows(path).items() if SECRET in r["text"] + (r["summary"] or "")}
    kinds = {item_rows(path)[i]["kind"] for i in quoted}
    assert {"turn", "segment", "fact", "profile"} <= kinds, kinds
    for i in [i for i in ids if SECRET in m.get(i).text]:
        m.delete(i)
    assert [r["id"] for r in item_rows(path).values() if SECRET in r["text"] + (r["summary"] or "")] == []
    m.close()


def test_search_of_the_remaining_items_is_unchanged(tmp_path: Path) -> None:
    """Deleting an item of one session leaves the results of the others as they were: a memory
    built without the deleted session serves the same items with the same scores."""
    cfg = MemoryConfig(ann_threshold=8)  # the archive is served by hnswlib after the delete
    keep = [("Alice", LINES[j % len(LINES)] + f" ({j})") for j in range(40)]
    with Memory(tmp_path / "a.db", embedder="hashing", config=cfg) as a, Memory(embedder="hashing", config=cfg) as b:
        chat(a, "u", "s", keep, T0, "k")
        chat(b, "u", "s", keep, T0, "k")
        gone = chat(a, "u", "t", [("Bob", f"{SECRET} is here.")], T0 + DAY, "g")
        for q in ("coffee", "dog Max", "Paris"):
            a.search(q, user_id="u", k=5, layers=["archive"])  # builds the graph with the doomed row
        a.delete(gone[0])
        for q in ("coffee", "dog Max", "Paris", SECRET):
            # every kept turn (the lines repeat, so scores tie exactly: a tie's order is the graph's)
            ha = a.search(q, user_id="u", k=len(keep), layers=["archive"])
            hb = b.search(q, user_id="u", k=len(keep), layers=["archive"])
            assert len(ha) == len(keep)
            sa, sb = ({x.sources: x.score for x in h} for h in (ha, hb))
            assert sa.keys() == sb.keys()
            assert [sa[k] for k in sorted(sa)] == pytest.approx([sb[k] for k in sorted(sa)], abs=1e-5)
            assert [x.score for x in ha] == sorted((x.score for x in ha), reverse=True)
        assert np.all([SECRET not in it.text for it in a.search(SECRET, user_id="u", k=50, layers=list(LAYERS))])


def test_no_graph_keeps_a_deleted_vector(tmp_path: Path) -> None:
    """Past ``ann_threshold`` layers are hnswlib graphs; evictions only mark points deleted, so
    a deleted turn's vector (and its evicted leaf's, and its turn view's) must be scrubbed from
    every graph, whether the point was live or already marked deleted — without a rebuild."""
    import pickle

    cfg = MemoryConfig(ann_threshold=4, episodic_capacity=3, semantic_capacity=3, working_capacity=4)
    m, ids = _build(tmp_path / "m.db", cfg)
    with m:
        for q in ("dog", "moved", "coffee"):
            for layers in (["archive"], ["episodic"], ["semantic"]):
                m.search(q, user_id="u", k=5, layers=layers)  # builds the graphs
            m.context(q, user_id="u", budget=200)
        vectors = m._st.vectors
        doomed = [i for i in ids if i in vectors]
        before = {i: vectors.get([i])[0].tobytes() for i in doomed}
        builds, graphs = vectors.ann_builds, vectors.graph_namespaces()
        assert graphs
        rep = m.delete(ids[0], user_id="u")
        assert ids[0] in rep.ids
        blobs = [pickle.dumps(g.index) for g in vectors._graphs.values()]
        assert blobs and not any(before[ids[0]] in b for b in blobs)
        assert vectors.ann_builds == builds and vectors.graph_namespaces() == graphs  # scrubbed in place
        hits = m.search(SECRET, user_id="u", k=50, layers=list(LAYERS))
        assert all(f"dog is called {SECRET}" not in it.text for it in hits)
