"""The in-memory state of a :class:`lamina.Memory` and how it follows the store.

:class:`MemoryState` mirrors the database: every record, per-user indexes (working queues, the
MemTree's children, current facts, profiles, the turns of active leaves, the people a user's
memory knows), the sessions, and the vectors of the active items in a
:class:`~lamina.native.layer_index.LayerIndex` (plus a :class:`~lamina.native.lexical.LexicalIndex` over the
turns of active episodes). It is rebuilt from the store on open and after any failed write
(:meth:`MemoryState.load`), so the store stays the one source of truth.

It follows the store's change log: :meth:`MemoryState.catch_up` applies the rows and tombstones
another writer stamped since a user's version (:meth:`MemoryState.apply`, the exact inverse of
indexing followed by indexing the new rows), and ``delete`` patches it the same way. The unit of
work that changes it in a write is :class:`lamina.memory.state.tx.Tx`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ...native.layer_index import LayerIndex
from ...native.lexical import LexicalIndex
from ..config import MemoryConfig
from ..store.protocol import SessionRow, Store, UserRow
from .gcquiet import quiet
from .placement import Placement
from .postings import discard_id, insert_id, tuple_add, tuple_discard
from .records import (
    ITEM_FIELDS,
    NO_TREE,
    ROOT,
    TURN_KEY,
    NsCode,
    Record,
    norm_key,
    record_namespace,
)
from .userstate import UserState

__all__ = ["UserState", "MemoryState"]


Vec = npt.NDArray[np.float32]


def _person(name: str) -> tuple[str, re.Pattern[str]]:
    """A person's entry in ``UserState.people``: the name as first written, and a pattern that
    finds it as whole words (case-insensitive, any spacing collapsed to one space)."""
    return name, re.compile(r"(?<!\w)" + re.escape(" ".join(name.split())) + r"(?!\w)", re.I)


def _set_user_row(u: UserState, row: UserRow) -> None:
    """A user's stored statistics (drift, α decays) from its ``users`` row."""
    _uid, _idx, u.drift_total, u.drift_last, u.drift_updates, u.decays = row


def _in_tree(r: Record) -> bool:
    """Whether a record is an active node of its user's MemTree (in ``UserState.children``)."""
    return r.status == "active" and r.layer == "episodic" and r.parent_id is not None and r.parent_id != NO_TREE


def _not_turn(r: Record | None) -> bool:
    """Whether a record is anything but a turn (or unknown)."""
    return r is None or r.kind != "turn"


class MemoryState(Placement):
    """Records, users, sessions and vector indexes of one memory (see the module docstring).

    Thread safety: none of its own; :class:`lamina.Memory` holds its lock around every use.
    """

    def __init__(self, config: MemoryConfig, dim: int, device: str = "cpu") -> None:
        self.config = config
        self.dim = dim
        c = config
        self.vectors = LayerIndex(
            dim,
            c.ann_threshold,
            c.ann_m,
            c.ann_ef_construction,
            c.ann_ef_search,
            c.codec,
            c.oversample,
            device=device,
            dtype=c.vector_dtype,
        )
        self.lex = LexicalIndex()
        self.recs: dict[int, Record] = {}
        self.pending: dict[int, Record] = {}  # records whose access bumps are not yet written
        self.users: dict[str, UserState] = {}
        # (user, session) -> [status, started, ended, ends: the times it was consolidated]
        self.sessions: dict[tuple[str, str], list[Any]] = {}
        self.data_version = -1  # the store's data_version when this state last caught up
        self.unloaded: set[str] = set()  # users of the store whose state is loaded on first use
        # loaded users, least recently used first (Memory(max_loaded_users=...) evicts from the front)
        self.recent: dict[str, None] = {}
        self.by_idx: dict[int, str] = {}  # a loaded user's namespace index -> its id
        self.high_water = 0  # the store's last write number this state has caught up with
        quiet(self)  # full collections skip its containers (lamina.memory.state.gcquiet)

    def gc_containers(self) -> Iterator[object]:
        """The containers of ids, strings, numbers and records the state holds (full collections
        skip them: :mod:`lamina.memory.state.gcquiet`)."""
        yield from (self.recs, self.pending, self.sessions, self.unloaded)
        yield from list(self.sessions.values())
        yield from self.vectors.id_containers()
        for u in list(self.users.values()):
            yield from u.gc_containers()

    # ------------------------------------------------------------------ (re)building
    @classmethod
    def load(
        cls, store: Store, config: MemoryConfig, dim: int, device: str = "cpu", *, lazy: bool = False
    ) -> MemoryState:
        """Build every in-memory structure from the database (inside a read snapshot); ``lazy``:
        no user yet, each is loaded on first use (:meth:`user`)."""
        st = cls(config, dim, device)
        st.high_water = store.last_write()
        if lazy:
            st.unloaded = set(store.user_versions())
        else:
            st._load_rows(store.users(), store.sessions(), store.load_items(), store.user_versions())
        st.data_version = store.data_version()
        return st

    def _load_rows(
        self,
        users: list[UserRow],
        sessions: list[SessionRow],
        items: Iterable[dict[str, Any]],
        versions: Mapping[str, int],
    ) -> None:
        """Add users (absent from the state) with their sessions and items (in id order)."""
        for row in users:
            u = self.users[row[0]] = UserState(row[0], row[1])
            self.by_idx[u.idx] = u.user_id
            self.used(u.user_id)
            _set_user_row(u, row)
            u.version = versions.get(u.user_id, 0)
        self._set_sessions(sessions)
        for r in self._add_rows(items):
            self.add_turn_views(self.users[r.user_id], r, [m for m in r.members if m in self.vectors])

    def _add_rows(self, items: Iterable[dict[str, Any]]) -> list[Record]:
        """Index item rows (in id order) of users in the state; their vectors go to the arenas in
        one call per namespace. Returns the active episodic leaves among them (their turn views
        are the caller's: they need the member turns' vectors)."""
        pending: dict[int, tuple[list[int], list[bytes]]] = {}
        leaves: list[Record] = []
        for row in items:
            emb = row.pop("embedding")
            r = Record(**row)
            self.recs[r.id] = r
            u = self.users[r.user_id]
            u.ids.add(r.id)
            if r.status == "active":
                ids, embs = pending.setdefault(record_namespace(u.idx, r), ([], []))
                ids.append(r.id)
                embs.append(emb)
                u.activate(r)
                if r.kind == "segment" and r.layer == "episodic":
                    leaves.append(r)
            self.index(u, r)
        for ns, (ids, embs) in pending.items():
            X = np.frombuffer(b"".join(embs), dtype=np.float32).reshape(len(ids), self.dim)
            self.vectors.add(ns, ids, X)
        return leaves

    def drop_user(self, user_id: str) -> None:
        """Forget a user's state (records, vectors, turn views, sessions, pending bumps)."""
        u = self.users.pop(user_id, None)
        self.recent.pop(user_id, None)
        if u is None:
            return
        self.by_idx.pop(u.idx, None)
        # a graph keeps the data of points it only marks deleted (evicted items' too): the
        # graphs of the user's namespaces go whole (rebuilt from the arena when next searched)
        self.vectors.drop_graphs([u.ns(code) for code in NsCode])
        self.vectors.remove([k for i in u.ids for k in (i, i | TURN_KEY) if k in self.vectors])
        self.lex.remove(list(u.seg_of), missing_ok=True)
        for i in u.ids:
            self.recs.pop(i, None)
            self.pending.pop(i, None)
        for key in [k for k in self.sessions if k[0] == user_id]:
            del self.sessions[key]

    def reload_user(self, store: Store, user_id: str, versions: Mapping[str, int]) -> None:
        """Replace a user's state by what the store holds now (absent there: forgotten)."""
        self.drop_user(user_id)
        rows = store.users(user_id)
        if rows:
            self._load_rows(rows, store.sessions(user_id), store.load_items(user_id), versions)

    def apply(self, u: UserState, rows: list[dict[str, Any]], dead: Iterable[int]) -> None:
        """Patch a user's state with changed rows of the store (inserted or updated: ``rows``, in
        id order) and deleted ids (``dead``): the old records leave every index, the rows enter
        them, and what depends on both (turn views of the leaves that hold a changed turn, the
        tree's height, cached fact staleness) is redone. The result equals the state
        :meth:`reload_user` would build; the cost follows the change, not the user. Deleted
        vectors are forgotten (arena rows zeroed, scrubbed from the graphs that held them)."""
        dead = set(dead)
        u.turn_epoch += 1  # (the pooled items' turns are read again: rows of any kind may have changed)
        u.vec_epoch += 1  # (and the listed turns' vectors checked)
        moved = 0  # the greatest depth a tree node patched in place moved from or to (the height may change)
        full: list[dict[str, Any]] = []
        for row in rows:
            r = self.recs[row["id"]] if row["id"] in u.ids else None
            d = int(r.depth) if r is not None else 0
            if r is not None and self._patch(u, r, row):
                if _in_tree(r) and int(r.depth) != d:
                    moved = max(moved, d, int(r.depth))
                continue
            full.append(row)
        rows = full
        ids = dead | {int(row["id"]) for row in rows}
        old = sorted((self.recs[i] for i in ids if i in u.ids), key=lambda r: r.seq)
        gone = {r.id for r in old}
        deepest = max([moved] + [int(r.depth) for r in old if _in_tree(r)])
        # leaves whose turn views show a changed turn: their views are built again below
        refresh = {u.seg_of[r.id] for r in old if r.kind == "turn" and r.id in u.seg_of} - gone
        for lid in sorted(refresh):
            self.drop_turn_views(u, self.recs[lid])
        for r in old:
            self.unindex(u, r, forget=r.id in dead)
        leaves = self._add_rows(rows)
        leaves += [self.recs[i] for i in refresh if i in u.active["episodic"]]
        for leaf in sorted(leaves, key=lambda r: r.seq):
            self.add_turn_views(u, leaf, [m for m in leaf.members if m in self.vectors])
        if deepest >= u.max_depth:  # (else the tree's height stands: new rows raised it as they came)
            self.tree_height(u)
        u.people = {k: u.people[k] for k in sorted(u.people, key=lambda k: u.named[k][0])}  # first named first
        u.stale = u.stale_last = None  # (its per-item cache is keyed by id: texts may have changed)
        # (u.coverage stays: the projection syncs it to the covered turns and their vectors' stamps)

    # columns that key an index, a vector or a turn view: a row that changes one takes the full path
    _KEYED = frozenset(
        {"status", "layer", "kind", "text", "members", "session_id", "speaker", "source_id", "subject", "predicate"}
    )
    # columns a record can change in place (a strength decayed, ...); the tree's and the sources'
    # indexes are kept by _patch itself
    _IN_PLACE = frozenset(ITEM_FIELDS) - _KEYED - {"parent_id", "sources"}

    def _patch(self, u: UserState, r: Record, row: dict[str, Any]) -> bool:
        """Update a record from its changed row in place when that touches no vector, turn view
        or index but the tree and the sources (True), else leave it for the full path (False)."""
        if any(getattr(r, f) != row[f] for f in self._KEYED):
            return False
        if r.status == "active" and self.vec(r).tobytes() != row["embedding"]:
            return False
        active_ep = r.status == "active" and r.layer == "episodic"  # (status and layer are the row's)
        if _in_tree(r) != (active_ep and row["parent_id"] not in (None, NO_TREE)):
            return False
        if _in_tree(r):
            self._reparent(u, r, row["parent_id"])
        elif r.parent_id != row["parent_id"]:
            r.parent_id = row["parent_id"]
            u.refile(r)
        if tuple(row["sources"]) != r.sources:
            self.set_sources(u, r, tuple(row["sources"]))
        for f in self._IN_PLACE:
            setattr(r, f, row[f])
        self.pending.pop(r.id, None)
        u.touch(r)
        return True

    def _reparent(self, u: UserState, r: Record, parent: int) -> None:
        """Move an active tree node under another parent in ``u.children`` (and on the record)."""
        if parent != r.parent_id:
            discard_id(u.children, r.parent_id, r.id, keep=ROOT)
            insert_id(u.children.setdefault(parent, []), r.id)
            r.parent_id = parent

    def retree(self, u: UserState, moves: Mapping[int, Mapping[str, int]]) -> None:
        """Move active tree nodes in memory: new ``parent_id`` and/or ``depth`` per record id (as
        :func:`lamina.memory.write.consolidate.lift_orphans` returns them; the caller writes them)."""
        deepest = 0
        for rid, cols in moves.items():
            r = self.recs[rid]
            if "parent_id" in cols:
                self._reparent(u, r, cols["parent_id"])
            deepest = max(deepest, int(r.depth))
            r.depth = cols.get("depth", r.depth)
        if deepest >= u.max_depth:
            self.tree_height(u)

    def tree_height(self, u: UserState) -> None:
        """``u.max_depth`` measured again: the greatest depth of an active tree node (0: none).

        A node's depth is its parent's plus one (the root's children are at depth 1: the tree's
        invariant), so depths are read from the child lists alone: no record is visited (a few
        thousand scattered records at 100k turns cost ~5 ms whenever a node of the greatest depth
        left). ``u.max_depth`` is never below the height (whatever adds a node raises it), so the
        height can only have fallen: a depth-first walk stops at the first node of the old
        height, which is usually near (a breadth-first walk of the whole tree took ~2.5 ms)."""
        ch = u.children
        target = u.max_depth
        height = 0
        stack = [(k, 1) for k in ch.get(ROOT, ())]
        while stack:
            i, d = stack.pop()
            if d > height:
                height = d
                if height >= target:
                    break
            kids = ch.get(i)
            if kids:
                stack += [(k, d + 1) for k in kids]
        u.max_depth = height

    def catch_up(self, store: Store, user_id: str) -> None:
        """Bring a loaded user's state to the store's (inside a snapshot): apply the user's change
        log since its version; a user deleted meanwhile is dropped, one deleted and created
        again is loaded afresh."""
        u = self.users.get(user_id)
        if u is None:
            return
        version = store.user_versions(user_id).get(user_id)
        born = store.user_born(user_id)
        if version is None or born is None:
            self.drop_user(user_id)
            return
        if version == u.version:
            return
        if born > u.version:
            self.reload_user(store, user_id, {user_id: version})
            return
        rows, dead = store.changes(user_id, u.version)
        self.apply(u, rows, dead)
        for row in store.users(user_id):
            _set_user_row(u, row)
        for key in [k for k in self.sessions if k[0] == user_id]:
            del self.sessions[key]
        self._set_sessions(store.sessions(user_id))
        u.version = version

    def _set_sessions(self, rows: Iterable[SessionRow]) -> None:
        """Sessions from the store's rows."""
        for uid, sid, status, started, ended, ends in rows:
            self.sessions[(uid, sid)] = [status, started, ended, ends]

    def sync(self, store: Store) -> list[str]:
        """Catch up with other writers of the store (inside a snapshot or the write's
        transaction): each loaded user whose version another writer moved applies its change log
        (:meth:`catch_up`); users deleted elsewhere are dropped; users not loaded here are loaded
        when first used (:meth:`user`), so a process pays only for the users it serves. Cheap
        when nobody else wrote (the store's data version is unchanged: no table read); otherwise
        one indexed read of the users written since the last catch-up. Returns the users caught
        up or dropped."""
        dv = store.data_version()
        if dv == self.data_version:
            return []
        moved, gone = store.moved_since(self.high_water)
        self.high_water = store.last_write()
        out = sorted(u.user_id for u in self.users.values() if u.idx in gone)
        for uid in out:  # (created again meanwhile: loaded afresh when next used)
            self.drop_user(uid)
        self.unloaded -= set(out)
        for uid in sorted(moved):
            u = self.users.get(uid)
            if u is None:
                self.unloaded.add(uid)
            elif moved[uid] != u.version:
                self.catch_up(store, uid)
                out.append(uid)
        if gone:  # a user deleted elsewhere that this state never loaded
            self.unloaded &= set(store.user_versions())
        self.data_version = dv
        return out

    def user(self, store: Store, user_id: str) -> UserState | None:
        """A user's state, loaded from the store on first use (None: no such user)."""
        if user_id in self.unloaded:
            self.reload_user(store, user_id, store.user_versions(user_id))
            self.unloaded.discard(user_id)
        self.used(user_id)
        return self.users.get(user_id)

    def add_user(self, u: UserState) -> None:
        """A user new to the store (its state starts empty)."""
        self.users[u.user_id] = u
        self.by_idx[u.idx] = u.user_id
        self.used(u.user_id)

    # ------------------------------------------------------------------ the cache limit
    def used(self, user_id: str) -> None:
        """A loaded user was used now (the most recently used; see :meth:`lru_victims`)."""
        if user_id in self.users:
            self.recent.pop(user_id, None)
            self.recent[user_id] = None

    def lru_victims(self, limit: int) -> set[str]:
        """The least recently used loaded users beyond ``limit`` (those to evict)."""
        order = [uid for uid in self.recent if uid in self.users]
        order += [uid for uid in self.users if uid not in self.recent]
        return set(order[: max(0, len(self.users) - limit)])

    def evict_user(self, user_id: str) -> None:
        """Forget a loaded user's state (records, vectors, turn views, graphs) and leave it to be
        loaded from the store on its next use. Pending access bumps of its records are dropped:
        the caller writes them first."""
        if user_id in self.users:
            self.drop_user(user_id)
            self.unloaded.add(user_id)

    def load_all(self, store: Store) -> None:
        """Load every user :meth:`sync` left unloaded."""
        if self.unloaded:
            versions = store.user_versions()
            for uid in sorted(self.unloaded):
                self.reload_user(store, uid, versions)
            self.unloaded.clear()

    def index(self, u: UserState, r: Record) -> None:
        """Add a record to the per-user indexes (working queues, tree, current facts, profiles,
        sources, people); :meth:`unindex` is its inverse. Lists stay in id (= creation) order."""
        for src in r.sources:
            tuple_add(u.derived, src, r.id)
        u.touch(r)
        if r.kind == "turn":
            if r.source_id is not None:
                self._index_source(u, r.source_id)
            if r.session_id is not None:
                insert_id(u.session_turns.setdefault(r.session_id, []), r.id)
        elif r.kind == "fact":
            insert_id(u.facts, r.id)
        who = r.speaker if r.kind == "turn" else (r.subject if r.kind == "fact" else None)
        if who:
            key = norm_key(who)
            lst = u.named.setdefault(key, [])
            insert_id(lst, r.id)
            if lst[0] == r.id:  # the first record that names a person spells the name
                u.people[key] = _person(who)
        if r.status != "active":
            return
        if r.layer == "working":
            assert r.session_id is not None
            insert_id(u.working.setdefault(r.session_id, []), r.id)
        elif _in_tree(r):
            assert r.parent_id is not None
            insert_id(u.children.setdefault(r.parent_id, []), r.id)
            u.max_depth = max(u.max_depth, int(r.depth))
        elif r.layer == "semantic" and r.kind == "fact":
            assert r.subject is not None and r.predicate is not None
            insert_id(u.current.setdefault((norm_key(r.subject), r.predicate), []), r.id)
            u.stale = None
        elif r.layer == "semantic" and r.kind == "profile":
            assert r.subject is not None
            u.profiles[norm_key(r.subject)] = r.id
        elif r.layer == "history":
            u.stale = None

    def unindex(self, u: UserState, r: Record, *, forget: bool = False) -> None:
        """Take a record out of the state: every per-user index, its vector (and, for a leaf,
        its turn views), pending bumps. ``forget``: it is being deleted, so no graph may keep its
        vector or its turn view, even from an earlier eviction (see
        :meth:`lamina.native.layer_index.LayerIndex.forget`)."""
        u.touch(r, removed=True)
        if forget:
            self.vectors.forget([r.id, r.id | TURN_KEY] if r.kind == "turn" else [r.id])
        if r.status == "active":
            if r.id in u.active[r.layer]:
                if not forget:
                    self.vectors.remove([r.id])
                u.deactivate(r)
            if r.kind == "segment" and r.layer == "episodic":
                self.drop_turn_views(u, r, forget=forget)
            if r.layer == "working" and r.session_id is not None:
                discard_id(u.working, r.session_id, r.id)
            elif _in_tree(r):
                discard_id(u.children, r.parent_id, r.id, keep=ROOT)
            elif r.layer == "semantic" and r.kind == "fact":
                discard_id(u.current, (norm_key(r.subject or ""), r.predicate or ""), r.id)
            elif r.layer == "semantic" and r.kind == "profile":
                if u.profiles.get(norm_key(r.subject or "")) == r.id:
                    del u.profiles[norm_key(r.subject or "")]
            u.stale = None
        if r.kind == "turn":
            u.turn_epoch += 1  # (a leaf or fact rendering it renders it no more)
            u.vec_epoch += 1
            if r.session_id is not None:
                discard_id(u.session_turns, r.session_id, r.id)
        elif r.kind == "fact":
            u.facts.remove(r.id)
        who = r.speaker if r.kind == "turn" else (r.subject if r.kind == "fact" else None)
        if who:
            key = norm_key(who)
            lst = u.named[key]
            first = lst[0] == r.id
            lst.remove(r.id)
            if not lst:
                del u.named[key]
                del u.people[key]
            elif first:  # the next record that names the person spells the name now
                nxt = self.recs[lst[0]]
                name = nxt.speaker if nxt.kind == "turn" else nxt.subject
                assert name is not None
                u.people[key] = _person(name)
        for src in r.sources:
            tuple_discard(u.derived, src, r.id)
        if r.kind == "turn" and r.source_id is not None:
            self._index_source(u, r.source_id, without=r.id)
        u.ids.discard(r.id)
        self.recs.pop(r.id, None)
        self.pending.pop(r.id, None)

    def _index_source(self, u: UserState, src: str, without: int | None = None) -> None:
        """``u.by_src[src]``: the newest turn with that source id (as a load in id order leaves it)."""
        turns = [i for i in u.derived.get(src, ()) if i != without and self.recs[i].kind == "turn"]
        turns = [i for i in turns if self.recs[i].source_id == src]
        old = u.by_src.get(src)
        if turns:
            u.by_src[src] = max(turns)
        else:
            u.by_src.pop(src, None)
        new = u.by_src.get(src)
        # a source id that names another turn now, or a first one for records that derive from it
        if new != old and (old is not None or any(_not_turn(self.recs.get(i)) for i in u.derived.get(src, ()))):
            u.turn_epoch += 1

    def set_sources(self, u: UserState, r: Record, sources: tuple[str, ...]) -> None:
        """Change a record's provenance (keeps the index of what derives from each source; a
        grown list, the usual change, costs its new part only)."""
        old = r.sources
        grown = sources[: len(old)] == old
        for src in () if grown else old:
            tuple_discard(u.derived, src, r.id)
        r.sources = sources
        for src in sources[len(old) :] if grown else sources:
            tuple_add(u.derived, src, r.id)
        u.touch(r)
        if r.kind == "turn" and r.source_id is not None:
            self._index_source(u, r.source_id)
