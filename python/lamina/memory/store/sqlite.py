"""Persistence of :class:`lamina.Memory` on SQLite: :class:`SQLiteStore`.

With :mod:`~lamina.memory.store.postgres`, the only SQL of the memory loop.
:class:`~lamina.memory.store.protocol.Store` is what the loop needs of a backend (transactions,
meta values, ids, users, sessions, item rows, revisions); :class:`SQLiteStore` implements it on
the stdlib ``sqlite3`` in WAL mode.

The database is the source of truth: every write of the memory loop happens inside one
``BEGIN IMMEDIATE`` transaction, and the in-memory state (records, arenas, trees) is built from
it on open and after any failed write. ``path=None`` uses an in-memory database with the same
code path.

Change log: each write transaction gets the database's next write number
(:meth:`SQLiteStore.write_number`); it stamps every item row the write inserts or updates
(``items.version``), every id it deletes (a row in ``tombstones``) and every user it touches
(``users.version``); a deleted user leaves its namespace index (``gone_users``). A handle whose state of a user is at version v catches up by reading the
rows stamped after v and the tombstones after v (:meth:`SQLiteStore.changes`, indexed), not the
whole user; a user deleted (a tombstone without an item id) or created again (``users.born``
after v) is loaded afresh.

Writers in line: a write takes an exclusive ``flock(2)`` on ``<database>-lock`` (an empty file
beside the database) before ``BEGIN IMMEDIATE`` and gives it back after ``COMMIT`` /
``ROLLBACK``. SQLite's own wait for its write lock polls, sleeping up to 100 ms between tries,
so under a steady stream of writes from two processes (``lamina serve --workers 2``) the
process that has just committed takes the lock again before a sleeping one wakes: a write
waited up to a second (add p99 at 64 clients 0.5-1.2 s with two workers, 0.28 s with one;
docs/benchmarks/serving.md). A process blocked in ``flock`` is woken when the lock is given
back. The lock is advisory and only orders lamina's writers: any other writer (the ``sqlite3``
shell, an older lamina) is still kept out by SQLite's lock, as before; where the lock file
cannot be opened (a read-only folder) writes go by SQLite's lock alone. A ``fork()``ed child
closes the lock descriptors it inherited (a flock, unlike SQLite's locks, would otherwise stay
held by the child).

Durability: WAL with ``synchronous=NORMAL`` survives a killed process (kill -9) for every
committed transaction; ``synchronous="FULL"`` (``MemoryConfig.synchronous``) also survives power
loss at the cost of an fsync per commit.

Deletion forgets: the connection runs with ``PRAGMA secure_delete=ON`` (checked at open; it
overwrites deleted cells and freed pages with zeros), and :meth:`SQLiteStore.forget`, run by
``Memory`` after each committed ``delete`` / ``delete_user``, checkpoints the write-ahead log
into the database and truncates it. Where the SQLite build refuses ``secure_delete``,
``forget`` runs ``VACUUM`` first (a full rewrite without the deleted rows), so either way no copy
of a deleted row stays in the ``.db``, ``-wal`` or ``-shm`` file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .notestore import SQLITE_NOTES_SCHEMA, SQLiteNotes
from .protocol import ITEM_COLUMNS, _enc
from .sql import SQLITE, SQLStore

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

SCHEMA_VERSION = 5
# 2: users.version (the database write number of the user's last write)
# 3: the change log: items.version (the write number of the row's last change), users.born (the
#    write number that created the user) and tombstones (ids deleted by each write); the lazy α
#    decay: users.decays, sessions.ends, items.decay_mark (see lamina.memory.state.memstate.strength)
# 4: A-Mem notes of turns, their revisions and links (tables notes, note_revisions, links; created
#    by the schema's CREATE TABLE IF NOT EXISTS, empty for the turns of older stores)
# 5: items.metadata (a JSON object of the caller's metadata; '{}' for the rows of older stores)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (
  user_id TEXT PRIMARY KEY, ns INTEGER NOT NULL UNIQUE,
  drift_total REAL NOT NULL DEFAULT 0, drift_last REAL NOT NULL DEFAULT 0,
  drift_updates INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL DEFAULT 0,
  born INTEGER NOT NULL DEFAULT 0, decays INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS sessions (
  user_id TEXT NOT NULL, session_id TEXT NOT NULL, status TEXT NOT NULL,
  started_at REAL, ended_at REAL, ends INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (user_id, session_id));
CREATE TABLE IF NOT EXISTS items (
  id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, session_id TEXT, layer TEXT NOT NULL,
  kind TEXT NOT NULL, status TEXT NOT NULL, text TEXT NOT NULL, summary TEXT, speaker TEXT,
  source_id TEXT, sources TEXT NOT NULL, members TEXT NOT NULL, embedding BLOB NOT NULL,
  created_at REAL, timestamp REAL, last_access REAL, access_count INTEGER NOT NULL,
  interaction_len REAL NOT NULL, strength REAL NOT NULL, domain TEXT, commitment TEXT NOT NULL,
  subject TEXT, predicate TEXT, object TEXT, valid_from REAL, valid_to REAL,
  superseded_by INTEGER, parent_id INTEGER, depth INTEGER NOT NULL, seq INTEGER NOT NULL,
  decay_mark INTEGER, version INTEGER NOT NULL DEFAULT 0, metadata TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS items_user ON items(user_id);
CREATE INDEX IF NOT EXISTS items_user_version ON items(user_id, version);
CREATE INDEX IF NOT EXISTS users_version ON users(version);
CREATE TABLE IF NOT EXISTS tombstones (user_id TEXT NOT NULL, item_id INTEGER NOT NULL, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_user ON tombstones(user_id, version);
CREATE TABLE IF NOT EXISTS gone_users (ns INTEGER NOT NULL, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS gone_users_version ON gone_users(version);
CREATE TABLE IF NOT EXISTS revisions (
  item_id INTEGER NOT NULL, text TEXT NOT NULL, changed_at REAL NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS revisions_item ON revisions(item_id);
"""


#: The descriptors of the writers' lock file this process has open (held or waited on). A
#: child of ``fork()`` would inherit them, and an inherited descriptor holds the parent's flock
#: for the child's lifetime (SQLite's own locks are not inherited): the child closes them first.
_LOCK_FDS: set[int] = set()


def _close_lock_fds_in_child() -> None:
    for fd in tuple(_LOCK_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _LOCK_FDS.clear()


os.register_at_fork(after_in_child=_close_lock_fds_in_child)


def _close_lock_fd(fd: int) -> None:
    _LOCK_FDS.discard(fd)
    os.close(fd)


class _WriterLock:
    """The exclusive ``flock(2)`` of one database's lamina writers, across processes (see the
    module's "Writers in line"). Each :meth:`take` opens the lock file afresh, so a lock is one
    open file description's: a wait given up on (after the timeout) can finish later and let go
    of its own lock without touching another transaction's."""

    def __init__(self, path: str) -> None:
        self.path = path

    def take(self, timeout: float) -> int | None:
        """The lock, held by the returned descriptor (give it to :meth:`give`); ``None`` when
        the lock file cannot be opened (writes then go by SQLite's lock alone). Raises
        :class:`TimeoutError` when another writer held the lock for over ``timeout`` seconds."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        _LOCK_FDS.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        except OSError:
            _close_lock_fd(fd)
            return None
        # flock(2) has no timeout: a helper thread blocks in it; given up on, it closes the
        # descriptor as soon as its lock comes (or at once, if it failed)
        got = threading.Event()
        guard = threading.Lock()
        state = {"abandoned": False, "failed": False}

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                state["failed"] = True
            with guard:
                if state["abandoned"]:
                    _close_lock_fd(fd)
                    return
                got.set()

        threading.Thread(target=wait, name="lamina-sqlite-writer-lock", daemon=True).start()
        deadline = time.monotonic() + timeout
        try:
            while not got.wait(max(0.0, min(1.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    break
        finally:
            with guard:
                if not got.is_set():
                    state["abandoned"] = True
        if not got.is_set():
            raise TimeoutError(f"{self.path}: held by another writer for over {timeout:g} s")
        if state["failed"]:
            _close_lock_fd(fd)
            return None
        return fd

    @staticmethod
    def give(fd: int | None) -> None:
        """Let go of a lock :meth:`take` returned (closing its descriptor releases it)."""
        if fd is not None:
            _close_lock_fd(fd)


class SQLiteStore(SQLStore, SQLiteNotes):
    """One SQLite database (WAL mode). Not thread-safe by itself: ``Memory`` serialises all calls."""

    dialect = SQLITE

    def __init__(self, path: str | None, synchronous: str = "NORMAL", busy_timeout: float = 30.0) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if not busy_timeout >= 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
        self.path = path
        self.busy_timeout = float(busy_timeout)
        target = ":memory:" if path is None else os.fspath(path)
        self.conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout)
        if path is not None:
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise OSError(f"could not enable WAL mode on {path} (got {mode})")
        self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._ready = False
        self._in_tx = False
        self._write_no: int | None = None  # this transaction's write number, once allocated
        self._writers = None if path is None else _WriterLock(os.fspath(path) + "-lock")
        self.secure_delete = _secure_delete(self.conn)
        with self.tx():
            self.conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            v = self.get_meta("schema_version")
            if v is not None and int(v) != SCHEMA_VERSION:
                _migrate(self.conn, int(v))
            for stmt in (_SCHEMA + SQLITE_NOTES_SCHEMA).strip().split(";"):
                if stmt.strip():
                    self.conn.execute(stmt)
            if v is None:
                self.set_meta("db_tag", str(1 + secrets.randbelow((1 << 22) - 1)))
                self.set_meta("next_seq", "1")
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        self.tag = int(self.get_meta("db_tag") or 0)
        self.next_seq = int(self.get_meta("next_seq") or 1)
        self._ready = True

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def tx(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception (and re-raises).

        ``BEGIN IMMEDIATE`` takes the database's write lock (waiting up to the connection's
        timeout for another process's write to end), so the id counter is read afresh inside it:
        ids never collide between processes. Raises :class:`StoreBusy` when another connection
        holds the write lock for longer than ``busy_timeout``. On a file, lamina's writers first
        queue on the writers' lock (the module's "Writers in line"), which the transaction holds
        until its end."""
        start = time.monotonic()
        try:
            held = None if self._writers is None else self._writers.take(self.busy_timeout)
        except TimeoutError as e:
            raise self._busy() from e
        try:
            self._begin(max(0.0, self.busy_timeout - (time.monotonic() - start)))
            self._in_tx = True
            self._write_no = None
            try:
                if self._ready:
                    self.next_seq = int(self.get_meta("next_seq") or 1)
                yield
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            finally:
                self._in_tx = False
                self._write_no = None
        finally:
            _WriterLock.give(held)

    def _begin(self, timeout: float) -> None:
        """``BEGIN IMMEDIATE``, waiting at most about ``timeout`` seconds for SQLite's write lock
        (the connection's ``busy_timeout`` less what the writers' lock took, when that was over
        a millisecond)."""
        shorter = timeout < self.busy_timeout - 1e-3
        if shorter:
            self.conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise self._busy() from e
            raise
        finally:
            if shorter:
                self.conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.conn.executemany(sql, rows)

    def _end(self, how: str) -> None:
        self.conn.execute(how)

    def read_snapshot(self) -> SQLiteStore | None:
        """A read-only connection to the same file inside a read transaction whose snapshot is
        taken now (WAL mode: it sees every write committed before, none after, and blocks no
        writer); the caller reads through it without holding any lock and closes it. None for
        an in-memory database (no second connection can reach it)."""
        if self.path is None:
            return None
        uri = Path(os.fspath(self.path)).absolute().as_uri() + "?mode=ro"
        reader = self._reader(
            sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout)
        )
        reader._ready = True
        reader.secure_delete = self.secure_delete
        reader.next_seq = self.next_seq
        return reader

    # -- meta / ids --------------------------------------------------------------------------
    def new_ids(self, n: int) -> list[int]:
        """n fresh item ids (persisted with the enclosing transaction)."""
        start = self.next_seq
        self.next_seq += n
        self.set_meta("next_seq", str(self.next_seq))
        return self._tagged(list(range(start, start + n)))

    # -- users / sessions --------------------------------------------------------------------
    def item_counts(self, user_ids: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for uid in user_ids:
            row = self.conn.execute("SELECT COUNT(*) FROM items WHERE user_id=?", (uid,)).fetchone()
            if row[0]:
                out[uid] = int(row[0])
        return out

    def _next_write(self) -> int:
        # one number per write of the whole database, never reused: a user deleted and
        # created again can never come back to a version another handle still holds
        n = int(self.get_meta("write_seq") or 0) + 1
        self.set_meta("write_seq", str(n))
        return n

    def _bump(self, uids: list[str], n: int) -> dict[str, int]:
        self.conn.executemany("UPDATE users SET version=? WHERE user_id=?", [(n, u) for u in uids])
        found = {
            str(r[0])
            for r in self.conn.execute(
                f"SELECT user_id FROM users WHERE user_id IN ({','.join('?' for _ in uids)})", uids
            )
        }
        return {u: n for u in uids if u in found}  # (a user deleted by this write has none)

    def data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    # -- items -------------------------------------------------------------------------------
    def insert_items(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        cols = ",".join(ITEM_COLUMNS)
        qs = ",".join("?" for _ in ITEM_COLUMNS)
        n = self.write_number()
        self.conn.executemany(
            f"INSERT INTO items({cols},version) VALUES({qs},?)",
            [tuple(_enc(c, r[c]) for c in ITEM_COLUMNS) + (n,) for r in rows],
        )

    def delete_items(self, user_id: str, ids: list[int]) -> None:
        n = self.write_number()
        self.conn.executemany("DELETE FROM items WHERE id=?", [(i,) for i in ids])
        self.conn.executemany("DELETE FROM revisions WHERE item_id=?", [(i,) for i in ids])
        self.delete_notes(ids)
        self.conn.executemany(
            "INSERT INTO tombstones(user_id, item_id, version) VALUES(?,?,?)", [(user_id, i, n) for i in ids]
        )

    def delete_user(self, user_id: str) -> None:
        row = self.conn.execute("SELECT ns FROM users WHERE user_id=?", (user_id,)).fetchone()
        self.conn.execute("DELETE FROM revisions WHERE item_id IN (SELECT id FROM items WHERE user_id=?)", (user_id,))
        self.delete_user_notes(user_id)
        self.conn.execute("DELETE FROM items WHERE user_id=?", (user_id,))
        self.conn.execute("DELETE FROM sessions WHERE user_id=?", (user_id,))
        self.conn.execute("DELETE FROM users WHERE user_id=?", (user_id,))
        # the user's item tombstones give way to one for the whole user, by namespace index
        # (the user id itself is forgotten)
        self.conn.execute("DELETE FROM tombstones WHERE user_id=?", (user_id,))
        if row is not None:
            self.conn.execute("INSERT INTO gone_users(ns, version) VALUES(?, ?)", (int(row[0]), self.write_number()))

    def forget(self) -> bool:
        """Wipe what a committed delete left behind in the files: the deleted cells and freed
        pages are zeroed as they are deleted (``PRAGMA secure_delete=ON``, set at open; on a
        SQLite build that refuses it, a ``VACUUM`` here rewrites the database without them);
        then ``PRAGMA wal_checkpoint(TRUNCATE)`` copies the zeroed pages into the database and
        truncates the ``-wal`` file, whose older frames still hold the deleted rows. Returns
        False when the checkpoint could not finish (another connection reads the log; it is
        completed by a later ``forget`` or the last connection's close); it does not wait for
        readers. Deletes count generations in the meta table (``wipe_gen``, :meth:`mark_deleted`);
        a wipe that went through records the one it covered (``wiped_gen``)."""
        try:
            gen = int(self.get_meta("wipe_gen") or 0)
            if not self.secure_delete:
                self.conn.execute("VACUUM")
            # without waiting: a reader that holds the log would otherwise stall this write (and,
            # behind its lock, every other writer) for the whole busy timeout; a later write retries
            self.conn.execute("PRAGMA busy_timeout=0")
            try:
                busy, _log, _done = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                self.conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            if busy:
                return False
            # only the generation read before the checkpoint is covered: a delete committed
            # meanwhile (by another connection) stays pending
            self._wiped(gen)
            return True
        except sqlite3.Error:
            return False  # (a later write retries)

    def add_revision(self, item_id: int, text: str, changed_at: float) -> None:
        seq = self.conn.execute("SELECT COUNT(*) FROM revisions WHERE item_id=?", (item_id,)).fetchone()[0]
        self.conn.execute(
            "INSERT INTO revisions(item_id, text, changed_at, seq) VALUES(?,?,?,?)", (item_id, text, changed_at, seq)
        )


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a store of an older schema to :data:`SCHEMA_VERSION` (inside the open transaction)."""
    if version > SCHEMA_VERSION or version < 1:
        raise ValueError(f"database schema version {version} is not supported (expected {SCHEMA_VERSION})")
    if version < 2:  # per-user change counter
        conn.execute("ALTER TABLE users ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
    if version < 3:  # the change log (rows of older writes carry version 0: a handle that opens loads them)
        conn.execute("ALTER TABLE items ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
        conn.execute("ALTER TABLE users ADD COLUMN born INTEGER NOT NULL DEFAULT 0")
        # the lazy α decay: stored strengths of older stores are already decayed (decay_mark NULL)
        conn.execute("ALTER TABLE items ADD COLUMN decay_mark INTEGER")
        conn.execute("ALTER TABLE users ADD COLUMN decays INTEGER NOT NULL DEFAULT 0")
        conn.execute("ALTER TABLE sessions ADD COLUMN ends INTEGER NOT NULL DEFAULT 0")
    if version < 5:  # metadata of items (none for the rows of older stores)
        conn.execute("ALTER TABLE items ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")


def _secure_delete(conn: sqlite3.Connection) -> bool:
    """Turn ``secure_delete`` on (deleted content is overwritten with zeros); whether it took."""
    row = conn.execute("PRAGMA secure_delete=ON").fetchone()
    return row is not None and int(row[0]) == 1
