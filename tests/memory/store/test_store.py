"""lamina.memory.store.sqlite through the Store protocol (transactions, ids, meta, users, sessions,
item rows, revisions): the protocol's tests run on both backends, SQLiteStore and PostgresStore
(a real PostgreSQL: tests/pgkit.py); the SQLite file's own properties (WAL, migrations of older
files, secure delete) and PostgreSQL's (migrations table, layout, lock timeout) follow."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lamina.memory.state.records import Record
from lamina.memory.store.protocol import ID_SHIFT, ITEM_COLUMNS, Store, seq_of
from lamina.memory.store.sqlite import SCHEMA_VERSION, SQLiteStore


def _store(path: Path | None = None) -> Store:
    return SQLiteStore(None if path is None else str(path))


class Backend:
    """One backend's stores: ``open()`` a handle on the test's database (a second call: a second
    connection, as another process would open), ``fresh()`` one on another empty database."""

    def __init__(self, name: str, target: str, fresh: Callable[[], Store]) -> None:
        self.name = name
        self.target = target
        self.fresh = fresh

    def open(self) -> Store:
        if self.name == "sqlite":
            return SQLiteStore(self.target)
        from lamina.memory.store.postgres import PostgresStore

        return PostgresStore(self.target)

    @property
    def integrity_error(self) -> type[Exception]:
        if self.name == "sqlite":
            return sqlite3.IntegrityError
        import psycopg

        return psycopg.IntegrityError


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "s.db"), lambda: SQLiteStore(None))
    from lamina.memory.store.postgres import PostgresStore

    cluster = request.getfixturevalue("pg_cluster")
    return Backend("postgres", cluster.new_database(), lambda: PostgresStore(cluster.new_database()))


def _row(rid: int, **kw: object) -> dict[str, object]:
    r = Record(
        id=rid,
        user_id="u",
        layer="working",
        kind="turn",
        text=f"text {rid}",
        seq=seq_of(rid),
        session_id="s",
        sources=(f"t{rid}", "x"),
        members=(1, 2),
        timestamp=1.5,
        **kw,
    )  # type: ignore[arg-type]
    return r.row(np.arange(4, dtype=np.float32) + rid % 7)


def test_tx_commits_and_rolls_back(backend: Backend) -> None:
    s = backend.open()
    with s.tx():
        s.set_meta("a", "1")
    with pytest.raises(RuntimeError):
        with s.tx():
            s.set_meta("a", "2")
            s.set_meta("b", "x")
            raise RuntimeError("boom")
    assert s.get_meta("a") == "1" and s.get_meta("b") is None
    other = backend.open()  # committed means durable: another connection sees it
    assert other.get_meta("a") == "1" and other.get_meta("b") is None
    other.close()
    if backend.name == "sqlite":
        conn = sqlite3.connect(backend.target)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        conn.close()
    s.close()


def test_ids_are_tagged_and_persist(backend: Backend) -> None:
    s = backend.open()
    with s.tx():
        a = s.new_ids(3)
    assert [seq_of(i) for i in a] == [1, 2, 3] and len({i >> ID_SHIFT for i in a}) == 1
    assert all(s.owns(i) for i in a)
    other = backend.fresh()
    with other.tx():
        (o,) = other.new_ids(1)
    assert not s.owns(o) and not other.owns(a[0])  # each database has its own tag
    other.close()
    with pytest.raises(RuntimeError):
        with s.tx():
            lost = s.new_ids(2)
            raise RuntimeError
    with s.tx():
        again = s.new_ids(2)
    if backend.name == "sqlite":
        # ids handed out by a rolled-back transaction are handed out again (each transaction
        # reads the counter afresh)
        assert again == lost and [seq_of(i) for i in again] == [4, 5]
    else:  # a sequence: a rolled-back write burns its ids
        assert [seq_of(i) for i in lost] == [4, 5] and [seq_of(i) for i in again] == [6, 7]
    s.close()
    s2 = backend.open()  # the counter and the tag survive reopening
    with s2.tx():
        (nxt,) = s2.new_ids(1)
    assert seq_of(nxt) == seq_of(again[-1]) + 1 and s2.owns(a[0])
    assert s2.get_meta("schema_version") is not None
    s2.close()


def test_two_connections_never_hand_out_the_same_id(backend: Backend) -> None:
    """Each write transaction reads the id counter under the database's write lock, so two
    handles of one database (two processes, say) interleave without a collision."""
    a, b = backend.open(), backend.open()
    got: list[int] = []
    for i in range(20):
        s = a if i % 3 else b
        with s.tx():
            got += s.new_ids(1 + i % 2)
    assert len(got) == len(set(got)) == sum(1 + i % 2 for i in range(20))
    assert sorted(seq_of(i) for i in got) == list(range(1, len(got) + 1))
    a.close()
    b.close()


def test_user_versions_count_writes_and_data_version_sees_other_connections(backend: Backend) -> None:
    a, b = backend.open(), backend.open()
    with a.tx():
        a.add_user("u", a.next_user_index())
        a.add_user("v", a.next_user_index())
        assert a.bump_versions(["u", "u", "v"]) == {"u": 1, "v": 1}
    dv = b.data_version()
    assert b.user_versions() == {"u": 1, "v": 1}
    with a.tx():
        assert a.bump_versions(["u", "gone"]) == {"u": 2}  # (a user without a row has no version)
    assert b.data_version() != dv and b.user_versions() == {"u": 2, "v": 1}
    dv_a = a.data_version()
    with a.tx():
        a.bump_versions(["v"])
    assert a.data_version() == dv_a  # a connection's own commits do not move its data_version
    with b.tx():
        b.bump_versions(["u"])
    assert a.data_version() != dv_a  # another's do, even after its own
    with b.tx():
        assert b.next_user_index() == 3
    a.close()
    b.close()


def test_schema_version_and_synchronous_are_checked(tmp_path: Path) -> None:
    p = tmp_path / "s.db"
    SQLiteStore(str(p)).close()
    conn = sqlite3.connect(p)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="schema version 99"):
        SQLiteStore(str(p))
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(None, synchronous="OFF")
    full = SQLiteStore(None, synchronous="full")
    assert full.conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    full.close()


def test_users_and_sessions(backend: Backend) -> None:
    s = backend.fresh()
    with s.tx():
        s.add_user("bob", 2)
        s.add_user("ann", 1)
        s.set_drift("ann", 0.5, 0.25, 2)
        s.upsert_session("ann", "s1", "open", 10.0, None)
        s.upsert_session("ann", "s1", "ended", 99.0, 20.0)  # started_at is kept on update
    assert s.users() == [("ann", 1, 0.5, 0.25, 2, 0), ("bob", 2, 0.0, 0.0, 0, 0)]  # by namespace index
    assert s.sessions() == [("ann", "s1", "ended", 10.0, 20.0, 0)]
    with pytest.raises(backend.integrity_error):
        with s.tx():
            s.add_user("carl", 1)  # namespace indexes are unique
    assert [u[0] for u in s.users()] == ["ann", "bob"]
    s.close()


def _three_items(
    backend: Backend, order: tuple[int, int, int] = (0, 1, 2)
) -> tuple[Store, list[int], list[dict[str, object]]]:
    """A fresh store with user ``u`` and three new items (their ids, their rows), inserted in ``order``."""
    s = backend.fresh()
    with s.tx():
        ids = s.new_ids(3)
        s.add_user("u", 1)
        rows = [_row(i) for i in ids]
        s.insert_items([rows[k] for k in order])
    return s, ids, rows


def test_items_round_trip_updates_and_deletes(backend: Backend) -> None:
    s, ids, rows = _three_items(backend)
    loaded = list(s.load_items())
    assert [r["id"] for r in loaded] == ids and set(loaded[0]) == set(ITEM_COLUMNS)
    for got, want in zip(loaded, rows):
        assert got == want  # sources and members back as tuples, the embedding as bytes
    assert isinstance(loaded[0]["sources"], tuple) and isinstance(loaded[0]["members"], tuple)
    with s.tx():
        s.update_items([(ids[0], {"text": "new", "members": (7,)}), (ids[1], {})])
        s.bump_access([(5, 123.0, ids[2])])
    by_id = {r["id"]: r for r in s.load_items()}
    assert by_id[ids[0]]["text"] == "new" and by_id[ids[0]]["members"] == (7,)
    assert by_id[ids[0]]["summary"] is None and by_id[ids[1]] == rows[1]  # nothing else changed
    assert (by_id[ids[2]]["access_count"], by_id[ids[2]]["last_access"]) == (5, 123.0)
    with s.tx():
        s.add_revision(ids[0], "old", 1.0)
        s.add_revision(ids[0], "older", 2.0)
        s.add_revision(ids[1], "x", 3.0)
    assert s.revisions(ids[0]) == [("old", 1.0), ("older", 2.0)] and s.revisions(ids[2]) == []
    with s.tx():
        s.delete_items("u", [ids[0]])
    assert [r["id"] for r in s.load_items()] == ids[1:] and s.revisions(ids[0]) == []
    assert s.item_user(ids[1]) == "u" and s.item_user(ids[0]) is None
    with s.tx():
        s.upsert_session("u", "s", "open", 1.0, None)
        s.delete_user("u")
    assert list(s.load_items()) == [] and s.users() == [] and s.sessions() == [] and s.revisions(ids[1]) == []
    s.close()


def test_load_items_orders_by_sequence(backend: Backend) -> None:
    s, ids, _ = _three_items(backend, order=(2, 0, 1))
    assert [r["id"] for r in s.load_items()] == ids
    s.close()


def test_the_change_log_and_a_read_snapshot(backend: Backend) -> None:
    """changes() returns exactly the rows and tombstones written after a version; moved_since the
    users written and deleted after it; a read snapshot sees none of the later writes."""
    s = backend.open()
    with s.tx():
        s.add_user("u", 1)
        s.add_user("w", 2)
        ids = s.new_ids(3)
        s.insert_items([_row(i) for i in ids])
        s.bump_versions(["u", "w"])
    v1 = s.last_write()
    assert s.user_born("u") == v1 and s.user_born("nobody") is None
    snap = s.read_snapshot()
    assert snap is not None
    with s.tx():
        s.update_items([(ids[1], {"text": "edited"})])
        s.delete_items("u", [ids[2]])
        s.bump_versions(["u"])
    with s.tx():
        s.delete_user("w")
    rows, dead = s.changes("u", v1)
    assert [r["text"] for r in rows] == ["edited"] and dead == [ids[2]]
    assert s.changes("u", s.last_write()) == ([], [])
    moved, gone = s.moved_since(v1)
    assert moved == {"u": v1 + 1} and gone == {2}
    with snap.read_tx():  # the snapshot: as of v1
        assert [r["id"] for r in snap.load_items()] == ids and snap.last_write() == v1
        assert sorted(snap.user_versions()) == ["u", "w"]
    snap.close()
    s.close()


def _downgrade(p: Path, version: int) -> None:
    """Turn a store into one of an older schema (what an older lamina wrote)."""
    con = sqlite3.connect(p)
    for stmt in (
        "DROP INDEX users_version",
        "DROP INDEX items_user_version",
        "DROP TABLE tombstones",
        "DROP TABLE gone_users",
        "ALTER TABLE items DROP COLUMN version",
        "ALTER TABLE users DROP COLUMN born",
        "ALTER TABLE items DROP COLUMN decay_mark",
        "ALTER TABLE users DROP COLUMN decays",
        "ALTER TABLE sessions DROP COLUMN ends",
        "ALTER TABLE items DROP COLUMN metadata",
    ):
        con.execute(stmt)
    if version < 2:
        con.execute("ALTER TABLE users DROP COLUMN version")
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
    con.commit()
    con.close()


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_store_is_migrated_on_open(tmp_path: Path, version: int) -> None:
    """Stores written before the per-user version (schema 1) or the change log (schema 2) open,
    keep their rows, and count changes from there."""
    p = tmp_path / "s.db"
    s = _store(p)
    with s.tx():
        s.add_user("u", 1)
        (i,) = s.new_ids(1)
        s.insert_items([_row(i)])
        s.bump_versions(["u"])
    s.close()
    _downgrade(p, version)
    s = _store(p)
    assert s.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert s.user_versions() == {"u": 0 if version == 1 else 1} and [r["id"] for r in s.load_items()] == [i]
    assert s.changes("u", 0) == ([], [])  # rows of older writes are not in the log (a handle loads them)
    with s.tx():
        s.update_items([(i, {"text": "new"})])
        n = s.write_number()
    assert [r["text"] for r in s.changes("u", 0)[0]] == ["new"] and s.last_write() == n
    s.close()


def test_secure_delete_and_forget(tmp_path: Path) -> None:
    """Deleted rows leave no bytes behind: secure_delete is on at open, and forget()
    checkpoints and truncates the WAL (and VACUUMs where secure_delete is refused)."""
    p = tmp_path / "s.db"
    for secure in (True, False):
        s = SQLiteStore(str(p))
        assert s.secure_delete and s.conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
        s.secure_delete = secure  # False: as on a SQLite build that refuses it
        if not secure:
            s.conn.execute("PRAGMA secure_delete=OFF")
        with s.tx():
            ids = s.new_ids(2)
            if secure:
                s.add_user("u", 1)
            s.insert_items([{**_row(i), "text": f"needle-{secure} " * 50} for i in ids])
            s.add_revision(ids[0], f"needle-{secure} old", 1.0)
        assert f"needle-{secure}".encode() in Path(f"{p}-wal").read_bytes()
        with s.tx():
            s.delete_items("u", ids)
        assert s.forget() is True
        assert Path(f"{p}-wal").stat().st_size == 0
        assert f"needle-{secure}".encode() not in p.read_bytes()
        s.close()
    mem = SQLiteStore(None)
    with mem.tx():
        mem.add_user("u", 1)
    assert mem.forget() is True  # in memory: nothing to checkpoint
