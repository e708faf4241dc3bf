"""The :class:`~lamina.memory.store.protocol.Store` protocol on PostgreSQL: :class:`PostgresStore`.

``lamina.Memory("postgresql://user@host/db")`` opens one (extra ``lamina[postgres]``: psycopg 3).
Several handles — processes, uvicorn workers, hosts — share one database the way several
processes share one SQLite file: each keeps its in-memory state (records, arenas, trees) and
catches up with the others' writes through the same change log (``items.version``,
``tombstones``, ``gone_users``, per-user ``users.version``; see :mod:`lamina.memory.store.sqlite`).

Layout. Everything lives in the schema ``lamina`` (so it can share a database with other
applications). The schema is built by numbered migrations recorded in ``lamina.migrations``
(version, name, time applied), applied in order under the write lock when a handle opens; a
database with a migration newer than this lamina knows is refused. Every per-user table carries
``user_id`` and has it first in its primary key; no table references another (no cross-user
foreign keys), so the per-user tables can be distributed by ``user_id`` (Citus; see the README).
Item ids come from the sequence ``lamina.item_seq`` (tagged with the database's tag like the
SQLite ids): a rolled-back write burns its ids rather than handing them out again.

Writes. Every write is one transaction that first takes the database's write lock, a
transaction-level advisory lock (``pg_advisory_xact_lock``), like SQLite's ``BEGIN IMMEDIATE``:
the :class:`Store` protocol's transaction does not know which users it will touch (a write
first catches up with every other writer, then its stages choose the users), and write numbers
are database-wide and must commit in order for a handle's high-water mark
(:meth:`PostgresStore.moved_since`) to miss nothing, so the lock is database-wide, not per user.
It waits at most ``busy_timeout`` seconds (``lock_timeout``) and then raises
:class:`~lamina.errors.StoreBusy`. Writes run at READ COMMITTED (each statement sees what
committed before the lock was granted); reads (:meth:`PostgresStore.read_tx`) at REPEATABLE READ,
one snapshot for the whole catch-up.

Notices. Each write also sends, inside its transaction, one ``NOTIFY`` per user it touched on
the channel :data:`CHANNEL` (payload ``"<write number> <user_id>"``, :func:`notice_payload`);
PostgreSQL delivers them at commit and drops them on rollback. Handles that listen
(:mod:`lamina.memory.store.pgnotify`) catch those users up in the background; the write number check
before every call stays the guard.

The archive in pgvector. Migration 2 (applied when the ``vector`` extension is available and
this role may create it; otherwise skipped and tried again at the next open) adds ``items.vec``,
each turn's embedding as a pgvector ``vector`` beside the ``bytea`` (which the handles load:
it is the faster format to read), filled from the stored embeddings. Writes keep the two equal.
A user's archive past ``MemoryConfig.pgvector_threshold`` rows gets a partial HNSW index of its
own (:meth:`PostgresStore.build_archive_index`: ``CREATE INDEX CONCURRENTLY`` over the rows
already stored, the bulk build; then PostgreSQL inserts each new row), searched by
:meth:`PostgresStore.archive_search` with the same cosine as the arenas, approximately.

Deletion. Rows are deleted in the write's transaction and are never served again by any handle
(the change log carries the tombstones). :meth:`PostgresStore.forget` then runs ``VACUUM`` on
the tables a delete touches, so no dead tuple or index entry of a deleted row survives in the
live pages. Unlike the SQLite store it does not guarantee that no byte of a deleted row remains
in the cluster's files: PostgreSQL does not zero freed space, and its write-ahead log (and any
archive, replica or backup of it) keeps the rows until recycled.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from ...errors import InvalidInput, StoreBusy
from .dburl import is_postgres_url, redact_url
from .notestore import PostgresNotes
from .pgschema import _ITEM_TYPES, CHANNEL, MIGRATIONS, PG_SCHEMA_VERSION, WRITE_LOCK, notice_payload
from .pgvectors import ArchiveIndexes, archive_index_name, vector_text
from .protocol import ID_SHIFT, ITEM_COLUMNS, SessionRow, UserRow, _decode, _enc

__all__ = ["PostgresStore", "vector_text", "archive_index_name"]

_log = logging.getLogger("lamina")


class PostgresStore(ArchiveIndexes, PostgresNotes):
    """One PostgreSQL database (schema ``lamina``) through one connection. Not thread-safe by
    itself: ``Memory`` serialises all calls.

    Parameters
    ----------
    url : str
        A libpq connection URL (``postgresql://user:password@host:port/dbname``; a unix socket:
        ``postgresql:///dbname?host=/run/postgresql``).
    busy_timeout : float
        Seconds a write waits for another connection's write lock before it raises
        :class:`~lamina.errors.StoreBusy`.
    """

    def __init__(self, url: str, busy_timeout: float = 30.0) -> None:
        if not is_postgres_url(url):
            raise ValueError(f"url must start with postgresql:// or postgres://, got {redact_url(str(url))!r}")
        if not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
        self.url = url
        self.path: str | None = redact_url(url)
        self.busy_timeout = float(busy_timeout)
        self.conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(url, autocommit=True)
        self._in_tx = False
        self._write_no: int | None = None
        self._own: set[int] = set()  # write numbers this connection committed (data_version skips them)
        self.vectors = False  # items.vec exists (migration 2: pgvector)
        self._index_state: dict[str, bool] = {}  # user -> its archive index is valid (cache)
        self._builds: set[str] = set()  # users whose archive index a thread of this store builds
        self._guard = threading.Lock()
        self._ef_search: int | None = None  # the session's hnsw.ef_search, when this store set it
        try:
            self._set_lock_timeout(self.busy_timeout)
            self._migrate()
            self.tag = int(self.get_meta("db_tag") or 0)
        except BaseException:
            self.conn.close()
            raise

    def _set_lock_timeout(self, seconds: float) -> None:
        # (0 would mean "wait forever" to PostgreSQL: the shortest wait it takes is 1 ms)
        self.conn.execute(f"SET lock_timeout = {max(1, int(seconds * 1000))}")

    def _migrate(self) -> None:
        """Apply the migrations this database lacks (under the write lock: one opener does)."""
        with self.tx():
            self.conn.execute("CREATE SCHEMA IF NOT EXISTS lamina")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS lamina.migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            done = {int(r[0]) for r in self.conn.execute("SELECT version FROM lamina.migrations")}
            newest = max(done, default=0)
            if newest > PG_SCHEMA_VERSION:
                raise ValueError(
                    f"database schema version {newest} is not supported (expected {PG_SCHEMA_VERSION}); "
                    "it was written by a newer lamina"
                )
            for version, name, steps in MIGRATIONS:
                if version in done:
                    continue
                self.conn.execute("SAVEPOINT lamina_migration")
                applied = True
                for step in steps:
                    if isinstance(step, str):
                        self.conn.execute(step)
                    elif not step(self.conn):
                        applied = False
                        break
                if not applied:  # (tried again at the next open; later migrations wait for it)
                    self.conn.execute("ROLLBACK TO SAVEPOINT lamina_migration")
                    break
                self.conn.execute("RELEASE SAVEPOINT lamina_migration")
                self.conn.execute("INSERT INTO lamina.migrations(version, name) VALUES (%s, %s)", (version, name))
                done.add(version)
            if self.get_meta("db_tag") is None:
                self.set_meta("db_tag", str(1 + secrets.randbelow((1 << 22) - 1)))
            self.set_meta("schema_version", str(max(done)))
            self.vectors = 2 in done

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def tx(self) -> Iterator[None]:
        """``BEGIN`` (READ COMMITTED), the database's write lock (``pg_advisory_xact_lock``,
        released at commit or rollback), ... ``COMMIT``; rolls back on any exception (and
        re-raises). Raises :class:`StoreBusy` when another connection holds the write lock for
        longer than ``busy_timeout``; a text PostgreSQL cannot store (a NUL character) raises
        :class:`~lamina.errors.InvalidInput`."""
        try:  # (one round trip: a simple query of two statements)
            self.conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITE_LOCK:d})")
        except pg_errors.LockNotAvailable as e:
            self._end("ROLLBACK")
            raise StoreBusy(
                f"{self.path}: another connection held the database's write lock for over "
                f"{self.busy_timeout:g} s (busy_timeout); nothing was written"
            ) from e
        except BaseException:
            self._end("ROLLBACK")
            raise
        self._in_tx = True
        self._write_no = None
        try:
            try:
                yield
            except psycopg.DataError as e:
                raise InvalidInput(f"{self.path}: PostgreSQL refused a value: {e}") from e
            written = self.write_numbered()
            self.conn.execute("COMMIT")
            if written is not None:
                self._own.add(written)
        except BaseException:
            self._end("ROLLBACK")
            raise
        finally:
            self._in_tx = False
            self._write_no = None

    def wrote(self, version: int) -> bool:
        """Whether this connection committed the write of that number (its own notices)."""
        return version in self._own

    def write_numbered(self) -> int | None:
        """The write number this transaction took (None: none yet)."""
        return self._write_no

    def _end(self, how: str) -> None:
        """COMMIT or ROLLBACK the open transaction, if the connection still has one."""
        if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
            self.conn.execute(how)

    @contextlib.contextmanager
    def read_tx(self) -> Iterator[None]:
        """``BEGIN ISOLATION LEVEL REPEATABLE READ`` (one snapshot, no lock) ... ``COMMIT``;
        inside a transaction already, the reads belong to it."""
        if self._in_tx:
            yield
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self._in_tx = True
        try:
            yield
        finally:
            self._in_tx = False
            self._end("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def read_snapshot(self) -> PostgresStore | None:
        """A second connection inside a REPEATABLE READ transaction whose snapshot is taken now
        (it sees every write committed before, none after, and blocks no writer); the caller
        reads through it without holding any lock and closes it."""
        conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(self.url, autocommit=True)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1 FROM lamina.meta LIMIT 1").fetchall()  # (the snapshot is taken at the first read)
        except BaseException:
            conn.close()
            raise
        reader = object.__new__(PostgresStore)
        reader.url = self.url
        reader.path = self.path
        reader.busy_timeout = self.busy_timeout
        reader.conn = conn
        reader._in_tx = True  # (read_tx inside it belongs to the snapshot)
        reader._write_no = None
        reader._own = set()
        reader.tag = self.tag
        reader.vectors = self.vectors
        reader._index_state = {}
        reader._builds = set()
        reader._guard = threading.Lock()
        reader._ef_search = None
        return reader

    # -- helpers -----------------------------------------------------------------------------
    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)

    # -- meta / ids --------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        v = self._one("SELECT value FROM lamina.meta WHERE key=%s", (key,))
        return None if v is None else str(v)

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO lamina.meta(key, value) VALUES(%s, %s) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def new_ids(self, n: int) -> list[int]:
        """n fresh item ids from the sequence (a rolled-back write does not hand its ids out again)."""
        if n <= 0:
            return []
        seqs = [
            int(r[0]) for r in self.conn.execute("SELECT nextval('lamina.item_seq') FROM generate_series(1, %s)", (n,))
        ]
        return [(self.tag << ID_SHIFT) | s for s in sorted(seqs)]

    def owns(self, item_id: int) -> bool:
        return (item_id >> ID_SHIFT) == self.tag

    # -- users / sessions --------------------------------------------------------------------
    def users(self, user_id: str | None = None) -> list[UserRow]:
        sql = "SELECT user_id, ns, drift_total, drift_last, drift_updates, decays FROM lamina.users"
        cur = (
            self.conn.execute(sql + " ORDER BY ns")
            if user_id is None
            else self.conn.execute(sql + " WHERE user_id=%s", (user_id,))
        )
        return [(str(u), int(ns), float(t), float(last), int(n), int(d)) for u, ns, t, last, n, d in cur]

    def user_versions(self, user_id: str | None = None) -> dict[str, int]:
        sql = "SELECT user_id, version FROM lamina.users"
        cur = self.conn.execute(sql) if user_id is None else self.conn.execute(sql + " WHERE user_id=%s", (user_id,))
        return {str(u): int(v) for u, v in cur}

    def item_user(self, item_id: int) -> str | None:
        v = self._one("SELECT user_id FROM lamina.items WHERE id=%s", (item_id,))
        return None if v is None else str(v)

    def item_counts(self, user_ids: list[str]) -> dict[str, int]:
        cur = self.conn.execute(
            "SELECT user_id, COUNT(*) FROM lamina.items WHERE user_id = ANY(%s) GROUP BY user_id",
            (list(user_ids),),
        )
        return {str(u): int(n) for u, n in cur}

    def write_number(self) -> int:
        """This transaction's write number (allocated on first use: the database's next one;
        the write lock makes write numbers commit in order)."""
        if self._write_no is None:
            self._write_no = int(
                self._one(
                    "INSERT INTO lamina.meta(key, value) VALUES('write_seq', '1') ON CONFLICT(key)"
                    " DO UPDATE SET value=(lamina.meta.value::BIGINT + 1)::TEXT RETURNING value"
                )
            )
        return self._write_no

    def last_write(self) -> int:
        return int(self.get_meta("write_seq") or 0)

    def bump_versions(self, user_ids: Iterable[str]) -> dict[str, int]:
        uids = sorted(set(user_ids))
        if not uids:
            return {}
        n = self.write_number()
        found = self.conn.execute(
            "UPDATE lamina.users SET version=%s WHERE user_id = ANY(%s) RETURNING user_id", (n, uids)
        ).fetchall()
        # every touched user (one deleted by this write too) announced to the listening handles;
        # PostgreSQL delivers the notices when (and only if) the transaction commits
        self.conn.execute(
            "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (CHANNEL, [notice_payload(n, u) for u in uids])
        )
        return {str(r[0]): n for r in sorted(found)}  # (a user deleted by this write has none)

    def next_user_index(self) -> int:
        return int(self._one("SELECT COALESCE(MAX(ns), 0) + 1 FROM lamina.users"))

    def data_version(self) -> int:
        """The database's last write number, not counting this connection's own writes on top
        (as SQLite's ``PRAGMA data_version``: it moves only when another connection commits)."""
        v = self.last_write()
        while v in self._own:
            v -= 1
        self._own = {w for w in self._own if w > v}  # (a later read never walks below v)
        return v

    def add_user(self, user_id: str, ns: int) -> None:
        self.conn.execute(
            "INSERT INTO lamina.users(user_id, ns, born) VALUES(%s, %s, %s)", (user_id, ns, self.write_number())
        )

    def user_born(self, user_id: str) -> int | None:
        v = self._one("SELECT born FROM lamina.users WHERE user_id=%s", (user_id,))
        return None if v is None else int(v)

    def moved_since(self, version: int) -> tuple[dict[str, int], set[int]]:
        moved = {
            str(u): int(v)
            for u, v in self.conn.execute("SELECT user_id, version FROM lamina.users WHERE version > %s", (version,))
        }
        gone = {int(r[0]) for r in self.conn.execute("SELECT ns FROM lamina.gone_users WHERE version > %s", (version,))}
        return moved, gone

    def set_decays(self, user_id: str, decays: int) -> None:
        self.conn.execute("UPDATE lamina.users SET decays=%s WHERE user_id=%s", (decays, user_id))

    def set_drift(self, user_id: str, total: float, last: float, updates: int) -> None:
        self.conn.execute(
            "UPDATE lamina.users SET drift_total=%s, drift_last=%s, drift_updates=%s WHERE user_id=%s",
            (total, last, updates, user_id),
        )

    def sessions(self, user_id: str | None = None) -> list[SessionRow]:
        sql = "SELECT user_id, session_id, status, started_at, ended_at, ends FROM lamina.sessions"
        cur = (
            self.conn.execute(sql + " ORDER BY user_id, session_id")
            if user_id is None
            else self.conn.execute(sql + " WHERE user_id=%s ORDER BY session_id", (user_id,))
        )
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
        self.conn.execute(
            "INSERT INTO lamina.sessions(user_id, session_id, status, started_at, ended_at, ends)"
            " VALUES(%s,%s,%s,%s,%s,%s) ON CONFLICT(user_id, session_id) DO UPDATE SET status=excluded.status,"
            " ended_at=excluded.ended_at, ends=excluded.ends",
            (user_id, session_id, status, started_at, ended_at, ends),
        )

    # -- items -------------------------------------------------------------------------------
    def insert_items(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        cols = ",".join(f'"{c}"' for c in ITEM_COLUMNS)
        n = self.write_number()
        if not self.vectors:
            with self.conn.cursor() as cur, cur.copy(f"COPY lamina.items ({cols}, version) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(tuple(_enc(c, r[c]) for c in ITEM_COLUMNS) + (n,))
            return
        with self.conn.cursor() as cur, cur.copy(f"COPY lamina.items ({cols}, version, vec) FROM STDIN") as copy:
            for r in rows:  # (a turn's embedding also as a pgvector vector: the archive's index reads it)
                vec = vector_text(r["embedding"]) if r["kind"] == "turn" else None
                copy.write_row(tuple(_enc(c, r[c]) for c in ITEM_COLUMNS) + (n, vec))

    def update_items(self, updates: list[tuple[int, dict[str, Any]]]) -> None:
        groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for item_id, fields in updates:
            if fields:  # one statement per set of columns, run over all its rows
                for k in fields:
                    if k not in _ITEM_TYPES:
                        raise ValueError(f"unknown item column {k!r}")
                groups.setdefault(tuple(fields), []).append(tuple(_enc(k, v) for k, v in fields.items()) + (item_id,))
        if not groups:
            return
        n = self.write_number()
        for cols, rows in groups.items():
            sets = ",".join(f'"{k}"=%s' for k in cols)
            if self.vectors and "embedding" in cols:  # (a turn's vector follows its embedding)
                at = cols.index("embedding")
                sets += ", vec=CASE WHEN kind='turn' THEN %s::vector END"
                rows = [(*r[:-1], vector_text(r[at]), r[-1]) for r in rows]
            self._many(f"UPDATE lamina.items SET {sets}, version={n} WHERE id=%s", rows)

    def bump_access(self, rows: list[tuple[int, float | None, int]]) -> None:
        """(access_count, last_access, id) per row."""
        self._many("UPDATE lamina.items SET access_count=%s, last_access=%s WHERE id=%s", list(rows))

    def delete_items(self, user_id: str, ids: list[int]) -> None:
        if not ids:
            return
        n = self.write_number()
        self.conn.execute("DELETE FROM lamina.items WHERE user_id=%s AND id = ANY(%s)", (user_id, ids))
        self.conn.execute("DELETE FROM lamina.revisions WHERE user_id=%s AND item_id = ANY(%s)", (user_id, ids))
        self.delete_notes(user_id, ids)
        self._many(
            "INSERT INTO lamina.tombstones(user_id, item_id, version) VALUES(%s,%s,%s)", [(user_id, i, n) for i in ids]
        )

    def delete_user(self, user_id: str) -> None:
        ns = self._one("SELECT ns FROM lamina.users WHERE user_id=%s", (user_id,))
        for table in ("revisions", "notes", "note_revisions", "links", "items", "sessions", "users", "tombstones"):
            # (the user's item tombstones give way to one for the whole user, by namespace index)
            self.conn.execute(f"DELETE FROM lamina.{table} WHERE user_id=%s", (user_id,))
        if ns is not None:
            self.conn.execute(
                "INSERT INTO lamina.gone_users(ns, version) VALUES(%s, %s)", (int(ns), self.write_number())
            )

    def changes(self, user_id: str, since: int) -> tuple[list[dict[str, Any]], list[int]]:
        cols = ",".join(f'"{c}"' for c in ITEM_COLUMNS)
        cur = self.conn.execute(
            f"SELECT {cols} FROM lamina.items WHERE user_id=%s AND version > %s ORDER BY seq", (user_id, since)
        )
        rows = [_decode(row) for row in cur]
        dead = [
            int(r[0])
            for r in self.conn.execute(
                "SELECT item_id FROM lamina.tombstones WHERE user_id=%s AND version > %s", (user_id, since)
            )
        ]
        return rows, dead

    def forget(self) -> bool:
        """``VACUUM`` the tables deletes touch (no dead tuple or index entry of a deleted row
        stays in the live pages), without waiting on another connection's lock of them; records
        the delete generation it covered. Returns False when a lock or error stopped it (a later
        ``forget`` retries). PostgreSQL does not zero freed space, nor the rows in its
        write-ahead log: see the module's docstring."""
        try:
            gen = int(self.get_meta("wipe_gen") or 0)
            self._set_lock_timeout(0)
            try:
                self.conn.execute(
                    "VACUUM lamina.items, lamina.revisions, lamina.sessions, lamina.users,"
                    " lamina.notes, lamina.note_revisions, lamina.links"
                )
            finally:
                self._set_lock_timeout(self.busy_timeout)
            with self.tx():
                if int(self.get_meta("wiped_gen") or 0) < gen:
                    self.set_meta("wiped_gen", str(gen))
            return True
        except psycopg.Error:
            return False

    def mark_deleted(self) -> None:
        self.set_meta("wipe_gen", str(int(self.get_meta("wipe_gen") or 0) + 1))

    def wipe_pending(self) -> bool:
        gens = dict(self.conn.execute("SELECT key, value FROM lamina.meta WHERE key IN ('wipe_gen', 'wiped_gen')"))
        return int(gens.get("wipe_gen") or 0) > int(gens.get("wiped_gen") or 0)

    def load_items(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        cols = ",".join(f'"{c}"' for c in ITEM_COLUMNS)
        sql = f"SELECT {cols} FROM lamina.items"
        cur = (
            self.conn.execute(sql + " ORDER BY seq")
            if user_id is None
            else self.conn.execute(sql + " WHERE user_id=%s ORDER BY seq", (user_id,))
        )
        for row in cur:
            yield _decode(row)

    def add_revision(self, item_id: int, text: str, changed_at: float) -> None:
        # (the user key comes from the item: revisions are keyed by user like every table)
        cur = self.conn.execute(
            "INSERT INTO lamina.revisions(user_id, item_id, seq, text, changed_at)"
            " SELECT i.user_id, %s, (SELECT COUNT(*) FROM lamina.revisions r WHERE r.item_id=%s), %s, %s"
            " FROM lamina.items i WHERE i.id=%s",
            (item_id, item_id, text, changed_at, item_id),
        )
        if cur.rowcount != 1:
            raise ValueError(f"add_revision: no item {item_id} in {self.path}")

    def revisions(self, item_id: int) -> list[tuple[str, float]]:
        return [
            (str(t), float(c))
            for t, c in self.conn.execute(
                "SELECT text, changed_at FROM lamina.revisions WHERE item_id=%s ORDER BY seq", (item_id,)
            )
        ]
