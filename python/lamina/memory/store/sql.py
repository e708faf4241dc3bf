"""The SQL the two backends share: :class:`SQLStore`, the part of the
:class:`~lamina.memory.store.protocol.Store` protocol that is one statement in both dialects, and
:class:`Dialect`, what tells SQLite's statements from PostgreSQL's (the placeholder, the schema
prefix of the tables, quoted column names, the snapshot a read transaction takes).

A shared statement is written once in SQLite's spelling with ``{t}`` before each table name
(``SELECT value FROM {t}meta WHERE key=?``); :meth:`Dialect.sql` turns it into the backend's.
What differs in more than spelling stays in the backend: transactions, ids and write numbers,
array parameters (``IN (?, ...)`` against ``= ANY(%s)``), inserts (``COPY`` on PostgreSQL),
deletes, the wipe of deleted rows (:mod:`~lamina.memory.store.sqlite`,
:mod:`~lamina.memory.store.postgres`)."""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import StoreBusy
from .protocol import ID_SHIFT, ITEM_COLUMNS, SessionRow, UserRow, _decode, _enc

__all__ = ["Dialect", "SQLStore", "SQLITE", "POSTGRES"]


_S = TypeVar("_S", bound="SQLStore")


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the shared statements."""

    prefix: str  #: before every table name (the schema: ``lamina.`` on PostgreSQL)
    mark: str  #: the parameter placeholder
    quoted: bool  #: column names in double quotes
    begin_read: str  #: the statement that opens a read transaction (a snapshot, no lock)

    def sql(self, text: str) -> str:
        """A statement written for SQLite with ``{t}`` before its table names, in this dialect."""
        return _spelled(text, self.prefix, self.mark)

    def column(self, name: str) -> str:
        return f'"{name}"' if self.quoted else name

    @functools.cached_property
    def item_columns(self) -> str:
        """The item row's columns (:data:`ITEM_COLUMNS`), comma-separated."""
        return ",".join(self.column(c) for c in ITEM_COLUMNS)


@functools.lru_cache(maxsize=512)
def _spelled(text: str, prefix: str, mark: str) -> str:
    return text.replace("{t}", prefix).replace("?", mark)


SQLITE = Dialect(prefix="", mark="?", quoted=False, begin_read="BEGIN")
POSTGRES = Dialect(prefix="lamina.", mark="%s", quoted=True, begin_read="BEGIN ISOLATION LEVEL REPEATABLE READ")


class SQLStore(abc.ABC):
    """The statements SQLite and PostgreSQL share, over the backend's connection (``conn``) in
    its :class:`Dialect` (``dialect``). A backend subclasses it and adds what differs."""

    dialect: Dialect
    conn: Any  # (the backend's connection: sqlite3 or psycopg)
    path: str | None
    busy_timeout: float
    tag: int
    _in_tx: bool
    _write_no: int | None
    #: ORDER BY of :meth:`sessions` (all users, one user)
    _sessions_order: tuple[str, str] = ("", "")

    # -- to implement ------------------------------------------------------------------------
    @abc.abstractmethod
    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run one statement over many rows."""

    @abc.abstractmethod
    def _end(self, how: str) -> None:
        """COMMIT or ROLLBACK the open transaction."""

    @abc.abstractmethod
    def _next_write(self) -> int:
        """Take the database's next write number."""

    @abc.abstractmethod
    def _bump(self, uids: list[str], n: int) -> dict[str, int]:
        """Stamp these users (sorted, at least one) with write number n; those found."""

    # -- helpers -----------------------------------------------------------------------------
    def _run(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        """Execute a shared statement (:meth:`Dialect.sql`); the cursor."""
        return self.conn.execute(self.dialect.sql(sql), params)

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _check_columns(self, names: Iterable[str]) -> None:
        for k in names:
            if k not in ITEM_COLUMNS:
                raise ValueError(f"unknown item column {k!r}")

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def read_tx(self) -> Iterator[None]:
        """A read transaction (:attr:`Dialect.begin_read`: one snapshot, no lock) ... ``COMMIT``;
        inside a transaction already, the reads belong to it."""
        if self._in_tx:
            yield
            return
        self.conn.execute(self.dialect.begin_read)
        self._in_tx = True
        try:
            yield
        finally:
            self._in_tx = False
            self._end("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def _busy(self) -> StoreBusy:
        """The error of a write that waited for the write lock past ``busy_timeout``."""
        return StoreBusy(
            f"{self.path}: another connection held the database's write lock for over "
            f"{self.busy_timeout:g} s (busy_timeout); nothing was written"
        )

    def _reader(self: _S, conn: Any) -> _S:
        """A store of the same class on ``conn`` (a second connection, closed on failure) inside
        a read transaction whose snapshot is taken now; the backend sets its own attributes."""
        try:
            conn.execute(self.dialect.begin_read)
            # (the snapshot is taken at the first read)
            conn.execute(self.dialect.sql("SELECT 1 FROM {t}meta LIMIT 1")).fetchall()
        except BaseException:
            conn.close()
            raise
        reader = object.__new__(type(self))
        reader.path = self.path
        reader.busy_timeout = self.busy_timeout
        reader.conn = conn
        reader._in_tx = True  # (read_tx inside it belongs to the snapshot)
        reader._write_no = None
        reader.tag = self.tag
        return reader

    # -- meta / ids --------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        v = self._one(self.dialect.sql("SELECT value FROM {t}meta WHERE key=?"), (key,))
        return None if v is None else str(v)

    def set_meta(self, key: str, value: str) -> None:
        self._run(
            "INSERT INTO {t}meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def owns(self, item_id: int) -> bool:
        return (item_id >> ID_SHIFT) == self.tag

    def _tagged(self, seqs: list[int]) -> list[int]:
        """Item ids of these sequence numbers."""
        return [(self.tag << ID_SHIFT) | s for s in seqs]

    def write_number(self) -> int:
        """This transaction's write number (allocated on first use: the database's next one)."""
        if self._write_no is None:
            self._write_no = self._next_write()
        return self._write_no

    def bump_versions(self, user_ids: Iterable[str]) -> dict[str, int]:
        uids = sorted(set(user_ids))
        if not uids:
            return {}
        return self._bump(uids, self.write_number())

    def last_write(self) -> int:
        return int(self.get_meta("write_seq") or 0)

    def mark_deleted(self) -> None:
        self.set_meta("wipe_gen", str(int(self.get_meta("wipe_gen") or 0) + 1))

    def wipe_pending(self) -> bool:
        gens = dict(self._run("SELECT key, value FROM {t}meta WHERE key IN ('wipe_gen', 'wiped_gen')"))
        return int(gens.get("wipe_gen") or 0) > int(gens.get("wiped_gen") or 0)

    def _wiped(self, gen: int) -> None:
        """Record that the wipe covered the delete generation ``gen`` (in its own transaction)."""
        with self.tx():
            if int(self.get_meta("wiped_gen") or 0) < gen:
                self.set_meta("wiped_gen", str(gen))

    @abc.abstractmethod
    def tx(self) -> contextlib.AbstractContextManager[None]:
        """The backend's write transaction (nested calls join the open one)."""

    # -- users / sessions --------------------------------------------------------------------
    def users(self, user_id: str | None = None) -> list[UserRow]:
        sql = "SELECT user_id, ns, drift_total, drift_last, drift_updates, decays FROM {t}users"
        cur = self._run(sql + " ORDER BY ns") if user_id is None else self._run(sql + " WHERE user_id=?", (user_id,))
        return [(str(u), int(ns), float(t), float(last), int(n), int(d)) for u, ns, t, last, n, d in cur]

    def user_versions(self, user_id: str | None = None) -> dict[str, int]:
        sql = "SELECT user_id, version FROM {t}users"
        cur = self._run(sql) if user_id is None else self._run(sql + " WHERE user_id=?", (user_id,))
        return {str(u): int(v) for u, v in cur}

    def item_user(self, item_id: int) -> str | None:
        v = self._one(self.dialect.sql("SELECT user_id FROM {t}items WHERE id=?"), (item_id,))
        return None if v is None else str(v)

    def next_user_index(self) -> int:
        return int(self._one(self.dialect.sql("SELECT COALESCE(MAX(ns), 0) + 1 FROM {t}users")))

    def add_user(self, user_id: str, ns: int) -> None:
        self._run("INSERT INTO {t}users(user_id, ns, born) VALUES(?, ?, ?)", (user_id, ns, self.write_number()))

    def user_born(self, user_id: str) -> int | None:
        v = self._one(self.dialect.sql("SELECT born FROM {t}users WHERE user_id=?"), (user_id,))
        return None if v is None else int(v)

    def moved_since(self, version: int) -> tuple[dict[str, int], set[int]]:
        moved = {
            str(u): int(v) for u, v in self._run("SELECT user_id, version FROM {t}users WHERE version > ?", (version,))
        }
        gone = {int(r[0]) for r in self._run("SELECT ns FROM {t}gone_users WHERE version > ?", (version,))}
        return moved, gone

    def set_decays(self, user_id: str, decays: int) -> None:
        self._run("UPDATE {t}users SET decays=? WHERE user_id=?", (decays, user_id))

    def set_drift(self, user_id: str, total: float, last: float, updates: int) -> None:
        self._run(
            "UPDATE {t}users SET drift_total=?, drift_last=?, drift_updates=? WHERE user_id=?",
            (total, last, updates, user_id),
        )

    def sessions(self, user_id: str | None = None) -> list[SessionRow]:
        sql = "SELECT user_id, session_id, status, started_at, ended_at, ends FROM {t}sessions"
        every, one = self._sessions_order
        cur = self._run(sql + every) if user_id is None else self._run(sql + " WHERE user_id=?" + one, (user_id,))
        return [(str(u), str(s), str(st), started, ended, int(n)) for u, s, st, started, ended, n in cur]

    def upsert_session(
        self,
        user_id: str,
        session_id: str,
        status: str,
        started_at: float | None,
        ended_at: float | None,
        ends: int = 0,
    ) -> None:
        self._run(
            "INSERT INTO {t}sessions(user_id, session_id, status, started_at, ended_at, ends) VALUES(?,?,?,?,?,?) "
            "ON CONFLICT(user_id, session_id) DO UPDATE SET status=excluded.status, ended_at=excluded.ended_at, "
            "ends=excluded.ends",
            (user_id, session_id, status, started_at, ended_at, ends),
        )

    # -- items -------------------------------------------------------------------------------
    def _update_sets(self, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> tuple[str, list[tuple[Any, ...]]]:
        """The SET list of an update of these columns, and its rows (in the dialect)."""
        d = self.dialect
        return ",".join(f"{d.column(k)}={d.mark}" for k in cols), rows

    def update_items(self, updates: list[tuple[int, dict[str, Any]]]) -> None:
        groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for item_id, fields in updates:
            if fields:  # one statement per set of columns, run over all its rows
                self._check_columns(fields)
                groups.setdefault(tuple(fields), []).append(tuple(_enc(k, v) for k, v in fields.items()) + (item_id,))
        if not groups:
            return
        n = self.write_number()
        where = self.dialect.sql(" WHERE id=?")
        for cols, rows in groups.items():
            sets, args = self._update_sets(cols, rows)
            self._many(f"UPDATE {self.dialect.prefix}items SET {sets}, version={n:d}{where}", args)

    def bump_access(self, rows: list[tuple[int, float | None, int]]) -> None:
        """(access_count, last_access, id) per row."""
        self._many(self.dialect.sql("UPDATE {t}items SET access_count=?, last_access=? WHERE id=?"), list(rows))

    def changes(self, user_id: str, since: int) -> tuple[list[dict[str, Any]], list[int]]:
        sql = f"SELECT {self.dialect.item_columns} FROM {{t}}items WHERE user_id=? AND version > ? ORDER BY seq"
        rows = [_decode(row) for row in self._run(sql, (user_id, since))]
        dead = [
            int(r[0])
            for r in self._run(
                "SELECT item_id FROM {t}tombstones WHERE user_id=? AND version > ? AND item_id IS NOT NULL",
                (user_id, since),
            )
        ]
        return rows, dead

    def load_items(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        sql = f"SELECT {self.dialect.item_columns} FROM {{t}}items"
        cur = (
            self._run(sql + " ORDER BY seq")
            if user_id is None
            else self._run(sql + " WHERE user_id=? ORDER BY seq", (user_id,))
        )
        for row in cur:
            yield _decode(row)

    def revisions(self, item_id: int) -> list[tuple[str, float]]:
        sql = "SELECT text, changed_at FROM {t}revisions WHERE item_id=? ORDER BY seq"
        return [(str(t), float(c)) for t, c in self._run(sql, (item_id,))]
