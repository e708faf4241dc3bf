"""The ranking of many queries' candidates at once (:func:`rank_many`): the replay clock and
domain gate, the episodic turns with their folded facts, the stale penalty, the floor, the
speaker scope and the layer relevances, as numpy steps over the candidates of every query of a
batch. The same results as :func:`lamina.memory.read.candidates.rank` one query at a time: the same
float operations on each candidate in the same order, the same lists in the same order; what
depends only on a record (its stale weight, whether a fact folds into its turn) is asked once
per batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...text.timeref import date_intent
from ..state.memstate import MemoryState, UserState
from ..state.records import GENERAL_KINDS, Record, TokenCount, norm_key, text_key
from ..state.staleness import Staleness
from .candidates import Candidates, Found, Lookup, Scored, scope
from .fill import item_tokens, length_factor
from .fusion import FusedMany, segment_ranks, sort_within

__all__ = ["rank_many", "Ranked", "Pools"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_NONE = np.empty(0, dtype=np.int64)


def rank_many(
    st: MemoryState,
    users: Sequence[UserState],
    queries: Sequence[str],
    layers: Sequence[str],
    found: Sequence[Found],
    m: int,
    now: float | None,
    domains: Sequence[str | None],
    lookup: Lookup,
    turns: FusedMany,
) -> Ranked:
    """:func:`lamina.memory.read.candidates.rank` of many queries (:meth:`Ranked.candidates`).

    Parameters
    ----------
    users, queries, found, domains, turns : per query: its user, its text, its search results
        (:func:`lamina.memory.read.candidates.search` at depth ``m`` with ``views``), its domain gate
        and its fused turns (``turns``: :func:`lamina.memory.read.candidates.fused_turns_many`)
    layers : the layers ranked (the same for every query)
    now : the replay clock
    lookup : holds the records of ``found``
    """
    c = st.config
    B, nL = len(found), len(layers)
    epi = layers.index("episodic") if "episodic" in layers else -1
    sem = layers.index("semantic") if "semantic" in layers else -1
    rl: list[Record] = lookup.recs.tolist()
    kind = [r.kind for r in rl]

    # -- the layers' own hits, per query and layer in the order rank reads them, visible ones --
    k_epi = min(m, c.candidates)
    gates: dict[str | None, int] = {}
    gate_of = np.zeros(B, dtype=np.int64)
    has_views = np.zeros(B, dtype=bool)
    parts: list[tuple[int, int, npt.NDArray[np.floating], I64]] = []
    for i, raw in enumerate(found):
        gate_of[i] = gates.setdefault(domains[i], len(gates))
        has_views[i] = raw.views is not None and raw.lexical is not None
        for j, L in enumerate(layers):
            hit = raw.layers.get(L)
            if hit is not None:
                parts.append((i, j, hit[0][:k_epi], hit[1][:k_epi]) if j == epi else (i, j, hit[0], hit[1]))
            if j == epi and raw.leaves is not None:
                parts.append((i, j, raw.leaves[0], raw.leaves[1]))
    sizes = np.fromiter((len(p[3]) for p in parts), dtype=np.int64, count=len(parts))
    q_of = np.repeat(np.fromiter((p[0] for p in parts), dtype=np.int64, count=len(parts)), sizes)
    l_of = np.repeat(np.fromiter((p[1] for p in parts), dtype=np.int64, count=len(parts)), sizes)
    score = np.concatenate([np.empty(0), *(p[2] for p in parts)]).astype(np.float64)
    pos = lookup.pos(np.concatenate([_NONE, *(p[3] for p in parts)]))
    if now is not None or any(d is not None for d in gates):
        ok = np.stack([lookup.visible(now, d) for d in gates])[gate_of[q_of], pos]
        q_of, l_of, score, pos = q_of[ok], l_of[ok], score[ok], pos[ok]

    # -- current facts fold into their turns (the queries whose users' episodes have turns) --
    fold_to = np.full(len(rl), -1, dtype=np.int64)  # a fact's turn id, -1: stands on its own
    in_sem = (l_of == sem) & has_views[q_of] if epi >= 0 and sem >= 0 else np.zeros(len(pos), dtype=bool)
    for p in np.unique(pos[in_sem]).tolist():
        f = rl[p]
        if kind[p] == "fact" and f.sources:
            u = st.users[f.user_id]
            t = u.by_src.get(f.sources[-1])
            if t is not None and t in u.seg_of and f.id not in u.staleness(st.recs).resolved:
                fold_to[p] = t
    folded = in_sem & (fold_to[pos] >= 0)
    fact_of: list[dict[int, int]] = [{} for _ in range(B)]  # turn id -> its best-scored fact's position
    for i, t, p in zip(q_of[folded].tolist(), fold_to[pos[folded]].tolist(), pos[folded].tolist()):
        fact_of[i].setdefault(t, p)
    drop = folded | ((l_of == epi) & np.array([k == "segment" for k in kind], dtype=bool)[pos])
    # the turns found through their episodes, a table of (query, record) keys q·N + position:
    # the episodic layer's own turns, and each query's fused turns but those shown as their fact
    N = max(len(rl), 1)
    own = _NONE
    if epi >= 0:
        turn_rows = (l_of == epi) & ~drop & np.array([k == "turn" for k in kind], dtype=bool)[pos]
        own = q_of[turn_rows] * N + pos[turn_rows]
    q_of, l_of, score, pos = q_of[~drop], l_of[~drop], score[~drop], pos[~drop]

    # -- the fused turns after the episodic layer's rows (a turn with a current fact shows as it)
    tq, ts, tp, every, every_q = _NONE, np.empty(0), _NONE, _NONE, _NONE
    swapped: list[int] = []  # turns shown as their fact (query, turn id), flattened
    if epi >= 0:
        tq, ts, tp, every, every_q = turns.q, turns.scores, turns.at, turns.every, turns.every_q
        for i in np.unique(tq).tolist() if any(fact_of) else ():
            if fact_of[i]:
                swap = fact_of[i]
                k = turns.kept(i)
                if tp is turns.at:
                    tp = tp.copy()
                tp[k] = [swap.get(t, a) for t, a in zip(turns.ids[k].tolist(), tp[k].tolist())]
                for t in swap:
                    swapped += (i, t)
    via = np.zeros(B * N, dtype=bool)
    via[every_q * N + lookup.pos(every)] = True
    if swapped:
        sw = np.array(swapped, dtype=np.int64).reshape(-1, 2)
        at_sw = lookup.find(sw[:, 1])
        sw_ok = at_sw >= 0
        via[sw[sw_ok, 0] * N + at_sw[sw_ok]] = False
    via[own] = True
    q_of = np.concatenate([q_of, tq])
    l_of = np.concatenate([l_of, np.full(len(tq), epi, dtype=np.int64)])
    score = np.concatenate([score, ts])
    pos = np.concatenate([pos, tp])
    group = q_of * nL + l_of
    # (a layer's own rows, then the fused turns; numpy's stable sort of 16-bit keys is a radix sort)
    order = np.argsort(group.astype(np.int16) if B * nL <= np.iinfo(np.int16).max else group, kind="stable")
    q_of, l_of, score, pos, group = q_of[order], l_of[order], score[order], pos[order], group[order]

    # -- the stale penalty (a share w of a score's magnitude), the floor --
    stp, sp, floor = c.stale_penalty, c.speaker_scope, c.min_similarity
    weight = np.zeros(len(rl))
    for p in np.unique(pos).tolist():
        r = rl[p]
        if kind[p] == "fact":
            continue
        stale = st.users[r.user_id].staleness(st.recs)
        if not stale:
            continue
        e = stale.cache.get(r.id)
        weight[p] = (
            e[2]
            if e is not None and e[0] is r.text and e[1] is r.sources
            else stale.weight(r.id, r.text, r.sources, text_key(r))
        )
    w = weight[pos]
    # (a query for a time asks when something happened: a superseded fact's turns are its history)
    stp_q = np.array([0.0 if date_intent(q) else stp for q in queries])
    adj = np.where(w != 0, score - np.abs(score) * (stp_q[q_of] * w), score)
    _lift_current(st, rl, kind, q_of, pos, score, adj, stp_q)
    kept = ~(adj < floor)

    # -- the speaker scope: items of someone else than the one person the query names --
    scopes: dict[tuple[str, str], int] = {}
    scope_of = np.full(B, -1, dtype=np.int64)
    if sp > 0:
        for i, (u, query) in enumerate(zip(users, queries)):
            who_scope = scope(u, query)
            if who_scope is not None:
                scope_of[i] = scopes.setdefault((who_scope, u.people[who_scope][0]), len(scopes))
    demote = np.zeros(len(pos), dtype=bool)
    if scopes:
        whos: dict[str, int] = {}
        who_of = np.full(len(rl), -1, dtype=np.int64)
        for p in np.unique(pos).tolist():
            r, k = rl[p], kind[p]
            who = r.speaker if k == "turn" else (r.subject if k in ("fact", "profile") else None)
            if who is not None:
                who_of[p] = whos.setdefault(who, len(whos))
        names = list(whos)
        other = np.zeros((len(scopes), max(len(whos), 1)), dtype=bool)
        for (key, name), sc in scopes.items():
            other[sc, : len(names)] = [x != name and norm_key(x) != key for x in names]
        sc_e, wh_e = scope_of[q_of], who_of[pos]
        demote = kept & (sc_e >= 0) & (wh_e >= 0)
        demote[demote] = other[sc_e[demote], wh_e[demote]]
    lowered = adj - np.abs(adj) * sp

    # -- r_i: the mean of a layer's best ``relevance_top`` specific scores (else its best) --
    general = np.array([k in GENERAL_KINDS for k in kind], dtype=bool)[pos]
    present, g_first = np.unique(group, return_index=True)
    has_spec = np.zeros(B * nL, dtype=bool)
    has_spec[group[~general]] = True
    counted = general != has_spec[group]  # (spec entries where the layer has some, else all)
    cg = group[counted]
    by_score = sort_within(cg, -score[counted], np.zeros(len(cg), dtype=np.int64), B * nL)  # (by layer, best first)
    cg, cs = cg[by_score], score[counted][by_score]
    rank_in = segment_ranks(np.unique(cg, return_inverse=True)[1], len(present))
    take = rank_in < c.relevance_top
    cg, cs, rank_in = cg[take], cs[take], rank_in[take]
    acc = np.zeros(B * nL)
    cnt = np.zeros(B * nL, dtype=np.int64)
    for j in range(c.relevance_top):  # the mean, summed in order as rank sums it
        at_j = rank_in == j
        acc[cg[at_j]] += cs[at_j]
        cnt[cg[at_j]] += 1
    rel_of = (acc[present] / cnt[present]).tolist()

    # -- the candidates of each query, built when asked --
    kept_q = q_of[kept]
    n_kept = np.bincount(group[kept], minlength=B * nL)
    end = np.cumsum(n_kept)
    relevance: list[dict[str, float]] = [{} for _ in range(B)]
    for g, r_i in zip(present.tolist(), rel_of):
        i, j = divmod(g, nL)
        relevance[i][layers[j]] = r_i
    d_at = np.searchsorted(q_of[demote], np.arange(B + 1))
    shown_lower = np.zeros(B * N, dtype=bool)  # (query, record) demoted in some layer
    shown_lower[q_of[demote] * N + pos[demote]] = True
    return Ranked(
        layers,
        relevance,
        np.bincount(kept_q, minlength=B).tolist(),
        (end - n_kept).tolist(),
        end.tolist(),
        (lookup.ids[pos[demote]].tolist(), lowered[demote].tolist(), d_at.tolist()),
        _Flat(kept_q, l_of[kept], adj[kept], pos[kept], general[kept], shown_lower, via, lookup),
    )


def _lift_current(
    st: MemoryState,
    rl: list[Record],
    kind: list[str],
    q_of: I64,
    pos: I64,
    score: F64,
    adj: F64,
    stp_q: F64,
) -> None:
    """The current-value lift (in place on ``adj``), as :func:`~lamina.memory.read.candidates.rank`
    applies it: a current fact that superseded a fact of a stale candidate's sources scores at
    least that candidate's unpenalised score, in the queries with a stale penalty."""
    rows: dict[int, list[tuple[float, tuple[str, ...]]]] = {}
    stale_of: dict[str, Staleness] = {}
    for j in np.flatnonzero(stp_q[q_of] > 0).tolist():
        p = int(pos[j])
        if kind[p] == "fact":
            continue
        r = rl[p]
        stale = stale_of.get(r.user_id)
        if stale is None:
            stale = stale_of[r.user_id] = st.users[r.user_id].staleness(st.recs)
        if stale.heirs and any(src in stale.heirs for src in r.sources):
            rows.setdefault(int(q_of[j]), []).append((float(score[j]), r.sources))
    if not rows:
        return
    lifts = {i: stale_of[rl[int(pos[np.flatnonzero(q_of == i)[0]])].user_id].lifts(v) for i, v in rows.items()}
    for j in np.flatnonzero(np.isin(q_of, list(lifts))).tolist():
        p = int(pos[j])
        if kind[p] == "fact":
            x = lifts[int(q_of[j])].get(rl[p].id)
            if x is not None and x > adj[j]:
                adj[j] = x


@dataclass(slots=True)
class _Flat:
    """The candidates of all the queries of a batch as flat arrays, in :class:`Ranked`'s order
    (by query, layer, then as each layer's list): what :meth:`Ranked.pools` orders."""

    q: I64  # each candidate's query
    layer: I64  # its layer (index in Ranked's layers)
    score: F64  # its adjusted score
    pos: I64  # its record's position in the lookup
    general: npt.NDArray[np.bool_]  # whether its record is an aggregate
    demoted: npt.NDArray[np.bool_]  # (query, record) keys q·N + position the speaker scope lowers
    via: npt.NDArray[np.bool_]  # (query, record) keys of the turns found through their episodes
    lookup: Lookup


@dataclass(slots=True)
class Pools:
    """The fill order of every query of a batch (:meth:`Ranked.pools`), flat: query ``i``'s
    candidates are ``recs[starts[i]:ends[i]]``, working memory's first (up to
    ``working_ends[i]``, in the order the fill walks them), then its pool in fill order (as
    :func:`lamina.memory.read.fill.fill` orders them). ``scores``: each one's adjusted score;
    ``sizes``: its :func:`lamina.memory.read.fill.item_tokens`; ``keys``: its
    :func:`~lamina.memory.state.records.text_key` (turns; None for the others); ``least``: the fewest
    tokens of the query's candidates from it on; ``via``: whether it is a turn found through its
    episode (the arguments of :func:`lamina.memory.read.fill.take`)."""

    recs: list[Record]
    scores: list[float]
    sizes: list[TokenCount]
    keys: list[str | None]
    least: list[int]
    via: list[bool]
    starts: list[int]
    working_ends: list[int]
    ends: list[int]


class Ranked:
    """The candidates of a batch's queries (:func:`rank_many`): every query's layer relevances,
    and its candidates when asked (:meth:`candidates`, built one query at a time: a batch then
    holds one query's lists at once, not all).

    Not thread-safe: the batch that built it reads it under the memory's lock.
    """

    __slots__ = ("_layers", "relevance", "_n_kept", "_scores", "_recs", "_starts", "_ends", "_demoted", "_flat")

    def __init__(
        self,
        layers: Sequence[str],
        relevance: list[dict[str, float]],
        n_kept: list[int],
        starts: list[int],
        ends: list[int],
        demoted: tuple[list[int], list[float], list[int]],
        flat: _Flat,
    ) -> None:
        self._layers = list(layers)
        #: per query: layer -> r_i, for the layers with a candidate (above the floor or not)
        self.relevance = relevance
        self._n_kept = n_kept
        self._scores: list[float] | None = None  # (the candidates' scores and records as lists,
        self._recs: list[Record] | None = None  # made when candidates() is first asked)
        self._starts, self._ends = starts, ends
        self._demoted = demoted
        self._flat = flat

    def __len__(self) -> int:
        return len(self.relevance)

    def empty(self, i: int) -> bool:
        """Whether query ``i`` has no candidate above the floor (:func:`~lamina.memory.read.candidates.rank`
        returns None then)."""
        return self._n_kept[i] == 0

    def candidates(self, i: int) -> Candidates | None:
        """Query ``i``'s candidates, as :func:`~lamina.memory.read.candidates.rank` returns them."""
        if self.empty(i):
            return None
        cd = Candidates()
        nL = len(self._layers)
        f = self._flat
        if self._scores is None or self._recs is None:
            self._scores, self._recs = f.score.tolist(), f.lookup.recs[f.pos].tolist()
        scores, recs = self._scores, self._recs
        for L in self.relevance[i]:
            g = i * nL + self._layers.index(L)
            a, b = self._starts[g], self._ends[g]
            cd.per_layer[L] = list(zip(scores[a:b], recs[a:b]))
        cd.relevance = dict(self.relevance[i])
        cd.demoted = self.demoted(i)
        N = max(len(f.lookup.ids), 1)
        cd.via = set(f.lookup.ids[np.flatnonzero(f.via[i * N : (i + 1) * N])].tolist())
        work: Scored | None = cd.per_layer.get("working")
        if work:  # the fill walks working memory in this order; the rest it ranks itself
            shown = cd.demoted
            work.sort(key=lambda x: (-x[0], x[1].id in shown, x[1].seq))  # ties: the named person first
        return cd

    def demoted(self, i: int) -> dict[int, float]:
        """Query ``i``'s demotions: record id -> its score lowered by the speaker scope."""
        ids, values, at = self._demoted
        a, b = at[i], at[i + 1]
        return dict(zip(ids[a:b], values[a:b])) if b > a else {}

    def pools(self, st: MemoryState, gates: Mapping[int, tuple[Mapping[str, float], float]]) -> Pools:
        """The fill order of the gated queries' candidates, all sorted at once: for query ``i``
        with ``gates[i] = (γ per layer, β)``, working memory's candidates best first (ties: not
        demoted, then the older), then every candidate by (aggregate last, gate-weighted score
        s·(γ_L/γ_max)^(1/β) times its :func:`~lamina.memory.read.fill.length_factor` where
        positive best first, not demoted first, older first, list position) — the
        order :func:`lamina.memory.read.fill.fill` builds for that query alone, with the same float
        operations. Queries without gates get no candidates."""
        f = self._flat
        layers, nL, B = self._layers, len(self._layers), len(self)
        N = max(len(f.lookup.ids), 1)
        prior = np.ones(B * nL)
        live = np.zeros(B, dtype=bool)
        for i, (g, beta) in gates.items():
            live[i] = True
            g_max = max(g.values())
            for L, x in g.items():
                prior[i * nL + layers.index(L)] = (x / g_max) ** (1.0 / beta) if beta > 0 and x > 0 else 1.0
        e = np.flatnonzero(live[f.q])  # the pool: every candidate of a gated query
        w = e[f.layer[e] == layers.index("working")] if "working" in layers else _NONE
        floor = st.config.fill_floor
        if floor > 0 and len(e):  # the fill floor: a share of each query's best gate-weighted score
            gw = f.score[e] * prior[f.q[e] * nL + f.layer[e]]
            best = np.full(B, -np.inf)
            np.maximum.at(best, f.q[e], gw)
            bq = best[f.q[e]]
            e = e[~(bq > 0) | (gw >= floor * bq)]
        q = np.concatenate([f.q[w], f.q[e]])
        both = np.concatenate([w, e])
        sizes = np.empty(N, dtype=object)  # (asked once per record)
        keys = np.full(N, None, dtype=object)
        tokens = np.zeros(N, dtype=np.int64)
        factor = np.ones(N)  # the fill's value per token (length_factor), per record
        rl: list[Record] = f.lookup.recs.tolist()
        for p in np.unique(f.pos[both]).tolist():
            r = rl[p]
            sizes[p] = size = item_tokens(st, r)
            tokens[p] = size[0]
            factor[p] = length_factor(size[0], st.config)
            if r.kind == "turn":
                keys[p] = text_key(r)
        # sort keys: (query, section: working 0 / pool 1, aggregate), then the negated score (the
        # pool's gate-weighted, times its value per token where positive), then (demoted, seq),
        # then position (the pool's order of equal keys, as fill's list)
        group = q * 4 + np.concatenate([np.zeros(len(w), dtype=np.int64), 2 + f.general[e].astype(np.int64)])
        gw = f.score[e] * prior[f.q[e] * nL + f.layer[e]]
        gw = np.where(gw > 0, gw * factor[f.pos[e]], gw)
        neg = np.concatenate([-f.score[w], -gw])
        key = f.q[both] * N + f.pos[both]
        seq = self._seq(f.lookup)[f.pos[both]]
        tie = np.where(f.demoted[key], np.int64(1) << 62, np.int64(0)) + seq
        order = both[sort_within(group, neg, tie, 4 * B)] if len(both) else both
        at = f.pos[order]
        # the fewest tokens from each candidate on within its query: a running minimum from the
        # end, each query's tokens raised above those of the queries before it
        q_at = f.q[order]
        top = int(tokens.max()) + 1
        least = np.minimum.accumulate((tokens[at] + q_at * top)[::-1])[::-1] - q_at * top
        n_of = np.bincount(q, minlength=B)
        ends = np.cumsum(n_of)
        return Pools(
            f.lookup.recs[at].tolist(),
            f.score[order].tolist(),
            sizes[at].tolist(),
            keys[at].tolist(),
            least.tolist(),
            f.via[q_at * N + at].tolist(),
            (ends - n_of).tolist(),
            (ends - n_of + np.bincount(f.q[w], minlength=B)).tolist(),
            ends.tolist(),
        )

    @staticmethod
    def _seq(lookup: Lookup) -> I64:
        return np.fromiter((r.seq for r in lookup.recs.tolist()), dtype=np.int64, count=len(lookup.ids))
