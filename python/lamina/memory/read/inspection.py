"""The read-only views of :class:`lamina.Memory`: an item by id, its history, a user's facts,
listings, activity, statistics and the users (the :class:`Inspection` mixin).

Each view takes the memory's lock, catches up with other writers and reads the in-memory state;
none writes (visits are not counted). The mixin's methods read the parts of the memory that
:class:`~lamina.memory.host.MemoryHost` names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from ...errors import InvalidInput
from ...llm.extract import is_functional
from ..dump.format import KINDS, STATUSES
from ..inputs import check_count, check_id, check_layers, check_text
from ..reports import MemoryStats
from ..state.host import MemoryHost
from ..state.records import Record, norm_key
from ..store.protocol import Store
from ..types import MemoryItem
from ..write.notes import Link, Note, links_of, note_of
from . import listing
from .listing import Activity, ItemPage
from .stats import count_stats

__all__ = ["Inspection", "names_of"]

_T = TypeVar("_T")


class Inspection:
    """Read-only views of a memory (mixed into :class:`lamina.Memory`)."""

    def get(self: MemoryHost, item_id: int, *, user_id: str | None = None) -> MemoryItem:
        """The item with this id (any layer, evicted and superseded included).

        Raises
        ------
        NotFoundError
            Unknown id, an id of another database, or (with ``user_id``) another user's item.
        """
        self._check_open()
        with self._op():
            self._sync()
            return self._st.item(self._record(item_id, user_id))

    def history(self: MemoryHost, item_id: int, *, user_id: str | None = None) -> list[MemoryItem]:
        """Versions of an item, oldest first, ending with the current one.

        For a fact: every fact on the same subject + predicate in time order (superseded ones
        carry ``valid_to`` and ``superseded_by``). For other items: earlier texts set by
        :meth:`update` (as items with ``kind`` unchanged and ``timestamp`` = change time).
        """
        self._check_open()
        with self._op():
            self._sync()
            st = self._st
            r = self._record(item_id, user_id)
            if r.kind == "fact" and r.predicate is not None:
                key = (norm_key(r.subject or ""), r.predicate)
                chain = [
                    x
                    for x in st.urecs(st.users[r.user_id])
                    if x.kind == "fact" and (norm_key(x.subject or ""), x.predicate) == key
                ]
                if not is_functional(r.predicate):
                    chain = [x for x in chain if norm_key(x.object or "") == norm_key(r.object or "")]
                chain.sort(key=lambda x: (x.valid_from or 0.0, x.seq))
                return [st.item(x) for x in chain]
            with self._store.read_tx():
                revisions = self._store.revisions(r.id)
            out = [replace(st.item(r), text=t, timestamp=ct) for t, ct in revisions]
            return out + [st.item(r)]

    def note(self: MemoryHost, item_id: int, *, user_id: str | None = None) -> Note | None:
        """The A-Mem note of a turn (:mod:`lamina.memory.write.notes`): keywords, tags, context and
        their history; None for an item that is not a turn, or a turn without a note (added
        with ``MemoryConfig.notes`` off, or imported from a version-1 dump).

        Raises
        ------
        NotFoundError
            Unknown id, an id of another database, or (with ``user_id``) another user's item.
        """

        def read(store: Store, r: Record) -> Note | None:
            row = store.get_notes(r.user_id, [r.id]).get(r.id)
            return note_of(r, row, store.note_revisions(r.user_id, r.id) if row is not None else [])

        return _read_turn(self, item_id, user_id, read)

    def links(self: MemoryHost, item_id: int, *, user_id: str | None = None) -> list[Link]:
        """The links of a turn's note to related turns, either end (the turns it was linked to
        when it arrived, and the later turns that were linked to it), strongest first; empty for
        an item that is not a turn.

        Raises
        ------
        NotFoundError
            Unknown id, an id of another database, or (with ``user_id``) another user's item.
        """
        recs = self._st.recs

        def read(store: Store, r: Record) -> list[Link]:
            return links_of(r.id, store.links(r.user_id, r.id), lambda i: getattr(recs.get(i), "text", None))

        return _read_turn(self, item_id, user_id, read) or []

    def facts(self: MemoryHost, *, user_id: str, subject: str | None = None, current: bool = True) -> list[MemoryItem]:
        """Semantic facts of a user (current only by default; ``current=False`` adds history)."""
        self._check_user_call(user_id)
        if subject is not None:
            check_text(subject, "subject")
        with self._op():
            self._sync()
            st = self._st
            u = self._user(user_id)
            if u is None:
                return []
            out = [
                st.item(r)
                for r in st.urecs(u)
                if r.kind == "fact"
                and r.status == "active"
                and (r.layer == "semantic" or not current)
                and (subject is None or norm_key(r.subject or "") == norm_key(subject))
            ]
            out.sort(key=lambda it: (it.subject or "", it.predicate or "", it.valid_from or 0.0))
            return out

    def list_items(
        self: MemoryHost,
        *,
        user_id: str,
        layers: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        statuses: Sequence[str] | None = None,
        contains: str = "",
        offset: int = 0,
        limit: int | None = 50,
        newest_first: bool = False,
    ) -> ItemPage:
        """One page of a user's stored items, filtered, in time order (``timestamp``, else
        ``created_at``, then id): read from memory, no database read, no visit counted; only
        the page's items are built, so a page of a large memory costs little.

        Parameters
        ----------
        user_id : str
        layers : list of str, optional
            Layers to keep (:data:`lamina.memory.types.LAYERS`; ``history``: superseded facts).
        kinds : list of str, optional
            Kinds to keep (``turn``, ``segment``, ``summary``, ``note``, ``fact``, ``profile``).
        statuses : list of str, optional
            Statuses to keep (``active``, ``evicted``).
        contains : str
            Keep items whose text holds this, case-insensitive (empty: every item).
        offset : int
            Items to skip (>= 0).
        limit : int or None
            Items on the page (>= 1; None: every one from ``offset``).
        newest_first : bool

        Returns
        -------
        ItemPage
            ``total`` items pass the filters; ``items`` are the page's, as export entries
            (:class:`~lamina.memory.dump.format.ItemEntry`, without vectors).

        Raises
        ------
        NotFoundError
            Unknown user.
        """
        self._check_user_call(user_id)
        if layers is not None:
            layers = check_layers(layers)
        kinds = names_of(kinds, "kinds", KINDS)
        statuses = names_of(statuses, "statuses", STATUSES)
        if not isinstance(contains, str):
            raise TypeError(f"contains must be a str, got {type(contains).__name__}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0:
            raise InvalidInput(f"offset must be >= 0, got {offset}")
        if limit is not None:
            limit = check_count(limit, "limit")
        with self._op():
            self._sync()
            return listing.list_items(
                self._st,
                self._known_user(user_id),
                layers=layers,
                kinds=kinds,
                statuses=statuses,
                contains=contains,
                offset=offset,
                limit=limit,
                newest_first=bool(newest_first),
            )

    def activity(self: MemoryHost, *, user_id: str, kinds: Sequence[str] = ("turn",), bins: int = 40) -> Activity:
        """A user's items of ``kinds`` over time: per time bin (at most ``bins``, none under a
        day), how many were stated in it and the visits they got (their heat), with the user's
        last activity; read from memory, nothing built per item.

        Raises
        ------
        NotFoundError
            Unknown user.
        """
        self._check_user_call(user_id)
        checked = names_of(kinds, "kinds", KINDS)
        assert checked is not None
        bins = check_count(bins, "bins", maximum=10_000)
        with self._op():
            self._sync()
            return listing.activity(self._st, self._known_user(user_id), kinds=checked, bins=bins)

    def stats(self: MemoryHost, *, user_id: str | None = None) -> MemoryStats:
        """Counts and state: items per layer, archive turns, facts (current / superseded), evicted
        items, sessions, users, profile drift (sum / last ‖Δe‖² of the damped updates), the embedder,
        the database path and LLM fallbacks (see :class:`lamina.MemoryStats`)."""
        self._check_open()
        with self._op():
            self._sync()
            st = self._st
            if user_id is not None:
                check_id(user_id, "user_id")
                users = [self._known_user(user_id)]
            else:
                with self._store.read_tx():
                    st.load_all(self._store)
                users = list(st.users.values())
            summ, ext = self._models.summarizer, self._models.extractor
            return count_stats(
                st,
                users,
                embedder=self._embedder.name,
                dim=self._dim,
                path=self._path,
                config=self.config,
                llm=repr(self.llm) if self.llm is not None else None,
                llm_fallbacks=int(getattr(summ, "failures", 0)) + int(getattr(ext, "failures", 0)),
            )

    def users(self: MemoryHost) -> list[str]:
        """All user ids."""
        with self._op():
            if not self._closed:
                self._sync()
            return sorted(set(self._st.users) | self._st.unloaded)

    def item_counts(self: MemoryHost) -> dict[str, int]:
        """Items per user (every layer and status; ``stats(user_id=u).items``), counted in the
        loaded state and, for users not loaded (``Memory(max_loaded_users=...)``), in the store,
        without loading them."""
        self._check_open()
        with self._op():
            self._sync()
            st = self._st
            out = {uid: len(u.ids) for uid, u in st.users.items()}
            if st.unloaded:
                with self._store.read_tx():
                    stored = self._store.item_counts(sorted(st.unloaded))
                out.update({uid: stored.get(uid, 0) for uid in st.unloaded})
            return dict(sorted(out.items()))


def names_of(v: Sequence[str] | None, what: str, allowed: Sequence[str]) -> list[str] | None:
    """None, or a list of names out of ``allowed`` (TypeError / InvalidInput otherwise)."""
    if v is None:
        return None
    if isinstance(v, str) or not all(isinstance(x, str) for x in v):
        raise TypeError(f"{what} must be a list of str, e.g. [{allowed[0]!r}]")
    names = list(v)
    for x in names:
        if x not in allowed:
            raise InvalidInput(f"unknown {what[:-1]} {x!r}; expected some of {list(allowed)}")
    return names


def _read_turn(host: MemoryHost, item_id: int, user_id: str | None, read: Callable[[Store, Record], _T]) -> _T | None:
    """``read(store, record)`` of a turn, in a read transaction under the memory's lock (None:
    the item is not a turn); raises :class:`~lamina.errors.NotFoundError` as :meth:`Inspection.get`."""
    host._check_open()
    with host._op():
        host._sync()
        r = host._record(item_id, user_id)
        if r.kind != "turn":
            return None
        with host._store.read_tx():
            return read(host._store, r)
