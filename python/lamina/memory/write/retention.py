"""Retention: heat (MemoryOS), promotion of hot episodes to semantic notes, and the capacity
projection Π_C that keeps each user's pools within C_e / C_s at the end of a session.

Two pools: P_e (leaves and session summaries, at most C_e per user) and P_s (current facts and
notes, C_s). With ``MemoryConfig.lend_capacity`` (off by default) a pool may also use the capacity the
other leaves unused: P_e holds at most C_e + max(0, C_s − |P_s|) items and P_s at most
C_s + max(0, C_e − |P_e|) (:func:`pool_capacities`), so together they never exceed C_e + C_s and
a pool that fills its own capacity takes the lent slots back at the next projection (without an
LLM fact extractor P_s holds few facts, and C_s would otherwise idle while leaves are evicted).
``MemoryConfig.eviction = "coverage"`` (default): an active pooled item *covers* the
turns it renders verbatim (a leaf its member turns, a fact its latest source turn); c_t is the
number of items covering turn t. The novelty of a covered turn is ν_t = 1 − max(0, cos(t, t′)) for
its nearest covered turn t′ of another leaf (1 when there is none): a line said in many places
("that's great!") is worth little, a specific one close to 1. An item's value is its Shapley share
of the coverage game v(S) = Σ_{t covered by S} ν_t,

    V_i = Σ_{t rendered by i} ν_t / c_t,

i.e. the novel raw text the active layers lose with it, shared evenly among the items that
duplicate it (a fact whose turn is also in an active leaf holds half of it). Aggregates (session
summaries, notes) render no raw text: V_i = (share of their source turns that no active item
covers) × (1 − max(0, cos to the nearest active aggregate of the pool)), zero while their leaves
survive — the cheapest to drop — and worth up to one specific turn once they are the last trace
of a session. The retention score is

    score_i = V_i · (1 + a·N_visit + R_i) + ε · exp(−Δt/μ)

with MemoryOS visits N_visit (a = ``heat_a``), a fact's restatements R_i (its strength above 1),
and recency (μ = ``heat_mu``) scaled by ε = ``eviction_tiebreak`` so that it only breaks ties:
age alone evicts nothing (the α decay of strengths is not a term). Each round evicts the
⌈excess/2⌉ lowest scores of every pool over its bound (``kernels.evict_to_capacity``; on equal scores
the newer item goes) and re-measures c_t, ν and V, so of two near-duplicates only one goes.
``eviction = "heat"`` is the earlier rule: the lowest heat × strength (oldest first in practice).
Evicted internal MemTree nodes go with their last child; a node left with one child is spliced
out.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from ..._core import _gc_untrack
from ...native import kernels
from ...native.search import topk
from ..config import MemoryConfig
from ..state.coverage import TurnIncidence, TurnNeighbours
from ..state.memstate import MemoryState, UserState
from ..state.records import NO_TREE, ROOT, Record, norm_key
from ..state.tx import Models, Tx

I64 = npt.NDArray[np.int64]

__all__ = [
    "heat",
    "promote",
    "evict",
    "pooled_items",
    "item_turns",
    "CoverageProjection",
    "observe_covered",
    "neighbour_k",
    "pool_capacities",
]

_EXTRA = 16  # neighbours listed beyond one segment's worth, so that lists seldom run dry


def pool_capacities(c: MemoryConfig, n_episodic: int, n_semantic: int) -> tuple[int, int]:
    """The most items the episodic and the semantic pool may hold, given how many they hold now.

    Each pool's own capacity (C_e, C_s); with ``c.lend_capacity`` also the part of the other
    pool's capacity that it leaves unused, so that the two never hold more than C_e + C_s together
    and a pool that fills its own capacity takes the lent slots back.

    Parameters
    ----------
    c : MemoryConfig
    n_episodic, n_semantic : int
        Active items of the episodic pool (leaves, session summaries) and of the semantic pool
        (current facts, notes).

    Returns
    -------
    (int, int)
        The episodic and the semantic pool's bound.
    """
    cap_e, cap_s = int(c.episodic_capacity), int(c.semantic_capacity)
    if not c.lend_capacity:
        return cap_e, cap_s
    return cap_e + max(0, cap_s - n_semantic), cap_s + max(0, cap_e - n_episodic)


def neighbour_k(c: MemoryConfig) -> int:
    """Entries of a covered turn's neighbour list: itself, its leaf's other turns, and 16 more."""
    return int(c.max_segment_turns) + 1 + _EXTRA


def observe_covered(st: MemoryState, u: UserState, turn_ids: list[int]) -> None:
    """Turns just covered by new leaves (the add path): list them in the user's neighbour lists
    now, so that the capacity projection at the end of the session finds them listed (one
    new × T block instead of the projection's). A user without lists gets them here only while
    nothing else is covered (the projection builds them otherwise)."""
    if st.config.eviction != "coverage" or not turn_ids:
        return
    nb = u.coverage
    if nb is None:
        if len(u.seg_of) > len(turn_ids):
            return
        nb = u.coverage = TurnNeighbours(st.dim, neighbour_k(st.config))
    nb.observe(st.vectors, turn_ids)


def item_turns(st: MemoryState, u: UserState, items: list[Record]) -> tuple[list[bytes], list[bytes]]:
    """Per item: the turn ids it renders verbatim (a leaf its member turns, a fact its latest
    source turn; those stored) and, for an aggregate, the turns its sources name; each as the
    bytes of an int64 array (:func:`_flatten` joins them in one C call: a list of ints each took
    ~0.1 µs per id, an array each ~1 µs per item).

    Read from the user's :class:`~lamina.memory.state.coverage.TurnIncidence` (``u.incidence``) where an
    entry holds, else read from the records and kept there (see its docstring for when an entry
    holds); entries of items no longer asked about are dropped now and then."""
    inc = u.incidence
    if inc is None or inc.epoch != u.turn_epoch:
        inc = u.incidence = TurnIncidence(u.turn_epoch)
    ent = inc.entries
    raws: list[bytes] = []
    aggs: list[bytes] = []
    for r in items:
        e = ent.get(r.id)
        if e is None or e[0] is not r or e[1] is not r.sources:
            raw: list[int] = []
            agg: list[int] = []
            if r.kind in ("segment", "fact"):
                cand = (
                    list(r.members or ())
                    if r.kind == "segment"
                    else ([u.by_src.get(r.sources[-1])] if r.sources else [])
                )
                raw = [t for t in cand if t is not None and t in st.recs and t in st.vectors]
            else:  # aggregates: session summaries, notes
                agg = [t for t in map(u.by_src.get, r.sources or ()) if t is not None]
            e = ent[r.id] = (
                r,
                r.sources,
                np.array(raw, dtype=np.int64).tobytes(),
                np.array(agg, dtype=np.int64).tobytes(),
            )
            _gc_untrack(e)  # (long-lived, cycle-free: see lamina.memory.gcquiet; bytes are not tracked)
        raws.append(e[2])
        aggs.append(e[3])
    if len(ent) > 2 * len(items) + 256:
        keep = {r.id for r in items}
        inc.entries = {i: e for i, e in ent.items() if i in keep}
    return raws, aggs


# (kind, access_count, strength, last_access, id) of a record: what the projection reads of it
_SCORED_FIELDS = attrgetter("kind", "access_count", "strength", "last_access", "id")
# the kinds the projection tells apart (any other kind is an aggregate: 0)
_KIND_CODE = {"segment": 1, "fact": 2}


def _flatten(blobs: list[bytes]) -> tuple[I64, I64]:
    """Arrays of ids, each the bytes of an int64 array, as (array index, id) pairs in order: two
    arrays, shape (total,), int64 (the ids read-only)."""
    lens = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 8
    flat = np.frombuffer(b"".join(blobs), dtype=np.int64)
    return np.repeat(np.arange(len(blobs), dtype=np.int64), lens), flat


def _first_seen(
    flat: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Number the distinct ids of ``flat`` (shape (m,)) in order of first appearance.

    Returns
    -------
    ids : ndarray, shape (d,), int64
        The distinct ids, numbered 0..d-1 in order of first appearance.
    num : ndarray, shape (m,), int64
        The number of each entry of ``flat``.
    sorted_ids : ndarray, shape (d,), int64
        The distinct ids in increasing order ...
    rank : ndarray, shape (d,), int64
        ... and their numbers.
    """
    uniq, first, inv = np.unique(flat, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq), dtype=np.int64)
    return uniq[order].astype(np.int64), rank[inv.reshape(-1)], uniq.astype(np.int64), rank


def heat(st: MemoryState, recs: list[Record], now: float) -> npt.NDArray[np.float32]:
    """MemoryOS heat = a·N_visit + b·L_interaction + c·exp(−Δt/μ) per record (``kernels.heat_scores``)."""
    c = st.config
    visits = np.array([r.access_count for r in recs], dtype=np.float32)
    ilen = np.array([r.interaction_len for r in recs], dtype=np.float32)
    last = np.array([r.last_access if r.last_access is not None else now for r in recs], dtype=np.float64)
    return np.asarray(
        kernels.heat_scores(visits, ilen, last, float(now), a=c.heat_a, b=c.heat_b, c=c.heat_c, mu=c.heat_mu),
        dtype=np.float32,
    )


def promote(tx: Tx, models: Models, u: UserState, now: float) -> int:
    """Episodes with heat > τ become semantic notes (their facts are already extracted); a note
    takes its leaf's vector (the centroid of the leaf's turns: nothing is embedded)."""
    st = tx.st
    leaves = st.episodic_pool(u, sessions=False)
    if not leaves:
        return 0
    hot = np.asarray(kernels.select_hot(heat(st, leaves, now), float(st.config.promote_threshold))).reshape(-1)
    if hot.size == 0:
        return 0
    chosen = [leaves[int(i)] for i in hot]
    embs = st.vecs([r.id for r in chosen])
    for r, e in zip(chosen, embs):
        tx.new_record(
            u,
            e,
            session_id=r.session_id,
            layer="semantic",
            kind="note",
            text=r.summary or r.text,
            summary=r.summary,
            sources=r.sources,
            timestamp=r.timestamp,
            created_at=now,
            domain=r.domain,
            last_access=now,
        )
        r.access_count, r.interaction_len, r.last_access = 0, 0.0, now
        tx.changed(r, "access_count", "interaction_len", "last_access")
    return len(chosen)


def pooled_items(st: MemoryState, u: UserState) -> tuple[list[Record], int]:
    """The user's pooled records in id order, the episodic pool (leaves, session summaries)
    first, then the semantic pool (current facts, notes); and the episodic pool's size."""
    ep = st.episodic_pool(u)
    sem = [r for r in st.active_recs(u, "semantic") if r.kind in ("fact", "note")]
    return ep + sem, len(ep)


def evict(tx: Tx, u: UserState, now: float) -> int:
    """Capacity projection Π_C: beyond C_e / C_s, the items whose loss costs least leave the
    active layers (``MemoryConfig.eviction``; the rule is in the module docstring)."""
    st = tx.st
    c = st.config
    items, n_ep = pooled_items(st, u)
    ep, sem = items[:n_ep], items[n_ep:]
    cap_e, cap_s = pool_capacities(c, len(ep), len(sem))
    if len(ep) <= cap_e and len(sem) <= cap_s:
        return 0
    if c.eviction == "heat":
        victims: list[Record] = []
        for pool, cap in ((ep, cap_e), (sem, cap_s)):
            if len(pool) <= cap:
                continue
            score = heat(st, pool, now) * np.array([st.strength(r) for r in pool], dtype=np.float32)
            ns = np.zeros(len(pool), dtype=np.uint64)
            out = np.asarray(
                kernels.evict_to_capacity(np.ascontiguousarray(score, dtype=np.float32), ns, int(cap))
            ).reshape(-1)
            victims.extend(pool[int(i)] for i in out)
    else:
        items = ep + sem
        gone = CoverageProjection(st, u, items, len(ep), now).run()
        victims = [items[int(i)] for i in gone]
    # (the vectors and turn views of every victim leave the indexes at once, after the loop:
    # nothing in it reads them)
    withdrawn: list[int] = []
    leaves: list[Record] = []
    deepest = max((_evict_one(tx, u, r, withdrawn, leaves) for r in victims), default=-1)
    st.vectors.remove(withdrawn)
    st.drop_turn_views_of(u, leaves)
    if deepest >= u.max_depth:  # (else a node of the greatest depth stays where it was: the height stands)
        st.tree_height(u)
    return len(victims)


def _evict_one(tx: Tx, u: UserState, r: Record, gone: list[int], leaves: list[Record]) -> int:
    """Evict an item (and the tree nodes it leaves childless; spliced nodes go too). Returns the
    greatest depth of a tree node that left or moved up (-1: none). The ids whose vectors leave
    the index are appended to ``gone``, the leaves whose turn views leave to ``leaves`` (the
    caller removes both)."""
    st = tx.st
    deepest = -1
    stack = [r]
    while stack:
        x = stack.pop()
        if x.status != "active":
            continue
        if x.layer == "episodic" and x.parent_id is not None and x.parent_id != NO_TREE:
            deepest = max(deepest, int(x.depth))
        st.withdraw(u, x, gone)
        if x.kind == "segment":
            leaves.append(x)
        if x.decay_mark is not None:
            st.settle(x)  # (an evicted item decays no more)
            tx.changed(x, "strength", "decay_mark")
        x.status = "evicted"
        tx.changed(x, "status")
        if x.kind == "fact":
            lst = u.current.get((norm_key(x.subject or ""), x.predicate or ""), [])
            if x.id in lst:
                lst.remove(x.id)
            u.stale = None
        if x.layer == "episodic" and x.parent_id is not None and x.parent_id != NO_TREE:
            sib = u.children.get(x.parent_id, [])
            if x.id in sib:
                sib.remove(x.id)
            if not sib and x.parent_id != ROOT:
                u.children.pop(x.parent_id, None)
                stack.append(st.recs[x.parent_id])  # an internal node with no children goes too
            elif len(sib) == 1 and x.parent_id != ROOT:
                deepest = max(deepest, _splice(tx, u, st.recs[x.parent_id], gone))
    return deepest


def _splice(tx: Tx, u: UserState, node: Record, gone: list[int]) -> int:
    """An internal node left with one child is replaced by that child (which moves up a level
    with its subtree), so that evictions do not leave chains of one-child summaries behind:
    without this, internal nodes outlive their leaves and the tree grows without bound.
    Returns the greatest depth of a node that left or moved (before it moved)."""
    st = tx.st
    deepest = int(node.depth)
    (child,) = u.children.pop(node.id)
    parent = node.parent_id
    assert parent is not None
    sib = u.children.get(parent, [])
    if node.id in sib:
        sib[sib.index(node.id)] = child
        sib.sort(key=lambda i: st.recs[i].seq)
    c = st.recs[child]
    c.parent_id = parent
    tx.changed(c, "parent_id")
    stack = [c]
    while stack:
        y = stack.pop()
        deepest = max(deepest, int(y.depth))
        y.depth = max(0, int(y.depth) - 1)
        tx.changed(y, "depth")
        stack.extend(st.recs[k] for k in u.children.get(y.id, []))
    st.withdraw(u, node, gone)
    if node.decay_mark is not None:
        st.settle(node)
        tx.changed(node, "strength", "decay_mark")
    node.status = "evicted"
    tx.changed(node, "status")
    return deepest


class CoverageProjection:
    """Π_C by coverage (``MemoryConfig.eviction == "coverage"``; the rule is in the module docstring).

    ``items``: the pooled records of one user, sorted by id, episodic pool (leaves and session
    summaries) first, then the semantic pool (current facts and notes). ``run`` returns the
    indices of ``items`` to evict so that each pool fits its capacity; it assumes they are
    evicted (the user's neighbour lists then forget the turns nothing covers any more).

    The nearest neighbours of the T covered raw turns come from the user's
    :class:`~lamina.memory.state.coverage.TurnNeighbours` (``UserState.coverage``), kept up to date as
    turns become covered (:func:`observe_covered`, from the add path) and brought exactly to the
    covered set here (new turns listed against the others: one new × T block); it is built from
    scratch (one native T × T top-k) only when the user has none (a state loaded from the
    store). ``k_turn``: entries per list (default ``max_segment_turns + 1 + 16``); another value
    uses a private structure built here.

    Cost: building the incidence is O(items + sources); syncing the lists O(T) plus the new
    turns' block; then O(log₂ excess) rounds, each O(n + sources) vector arithmetic with one
    ``kernels.evict_to_capacity`` call, where ν is re-read (O(K) each) only for turns whose
    nearest neighbour lost its coverage — and re-listed (one row × T) only for a turn whose listed
    neighbours all left.
    """

    def __init__(
        self,
        st: MemoryState,
        u: UserState,
        items: list[Record],
        n_episodic: int,
        now: float,
        *,
        k_turn: int | None = None,
    ) -> None:
        c = st.config
        self.c = c
        self.items = items
        n = len(items)
        self.n = n
        self.pool = np.zeros(n, dtype=np.uint64)
        self.pool[n_episodic:] = 1
        raws, aggs = item_turns(st, u, items)
        # Raw (rendered) turns: one column each, numbered in order of first appearance.
        self.raw_i, flat = _flatten(raws)
        raw_ids, self.raw_t, uniq, rank = _first_seen(flat)
        self.n_raw = len(raw_ids)
        # Aggregates' source turns: a raw turn's column, or a further column (which nothing renders).
        self.agg_i, aflat = _flatten(aggs)
        self.agg_t = np.empty(len(aflat), dtype=np.int64)
        pos = np.minimum(np.searchsorted(uniq, aflat), max(len(uniq) - 1, 0))
        found = uniq[pos] == aflat if len(uniq) else np.zeros(len(aflat), dtype=bool)
        self.agg_t[found] = rank[pos[found]]
        extra, inv = np.unique(aflat[~found], return_inverse=True)
        self.agg_t[~found] = self.n_raw + inv.reshape(-1)
        self.n_col = self.n_raw + len(extra)
        self.col_ids = np.concatenate([raw_ids, extra.astype(np.int64)])  # the turn id of each column
        # what the scores read of each item, in one pass over the records (each pass over some
        # thousands of scattered records costs about a millisecond)
        got: list[tuple[str, int, float, float | None, int]] = list(map(_SCORED_FIELDS, items))
        kinds_t, visits_t, strength_t, last_t, ids_t = tuple(zip(*got)) or ((), (), (), (), ())
        kinds = np.fromiter(map(_KIND_CODE.get, kinds_t, repeat(0)), dtype=np.int8, count=n)
        is_seg, is_fact = kinds == _KIND_CODE["segment"], kinds == _KIND_CODE["fact"]
        self.is_agg = ~(is_seg | is_fact)
        self.agg_n = np.bincount(self.agg_i, minlength=n).astype(np.float64)
        # Turns that go together (one leaf) never count as each other's redundancy: a turn's group
        # is the leaf that renders it (``u.seg_of``: a turn is a member of one active leaf, and
        # every active leaf is pooled), else the turn alone (-1 - its id).
        self.group = -1 - raw_ids
        of_leaf = is_seg[self.raw_i]
        self.group[self.raw_t[of_leaf]] = np.array(ids_t, dtype=np.int64)[self.raw_i[of_leaf]]
        # the aggregates' vectors (row agg_row[i] of A for aggregate i)
        agg_idx = np.flatnonzero(self.is_agg)
        self.agg_row = np.full(n, -1, dtype=np.int64)
        self.agg_row[agg_idx] = np.arange(len(agg_idx), dtype=np.int64)
        self.A = st.vecs([items[i].id for i in agg_idx.tolist()]) if len(agg_idx) else None
        k = neighbour_k(c)
        self.k_turn = k if k_turn is None else int(k_turn)
        nb = u.coverage if self.k_turn == k else None
        if nb is None or nb.k != self.k_turn or nb.dim != st.dim:
            nb = TurnNeighbours(st.dim, self.k_turn)
            if self.k_turn == k:
                u.coverage = nb
        self.nb = nb
        # the list (column) of each raw turn; the listed turns' stamps are read only when a vector
        # of one of them was replaced since they were last read (UserState.vec_epoch)
        kept = nb is u.coverage and nb.epoch == u.vec_epoch
        self.cols = nb.sync(st.vectors, raw_ids, listed_current=kept)
        if nb is u.coverage:
            nb.epoch = u.vec_epoch
        self.gcol = np.full(nb.n, -1, dtype=np.int64)  # each column's group (leaf)
        self.gcol[self.cols] = self.group
        self.best = np.full(self.n_raw, -np.inf, dtype=np.float32)  # nearest covered turn of another leaf
        self.where = np.full(self.n_raw, -1, dtype=np.int64)  # (its column; -1: none)
        self.asked = False
        visits = np.array(visits_t, dtype=np.float32)
        strength = np.array(strength_t, dtype=np.float64)
        restated = np.where(is_fact, np.maximum(0.0, strength - 1.0), 0.0)
        self.use = 1.0 + float(c.heat_a) * visits.astype(np.float64) + restated
        last = np.array([now if x is None else x for x in last_t], dtype=np.float64)
        zeros = np.zeros(n, dtype=np.float32)
        self.recency = np.asarray(
            kernels.heat_scores(zeros, zeros, last, float(now), a=0.0, b=0.0, c=1.0, mu=float(c.heat_mu)),
            dtype=np.float64,
        )

    def _turn_novelty(self, covered: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """ν_t = 1 − max(0, cos to the nearest covered raw turn of another leaf); 1 with none.

        Coverage only shrinks from round to round, so a turn's nearest neighbour stays its
        nearest while it is covered: only turns whose neighbour lost its coverage are asked again."""
        cov = covered[: self.n_raw]
        on = np.zeros(self.nb.n, dtype=bool)
        on[self.cols[cov]] = True
        if not self.asked:
            ask = np.flatnonzero(cov)
            self.asked = True
        else:
            ask = np.flatnonzero(cov & (self.where >= 0) & ~on[np.maximum(self.where, 0)])
        if len(ask):
            self.best[ask], self.where[ask] = self.nb.nearest(self.cols[ask], on, self.gcol)
        nu = np.ones(self.n_col, dtype=np.float64)
        best = np.where(cov, self.best, -np.inf)
        nu[: self.n_raw] = np.where(np.isfinite(best), 1.0 - np.clip(best, 0.0, 1.0), 1.0)
        return nu

    def turn_novelty(self) -> dict[int, float]:
        """ν of every covered raw turn (by turn id) while every item is active."""
        nu = self._turn_novelty(np.ones(self.n_col, dtype=bool))
        ids = self.nb.ids[self.cols].tolist()
        return dict(zip(ids, nu[: self.n_raw].tolist()))

    def _agg_novelty(self, active: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
        """ν_i of an aggregate: 1 − max(0, cos to the nearest active aggregate of its pool)."""
        nu = np.ones(self.n, dtype=np.float64)
        if self.A is None:
            return nu
        for p in (0, 1):
            idx = np.flatnonzero(self.is_agg & active & (self.pool == p)).astype(np.int64)
            if len(idx) < 2:
                continue
            Y = np.ascontiguousarray(self.A[self.agg_row[idx]])
            S, I = topk(Y, Y, 2, "ip")
            S = np.asarray(S, dtype=np.float64)
            I = np.asarray(I, dtype=np.int64)
            other = np.where(I[:, 0] == np.arange(len(idx)), S[:, 1], S[:, 0])
            nu[idx] = 1.0 - np.clip(other, 0.0, 1.0)
        return nu

    def scores(self, active: npt.NDArray[np.bool_]) -> npt.NDArray[np.float32]:
        """Retention score per item: V_i · use_i + ε · recency_i (see the module docstring)."""
        on = active[self.raw_i]
        cover = np.bincount(self.raw_t[on], minlength=self.n_col)
        nu = self._turn_novelty(cover > 0)
        share = np.zeros(len(self.raw_t), dtype=np.float64)
        share[on] = nu[self.raw_t[on]] / cover[self.raw_t[on]]
        value = np.bincount(self.raw_i, weights=share, minlength=self.n)
        if self.A is not None:
            lost = np.bincount(self.agg_i, weights=(cover[self.agg_t] == 0).astype(np.float64), minlength=self.n)
            frac = np.where(self.agg_n > 0, lost / np.maximum(self.agg_n, 1.0), 1.0)
            value = np.where(self.is_agg, frac * self._agg_novelty(active), value)
        score = value * self.use + float(self.c.eviction_tiebreak) * self.recency
        return np.ascontiguousarray(score, dtype=np.float32)

    def run(self) -> npt.NDArray[np.int64]:
        active = np.ones(self.n, dtype=bool)
        while True:
            caps: dict[int, int] = {}
            cnts = [int(np.count_nonzero(active & (self.pool == p))) for p in (0, 1)]
            bound = pool_capacities(self.c, cnts[0], cnts[1])
            for p in (0, 1):
                cnt = cnts[p]
                excess = cnt - bound[p]
                if excess > 0:  # halve the excess per round: redundancy is re-measured in between
                    caps[p] = cnt - (excess + 1) // 2
            if not caps:
                break
            out = np.asarray(
                kernels.evict_to_capacity(self.scores(active), self.pool, caps, live=active.view(np.uint8))
            ).reshape(-1)
            active[out] = False
        # The turns nothing covers any more leave the lists for good (their items are evicted).
        on = active[self.raw_i]
        still = np.zeros(self.n_raw, dtype=bool)
        still[self.raw_t[on]] = True
        keep = np.zeros(self.nb.n, dtype=bool)
        keep[self.cols[still]] = True
        self.nb.kill(np.flatnonzero(~keep).astype(np.int64))
        return np.flatnonzero(~active).astype(np.int64)
