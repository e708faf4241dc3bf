"""Where a record of the in-memory state stands: its strength under the lazy α decay, its
:class:`~lamina.memory.types.MemoryItem` view, and its vectors in the layer index (placed,
withdrawn, moved between layers; the turn views of episodic leaves). The base of
:class:`~lamina.memory.state.memstate.MemoryState`, which holds the containers named here.

Thread safety: none of its own; :class:`lamina.Memory` holds its lock around every use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...native.layer_index import LayerIndex
from ...native.lexical import LexicalIndex
from ..config import MemoryConfig
from ..metadata import Frozen, as_dict
from ..types import MemoryItem
from .records import (
    TURN_KEY,
    NsCode,
    Record,
    record_namespace,
    text_key,
    turn_tokens,
)
from .userstate import UserState

__all__ = ["Placement"]

Vec = npt.NDArray[np.float32]


class Placement:
    """The α decay, lookups and vector placement of :class:`~lamina.memory.state.memstate.MemoryState`
    (see the module docstring)."""

    config: MemoryConfig
    vectors: LayerIndex
    lex: LexicalIndex
    recs: dict[int, Record]
    users: dict[str, UserState]
    sessions: dict[tuple[str, str], list[Any]]

    # ------------------------------------------------------------------ the α decay
    def decay_level(self, u: UserState, session_id: str | None) -> int:
        """The α decays so far that apply to an active episodic item of this session: every
        consolidation of the user's sessions but those of the item's own session."""
        sess = self.sessions.get((u.user_id, session_id)) if session_id is not None else None
        return u.decays - (int(sess[3]) if sess is not None else 0)

    def strength(self, r: Record) -> float:
        """An item's strength. Active episodic items decay by α at each consolidation of
        another of their user's sessions (eq. 5's α·M_{t-1}); lazily: the stored strength holds
        at the item's ``decay_mark`` (the decay level it was created or last settled at), so a
        session's end writes two counters, not every episodic row. Other items (and an
        evicted one, settled as it leaves) keep their stored strength."""
        if r.decay_mark is None:
            return float(r.strength)
        k = self.decay_level(self.users[r.user_id], r.session_id) - r.decay_mark
        return float(r.strength) * float(self.config.alpha) ** k

    def settle(self, r: Record) -> None:
        """Store an item's decayed strength as it leaves the active episodic layer (it decays
        no more)."""
        r.strength = self.strength(r)
        r.decay_mark = None

    # ------------------------------------------------------------------ lookups
    def urecs(self, u: UserState) -> list[Record]:
        """Every record of a user (in the id set's order)."""
        return [self.recs[i] for i in u.ids]

    def active_recs(self, u: UserState, layer: str) -> list[Record]:
        """The user's active records of one layer, in id (creation) order."""
        return list(map(self.recs.__getitem__, sorted(u.active[layer])))

    def episodic_pool(self, u: UserState, *, leaves: bool = True, sessions: bool = True) -> list[Record]:
        """The user's active episodic leaves and/or active episodic items outside the tree
        (session summaries), in id order (without reading the tree's other nodes)."""
        ids = (u.pool_leaves if leaves else set()) | (u.pool_sessions if sessions else set())
        return list(map(self.recs.__getitem__, sorted(ids)))

    def vec(self, r: Record) -> Vec:
        """The vector of an active record, shape (dim,)."""
        v: Vec = self.vectors.get([r.id])[0]
        return v

    def vecs(self, ids: Sequence[int]) -> Vec:
        """Vectors of active records by id, shape (len(ids), dim)."""
        return self.vectors.get(ids)

    def metadata_of(self, r: Record) -> Frozen:
        """A record's metadata: a turn's own; a derived item's (segment, summary, fact, note,
        profile) the pairs all its source turns still stored agree on (none when they disagree
        on everything, or none is left)."""
        if r.kind == "turn" or not r.sources:
            return r.metadata
        by_src, recs = self.users[r.user_id].by_src, self.recs
        common: dict[str, Any] | None = None
        for src in r.sources:
            t = recs.get(by_src.get(src, -1))
            if t is None:
                continue
            md = dict(t.metadata)
            if common is None:
                common = md
            else:
                common = {k: v for k, v in common.items() if k in md and type(md[k]) is type(v) and md[k] == v}
            if not common:
                return ()
        return tuple(sorted(common.items())) if common else ()

    def item(self, r: Record, score: float = 0.0) -> MemoryItem:
        """The public view of a record (with the raw turns it renders)."""
        turns: tuple[tuple[float | None, str | None, str], ...] = ()
        if r.kind == "segment":
            turns = tuple(
                (self.recs[m].timestamp, self.recs[m].speaker, self.recs[m].text) for m in r.members if m in self.recs
            )
        if r.kind == "fact" and r.sources:
            u = self.users[r.user_id]
            src = self.recs.get(u.by_src.get(r.sources[-1], -1))
            if src is not None:
                turns = ((src.timestamp, src.speaker, src.text),)
        layer = r.layer if r.status == "active" else ("archive" if r.kind == "turn" else r.layer)
        return MemoryItem(
            id=r.id,
            text=r.text,
            layer=layer,
            kind=r.kind,
            user_id=r.user_id,
            session_id=r.session_id,
            score=score,
            sources=tuple(r.sources),
            timestamp=r.timestamp,
            speaker=r.speaker,
            subject=r.subject,
            predicate=r.predicate,
            object=r.object,
            valid_from=r.valid_from,
            valid_to=r.valid_to,
            superseded_by=r.superseded_by,
            summary=r.summary,
            access_count=int(r.access_count),
            last_access=r.last_access,
            strength=self.strength(r),
            domain=r.domain,
            commitment=r.commitment,
            turns=turns,
            metadata=as_dict(self.metadata_of(r)),
        )

    # ------------------------------------------------------------------ vectors
    def place(self, u: UserState, r: Record, emb: Vec) -> None:
        """Put an active record's vector in its namespace."""
        self.vectors.add(record_namespace(u.idx, r), [r.id], emb.reshape(1, -1))
        u.activate(r)

    def unplace(self, u: UserState, r: Record) -> Vec:
        """Take a record's vector out of the index (returns it)."""
        emb = self.vec(r)
        self.withdraw(u, r)
        return emb

    def withdraw(self, u: UserState, r: Record, defer: list[int] | None = None) -> None:
        """:meth:`unplace` without reading the vector (an eviction's). ``defer``: the vector's
        removal is left to the caller, who appends its id there and removes them all at once
        (:meth:`LayerIndex.remove <lamina.native.layer_index.LayerIndex.remove>` of the list, in order:
        the arenas end as after one call per record)."""
        if r.kind == "turn" and u.coverage is not None and r.id in u.coverage.col:
            u.vec_epoch += 1  # (a listed turn's vector is replaced or gone)
        if defer is None:
            self.vectors.remove([r.id])
        else:
            defer.append(r.id)
        u.deactivate(r)

    def move(self, u: UserState, r: Record, layer: str, emb: Vec | None = None) -> None:
        """Move an active record to another layer (or replace its vector when ``emb`` is given)."""
        old = self.unplace(u, r)
        r.layer = layer
        self.place(u, r, old if emb is None else emb)

    def add_turn_views(self, u: UserState, leaf: Record, members: Sequence[int], embs: Vec | None = None) -> None:
        """Index the member turns of an episodic leaf one by one (provenance: ``u.seg_of``)."""
        if not members:
            return
        X = self.vecs(members) if embs is None else embs
        ns = u.ns(NsCode.TURN_VIEW)
        self.vectors.add(ns, [m | TURN_KEY for m in members], X)
        self.lex.add(list(members), [f"{self.recs[m].speaker or ''} {self.recs[m].text}" for m in members], ns)
        for m in members:
            u.seg_of[m] = leaf.id
            # the read path's per-turn caches, now rather than on a context's first sight of it
            turn_tokens(self.recs[m])
            text_key(self.recs[m])

    def drop_turn_views(self, u: UserState, leaf: Record, *, forget: bool = False) -> None:
        """Take a leaf's turn views out of the index (``forget``: their graphs too)."""
        self.drop_turn_views_of(u, [leaf], forget=forget)

    def drop_turn_views_of(self, u: UserState, leaves: Sequence[Record], *, forget: bool = False) -> None:
        """:meth:`drop_turn_views` of several leaves, in order, with one removal from the index
        and one from the lexical index (the indexes end as after one call per leaf)."""
        keys: list[int] = []
        for leaf in leaves:
            for m in leaf.members or ():
                if u.seg_of.get(m) == leaf.id:
                    del u.seg_of[m]
                    keys.append(m | TURN_KEY)
        (self.vectors.forget if forget else self.vectors.remove)([k for k in keys if k in self.vectors])
        self.lex.remove([k & ~TURN_KEY for k in keys], missing_ok=True)

    def reindex_turn_view(self, u: UserState, r: Record, emb: Vec) -> None:
        """A turn of an active leaf got a new text: replace its view and its lexical entry."""
        ns = u.ns(NsCode.TURN_VIEW)
        self.vectors.remove([r.id | TURN_KEY])
        self.vectors.add(ns, [r.id | TURN_KEY], emb.reshape(1, -1))
        self.lex.remove([r.id], missing_ok=True)
        self.lex.add([r.id], [f"{r.speaker or ''} {r.text}"], ns)
