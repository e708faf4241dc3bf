"""Where the A-Mem notes of :mod:`lamina.memory.write.notes` are stored: their rows, the part of the
store protocol that reads and writes them (:class:`NoteStore`), and its SQLite and PostgreSQL
implementations as mixins of :class:`~lamina.memory.store.sqlite.SQLiteStore` and
:class:`~lamina.memory.store.postgres.PostgresStore` (tables ``notes``, ``note_revisions``, ``links``).

Every row names its user, and is keyed by item: a note by its turn, a revision by its turn and
sequence number, a link by its newer turn (``src``) and older turn (``dst``). Notes and links are
deleted with their turn (either end of a link) and with their user.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "NoteRow",
    "NoteRevisionRow",
    "LinkRow",
    "LINK_KINDS",
    "NoteStore",
    "SQLiteNotes",
    "PostgresNotes",
    "SQLITE_NOTES_SCHEMA",
    "PG_NOTES_SCHEMA",
]

#: A note: (item id, its keywords as JSON [[start, end, name], ...] spans of its turn's text, its tags
#: as JSON {"own": [...], "gained": [...]} indices into those keywords, updated at). No row holds
#: text: a deleted turn's words can outlive it nowhere but in its own (wiped) item row.
NoteRow = tuple[int, str, str, float | None]
#: A note's earlier state: (item id, its tags then as JSON, changed at, the id of the turn that changed it).
NoteRevisionRow = tuple[int, str, float | None, int | None]
#: A link: (newer turn id, older turn id, cosine, the shared keywords as JSON spans of the newer
#: turn's text, kind, created at).
LinkRow = tuple[int, int, float, str, str, float | None]
#: A link's kinds: ``related``, or ``duplicate`` (the same speaker saying nearly the same again).
LINK_KINDS = ("related", "duplicate")

#: The SQLite tables (created by the store's schema, ``CREATE ... IF NOT EXISTS``).
SQLITE_NOTES_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
  user_id TEXT NOT NULL, item_id INTEGER PRIMARY KEY, keywords TEXT NOT NULL, tags TEXT NOT NULL, updated_at REAL);
CREATE TABLE IF NOT EXISTS note_revisions (
  user_id TEXT NOT NULL, item_id INTEGER NOT NULL, seq INTEGER NOT NULL, tags TEXT NOT NULL,
  changed_at REAL, cause INTEGER, PRIMARY KEY (item_id, seq));
CREATE TABLE IF NOT EXISTS links (
  user_id TEXT NOT NULL, src INTEGER NOT NULL, dst INTEGER NOT NULL, weight REAL NOT NULL,
  shared TEXT NOT NULL, kind TEXT NOT NULL, created_at REAL, PRIMARY KEY (src, dst));
CREATE INDEX IF NOT EXISTS links_dst ON links(dst);
"""

#: PostgreSQL migration 3: the same tables in schema ``lamina``, each keyed by user first.
PG_NOTES_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE lamina.notes (user_id TEXT NOT NULL, item_id BIGINT NOT NULL, keywords TEXT NOT NULL,"
    " tags TEXT NOT NULL, updated_at DOUBLE PRECISION, PRIMARY KEY (user_id, item_id))",
    "CREATE TABLE lamina.note_revisions (user_id TEXT NOT NULL, item_id BIGINT NOT NULL, seq BIGINT NOT NULL,"
    " tags TEXT NOT NULL, changed_at DOUBLE PRECISION, cause BIGINT, PRIMARY KEY (user_id, item_id, seq))",
    "CREATE TABLE lamina.links (user_id TEXT NOT NULL, src BIGINT NOT NULL, dst BIGINT NOT NULL,"
    " weight DOUBLE PRECISION NOT NULL, shared TEXT NOT NULL, kind TEXT NOT NULL,"
    " created_at DOUBLE PRECISION, PRIMARY KEY (user_id, src, dst))",
    "CREATE INDEX links_dst ON lamina.links (user_id, dst)",
)


class NoteStore(Protocol):
    """What :mod:`lamina.memory.write.notes` needs of a store (part of :class:`~lamina.memory.store.protocol.Store`)."""

    def put_notes(self, user_id: str, rows: list[NoteRow]) -> None:
        """Insert or replace notes of the user's turns."""
        ...

    def get_notes(self, user_id: str, ids: list[int]) -> dict[int, NoteRow]:
        """The user's stored notes of these turns (absent ids: no note)."""
        ...

    def add_note_revisions(self, user_id: str, rows: list[NoteRevisionRow]) -> None:
        """Append earlier states of notes (each after the item's earlier ones)."""
        ...

    def note_revisions(self, user_id: str, item_id: int) -> list[tuple[str, float | None, int | None]]:
        """(tags, changed at, cause) of a note's earlier states, oldest first."""
        ...

    def forget_note_history(self, user_id: str, item_id: int) -> None:
        """Delete a note's earlier states and the links its turn made (its text changed)."""
        ...

    def add_links(self, user_id: str, rows: list[LinkRow]) -> None:
        """Insert links (a pair already linked keeps its first link)."""
        ...

    def links(self, user_id: str, item_id: int) -> list[LinkRow]:
        """The user's links with this turn at either end."""
        ...

    def user_notes(self, user_id: str) -> list[NoteRow]:
        """Every note of the user, by item id (an export)."""
        ...

    def user_note_revisions(self, user_id: str) -> list[NoteRevisionRow]:
        """Every earlier state of the user's notes, by item id, each note's oldest first (an export)."""
        ...

    def user_links(self, user_id: str) -> list[LinkRow]:
        """Every link of the user, by newer turn id, then older (an export)."""
        ...


#: The user's item ids (the tables are keyed by item: the user's rows are found through its items).
_SQLITE_MINE = "(SELECT id FROM items WHERE user_id=?)"


class SQLiteNotes:
    """:class:`NoteStore` on SQLite (a mixin of :class:`~lamina.memory.store.sqlite.SQLiteStore`)."""

    conn: Any  # (the store's sqlite3 connection)

    def put_notes(self, user_id: str, rows: list[NoteRow]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO notes(user_id, item_id, keywords, tags, updated_at) VALUES(?,?,?,?,?)",
            [(user_id, *r) for r in rows],
        )

    def get_notes(self, user_id: str, ids: list[int]) -> dict[int, NoteRow]:
        out: dict[int, NoteRow] = {}
        for lo in range(0, len(ids), 500):
            part = ids[lo : lo + 500]
            sql = (
                "SELECT item_id, keywords, tags, updated_at FROM notes"
                f" WHERE user_id=? AND item_id IN ({','.join('?' * len(part))})"
            )
            for i, kw, tags, at in self.conn.execute(sql, (user_id, *part)):
                out[int(i)] = (int(i), str(kw), str(tags), at)
        return out

    def add_note_revisions(self, user_id: str, rows: list[NoteRevisionRow]) -> None:
        for item_id, tags, at, cause in rows:
            self.conn.execute(
                "INSERT INTO note_revisions(user_id, item_id, seq, tags, changed_at, cause)"
                " SELECT ?, ?, COALESCE(MAX(seq) + 1, 0), ?, ?, ? FROM note_revisions WHERE item_id=?",
                (user_id, item_id, tags, at, cause, item_id),
            )

    def note_revisions(self, user_id: str, item_id: int) -> list[tuple[str, float | None, int | None]]:
        sql = "SELECT tags, changed_at, cause FROM note_revisions WHERE user_id=? AND item_id=? ORDER BY seq"
        return [(str(t), a, k) for t, a, k in self.conn.execute(sql, (user_id, item_id))]

    def forget_note_history(self, user_id: str, item_id: int) -> None:
        self.conn.execute("DELETE FROM note_revisions WHERE item_id=?", (item_id,))
        self.conn.execute("DELETE FROM links WHERE src=?", (item_id,))

    def add_links(self, user_id: str, rows: list[LinkRow]) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO links(user_id, src, dst, weight, shared, kind, created_at) VALUES(?,?,?,?,?,?,?)",
            [(user_id, *r) for r in rows],
        )

    def links(self, user_id: str, item_id: int) -> list[LinkRow]:
        sql = (
            "SELECT src, dst, weight, shared, kind, created_at FROM links WHERE user_id=? AND src=?"
            " UNION ALL SELECT src, dst, weight, shared, kind, created_at FROM links WHERE user_id=? AND dst=?"
        )
        return [
            (int(s), int(d), float(w), str(sh), str(k), at)
            for s, d, w, sh, k, at in self.conn.execute(sql, (user_id, item_id, user_id, item_id))
        ]

    def user_notes(self, user_id: str) -> list[NoteRow]:
        sql = (
            "SELECT item_id, keywords, tags, updated_at FROM notes"
            f" WHERE item_id IN {_SQLITE_MINE} AND user_id=? ORDER BY item_id"
        )
        return [(int(i), str(kw), str(t), at) for i, kw, t, at in self.conn.execute(sql, (user_id, user_id))]

    def user_note_revisions(self, user_id: str) -> list[NoteRevisionRow]:
        sql = (
            "SELECT item_id, tags, changed_at, cause FROM note_revisions"
            f" WHERE item_id IN {_SQLITE_MINE} AND user_id=? ORDER BY item_id, seq"
        )
        return [
            (int(i), str(t), at, None if k is None else int(k))
            for i, t, at, k in self.conn.execute(sql, (user_id, user_id))
        ]

    def user_links(self, user_id: str) -> list[LinkRow]:
        sql = (
            "SELECT src, dst, weight, shared, kind, created_at FROM links"
            f" WHERE src IN {_SQLITE_MINE} AND user_id=? ORDER BY src, dst"
        )
        return [
            (int(s), int(d), float(w), str(sh), str(k), at)
            for s, d, w, sh, k, at in self.conn.execute(sql, (user_id, user_id))
        ]

    def delete_notes(self, ids: list[int]) -> None:
        """Delete the notes, revisions and links (either end) of these items."""
        for lo in range(0, len(ids), 500):  # (notes and links: by their keys, one statement per table)
            part = ids[lo : lo + 500]
            marks = ",".join("?" * len(part))
            for sql in (
                f"DELETE FROM notes WHERE item_id IN ({marks})",
                f"DELETE FROM note_revisions WHERE item_id IN ({marks})",
                f"DELETE FROM links WHERE src IN ({marks})",
                f"DELETE FROM links WHERE dst IN ({marks})",
            ):
                self.conn.execute(sql, part)

    def delete_user_notes(self, user_id: str) -> None:
        """Delete a user's notes, revisions and links (before its items: they are found through them)."""
        # (every link's src is one of the user's turns, and so is every note's item)
        mine = _SQLITE_MINE
        for sql in (
            f"DELETE FROM notes WHERE item_id IN {mine}",
            f"DELETE FROM note_revisions WHERE item_id IN {mine}",
            f"DELETE FROM links WHERE src IN {mine}",
        ):
            self.conn.execute(sql, (user_id,))


class PostgresNotes:
    """:class:`NoteStore` on PostgreSQL (a mixin of :class:`~lamina.memory.store.postgres.PostgresStore`)."""

    conn: Any  # (the store's psycopg connection)

    def _many(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...

    def put_notes(self, user_id: str, rows: list[NoteRow]) -> None:
        self._many(
            "INSERT INTO lamina.notes(user_id, item_id, keywords, tags, updated_at) VALUES(%s,%s,%s,%s,%s)"
            " ON CONFLICT (user_id, item_id) DO UPDATE SET keywords=EXCLUDED.keywords, tags=EXCLUDED.tags,"
            " updated_at=EXCLUDED.updated_at",
            [(user_id, *r) for r in rows],
        )

    def get_notes(self, user_id: str, ids: list[int]) -> dict[int, NoteRow]:
        cur = self.conn.execute(
            "SELECT item_id, keywords, tags, updated_at FROM lamina.notes WHERE user_id=%s AND item_id = ANY(%s)",
            (user_id, ids),
        )
        return {int(i): (int(i), str(kw), str(t), at) for i, kw, t, at in cur}

    def add_note_revisions(self, user_id: str, rows: list[NoteRevisionRow]) -> None:
        for item_id, tags, at, cause in rows:
            self.conn.execute(
                "INSERT INTO lamina.note_revisions(user_id, item_id, seq, tags, changed_at, cause)"
                " SELECT %s, %s, COALESCE(MAX(seq) + 1, 0), %s, %s, %s FROM lamina.note_revisions"
                " WHERE user_id=%s AND item_id=%s",
                (user_id, item_id, tags, at, cause, user_id, item_id),
            )

    def note_revisions(self, user_id: str, item_id: int) -> list[tuple[str, float | None, int | None]]:
        cur = self.conn.execute(
            "SELECT tags, changed_at, cause FROM lamina.note_revisions WHERE user_id=%s AND item_id=%s ORDER BY seq",
            (user_id, item_id),
        )
        return [(str(t), a, None if k is None else int(k)) for t, a, k in cur]

    def forget_note_history(self, user_id: str, item_id: int) -> None:
        self.conn.execute("DELETE FROM lamina.note_revisions WHERE user_id=%s AND item_id=%s", (user_id, item_id))
        self.conn.execute("DELETE FROM lamina.links WHERE user_id=%s AND src=%s", (user_id, item_id))

    def add_links(self, user_id: str, rows: list[LinkRow]) -> None:
        self._many(
            "INSERT INTO lamina.links(user_id, src, dst, weight, shared, kind, created_at)"
            " VALUES(%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
            [(user_id, *r) for r in rows],
        )

    def links(self, user_id: str, item_id: int) -> list[LinkRow]:
        cur = self.conn.execute(
            "SELECT src, dst, weight, shared, kind, created_at FROM lamina.links"
            " WHERE user_id=%s AND (src=%s OR dst=%s)",
            (user_id, item_id, item_id),
        )
        return [(int(s), int(d), float(w), str(sh), str(k), at) for s, d, w, sh, k, at in cur]

    def user_notes(self, user_id: str) -> list[NoteRow]:
        cur = self.conn.execute(
            "SELECT item_id, keywords, tags, updated_at FROM lamina.notes WHERE user_id=%s ORDER BY item_id",
            (user_id,),
        )
        return [(int(i), str(kw), str(t), at) for i, kw, t, at in cur]

    def user_note_revisions(self, user_id: str) -> list[NoteRevisionRow]:
        cur = self.conn.execute(
            "SELECT item_id, tags, changed_at, cause FROM lamina.note_revisions WHERE user_id=%s ORDER BY item_id, seq",
            (user_id,),
        )
        return [(int(i), str(t), at, None if k is None else int(k)) for i, t, at, k in cur]

    def user_links(self, user_id: str) -> list[LinkRow]:
        cur = self.conn.execute(
            "SELECT src, dst, weight, shared, kind, created_at FROM lamina.links WHERE user_id=%s ORDER BY src, dst",
            (user_id,),
        )
        return [(int(s), int(d), float(w), str(sh), str(k), at) for s, d, w, sh, k, at in cur]

    def delete_notes(self, user_id: str, ids: list[int]) -> None:
        """Delete the notes, revisions and links (either end) of these items of the user."""
        for table in ("notes", "note_revisions"):
            self.conn.execute(f"DELETE FROM lamina.{table} WHERE user_id=%s AND item_id = ANY(%s)", (user_id, ids))
        self.conn.execute(
            "DELETE FROM lamina.links WHERE user_id=%s AND (src = ANY(%s) OR dst = ANY(%s))", (user_id, ids, ids)
        )
