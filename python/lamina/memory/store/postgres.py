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
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from ...errors import InvalidInput
from .dburl import is_postgres_url, redact_url
from .notestore import PostgresNotes
from .pgschema import CHANNEL, MIGRATIONS, PG_SCHEMA_VERSION, WRITE_LOCK, notice_payload
from .pgvectors import ArchiveIndexes, archive_index_name, vector_text
from .protocol import ITEM_COLUMNS, _enc
from .sql import POSTGRES, SQLStore

__all__ = ["PostgresStore", "vector_text", "archive_index_name"]

_log = logging.getLogger("lamina")


class PostgresStore(ArchiveIndexes, PostgresNotes, SQLStore):
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

    dialect = POSTGRES
    _sessions_order = (" ORDER BY user_id, session_id", " ORDER BY session_id")

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
            raise self._busy() from e
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

    def read_snapshot(self) -> PostgresStore | None:
        """A second connection inside a REPEATABLE READ transaction whose snapshot is taken now
        (it sees every write committed before, none after, and blocks no writer); the caller
        reads through it without holding any lock and closes it."""
        conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(self.url, autocommit=True)
        reader = self._reader(conn)
        reader.url = self.url
        reader._own = set()
        reader.vectors = self.vectors
        reader._index_state = {}
        reader._builds = set()
        reader._guard = threading.Lock()
        reader._ef_search = None
        return reader

    # -- helpers -----------------------------------------------------------------------------
    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)

    # -- meta / ids --------------------------------------------------------------------------
    def new_ids(self, n: int) -> list[int]:
        """n fresh item ids from the sequence (a rolled-back write does not hand its ids out again)."""
        if n <= 0:
            return []
        seqs = [
            int(r[0]) for r in self.conn.execute("SELECT nextval('lamina.item_seq') FROM generate_series(1, %s)", (n,))
        ]
        return self._tagged(sorted(seqs))

    # -- users / sessions --------------------------------------------------------------------
    def item_counts(self, user_ids: list[str]) -> dict[str, int]:
        cur = self.conn.execute(
            "SELECT user_id, COUNT(*) FROM lamina.items WHERE user_id = ANY(%s) GROUP BY user_id",
            (list(user_ids),),
        )
        return {str(u): int(n) for u, n in cur}

    def _next_write(self) -> int:
        # (the write lock makes write numbers commit in order)
        return int(
            self._one(
                "INSERT INTO lamina.meta(key, value) VALUES('write_seq', '1') ON CONFLICT(key)"
                " DO UPDATE SET value=(lamina.meta.value::BIGINT + 1)::TEXT RETURNING value"
            )
        )

    def _bump(self, uids: list[str], n: int) -> dict[str, int]:
        found = self.conn.execute(
            "UPDATE lamina.users SET version=%s WHERE user_id = ANY(%s) RETURNING user_id", (n, uids)
        ).fetchall()
        # every touched user (one deleted by this write too) announced to the listening handles;
        # PostgreSQL delivers the notices when (and only if) the transaction commits
        self.conn.execute(
            "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (CHANNEL, [notice_payload(n, u) for u in uids])
        )
        return {str(r[0]): n for r in sorted(found)}  # (a user deleted by this write has none)

    def data_version(self) -> int:
        """The database's last write number, not counting this connection's own writes on top
        (as SQLite's ``PRAGMA data_version``: it moves only when another connection commits)."""
        v = self.last_write()
        while v in self._own:
            v -= 1
        self._own = {w for w in self._own if w > v}  # (a later read never walks below v)
        return v

    # -- items -------------------------------------------------------------------------------
    def _update_sets(self, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> tuple[str, list[tuple[Any, ...]]]:
        sets, rows = super()._update_sets(cols, rows)
        if self.vectors and "embedding" in cols:  # (a turn's vector follows its embedding)
            at = cols.index("embedding")
            sets += ", vec=CASE WHEN kind='turn' THEN %s::vector END"
            rows = [(*r[:-1], vector_text(r[at]), r[-1]) for r in rows]
        return sets, rows

    def insert_items(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        cols = self.dialect.item_columns
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
            self._wiped(gen)
            return True
        except psycopg.Error:
            return False

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
