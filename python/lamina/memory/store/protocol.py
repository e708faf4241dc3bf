"""What the memory loop needs of a backend: the :class:`Store` protocol (transactions, meta values,
ids, users, sessions, item rows, revisions, the change log), the columns of an item row and how
they are encoded, and item ids. :mod:`~lamina.memory.store.sqlite` and
:mod:`~lamina.memory.store.postgres` implement it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from .notestore import NoteStore

__all__ = ["Store", "ITEM_COLUMNS", "ID_SHIFT", "seq_of"]


ID_SHIFT = 40  # item id = (database tag << 40) | sequence number


def seq_of(item_id: int) -> int:
    """The sequence number of an item id (its low ``ID_SHIFT`` bits)."""
    return item_id & ((1 << ID_SHIFT) - 1)


ITEM_COLUMNS = (
    "id",
    "user_id",
    "session_id",
    "layer",
    "kind",
    "status",
    "text",
    "summary",
    "speaker",
    "source_id",
    "sources",
    "members",
    "embedding",
    "created_at",
    "timestamp",
    "last_access",
    "access_count",
    "interaction_len",
    "strength",
    "domain",
    "commitment",
    "subject",
    "predicate",
    "object",
    "valid_from",
    "valid_to",
    "superseded_by",
    "parent_id",
    "depth",
    "seq",
    "decay_mark",
    "metadata",
)


UserRow = tuple[str, int, float, float, int, int]  # user_id, namespace index, drift total / last / updates, decays


SessionRow = tuple[str, str, str, float | None, float | None, int]  # user, session, status, started, ended, ends


class Store(NoteStore, Protocol):
    """What the memory loop needs of a database. Calls are serialised by the caller (one
    :class:`lamina.Memory` lock); every write happens inside :meth:`tx`."""

    path: str | None

    def tx(self) -> contextlib.AbstractContextManager[None]:
        """One transaction: committed when the block ends, rolled back (and re-raised) on error."""
        ...

    def close(self) -> None: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def new_ids(self, n: int) -> list[int]:
        """``n`` fresh item ids, persisted with the enclosing transaction."""
        ...

    def read_tx(self) -> contextlib.AbstractContextManager[None]:
        """A read-only transaction: the reads inside it see one snapshot of the store."""
        ...

    def read_snapshot(self) -> Store | None:
        """A second, read-only handle on the store whose reads all see the snapshot taken now
        (the caller closes it; it needs no lock of the caller's), or None where the store
        cannot give one (an in-memory database)."""
        ...

    def owns(self, item_id: int) -> bool:
        """Whether an item id was made by this database."""
        ...

    def users(self, user_id: str | None = None) -> list[UserRow]: ...

    def add_user(self, user_id: str, ns: int) -> None: ...

    def set_drift(self, user_id: str, total: float, last: float, updates: int) -> None: ...

    def sessions(self, user_id: str | None = None) -> list[SessionRow]: ...

    def upsert_session(
        self,
        user_id: str,
        session_id: str,
        status: str,
        started_at: float | None,
        ended_at: float | None,
        ends: int = 0,
    ) -> None:
        """Insert or update a session (``started_at`` is kept on update); ``ends``: how many
        times it was consolidated (the α decay skips its own items then)."""
        ...

    def set_decays(self, user_id: str, decays: int) -> None:
        """The user's count of α decays (one per consolidated session)."""
        ...

    def insert_items(self, rows: list[dict[str, Any]]) -> None: ...

    def update_items(self, updates: list[tuple[int, dict[str, Any]]]) -> None: ...

    def bump_access(self, rows: list[tuple[int, float | None, int]]) -> None: ...

    def delete_items(self, user_id: str, ids: list[int]) -> None:
        """Delete a user's items (and their revisions), leaving a tombstone per id for the change log."""
        ...

    def delete_user(self, user_id: str) -> None:
        """Delete a user with every item, revision and session (leaving its namespace index in
        the change log, not its id)."""
        ...

    def write_number(self) -> int:
        """This write transaction's number: the database's next, allocated on first use; it
        stamps every row the write inserts, updates or deletes (the change log)."""
        ...

    def last_write(self) -> int:
        """The number of the database's last committed write (0: none)."""
        ...

    def user_born(self, user_id: str) -> int | None:
        """The write number that created the user (None: no such user)."""
        ...

    def moved_since(self, version: int) -> tuple[dict[str, int], set[int]]:
        """Users written after write ``version`` (user_id -> version), and the namespace indexes
        of users deleted after it."""
        ...

    def changes(self, user_id: str, since: int) -> tuple[list[dict[str, Any]], list[int]]:
        """The change log of a user after write ``since``: the rows (decoded, as
        :meth:`load_items`, in sequence order) inserted or updated since, and the ids deleted since."""
        ...

    def forget(self) -> bool:
        """After a committed delete: make the deleted rows unrecoverable from the database files
        (no copy left in free pages or the write-ahead log), and record that the deletes marked
        so far are wiped. Returns False when that could not be completed now (e.g. another
        connection is reading the log); called outside any transaction."""
        ...

    def mark_deleted(self) -> None:
        """Inside a delete's transaction: one more delete for :meth:`forget` to wipe."""
        ...

    def wipe_pending(self) -> bool:
        """Whether a delete (of any connection) has not been wiped from the files yet."""
        ...

    def load_items(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every item row (``ITEM_COLUMNS``, decoded) of the store or of one user, in id
        sequence order."""
        ...

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap: no table read)."""
        ...

    def user_versions(self, user_id: str | None = None) -> dict[str, int]:
        """user_id -> the user's version (of every user, or of one): it grows with every committed
        write of the user, by any writer."""
        ...

    def item_user(self, item_id: int) -> str | None:
        """The user an item belongs to (None: no such item)."""
        ...

    def item_counts(self, user_ids: list[str]) -> dict[str, int]:
        """Stored items per user of ``user_ids`` (users without any are left out)."""
        ...

    def bump_versions(self, user_ids: Iterable[str]) -> dict[str, int]:
        """Count this write for each user (inside the write's transaction): their version becomes
        the database's next write number (unique, increasing); returns the new versions."""
        ...

    def next_user_index(self) -> int:
        """A namespace index no user has (read inside the write's transaction)."""
        ...

    def add_revision(self, item_id: int, text: str, changed_at: float) -> None: ...

    def revisions(self, item_id: int) -> list[tuple[str, float]]: ...


def _enc(col: str, v: Any) -> Any:
    if col in ("sources", "members"):
        return json.dumps(list(v))
    if col == "metadata":  # (key, value) pairs, sorted (lamina.memory.metadata.Frozen) -> a JSON object
        return json.dumps({k: list(x) if isinstance(x, tuple) else x for k, x in v}, ensure_ascii=False) if v else "{}"
    return v


def _decode(row: Iterable[Any]) -> dict[str, Any]:
    """An ``items`` row read in :data:`ITEM_COLUMNS` order, as a dict of decoded values."""
    return {c: _dec(c, v) for c, v in zip(ITEM_COLUMNS, row)}


def _dec(col: str, v: Any) -> Any:
    if col == "sources":
        return tuple(json.loads(v))
    if col == "members":
        return tuple(json.loads(v))
    if col == "metadata":
        if not v or v == "{}":
            return ()
        return tuple(sorted((k, tuple(x) if isinstance(x, list) else x) for k, x in json.loads(v).items()))
    return v
