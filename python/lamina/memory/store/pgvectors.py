"""pgvector on PostgreSQL: the archive vectors' column (migration 2 of
:mod:`~lamina.memory.store.postgres`), the text form of a vector, and the per-user HNSW indexes over
the archive (:class:`ArchiveIndexes`, a part of :class:`~lamina.memory.store.postgres.PostgresStore`):
their names, a background bulk build, validity, and the approximate search."""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

__all__ = ["ArchiveIndexes", "archive_index_name", "archive_vectors", "vector_text"]

_log = logging.getLogger("lamina")


def vector_text(v: npt.NDArray[np.float32] | bytes) -> str:
    """A float32 vector (or its bytes) as pgvector's text input, ``[x,y,...]`` (each value's
    shortest repr: pgvector reads back the same float32)."""
    x = np.frombuffer(v, dtype=np.float32) if isinstance(v, bytes) else np.asarray(v, dtype=np.float32)
    return "[" + ",".join(map(repr, x.tolist())) + "]"


def archive_index_name(user_id: str) -> str:
    """The name of a user's pgvector HNSW index over its archive (by a hash of the user id, so
    a user deleted and created again finds it)."""
    return "items_archive_" + hashlib.sha256(user_id.encode()).hexdigest()[:24]


def archive_vectors(conn: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """Migration 2: the pgvector column ``items.vec`` (a copy of each turn's embedding as a
    ``vector``), filled from the stored ``bytea`` embeddings. Needs the ``vector`` extension:
    without it (not installed, or this role may not create it) nothing is kept and the archive
    stays searched in the handles' native arenas."""
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone() is None:
        _log.warning("lamina: PostgreSQL has no pgvector extension; the archive is searched in the handles' arenas")
        return False
    conn.execute("SAVEPOINT lamina_vector")
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as e:
        conn.execute("ROLLBACK TO SAVEPOINT lamina_vector")
        _log.warning("lamina: cannot create the pgvector extension (%s); the archive stays in the arenas", e)
        return False
    conn.execute("RELEASE SAVEPOINT lamina_vector")
    conn.execute("ALTER TABLE lamina.items ADD COLUMN vec vector")
    # (the existing turns' embeddings, copied in batches through a temporary table)
    conn.execute("CREATE TEMPORARY TABLE lamina_vec (id BIGINT PRIMARY KEY, vec vector) ON COMMIT DROP")
    with conn.cursor(name="lamina_turns") as cur:
        cur.execute("SELECT id, embedding FROM lamina.items WHERE kind='turn'")
        while True:
            rows = cur.fetchmany(2000)
            if not rows:
                break
            with conn.cursor() as w, w.copy("COPY lamina_vec (id, vec) FROM STDIN") as copy:
                for i, emb in rows:
                    copy.write_row((i, vector_text(bytes(emb))))
    conn.execute("UPDATE lamina.items i SET vec = v.vec FROM lamina_vec v WHERE i.id = v.id")
    return True


class ArchiveIndexes:
    """The per-user pgvector HNSW indexes over the archive, on the store's connection (the
    attributes below are the store's: :class:`~lamina.memory.store.postgres.PostgresStore` sets them)."""

    url: str
    path: str | None
    conn: psycopg.Connection[tuple[Any, ...]]
    vectors: bool  # items.vec exists (migration 2)
    _in_tx: bool
    _index_state: dict[str, bool]  # user -> its archive index is valid (cache)
    _builds: set[str]  # users whose archive index a thread of this store builds
    _guard: threading.Lock
    _ef_search: int | None  # the session's hnsw.ef_search, when this store set it

    def archive_index_ready(self, user_id: str) -> bool | None:
        """Whether the user's archive HNSW index exists and is valid (True), is missing or not
        yet valid (False); None when this database has no pgvector column. Cached once valid."""
        if not self.vectors:
            return None
        if self._index_state.get(user_id):
            return True
        row = self.conn.execute(
            "SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = to_regclass(%s)",
            ("lamina." + archive_index_name(user_id),),
        ).fetchone()
        ok = bool(row and row[0])
        if ok:
            self._index_state[user_id] = True
        return ok

    def build_archive_index(self, user_id: str, dim: int, m: int = 16, ef_construction: int = 64) -> None:
        """Build the user's archive HNSW index (``CREATE INDEX CONCURRENTLY``: writers go on) in a
        daemon thread on a connection of its own, over the rows stored now — a bulk build, far
        faster than inserting row by row into an indexed table; rows written later are inserted
        into it by PostgreSQL. A partial index (that user's active archive rows), so a search
        reads one user's graph whatever the other users hold. Returns at once; a second call
        while a build of this store runs does nothing. An invalid index (a failed build) is
        dropped first."""
        if not self.vectors:
            raise ValueError(f"{self.path}: no pgvector column (migration 2 not applied)")
        with self._guard:
            if user_id in self._builds:
                return
            self._builds.add(user_id)
        name = archive_index_name(user_id)
        stmt = sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON lamina.items USING hnsw ((vec::vector({dim}))"
            " vector_cosine_ops) WITH (m = {m}, ef_construction = {efc})"
            " WHERE user_id = {uid} AND layer = 'archive' AND status = 'active'"
        ).format(
            name=sql.Identifier(name),
            dim=sql.Literal(int(dim)),
            m=sql.Literal(int(m)),
            efc=sql.Literal(int(ef_construction)),
            uid=sql.Literal(user_id),
        )

        def build() -> None:
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = to_regclass(%s)", ("lamina." + name,)
                    ).fetchone()
                    # (the graph is built in memory: a build past maintenance_work_mem is many times slower)
                    conn.execute("SET maintenance_work_mem = '512MB'")
                    if row is not None and not row[0]:
                        conn.execute(
                            sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS lamina.{}").format(sql.Identifier(name))
                        )
                    conn.execute(stmt)
            except psycopg.Error as e:
                _log.warning("lamina: building the archive index of a user failed: %s", e)
            finally:
                with self._guard:
                    self._builds.discard(user_id)

        threading.Thread(target=build, name="lamina-archive-index", daemon=True).start()

    def building(self) -> set[str]:
        """Users whose archive index a thread of this store is building now."""
        with self._guard:
            return set(self._builds)

    def archive_search(
        self, user_id: str, q: npt.NDArray[np.float32], k: int, ef_search: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The user's ``k`` active archive rows nearest ``q`` by cosine through its HNSW index
        (approximate: ``ef_search`` candidates, ``hnsw.ef_search``): (cosines, float32; item
        ids), best first. Only the index's rows: call it when :meth:`archive_index_ready`."""
        dim = int(q.shape[-1])
        qt = vector_text(np.ascontiguousarray(q, dtype=np.float32).reshape(-1))
        ef = max(int(ef_search), int(k))
        if ef != self._ef_search:  # (a session setting: set when it changes)
            self.conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef)))
            self._ef_search = ef if not self._in_tx else None
        stmt = sql.SQL(
            "SELECT id, vec::vector({dim}) <=> %s::vector({dim}) AS d FROM lamina.items"
            " WHERE user_id = {uid} AND layer = 'archive' AND status = 'active'"
            " ORDER BY vec::vector({dim}) <=> %s::vector({dim}) LIMIT %s"
        ).format(dim=sql.Literal(dim), uid=sql.Literal(user_id))
        rows = self.conn.execute(stmt, (qt, qt, int(k))).fetchall()
        ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
        cos = np.array([1.0 - float(r[1]) for r in rows], dtype=np.float32)
        return cos, ids
