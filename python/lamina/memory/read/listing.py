"""Paged listings of one user's stored items and their activity over time, read from the
in-memory state (no database read, no visit counted): what an inspector shows of a large
memory without building every item (:meth:`lamina.Memory.list_items`,
:meth:`lamina.Memory.activity`).

Items are ordered by their time (``timestamp``, else ``created_at``), then by id; filters look
at the records' fields, and only the page asked for becomes :class:`~lamina.memory.dump.format.ItemEntry`
objects (building one costs about as much as filtering a hundred records).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from ..dump.format import ItemEntry
from ..state.memstate import MemoryState, UserState
from ..state.records import STORED_FIELDS, Record

__all__ = ["ItemPage", "ActivityBin", "Activity", "list_items", "activity", "entry"]

# the fields an entry shares with the record (one C call per entry; no vector)
_VALUES = attrgetter(*STORED_FIELDS)
#: The narrowest bin of :func:`activity` (seconds): one day.
MIN_BIN = 86400.0


@dataclass(slots=True)
class ItemPage:
    """One page of a user's stored items, from :meth:`lamina.Memory.list_items`.

    Attributes
    ----------
    total : int
        Items that pass the filters (on every page).
    offset : int
        Position of the first item of this page among them.
    items : list of ItemEntry
        This page's items (the export format's entries, without vectors), in the order asked.
    """

    total: int
    offset: int
    items: list[ItemEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ActivityBin:
    """Items stated in ``[start, start + width)`` (seconds) and the visits they got since."""

    start: float
    width: float
    items: int
    accesses: int


@dataclass(slots=True)
class Activity:
    """A user's items over time, from :meth:`lamina.Memory.activity`.

    Attributes
    ----------
    bins : list of ActivityBin
        Equal-width bins from the first to the last timestamp (empty: nothing timed).
    last_activity : float or None
        The latest timestamp or visit of any of the user's items (None: none).
    """

    bins: list[ActivityBin] = field(default_factory=list)
    last_activity: float | None = None


_BY_ID = attrgetter("id")


def _t(r: Record) -> float:
    return r.timestamp if r.timestamp is not None else (r.created_at or 0.0)


def entry(r: Record) -> ItemEntry:
    """The export entry of a record (no vector)."""
    return ItemEntry(*_VALUES(r))


def list_items(
    st: MemoryState,
    u: UserState,
    *,
    layers: Sequence[str] | None,
    kinds: Sequence[str] | None,
    statuses: Sequence[str] | None,
    contains: str,
    offset: int,
    limit: int | None,
    newest_first: bool,
) -> ItemPage:
    """One page of a user's records that pass the filters (None: any), in time order.

    Parameters
    ----------
    st, u : the state and the user's state.
    layers, kinds, statuses : the values to keep (None: every one).
    contains : a case-insensitive substring of the text (empty: no filter).
    offset, limit : the page (``limit`` None: every item from ``offset``).
    newest_first : newest first instead of oldest first.
    """
    L = None if layers is None else frozenset(layers)
    K = None if kinds is None else frozenset(kinds)
    S = None if statuses is None else frozenset(statuses)
    q = contains.casefold()
    recs = st.recs
    ids: Iterable[int] = u.ids
    if L is not None and S is not None and S <= {"active"}:  # the state's per-layer active sets
        ids = [i for layer in L for i in u.active.get(layer, ())] if "active" in S else []
    hits = [
        r
        for r in (recs[i] for i in ids)
        if (L is None or r.layer in L)
        and (K is None or r.kind in K)
        and (S is None or r.status in S)
        and (not q or q in r.text.casefold())
    ]
    hits.sort(key=_BY_ID, reverse=newest_first)  # (two stable sorts: no key tuple per record)
    hits.sort(key=_t, reverse=newest_first)
    end = None if limit is None else offset + limit
    return ItemPage(total=len(hits), offset=offset, items=[entry(r) for r in hits[offset:end]])


def activity(st: MemoryState, u: UserState, *, kinds: Sequence[str], bins: int) -> Activity:
    """Items of ``kinds`` per time bin with the visits they got, and the user's last activity.

    The span from the first to the last timestamp is cut into at most ``bins`` bins of equal
    width, none narrower than :data:`MIN_BIN`; items without a timestamp are not binned.
    ``last_activity`` is the latest timestamp or visit of any item of the user.
    """
    K = frozenset(kinds)
    recs = [st.recs[i] for i in u.ids]
    stamps = [r.timestamp for r in recs if r.timestamp is not None]
    seen = [r.last_access for r in recs if r.last_access is not None]
    last = max(stamps + seen) if stamps or seen else None
    timed = [(r.timestamp, r.access_count) for r in recs if r.kind in K and r.timestamp is not None]
    if not timed:
        return Activity(bins=[], last_activity=last)
    ts = [t for t, _ in timed]
    lo, hi = min(ts), max(ts)
    width = max((hi - lo) / bins, MIN_BIN)
    n = min(bins, int((hi - lo) // width) + 1)
    counts = [0] * n
    visits = [0] * n
    for t, a in timed:
        i = min(n - 1, int((t - lo) // width))
        counts[i] += 1
        visits[i] += int(a)
    out = [ActivityBin(start=lo + i * width, width=width, items=counts[i], accesses=visits[i]) for i in range(n)]
    return Activity(bins=out, last_activity=last)
