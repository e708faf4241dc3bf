"""Small named values a service keeps in a memory's database (the :class:`ServiceRecords` mixin of
:class:`lamina.Memory`): ``lamina serve``'s inspector sessions, say, which every process and every
replica on the same database must see.

They live in the database's ``meta`` table (SQLite and PostgreSQL alike) under the prefix
``service:``, apart from the memory's own entries; they are not part of a user's export.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInput
from .state.host import MemoryHost

__all__ = ["ServiceRecords"]

_PREFIX = "service:"


def _key(name: str) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise InvalidInput(f"a service record's name must be a non-empty str of at most 200 characters, got {name!r}")
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
