"""The unit of work of the memory loop: :class:`Tx`, one write, and :class:`Models`, what the
write path calls out to.

:class:`Tx` collects the records a write creates and the columns it changes while the stages
run, and writes them to the store when the stage code is done (:meth:`Tx.commit`), inside the
store's transaction. A new record is written once, as it is at commit time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core import _gc_untrack
from ...llm.extract import FactExtractor, Summarizer
from ..store.protocol import Store, seq_of
from .memstate import MemoryState, UserState
from .records import Record

__all__ = ["Tx", "Models"]

Vec = npt.NDArray[np.float32]


class Tx:
    """One write of the memory loop (made by :meth:`lamina.Memory._write`, inside the store's
    transaction).

    Stages create records through :meth:`new_record` and report the columns they change on
    existing records through :meth:`changed`; :meth:`commit` writes both. A record created in
    this write is inserted as it is at commit time (later changes need no report). Every user
    the write touches (:meth:`touch`, and through records) counts one more version at commit,
    which is how other processes on the store learn that their state of that user is stale; a
    failed write rebuilds exactly those users from the store.
    """

    def __init__(self, store: Store, st: MemoryState) -> None:
        self.store = store
        self.st = st
        self._new: dict[int, tuple[Record, Vec]] = {}
        self._changed: dict[int, tuple[Record, dict[str, None]]] = {}
        self._embs: dict[int, Vec] = {}
        self.users: set[str] = set()  # users this write touches
        self.facts_added = 0  # facts inserted by this write (end_session reports)

    def touch(self, user_id: str) -> None:
        """This write changes (or may change) the user's state."""
        self.users.add(user_id)

    def user(self, user_id: str) -> UserState:
        """The user's state, created (and stored) on first use; touched."""
        st = self.st
        self.users.add(user_id)
        u = st.user(self.store, user_id)
        if u is None:
            idx = self.store.next_user_index()  # (from the store: other processes add users too)
            if idx >= (1 << 60):
                raise ValueError("too many users")
            self.store.add_user(user_id, idx)
            u = UserState(user_id, idx)
            st.add_user(u)
        return u

    def new_record(self, u: UserState, emb: Vec, **kw: Any) -> Record:
        """Create an active record (unless ``status`` says otherwise), index it and put its
        vector in the arena; it is inserted at commit."""
        (rid,) = self.store.new_ids(1)
        r = Record(id=rid, user_id=u.user_id, seq=seq_of(rid), **kw)
        if r.last_access is None:
            r.last_access = r.timestamp
        if r.layer == "episodic" and r.status == "active":
            r.decay_mark = self.st.decay_level(u, r.session_id)
        st = self.st
        self.users.add(u.user_id)
        st.recs[rid] = r
        _gc_untrack(st.recs)  # (storing a record tracks the map again: see lamina.memory.state.gcquiet)
        u.ids.add(rid)
        st.place(u, r, emb)
        self._new[rid] = (r, emb)
        st.index(u, r)
        return r

    def changed(self, r: Record, *columns: str, emb: Vec | None = None) -> None:
        """Columns of ``r`` changed in memory (``emb``: its new embedding)."""
        self.users.add(r.user_id)
        u = self.st.users.get(r.user_id)
        if u is not None:
            u.touch(r)
        if emb is not None:
            if r.id in self._new:
                self._new[r.id] = (r, emb)
            else:
                self._embs[r.id] = emb
                columns = (*columns, "embedding")
        if r.id in self._new or not columns:
            return
        entry = self._changed.setdefault(r.id, (r, {}))
        for c in columns:
            entry[1][c] = None

    def flush(self) -> None:
        """Write the rows collected so far (the write goes on; :meth:`commit` writes the rest)."""
        self.store.insert_items([r.row(e) for r, e in self._new.values()])
        updates: list[tuple[int, dict[str, Any]]] = []
        for rid, (r, cols) in self._changed.items():
            updates.append((rid, {c: (self._embs[rid].tobytes() if c == "embedding" else getattr(r, c)) for c in cols}))
        self.store.update_items(updates)
        self._new.clear()
        self._changed.clear()
        self._embs.clear()

    def commit(self) -> None:
        """Write the collected rows and count the write in each touched user's version (the
        caller commits the store's transaction)."""
        self.flush()
        for uid, v in self.store.bump_versions(self.users).items():
            u = self.st.users.get(uid)
            if u is not None:
                u.version = v


class Models:
    """What the write path calls out to: the embedder, ψ (summariser) and 𝒜 (fact extractor)."""

    __slots__ = ("embed", "summarizer", "extractor")

    def __init__(self, embed: Callable[[list[str]], Vec], summarizer: Summarizer, extractor: FactExtractor) -> None:
        self.embed = embed
        self.summarizer = summarizer
        self.extractor = extractor
