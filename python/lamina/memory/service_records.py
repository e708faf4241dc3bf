"""Small named values a service keeps in a memory's database (the :class:`ServiceRecords` mixin of
:class:`lamina.Memory`): ``lamina serve``'s inspector sessions, say, which every process and every
replica on the same database must see.

They live in the database's ``meta`` table (SQLite and PostgreSQL alike) under the prefix
``service:``, apart from the memory's own entries; they are not part of a user's export.

Besides single values, a record name can hold an **append-only log** (``lamina serve``'s audit
log per tenant, :mod:`lamina.serve.audit`): :meth:`ServiceRecords.append_service_log` numbers each
entry 1, 2, 3, ... in the write transaction that stores it (so the numbers are the order the
writes committed in, across processes and replicas), and :meth:`ServiceRecords.service_log` reads
a page of them. Nothing removes or replaces an entry; each append is committed before the
call returns (a ``kill -9`` after it loses nothing).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInput
from .state.host import MemoryHost

__all__ = ["ServiceRecords", "MAX_LOG_PAGE"]

_PREFIX = "service:"
_LOG_LENGTH = "#n"  # (the record ``<name>#n`` holds a log's length; entry i is ``<name>#<i>``)
#: Most entries :meth:`ServiceRecords.service_log` returns at once.
MAX_LOG_PAGE = 1000


def _key(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 200 or "#" in name:
        raise InvalidInput(
            f"a service record's name must be a non-empty str of at most 200 characters without '#', got {name!r}"
        )
    return _PREFIX + name


class ServiceRecords:
    """Named text values in the database, read and replaced atomically (mixed into :class:`lamina.Memory`).

    Thread safety: as the memory's calls (each holds its lock); a replacement is one database
    transaction, so processes sharing the database replace a value one at a time.
    """

    def service_record(self: MemoryHost, name: str) -> str | None:
        """The value of record ``name``, or None when there is none."""
        key = _key(name)
        with self._op():
            self._check_open()
            with self._store.read_tx():
                value = self._store.get_meta(key)
        return value or None

    def update_service_record(self: MemoryHost, name: str, update: Callable[[str | None], str | None]) -> str | None:
        """Replace the value of record ``name`` by ``update(current)`` in one write transaction
        (``update`` gets None when there is none, and returns None to remove it); returns the new value."""
        key = _key(name)
        with self._op():
            self._check_open()
            with self._store.tx():
                new = update(self._store.get_meta(key) or None)
                self._store.set_meta(key, new or "")
        return new

    def append_service_log(self: MemoryHost, name: str, value: str) -> int:
        """Append ``value`` to the log ``name`` in one write transaction; returns its number
        (1 for the first entry of a log)."""
        length_key = _key(name) + _LOG_LENGTH
        if not isinstance(value, str) or not value:
            raise InvalidInput("a service log entry must be a non-empty str")
        with self._op():
            self._check_open()
            with self._store.tx():
                n = int(self._store.get_meta(length_key) or 0) + 1
                self._store.set_meta(f"{_key(name)}#{n}", value)
                self._store.set_meta(length_key, str(n))
        return n

    def service_log(
        self: MemoryHost, name: str, *, after: int = 0, limit: int = 100
    ) -> tuple[list[tuple[int, str]], int]:
        """The entries of log ``name`` numbered after ``after``, oldest first, at most ``limit``
        (1 to :data:`MAX_LOG_PAGE`), as ``(number, value)`` pairs, and the log's length, read in
        one snapshot."""
        base = _key(name)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InvalidInput(f"after must be an int >= 0, got {after!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LOG_PAGE:
            raise InvalidInput(f"limit must be an int in 1..{MAX_LOG_PAGE}, got {limit!r}")
        with self._op():
            self._check_open()
            with self._store.read_tx():
                length = int(self._store.get_meta(base + _LOG_LENGTH) or 0)
                out = []
                for i in range(after + 1, min(length, after + limit) + 1):
                    value = self._store.get_meta(f"{base}#{i}")
                    if value:
                        out.append((i, value))
        return out, length
