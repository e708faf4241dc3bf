"""Per-user indexes of a memory's in-memory state (:class:`UserState`): ids only, the records
themselves live in :class:`~lamina.memory.state.memstate.MemoryState`, which keeps these indexes in step
with the records as the store changes."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..types import LAYERS
from .coverage import TurnIncidence, TurnNeighbours
from .records import NO_TREE, ROOT, Record, namespace, norm_key
from .staleness import Staleness, supersession_heirs

__all__ = ["UserState"]


class UserState:
    """Per-user indexes over the user's records (ids only; the records live in the state)."""

    __slots__ = (
        "user_id",
        "idx",
        "ids",
        "by_src",
        "working",
        "children",
        "current",
        "max_depth",
        "drift_total",
        "drift_last",
        "drift_updates",
        "stale",
        "stale_last",
        "facts",
        "profiles",
        "n_active",
        "seg_of",
        "people",
        "version",
        "decays",
        "active",
        "pool_leaves",
        "pool_sessions",
        "session_turns",
        "derived",
        "named",
        "coverage",
        "incidence",
        "turn_epoch",
        "vec_epoch",
        "filtered",
        "journal",
        "journal_gen",
    )

    def __init__(self, user_id: str, idx: int) -> None:
        self.user_id = user_id
        self.idx = idx  # the user's namespace index (namespace() puts the layer code below it)
        self.ids: set[int] = set()  # every record of this user
        self.by_src: dict[str, int] = {}  # source id -> turn record id
        self.working: dict[str, list[int]] = {}  # session -> turn ids in order
        self.children: dict[int, list[int]] = {ROOT: []}
        self.current: dict[tuple[str, str], list[int]] = {}  # (subject key, predicate) -> current fact ids
        self.profiles: dict[str, int] = {}  # subject key -> profile item id
        self.max_depth = 0
        self.drift_total = 0.0
        self.drift_last = 0.0
        self.drift_updates = 0
        self.stale: Staleness | None = None  # cache, rebuilt after fact changes
        self.stale_last: Staleness | None = None  # the last one built (reused while equal)
        self.facts: list[int] = []  # ids of every fact record (any layer or status)
        self.n_active = {name: 0 for name in LAYERS}
        self.seg_of: dict[int, int] = {}  # turn id -> id of the active episodic leaf holding it
        self.people: dict[str, tuple[str, re.Pattern[str]]] = {}  # name key -> (name, word-bounded pattern)
        self.version = 0  # the store's count of this user's committed writes, as of this state
        self.decays = 0  # α decays so far: one per consolidated session (see MemoryState.strength)
        self.active: dict[str, set[int]] = {name: set() for name in LAYERS}  # layer -> active record ids
        # the episodic pool of the capacity projection, kept with ``active`` (activate / deactivate):
        # the active leaves, and the active episodic items outside the tree (session summaries)
        self.pool_leaves: set[int] = set()
        self.pool_sessions: set[int] = set()
        self.session_turns: dict[str, list[int]] = {}  # session -> its turn ids (any layer), in order
        # source id -> ids of the records whose sources hold it (tuples: a handful of ids each, and
        # a tuple of ints leaves the cyclic GC's tracked set, which one set per turn would grow)
        self.derived: dict[str, tuple[int, ...]] = {}
        self.named: dict[str, list[int]] = {}  # person key -> ids of the records naming them, in order
        # cache: the covered turns' neighbour lists of the capacity projection (never stored;
        # synced to the covered set and the vectors' stamps when used; None: built again)
        self.coverage: TurnNeighbours | None = None
        # cache: the turns each pooled item renders or summarises (never stored; valid while
        # turn_epoch is the one it was built at, and per item while the record and its sources are)
        self.incidence: TurnIncidence | None = None
        # counts changes that can change an item's turns in place: a turn leaving the state, a
        # source id naming another turn (or a first turn for what derives from it), a patch
        self.turn_epoch = 0
        # counts vectors replaced of turns the neighbour lists hold (the lists' stamps are read
        # again at the next projection; see TurnNeighbours.sync)
        self.vec_epoch = 0
        # cache of the read path's filters (lamina.memory.read.batch.allowed): key -> (version, ...)
        self.filtered: dict[object, tuple[Any, ...]] = {}
        # the records created, changed or removed (a removal as -id - 1), in order, so that a
        # filter's admitted ids are brought up to date by what changed since they were computed
        # (:meth:`touch`); ``journal_gen`` counts the times the journal was emptied (the caches
        # computed before then are recomputed whole)
        self.journal: list[int] = []
        self.journal_gen = 0

    def touch(self, r: Record, *, removed: bool = False) -> None:
        """Note that ``r`` was created or changed (``removed``: is leaving the state) for the filter
        caches. A turn's change also touches what derives from it: a derived item's metadata is
        what its source turns agree on (:meth:`~lamina.memory.state.placement.Placement.metadata_of`)."""
        j = self.journal
        if len(j) > 4 * len(self.ids) + 4096:  # (bounded: the caches then start again from scratch)
            j.clear()
            self.journal_gen += 1
        j.append(-r.id - 1 if removed else r.id)
        if r.kind == "turn" and r.source_id is not None:
            j.extend(self.derived.get(r.source_id, ()))

    def gc_containers(self) -> Iterator[object]:
        """The user's containers of ids, strings, numbers and records (see
        :mod:`lamina.memory.state.gcquiet`)."""
        yield from (self.ids, self.by_src, self.seg_of, self.derived, self.profiles, self.facts, self.n_active)
        yield self.journal
        yield from (self.pool_leaves, self.pool_sessions)
        for d in (self.working, self.children, self.current, self.active, self.session_turns, self.named):
            yield d
            yield from list(d.values())
        inc = self.incidence
        if inc is not None:
            yield inc.entries
            yield from list(inc.entries.values())  # (their turn arrays: bytes, never tracked)
        if self.coverage is not None:
            yield self.coverage.col

    def activate(self, r: Record) -> None:
        """Count an active record in its layer (``active``, ``n_active``) and its pool."""
        self.n_active[r.layer] += 1
        self.active[r.layer].add(r.id)
        self._file(r)

    def deactivate(self, r: Record) -> None:
        """Undo :meth:`activate` (the record's layer is the one it was activated in)."""
        self.n_active[r.layer] -= 1
        self.active[r.layer].discard(r.id)
        self.pool_leaves.discard(r.id)
        self.pool_sessions.discard(r.id)

    def _file(self, r: Record) -> None:
        if r.layer != "episodic":
            return
        if r.kind == "segment":
            self.pool_leaves.add(r.id)
        elif r.parent_id == NO_TREE:
            self.pool_sessions.add(r.id)

    def refile(self, r: Record) -> None:
        """An active record's parent changed in place: file it in its pool again."""
        self.pool_leaves.discard(r.id)
        self.pool_sessions.discard(r.id)
        if r.id in self.active[r.layer]:
            self._file(r)

    def staleness(self, recs: Mapping[int, Record]) -> Staleness:
        """What only supports superseded facts: their source turns, and their object values
        (when the current value of the same subject + predicate is different). Cached until the
        user's facts change (``recs``: the memory's records by id)."""
        if self.stale is None:
            hist: set[str] = set()
            cur: set[str] = set()
            values: dict[str, set[str]] = {}
            resolved: set[int] = set()
            for i in self.facts:
                r = recs[i]
                if r.status != "active":
                    continue
                (hist if r.layer == "history" else cur).update(r.sources)
                if r.layer == "history" and r.superseded_by is not None:
                    resolved.add(int(r.superseded_by))
                if r.layer == "history":
                    key = (norm_key(r.subject or ""), r.predicate or "")
                    now_vals = {norm_key(recs[j].object or "") for j in self.current.get(key, [])}
                    old = norm_key(r.object or "")
                    if old and now_vals and old not in now_vals:
                        values.setdefault(old, set()).update(now_vals)
            stale_src = frozenset(hist - cur)
            s = Staleness(stale_src, values, frozenset(resolved), supersession_heirs(recs, self.facts, stale_src))
            last = self.stale_last
            if last is not None and last.same_as(s):
                s = last  # nothing it depends on changed: keep its per-item cache
            self.stale = self.stale_last = s
        return self.stale

    def ns(self, code: int) -> int:
        """This user's namespace of a layer code (:class:`~lamina.memory.state.records.NsCode`)."""
        return namespace(self.idx, code)
