"""Whole-collection calls of :class:`lamina.Memory` (the :class:`Bulk` mixin): a user's memories
page by page with an opaque cursor, filtered (``list_memories``); deleting the memories a filter
admits (``delete_memories``); deleting users wholesale (``reset``). Filters are those of
:mod:`lamina.memory.metadata`, matched by :func:`lamina.memory.read.batch.allowed`."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInput
from .inputs import check_count, check_id
from .metadata import parse_filters
from .read.batch import allowed
from .reports import DeleteReport, MemoryPage
from .state.host import MemoryHost
from .state.tx import Tx

__all__ = ["Bulk", "MAX_PAGE", "page_cursor", "cursor_position"]

#: The most items one page of :meth:`Bulk.list_memories` holds.
MAX_PAGE = 1000
_CURSOR = b"lamina:after:"


def page_cursor(after: int) -> str:
    """The opaque cursor of the page that starts after item ``after``."""
    return base64.urlsafe_b64encode(_CURSOR + str(after).encode()).decode("ascii")


def cursor_position(cursor: object) -> int:
    """The last item id of the page before a cursor (0: None, the first page).

    Raises
    ------
    TypeError, InvalidInput
        ``cursor`` is not a str, or not a cursor :func:`page_cursor` made.
    """
    if cursor is None:
        return 0
    if not isinstance(cursor, str):
        raise TypeError(f"cursor must be a str (a next_cursor a page returned) or None, got {type(cursor).__name__}")
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii"))
        if raw.startswith(_CURSOR):
            return int(raw[len(_CURSOR) :])
    except (binascii.Error, ValueError, UnicodeEncodeError):
        pass
    raise InvalidInput(f"cursor {cursor[:40]!r} is not one a page of list_memories returned")


class Bulk:
    """Paged listing, filtered deletes and resets (mixed into :class:`lamina.Memory`)."""

    def list_memories(
        self: MemoryHost,
        *,
        user_id: str,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> MemoryPage:
        """A page of a user's stored items (every layer, evicted and superseded included), in
        the order they were stored (item id), those ``filters`` admits only.

        Parameters
        ----------
        user_id : str
        filters : dict, optional
            As :meth:`search`'s (:mod:`lamina.memory.metadata`).
        cursor : str, optional
            The ``next_cursor`` of the page before (opaque); None: the first page. Items stored
            after a page was read appear on later pages; deleted ones do not.
        limit : int
            Items per page, 1 .. :data:`MAX_PAGE` (1000).

        Returns
        -------
        MemoryPage
            ``items`` and ``next_cursor`` (None on the last page). No visit is counted.

        Raises
        ------
        NotFoundError
            Unknown user.
        InvalidInput
            A bad filter (an unknown metadata key), a cursor this memory did not return.
        """
        self._check_user_call(user_id)
        flt = parse_filters(filters)
        limit = check_count(limit, "limit", maximum=MAX_PAGE)
        after = cursor_position(cursor)
        with self._op():
            self._sync()
            u = self._known_user(user_id)
            st = self._st
            ids = sorted(u.ids) if flt is None else allowed(st, u, flt).tolist()
            rest = [i for i in ids if i > after]
            page = rest[:limit]
            items = [st.item(st.recs[i]) for i in page]
            return MemoryPage(items=items, next_cursor=page_cursor(page[-1]) if len(rest) > limit else None)

    def delete_memories(self: MemoryHost, *, user_id: str, filters: Mapping[str, Any]) -> DeleteReport:
        """Delete the user's items ``filters`` admits (one atomic write), each as :meth:`delete`
        does: a raw turn takes what was derived from it along.

        Raises
        ------
        InvalidInput
            No filter (``delete_user`` deletes everything), a bad filter.
        NotFoundError
            Unknown user.
        """
        self._check_user_call(user_id)
        flt = parse_filters(filters)
        if flt is None:
            raise InvalidInput("delete_memories needs a non-empty filter; delete_user deletes every item of a user")
        with self._write() as tx:
            st = tx.st
            u = self._known_user(user_id)
            doomed = set(allowed(st, u, flt).tolist())
            for i in list(doomed):
                r = st.recs[i]
                if r.kind == "turn" and r.source_id is not None:
                    doomed.update(u.derived.get(r.source_id, ()))
            if doomed:
                tx.touch(user_id)
                self._remove(tx, u, doomed)
        return DeleteReport(deleted=len(doomed), ids=tuple(sorted(doomed)))

    def reset(self: MemoryHost, *, user_ids: Sequence[str] | None = None) -> DeleteReport:
        """Delete users with every item, session and statistic, in one atomic write: those of
        ``user_ids`` (unknown ones are skipped), or every user (None). Returns what was deleted."""
        self._check_open()
        if user_ids is not None:
            if isinstance(user_ids, str) or not isinstance(user_ids, Sequence):
                raise TypeError("user_ids must be a list of str or None")
            user_ids = [check_id(u, f"user_ids[{i}]") for i, u in enumerate(user_ids)]
        gone: list[int] = []
        with self._write() as tx:
            st = tx.st
            known = set(st.users) | set(st.unloaded)
            for uid in sorted(known if user_ids is None else set(user_ids) & known):
                gone += self._known_user(uid).ids
                self._drop_user(tx, uid)
        return DeleteReport(deleted=len(gone), ids=tuple(sorted(gone)))

    def _drop_user(self: MemoryHost, tx: Tx, user_id: str) -> None:
        """Delete a user inside ``tx`` (rows, state, cached vectors: :meth:`delete_user`)."""
        tx.touch(user_id)
        tx.store.delete_user(user_id)
        tx.store.mark_deleted()
        self._embed.clear()
        tx.st.drop_user(user_id)
