"""The schema lamina keeps in a PostgreSQL database: the schema ``lamina`` as migrations
(:data:`MIGRATIONS`, each applied once, recorded in ``lamina.migrations``), the database's write
lock and the ``NOTIFY`` channel a write announces its users on (:func:`notice_payload`).
:class:`~lamina.memory.store.postgres.PostgresStore` applies and uses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from .notestore import PG_NOTES_SCHEMA
from .pgvectors import archive_vectors
from .protocol import ITEM_COLUMNS

__all__ = ["PG_SCHEMA_VERSION", "MIGRATIONS", "WRITE_LOCK", "CHANNEL", "notice_payload"]


#: The database's write lock (an advisory lock key; advisory locks are per database).
WRITE_LOCK = 0x6C616D696E61  # "lamina"


#: The ``NOTIFY`` channel a write announces its users on (channels are per database, as the lock).
CHANNEL = "lamina_changes"


_MAX_PAYLOAD = 7999  # bytes PostgreSQL takes in a NOTIFY payload (8000 with the terminator)


def notice_payload(version: int, user_id: str) -> str:
    """A write's ``NOTIFY`` payload for one user: ``"<version> <user_id>"``; just
    ``"<version>"`` when the user id does not fit (a listener then treats every user as moved)."""
    p = f"{version} {user_id}"
    return p if len(p.encode()) <= _MAX_PAYLOAD else str(version)


_ITEM_TYPES = {
    "id": "BIGINT NOT NULL",
    "user_id": "TEXT NOT NULL",
    "session_id": "TEXT",
    "layer": "TEXT NOT NULL",
    "kind": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",
    "text": "TEXT NOT NULL",
    "summary": "TEXT",
    "speaker": "TEXT",
    "source_id": "TEXT",
    "sources": "TEXT NOT NULL",
    "members": "TEXT NOT NULL",
    "embedding": "BYTEA NOT NULL",
    "created_at": "DOUBLE PRECISION",
    "timestamp": "DOUBLE PRECISION",
    "last_access": "DOUBLE PRECISION",
    "access_count": "BIGINT NOT NULL",
    "interaction_len": "DOUBLE PRECISION NOT NULL",
    "strength": "DOUBLE PRECISION NOT NULL",
    "domain": "TEXT",
    "commitment": "TEXT NOT NULL",
    "subject": "TEXT",
    "predicate": "TEXT",
    "object": "TEXT",
    "valid_from": "DOUBLE PRECISION",
    "valid_to": "DOUBLE PRECISION",
    "superseded_by": "BIGINT",
    "parent_id": "BIGINT",
    "depth": "BIGINT NOT NULL",
    "seq": "BIGINT NOT NULL",
    "decay_mark": "BIGINT",
    "metadata": "TEXT NOT NULL DEFAULT '{}'",
}


assert tuple(_ITEM_TYPES) == ITEM_COLUMNS

_ITEMS = ", ".join(f'"{c}" {t}' for c, t in _ITEM_TYPES.items())


Conn = psycopg.Connection[tuple[Any, ...]]


#: A migration step: a statement, or a function run on the connection inside the migration's
#: transaction (it returns False when the migration cannot apply yet: nothing of it is kept, and
#: it is tried again at the next open).
Step = str | Callable[[Conn], bool]


#: (version, name, steps): applied in order, each once, recorded in ``lamina.migrations``.
MIGRATIONS: tuple[tuple[int, str, tuple[Step, ...]], ...] = (
    (
        1,
        "initial schema: meta, users, sessions, items, revisions, the change log",
        (
            "CREATE TABLE lamina.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE lamina.users (user_id TEXT PRIMARY KEY, ns BIGINT NOT NULL,"
            " drift_total DOUBLE PRECISION NOT NULL DEFAULT 0, drift_last DOUBLE PRECISION NOT NULL DEFAULT 0,"
            " drift_updates BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0,"
            " born BIGINT NOT NULL DEFAULT 0, decays BIGINT NOT NULL DEFAULT 0)",
            # (namespace indexes are unique; under Citus the index goes: next_user_index runs under the write lock)
            "CREATE UNIQUE INDEX users_ns ON lamina.users (ns)",
            "CREATE INDEX users_version ON lamina.users (version)",
            "CREATE TABLE lamina.sessions (user_id TEXT NOT NULL, session_id TEXT NOT NULL, status TEXT NOT NULL,"
            " started_at DOUBLE PRECISION, ended_at DOUBLE PRECISION, ends BIGINT NOT NULL DEFAULT 0,"
            " PRIMARY KEY (user_id, session_id))",
            f"CREATE TABLE lamina.items ({_ITEMS}, version BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (user_id, id))",
            "CREATE INDEX items_id ON lamina.items (id)",
            "CREATE INDEX items_user_seq ON lamina.items (user_id, seq)",
            "CREATE INDEX items_user_version ON lamina.items (user_id, version)",
            "CREATE TABLE lamina.revisions (user_id TEXT NOT NULL, item_id BIGINT NOT NULL, seq BIGINT NOT NULL,"
            " text TEXT NOT NULL, changed_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (user_id, item_id, seq))",
            "CREATE INDEX revisions_item ON lamina.revisions (item_id)",
            "CREATE TABLE lamina.tombstones (user_id TEXT NOT NULL, version BIGINT NOT NULL, item_id BIGINT NOT NULL)",
            "CREATE INDEX tombstones_user ON lamina.tombstones (user_id, version)",
            "CREATE TABLE lamina.gone_users (ns BIGINT NOT NULL, version BIGINT NOT NULL)",
            "CREATE INDEX gone_users_version ON lamina.gone_users (version)",
            "CREATE SEQUENCE lamina.item_seq AS BIGINT START 1",
        ),
    ),
    (2, "archive vectors in pgvector: items.vec (a turn's embedding as a vector)", (archive_vectors,)),
    (3, "A-Mem notes of turns, their revisions and links", PG_NOTES_SCHEMA),
    (
        4,
        "items.metadata: the caller's metadata of an item, a JSON object",
        ("ALTER TABLE lamina.items ADD COLUMN IF NOT EXISTS metadata TEXT NOT NULL DEFAULT '{}'",),
    ),
)


PG_SCHEMA_VERSION = MIGRATIONS[-1][0]
