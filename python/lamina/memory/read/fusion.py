"""The episodic turns' ranking for many queries at once (:func:`fuse_many`): reciprocal-rank fusion of
the dense, lexical and time lists, the session prior and the cosine-scale scores, as numpy steps
over every query of a batch together (a context alone is a batch of one).

Each step keeps a query's entries apart from the others': every sort is stable with the query
as its first key, every sum adds a turn's terms in the one order a query alone adds them, the
session maximum is exact, and a turn's cosine is computed from that query's own rows as one
query alone computes it. So a query's result has the same bits in any batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...native.layer_index import LayerIndex
from ...native.search import inner_products
from ..config import MemoryConfig
from ..state.records import NsCode
from ..store.protocol import ID_SHIFT

__all__ = ["Turns", "Fused", "FusedMany", "fuse_many", "segment_ranks", "sort_within", "twins"]

Vec = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_SEQ_MASK = (1 << ID_SHIFT) - 1
_NO: I64 = np.empty(0, dtype=np.int64)
#: The span above the floor that the turns past a query's cosines above it are scored in
#: (:attr:`~lamina.memory.config.MemoryConfig.fill_past_floor`).
_PAST_FLOOR = 1e-6


@dataclass(slots=True)
class Turns:
    """One query's turn hits, the input of :func:`fuse_many`.

    Attributes
    ----------
    row : the query's row in the batch's query matrix
    gate : the row of :func:`fuse_many`'s ``visible`` that says which turns the query sees
    dense : ndarray, shape (nd,), int64 — the turns whose views matched best, best first
        (unique ids)
    lexical : ndarray, shape (nl,), int64 — the turns whose BM25 matched best, best first
        (unique ids)
    when : whether the query asks for a time (the time channel is then a third list)
    """

    row: int
    gate: int
    dense: npt.NDArray[np.int64]
    lexical: npt.NDArray[np.int64]
    when: bool


@dataclass(slots=True)
class Fused:
    """One query's fused turns (:func:`fuse_many`).

    Attributes
    ----------
    ids : ndarray, shape (n,), int64 — the turns in fused order, the best ``n`` only: those
        whose score reaches the floor, and at least the ``top`` first (with
        ``MemoryConfig.fill_past_floor``, every turn when the best reaches the floor)
    at : ndarray, shape (n,), int64 — their positions in the lookup's ids
    scores : ndarray, shape (n,), float64 — the i-th largest cosine of all the query's turns
        for the i-th turn (past those at or above the floor, with ``fill_past_floor``: just
        above the floor, decreasing)
    every : ndarray, shape (m,), int64 — every turn of the query (dense hits, then lexical
        ones not among them), m >= n
    """

    ids: npt.NDArray[np.int64]
    at: npt.NDArray[np.int64]
    scores: F64
    every: npt.NDArray[np.int64]


class FusedMany:
    """The fused turns of many queries (:func:`fuse_many`), flat: for each query its kept
    turns in fused order and all its turns, the queries' entries one after the other.

    Parameters
    ----------
    q : ndarray, shape (n,), int64 — each kept turn's query (non-decreasing)
    ids, at, scores : ndarray, shape (n,) — as :class:`Fused`'s, of every query in turn
    every_q : ndarray, shape (m,), int64 — each turn's query (non-decreasing)
    every : ndarray, shape (m,), int64 — as :class:`Fused`'s, of every query in turn
    n_kept, n_every : ndarray, shape (n_queries,), int64 — each query's kept turns and turns
    """

    __slots__ = ("q", "ids", "at", "scores", "every_q", "every", "_kept", "_every")

    def __init__(
        self, q: I64, ids: I64, at: I64, scores: F64, every_q: I64, every: I64, n_kept: I64, n_every: I64
    ) -> None:
        self.q, self.ids, self.at, self.scores = q, ids, at, scores
        self.every_q, self.every = every_q, every
        self._kept = [0, *np.cumsum(n_kept).tolist()]  # query i's kept turns: [i, i + 1)
        self._every = [0, *np.cumsum(n_every).tolist()]

    def __len__(self) -> int:
        return len(self._every) - 1

    def kept(self, i: int) -> slice:
        """Where query ``i``'s kept turns are in :attr:`q`, :attr:`ids`, :attr:`at`, :attr:`scores`."""
        return slice(self._kept[i], self._kept[i + 1])

    def one(self, i: int) -> Fused | None:
        """Query ``i``'s turns, None when it has none."""
        a, b = self._every[i], self._every[i + 1]
        if a == b:
            return None
        k = self.kept(i)
        return Fused(self.ids[k], self.at[k], self.scores[k], self.every[a:b])

    def remap(self, rows: I64, n_queries: int) -> FusedMany:
        """The same turns with query ``j`` renamed ``rows[j]`` (increasing), among ``n_queries``."""
        if len(rows) == n_queries:  # (rows = 0 .. n_queries - 1)
            return self
        n_kept = np.zeros(n_queries, dtype=np.int64)
        n_every = np.zeros(n_queries, dtype=np.int64)
        n_kept[rows] = np.diff(self._kept)
        n_every[rows] = np.diff(self._every)
        return FusedMany(rows[self.q], self.ids, self.at, self.scores, rows[self.every_q], self.every, n_kept, n_every)


def segment_ranks(keys: I64, n_segments: int) -> I64:
    """Each entry's rank within its segment, for entries grouped by segment.

    Parameters
    ----------
    keys : ndarray, shape (n,), int64 — each entry's segment (0 .. n_segments - 1),
        non-decreasing
    n_segments : int

    Returns
    -------
    ndarray, shape (n,), int64 — 0 for a segment's first entry, 1 for its second, ...
    """
    counts = np.bincount(keys, minlength=n_segments)
    first = np.cumsum(counts) - counts
    out: I64 = np.arange(len(keys), dtype=np.int64) - first[keys]
    return out


def _small(n: int) -> type[np.signedinteger]:
    """The narrowest integer type for values below ``n`` (numpy's stable sort of 16-bit
    integers is a radix sort)."""
    return np.int16 if n <= np.iinfo(np.int16).max else np.int32 if n <= np.iinfo(np.int32).max else np.int64


def sort_within(group: I64, neg: npt.NDArray[np.floating], tie: I64, n_groups: int) -> I64:
    """``np.lexsort((tie, neg, group))`` for entries grouped by ``group`` (non-decreasing): the
    order by group, then ``neg`` ascending (floats, -0.0 equal to 0.0), then ``tie``, then
    position. One float sort and one radix sort of the groups; exact ties of (group, neg)
    are ordered apart.

    Parameters
    ----------
    group : ndarray, shape (n,), int64 — values 0 .. n_groups - 1, non-decreasing
    neg : ndarray, shape (n,), float32 or float64, no NaN
    tie : ndarray, shape (n,), int64
    n_groups : int

    Returns
    -------
    ndarray, shape (n,), int64 — the permutation
    """
    o = np.argsort(neg)
    o = o[np.argsort(group[o].astype(_small(n_groups)), kind="stable")]
    g, v = group[o], neg[o]
    eq = (g[1:] == g[:-1]) & (v[1:] == v[:-1])
    if eq.any():  # runs of equal (group, neg): by tie, then position
        run = np.concatenate(([0], np.cumsum(~eq)))
        inside = np.zeros(len(o), dtype=bool)
        inside[1:] |= eq
        inside[:-1] |= eq
        idx = np.flatnonzero(inside)
        oi = o[idx]
        o[idx] = oi[np.lexsort((oi, tie[oi], run[idx]))]
    return o


def twins(a: I64, b: I64, space: int, table: bool | None = None) -> tuple[I64, I64]:
    """The entries of ``b`` whose key is in ``a`` too, and where in ``a``.

    Parameters
    ----------
    a, b : ndarray, shape (na,) and (nb,), int64 — keys in [0, space), unique within each array
    space : int
    table : find them with a table of ``space`` entries (True) or by sorting the keys (False);
        None: a table unless ``space`` is large against ``na + nb``

    Returns
    -------
    in_b : ndarray, int64 — the positions in ``b`` of the keys in both, ascending
    in_a : ndarray, int64 — the positions in ``a`` of the same keys
    """
    if table is None:
        table = space <= 8 * (len(a) + len(b)) + 65_536
    if table:
        slot = np.full(space, -1, dtype=np.int64)
        slot[a] = np.arange(len(a))
        at = slot[b]
        in_b = np.flatnonzero(at >= 0)
        return in_b, at[in_b]
    both = np.concatenate([a, b])
    by_key = np.argsort(both)  # (a key in both arrays sorts next to itself)
    same = both[by_key[1:]] == both[by_key[:-1]]
    x, y = by_key[1:][same], by_key[:-1][same]
    in_b, in_a = np.maximum(x, y) - len(a), np.minimum(x, y)
    o = np.argsort(in_b)
    return in_b[o], in_a[o]


def fuse_many(
    vectors: LayerIndex,
    config: MemoryConfig,
    ids: I64,
    locate: Callable[[I64], I64],
    when: npt.NDArray[np.bool_],
    sessions: I64,
    visible: npt.NDArray[np.bool_],
    Q: Vec,
    jobs: Sequence[Turns],
    floor: float,
    top: int,
    words: I64 | None = None,
) -> FusedMany:
    """The turns of many queries, ranked by reciprocal-rank fusion (``config.rrf_k``) of their
    dense (exact cosine; ties: older first), lexical (BM25 order) and, for a query with
    ``when``, time lists (the turns whose text says when, in cosine order), each list
    contributing 1 / (k + 1 + rank); plus the session prior μ (``config.session_prior``): a
    session is as relevant as its best turn and lends μ of that to each of its turns. Ties: older
    first. The i-th turn in fused order gets the i-th largest cosine of the query's turns.
    A turn longer than ``config.long_turn_words`` has its dense term divided by its length in
    those words (at most ``config.long_turn_damping``); the lexical term is weighted by
    ``config.lexical_weight``. With ``config.fill_past_floor``, a query whose best cosine reaches
    the floor keeps all its turns, those past its cosines above the floor scored in
    (floor, floor + 1e-6], decreasing in fused order.

    Parameters
    ----------
    vectors : the memory's vectors (the turns' float32 rows, archive layer)
    config : the memory's settings
    ids : ndarray, shape (N,), int64 — the records found (sorted, unique: the lookup's)
    locate : where ids are in ``ids`` (as ``np.searchsorted(ids, x)``; a lookup's is faster)
    when : ndarray, shape (N,), bool — whether each record's text says when (read at the
        turns of the jobs that ask for a time only)
    sessions : ndarray, shape (N,), int64 — a code of each record's session (>= 0; read at the
        turns only: equal codes there mean the same session, the values themselves are not read)
    visible : ndarray, shape (V, N), bool — which records a query sees (the replay clock and
        domain gate), one row per gate of the jobs
    Q : ndarray, shape (b, dim), float32 — the query vectors
    jobs : the queries' turn hits (every id among ``ids``; those a query does not see are dropped)
    floor : the scores kept reach it (a turn below it can only be dropped)
    top : at least this many first turns are kept (the layer relevance reads them)
    words : ndarray, shape (N,), int64 — each record's length in words (the long-turn damping
        reads it at the turns; None: no damping)

    Returns
    -------
    FusedMany
        the turns of every job (job ``j`` as query ``j``)
    """
    B = len(jobs)
    if not B:
        return FusedMany(_NO, _NO, _NO, np.empty(0), _NO, _NO, _NO, _NO)
    N = max(len(ids), 1)
    qs = np.arange(B, dtype=np.int64)
    gates = np.fromiter((j.gate for j in jobs), dtype=np.int64, count=B)

    def seen(lists: list[I64]) -> tuple[I64, I64]:  # (query, key) of the visible hits
        q = np.repeat(qs, np.fromiter(map(len, lists), dtype=np.int64, count=B))
        pos = locate(np.concatenate(lists))
        ok = visible[gates[q], pos]
        q = q[ok]
        return q, q * N + pos[ok]

    d_q, d_key = seen([j.dense for j in jobs])
    l_q, l_key = seen([j.lexical for j in jobs])
    # each query's turns: its dense hits, then its lexical hits that are not among them (a key is
    # at most once in each list)
    nd = len(d_key)
    twin_l, twin_d = twins(d_key, l_key, B * N)  # the lexical hits that are dense ones too
    lonly = np.ones(len(l_key), dtype=bool)
    lonly[twin_l] = False
    q_all = np.concatenate([d_q, l_q[lonly]])
    perm = np.argsort(q_all.astype(_small(B)), kind="stable")
    key = np.concatenate([d_key, l_key[lonly]])[perm]
    q_of = q_all[perm]
    is_dense = perm < nd
    # where each lexical hit sits: its own entry, or its key's dense one
    where = np.empty(len(perm), dtype=np.int64)
    where[perm] = np.arange(len(perm))
    src = np.empty(len(l_key), dtype=np.int64)
    src[lonly] = nd + np.arange(len(perm) - nd)
    src[twin_l] = twin_d
    lex_at = where[src]
    at = key - q_of * N
    tid = ids[at]
    n = np.bincount(q_of, minlength=B)
    end = np.cumsum(n)
    starts, ends = (end - n).tolist(), end.tolist()
    # The cosines: each query's rows gathered and scored as one query alone scores them (where
    # the rows are, found for all queries at once).
    cos = np.empty(len(key), dtype=np.float32)
    arena, slots = vectors.keyed_slots(NsCode.ARCHIVE, tid)
    for b, j in enumerate(jobs):
        s, e = starts[b], ends[b]
        if e > s:
            cos[s:e] = inner_products(Q[j.row : j.row + 1], np.ascontiguousarray(vectors.rows(arena, slots[s:e])))[0]
    seq = tid & _SEQ_MASK
    kk = float(config.rrf_k)
    # each query's turns by cosine, best first (ties: older first)
    by_cos = sort_within(q_of, -cos, seq, B)
    fused = np.zeros(len(key))
    # (the terms of a turn add up in the order dense, lexical, time, as np.bincount of one query)
    dense = by_cos[is_dense[by_cos]]
    fused[dense] += 1.0 / (kk + 1 + segment_ranks(q_of[dense], B))
    if config.long_turn_words and words is not None and len(dense):
        # a long turn's vector is the sum of many sentences (or a truncated text): its cosine is
        # a weaker witness of what the turn says (long, general texts score high against most
        # queries), so its dense term is divided by its length in long_turn_words (at most by
        # long_turn_damping); BM25 normalises length itself
        fused[dense] /= np.clip(words[at[dense]] / float(config.long_turn_words), 1.0, config.long_turn_damping)
    # (a configuration not yet set by an embedder, MemoryConfig.for_embedder: the weight 1)
    w_lex = 1.0 if config.lexical_weight is None else float(config.lexical_weight)
    fused[lex_at] += w_lex / (kk + 1 + segment_ranks(l_q, B))
    asks = np.fromiter((j.when for j in jobs), dtype=bool, count=B)
    if config.time_channel and asks.any():
        tl = by_cos[asks[q_of[by_cos]] & when[at[by_cos]]]
        fused[tl] += 1.0 / (kk + 1 + segment_ranks(q_of[tl], B))
    mu = config.session_prior
    if mu > 0 and len(key):
        sess = sessions[at]
        S = int(sess.max()) + 1
        group = q_of * S + sess
        if B * S > 4 * len(key) + 4096:  # (many sessions: number the groups that occur)
            _, group = np.unique(group, return_inverse=True)
        best = np.full(int(group.max()) + 1, -1.0)
        np.maximum.at(best, group, fused)
        fused = fused + mu * best[group]
    dist = cos[by_cos].astype(np.float64)
    rk = segment_ranks(q_of, B)  # (q_of[by_cos] is q_of: the sort is within each query)
    above = dist >= floor
    keep = above | (rk < top)
    if config.fill_past_floor and len(dist):
        # the depth is the searches' (set by the budget), not the count of cosines above the
        # floor: a query whose best turn reaches the floor keeps every turn its lexical search
        # found too, those past its cosines above the floor scored just above the floor,
        # decreasing in fused order
        first = rk == 0
        ok = np.zeros(B, dtype=bool)
        ok[q_of[first]] = above[first]
        # (only turns the lexical search found: a dense hit under the floor is a weak witness,
        # and taking those would fill a budget with whatever is least unrelated)
        lexical = np.zeros(len(key), dtype=bool)
        lexical[lex_at] = True
        low = ok[q_of] & ~above & lexical[by_cos]
        if low.any():
            n_above = np.bincount(q_of[above], minlength=B)[q_of]
            tail = (n[q_of] - n_above).astype(np.float64)
            dist[low] = floor + _PAST_FLOOR * (tail[low] - (rk[low] - n_above[low])) / tail[low]
            keep |= low
    n_kept = np.bincount(q_of[keep], minlength=B)
    kept = n_kept.tolist()
    # Each query's first kept turns in fused order: only the turns scored at least its k-th best
    # can be among them (k: how many it keeps), so only those are sorted (their order is the
    # order of all: the same keys, the same positions among them).
    neg = -fused
    bar = np.zeros(B)
    for b in range(B):
        s, e, k = starts[b], ends[b], kept[b]
        if k:
            bar[b] = np.partition(neg[s:e], k - 1)[k - 1]  # (-) the k-th best score
    near = np.flatnonzero(neg <= bar[q_of])
    order = near[sort_within(q_of[near], neg[near], seq[near], B)]
    if B == 1:
        o = order[: kept[0]]
    else:  # (each query's first kept ones)
        o = order[segment_ranks(q_of[order], B) < n_kept[q_of[order]]]
    return FusedMany(q_of[o], tid[o], at[o], dist[keep], q_of, tid, n_kept, n)
