"""The read path's candidates: per-layer top-k (native exact search, hnswlib past a size),
episodic turns by reciprocal-rank fusion of their cosine and BM25, facts folded into the turns
they came from, the stale penalty, the similarity floor, the attribution firewall (speaker
scope) and the layer relevance r_i that the gate reads (:mod:`lamina.memory.read.fill`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from ...text.timeref import date_intent, mentions_time
from ..state.memstate import MemoryState, UserState
from ..state.records import GENERAL_KINDS, TURN_KEY, NsCode, Record, norm_key, text_key, turn_tokens
from ..state.staleness import Staleness
from ..types import LAYERS
from .fusion import Fused, FusedMany, Turns, fuse_many

__all__ = [
    "Candidates",
    "Found",
    "Job",
    "search",
    "rank_layers",
    "rank",
    "fused_turns_many",
    "candidates",
    "layer_hits",
    "Lookup",
    "visible",
]

Vec = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
_NO_IDS: I64 = np.empty(0, dtype=np.int64)
Scored = list[tuple[float, Record]]


def scope(u: UserState, query: str) -> str | None:
    """The one person the query names among those this user's memory attributes items to
    (speakers of turns, subjects of facts); None when it names none or several."""
    named = [k for k, (_, pat) in u.people.items() if pat.search(query)]
    return named[0] if len(named) == 1 else None


@dataclass(slots=True)
class Candidates:
    """Per-layer candidates of one query, ready for the gate and the fill.

    Attributes
    ----------
    per_layer : layer -> (score, record) above the floor (working memory sorted best first)
    relevance : layer -> r_i, the mean of its best ``relevance_top`` specific scores
    demoted : record id -> its score lowered by the speaker scope (presentation only)
    via : ids of turns found through their episode
    """

    per_layer: dict[str, Scored] = field(default_factory=dict)
    relevance: dict[str, float] = field(default_factory=dict)
    demoted: dict[int, float] = field(default_factory=dict)
    via: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Found:
    """One query's raw search results (:func:`search`), before any filter.

    Attributes
    ----------
    layers : layer -> (cosines, float32; item ids, int64), best first, for the layers with
        active items
    leaves : the episodic leaves' (cosines, ids), when searched
    views : ids of the turns whose views matched best (dense channel, ``TURN_KEY`` cleared),
        when the turn views were searched
    lexical : ids of the turns whose BM25 matched best, when the turn views were searched
    """

    layers: dict[str, tuple[Vec, I64]] = field(default_factory=dict)
    leaves: tuple[Vec, I64] | None = None
    views: I64 | None = None
    lexical: I64 | None = None


class Lookup:
    """The records that searches found, by id, with what the read path asks of each record
    whatever the query: visible at a (clock, domain) (:func:`visible`), and of each turn (the
    episodic fusion's lists hold turns only) whether its text says when
    (:func:`lamina.text.timeref.mentions_time`), its session and its length. Built once for a
    batch of queries (a record found by many is asked once), read with numpy gathers.

    Parameters
    ----------
    st : the memory state
    found : the searches' results (:func:`search`)
    """

    __slots__ = ("ids", "recs", "_vis", "_when", "_sess", "_words", "_turn_at", "_table", "_lo")

    def __init__(self, st: MemoryState, found: Sequence[Found]) -> None:
        parts = [_NO_IDS]
        for f in found:
            parts += [ids for _, ids in f.layers.values()]
            parts += [x for x in (f.views, f.lexical, None if f.leaves is None else f.leaves[1]) if x is not None]
        found_ids = np.concatenate(parts)
        lo = int(found_ids.min()) if len(found_ids) else 0
        span = int(found_ids.max()) - lo + 1 if len(found_ids) else 0
        if 0 < span <= 8 * len(found_ids) + 65_536:  # (ids close together: marked in a table, not sorted)
            seen = np.zeros(span, dtype=bool)
            seen[found_ids - lo] = True
            ids: I64 = np.flatnonzero(seen) + lo
        else:
            ids = np.sort(found_ids)
            ids = ids[np.concatenate(([True], ids[1:] != ids[:-1]))] if len(ids) else ids
        self.ids: I64 = ids  #: sorted, unique
        n = len(self.ids)
        got = itemgetter(*self.ids.tolist())(st.recs) if n > 1 else [st.recs[i] for i in self.ids.tolist()]
        self.recs: npt.NDArray[np.object_] = np.fromiter(got, dtype=object, count=n)  #: the record of each id
        self._vis: dict[tuple[float | None, str | None], npt.NDArray[np.bool_]] = {}
        self._when: npt.NDArray[np.bool_] | None = None
        self._sess: I64 | None = None
        self._words: I64 | None = None
        self._turn_at: tuple[I64, list[Record]] | None = None
        # ids close together (one database's sequence numbers): positions by a table, a gather
        # (np.searchsorted of many unsorted ids costs some 40x more)
        self._table: I64 | None = None
        self._lo = int(self.ids[0]) if n else 0
        if n and int(self.ids[-1]) - self._lo < 8 * n + 65_536:
            self._table = np.zeros(int(self.ids[-1]) - self._lo + 1, dtype=np.int64)
            self._table[self.ids - self._lo] = np.arange(n)

    def pos(self, ids: I64) -> I64:
        """Where each id is in :attr:`ids` (every id must be there)."""
        if self._table is not None:
            out: I64 = self._table[ids - self._lo]
            return out
        return np.searchsorted(self.ids, ids)

    def find(self, ids: I64) -> I64:
        """Where each id is in :attr:`ids`, -1 for an id that is not there."""
        if not len(self.ids):
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        out: I64 = np.where(self.ids[at] == ids, at, -1)
        return out

    def visible(self, now: float | None, domain: str | None) -> npt.NDArray[np.bool_]:
        """:func:`visible` of each record, shape (len(ids),)."""
        key = (now, domain)
        v = self._vis.get(key)
        if v is None:
            if now is None and domain is None:  # (no clock, no gate: every record)
                v = np.ones(len(self.ids), dtype=bool)
            else:
                v = np.array([visible(r, now, domain) for r in self.recs.tolist()], dtype=bool)
            self._vis[key] = v
        return v

    def _turns(self) -> tuple[I64, list[Record]]:
        """The positions of the records that are turns, and those records (what the episodic
        fusion reads the columns below of: its lists hold turns only)."""
        if self._turn_at is None:
            recs = self.recs.tolist()
            at = [j for j, r in enumerate(recs) if r.kind == "turn"]
            self._turn_at = (np.array(at, dtype=np.int64), [recs[j] for j in at])
        return self._turn_at

    def _turn_column(self, values: list[int] | list[bool], dtype: type[np.generic]) -> npt.NDArray[Any]:
        """A column of the records with ``values`` at the turns' positions (:meth:`_turns`), 0 elsewhere."""
        out = np.zeros(len(self.ids), dtype=dtype)
        out[self._turns()[0]] = values
        return out

    def when(self) -> npt.NDArray[np.bool_]:
        """Whether each turn's text says when (:func:`lamina.text.timeref.mentions_time`;
        False for the records that are not turns)."""
        if self._when is None:
            self._when = self._turn_column([mentions_time(r.text, r.timestamp) for r in self._turns()[1]], np.bool_)
        return self._when

    def words(self) -> I64:
        """Each turn's length in words (its rendered ``Speaker: text`` line; 0 for the records
        that are not turns)."""
        if self._words is None:
            self._words = self._turn_column([turn_tokens(r)[0] for r in self._turns()[1]], np.int64)
        return self._words

    def sessions(self) -> I64:
        """A code of each turn's session (equal codes: the same session id, None included; 0 for
        the records that are not turns)."""
        if self._sess is None:
            codes: dict[str | None, int] = {}
            self._sess = self._turn_column(
                [codes.setdefault(r.session_id, len(codes)) for r in self._turns()[1]], np.int64
            )
        return self._sess

    def hits(self, scores: Vec, ids: I64, now: float | None, domain: str | None) -> Scored:
        """Search results as (score, record), filtered by :func:`visible` when a clock or domain is set."""
        at = self.pos(ids)
        if now is not None or domain is not None:
            keep = self.visible(now, domain)[at]
            scores, at = scores[keep], at[keep]
        return list(zip(scores.tolist(), self.recs[at].tolist()))


#: One query of :func:`search`: its user, the layers to search and its text (the lexical channel).
Job = tuple[UserState, Sequence[str], str]


def search(
    st: MemoryState,
    jobs: Sequence[Job],
    Q: Vec,
    k: int,
    *,
    leaves: bool = False,
    views: bool = False,
    allow: Sequence[I64 | None] | None = None,
) -> list[Found]:
    """The native searches of many queries at once: the top-``k`` of each job's layers
    (:meth:`~lamina.native.layer_index.LayerIndex.search_batch`, the same bits as one query at a time),
    with ``leaves`` its episodic leaves too, and with ``views`` (when the job searches the
    episodic layer) the turn views of its episodes, dense and lexical (one
    :meth:`~lamina.native.lexical.LexicalIndex.search_many` for all jobs).

    Parameters
    ----------
    jobs : one (user, layers, query text) per query
    Q : ndarray, shape (len(jobs), dim), float32 — the query vectors, one row per job
    allow : per job, the item ids its filter admits (sorted int64; None: no filter), optional
        Pushed into both channels: the dense searches scan with an allow-mask
        (:meth:`~lamina.native.layer_index.LayerIndex.search_allowed`) and the lexical search
        takes the ids as its allow list, so a filtered job gets up to ``k`` admitted items per
        layer whenever that many exist (no post-filter).
    """
    requests: list[list[int]] = []
    plans: list[tuple[list[str], bool, int | None]] = []
    made: dict[tuple[int, tuple[str, ...]], tuple[list[int], tuple[list[str], bool, int | None]]] = {}
    for u, layers, _ in jobs:
        mine = (id(u), tuple(layers))  # (a user's plan is the same for each of its queries)
        plan = made.get(mine)
        if plan is None:
            live = [L for L in layers if u.n_active.get(L, 0) > 0]
            nss = [u.ns(LAYERS[L]) for L in live]
            leaf = leaves and "episodic" in live
            if leaf:
                nss.append(u.ns(NsCode.LEAF))
            tv = None
            if views and "episodic" in layers:
                ns = u.ns(NsCode.TURN_VIEW)
                if st.vectors.count(ns):
                    tv = ns
                    nss.append(ns)
            plan = made[mine] = (nss, (live, leaf, tv))
        requests.append(plan[0])
        plans.append(plan[1])
    res = st.vectors.search_batch(Q, requests, k, allow=allow) if jobs else []
    out = [Found(dict(zip(live, r))) for (live, _, _), r in zip(plans, res)]
    lex: list[int] = []
    for j, (f, (live, leaf, tv), r) in enumerate(zip(out, plans, res)):
        if leaf:
            f.leaves = r[len(live)]
        if tv is not None:
            f.views = _whole_ties(*r[-1], k) & ~TURN_KEY
            f.lexical = _NO_IDS
            if st.config.lexical:
                lex.append(j)
    plain = [j for j in lex if allow is None or allow[j] is None]
    groups: list[tuple[list[int], I64 | None]] = [(plain, None)] if plain else []
    groups += [([j], allow[j]) for j in lex if allow is not None and allow[j] is not None]
    for js, ids in groups:
        scores, keys = st.lex.search_many([jobs[j][2] for j in js], [plans[j][2] or 0 for j in js], k, allow=ids)
        for j, sc, row in zip(js, scores, keys):
            ok = row >= 0
            out[j].lexical = _whole_ties(sc[ok], row[ok], k)
    return out


def _whole_ties(scores: npt.NDArray[np.floating], ids: I64, k: int) -> I64:
    """A top-``k`` list (best first) without its last tie class when the depth ``k`` cut it:
    which members of a class of equal scores (repeated texts) a search returns at its depth
    depends on where the rows are stored, so the turns past the floor would differ between two
    handles of one store (:attr:`~lamina.memory.config.MemoryConfig.fill_past_floor`). A list
    of one tie class is kept whole."""
    n = len(ids)
    if n < k or n == 0 or scores[0] == scores[n - 1]:
        return ids
    last = scores[n - 1]
    cut = n
    while scores[cut - 1] == last:
        cut -= 1
    return ids[:cut]


def rank_layers(
    st: MemoryState,
    u: UserState,
    q: Vec,
    query: str,
    layers: Sequence[str],
    m: int,
    t_now: float | None,
    domain: str | None,
    stale: Staleness,
) -> Candidates | None:
    """Candidates at depth ``m`` per layer with their adjusted scores; None when no layer has a
    candidate above the floor (:func:`search`, then :func:`rank`)."""
    found = search(st, [(u, layers, query)], q.reshape(1, -1), m, views=True)[0]
    return rank(st, u, q, query, layers, found, m, t_now, domain, stale)


def fused_turns_many(
    st: MemoryState,
    lookup: Lookup,
    Q: Vec,
    found: Sequence[Found],
    queries: Sequence[str],
    now: float | None,
    domains: Sequence[str | None],
) -> FusedMany:
    """The episodic turns of many queries' search results, fused and scored together
    (:func:`lamina.memory.read.fusion.fuse_many`; the same bits as one query at a time; a query
    without turn views or without a visible turn has none).

    Parameters
    ----------
    lookup : holds the records of ``found``
    Q : ndarray, shape (len(found), dim), float32 — the query vectors
    found : each query's search results (:func:`search` with ``views``)
    queries : the query texts (the time channel reads them)
    now, domains : the replay clock, and each query's domain gate
    """
    gates: dict[tuple[float | None, str | None], int] = {}
    jobs: list[Turns] = []
    which: list[int] = []
    for i, raw in enumerate(found):
        if raw.views is None or raw.lexical is None:
            continue
        g = gates.setdefault((now, domains[i]), len(gates))
        jobs.append(Turns(i, g, raw.views, raw.lexical, date_intent(queries[i])))
        which.append(i)
    if not jobs:
        none = np.zeros(len(found), dtype=np.int64)
        return FusedMany(_NO_IDS, _NO_IDS, _NO_IDS, np.empty(0), _NO_IDS, _NO_IDS, none, none)
    visible = np.stack([lookup.visible(t, d) for t, d in gates])
    c = st.config
    # (whether a record's text says when: asked only when a query asks for a time)
    when = lookup.when() if c.time_channel and any(j.when for j in jobs) else np.zeros(len(lookup.ids), dtype=bool)
    fused = fuse_many(
        st.vectors,
        c,
        lookup.ids,
        lookup.pos,
        when,
        lookup.sessions(),
        visible,
        Q,
        jobs,
        c.min_similarity,
        c.relevance_top,
        lookup.words() if c.long_turn_words else None,
    )
    return fused.remap(np.array(which, dtype=np.int64), len(found))


def rank(
    st: MemoryState,
    u: UserState,
    q: Vec,
    query: str,
    layers: Sequence[str],
    raw: Found,
    m: int,
    t_now: float | None,
    domain: str | None,
    stale: Staleness,
    lookup: Lookup | None = None,
    turns: Fused | None = None,
) -> Candidates | None:
    """:func:`rank_layers` of one query's search results (``raw``: :func:`search` at depth
    ``m`` with ``views``): the replay clock and domain gate, the episodic fusion, the stale
    penalty, the floor, the speaker scope and the layer relevances. ``lookup``: one that holds
    ``raw``'s records (a batch's) with ``turns``, the query's :func:`fused_turns_many` from it; by
    default both are computed here for ``raw``."""
    if lookup is None:
        lookup = Lookup(st, [raw])
        turns = fused_turns_many(st, lookup, q.reshape(1, -1), [raw], [query], t_now, [domain]).one(0)
    c = st.config
    out = Candidates()
    per_layer, rel, shown = out.per_layer, out.relevance, out.demoted
    who_scope = scope(u, query) if c.speaker_scope > 0 else None
    scope_name = u.people[who_scope][0] if who_scope is not None else None
    other: dict[str, bool] = {}  # speaker / subject -> is someone else than the named person
    # The episodic layer's own rows searched here are its summaries (aggregates: they only
    # fill what specific items leave), so c.candidates of them are enough (its leaves are
    # found through their turns instead); the other layers get m.
    found = layer_hits(st, raw, layers, t_now, domain, k_of={"episodic": min(m, c.candidates)}, lookup=lookup)
    if "episodic" in found:
        found["episodic"], folded, out.via = episodic_candidates(
            st, u, found["episodic"], raw, lookup, turns, found.get("semantic", ())
        )
        if folded:
            found["semantic"] = [(s, r) for s, r in found["semantic"] if r.id not in folded]
    # a query for a time asks when something happened: a superseded fact's turns are its history
    stp = 0.0 if date_intent(query) else c.stale_penalty
    # the current value of what a stale candidate said ranks at least as that candidate did
    lift = (
        stale.lifts([(s, r.sources) for L in layers for s, r in found[L] if r.kind != "fact"])
        if stp and stale.heirs
        else {}
    )
    for L in layers:
        cands = found[L]
        if not cands:
            continue
        adj: Scored = []
        spec: list[float] = []  # scores of the layer's specific items (turns, facts)
        floor, sp = c.min_similarity, c.speaker_scope
        # (hot loop: names resolved once.) A penalty w in [0, 1] lowers a cosine-scale score
        # by the share w of its magnitude: s - |s|·w (×(1 − w) for a positive score; a
        # negative one moves down too, never up).
        wcache = stale.cache if stale else None
        for s, r in cands:
            kind = r.kind
            if kind not in GENERAL_KINDS:
                spec.append(s)
            if wcache is not None and kind != "fact":
                e = wcache.get(r.id)
                if e is not None and e[0] is r.text and e[1] is r.sources:
                    w = e[2]
                else:
                    w = stale.weight(r.id, r.text, r.sources, text_key(r))
                if w:
                    s = s - abs(s) * (stp * w)  # the stale penalty
            elif lift and r.id in lift and lift[r.id] > s:
                s = lift[r.id]  # the current-value lift
            if s < floor:
                continue
            adj.append((s, r))
            if who_scope is not None:
                who = r.speaker if kind == "turn" else (r.subject if kind in ("fact", "profile") else None)
                if who is not None:
                    o = other.get(who)
                    if o is None:
                        o = other[who] = who != scope_name and norm_key(who) != who_scope
                    if o:
                        shown[r.id] = s - abs(s) * sp  # the speaker-scope penalty
        # r_i from the layer's best specific items; aggregates only when it has nothing else
        top = sorted(spec or [s for s, _ in cands], reverse=True)[: c.relevance_top]
        acc = 0.0
        for x in top:  # the mean, summed in order (as numpy does for so few values)
            acc += x
        rel[L] = acc / len(top)
        if L == "working":  # the fill walks working memory in this order; the rest it ranks itself
            adj.sort(key=lambda x: (-x[0], x[1].id in shown, x[1].seq))  # ties: the named person first
        per_layer[L] = adj
    names = [L for L in layers if L in rel]
    if not names or not any(per_layer[L] for L in names):
        return None
    return out


def candidates(
    st: MemoryState,
    u: UserState,
    q: Vec,
    layers: Sequence[str],
    k: int,
    now: float | None,
    domain: str | None,
    leaves: bool = True,
    k_of: Mapping[str, int] | None = None,
) -> dict[str, Scored]:
    """Top-k per layer: one native call per arena for the layers searched exactly (one query
    row per (user, layer) namespace), hnswlib for layers past ``ann_threshold``.

    The episodic layer's leaves are searched only with ``leaves`` (its list is then the
    top-k of leaves and of summaries each, for the caller to rank). ``k_of``: a smaller k
    for some layers (their top-k is the prefix of the top-``k``)."""
    found = search(st, [(u, layers, "")], q.reshape(1, -1), k, leaves=leaves)[0]
    return layer_hits(st, found, layers, now, domain, k_of)


def layer_hits(
    st: MemoryState,
    found: Found,
    layers: Sequence[str],
    now: float | None,
    domain: str | None,
    k_of: Mapping[str, int] | None = None,
    lookup: Lookup | None = None,
) -> dict[str, Scored]:
    """:func:`candidates` of one query's search results: (score, record) per layer, filtered
    by :func:`visible` (the episodic leaves appended to the episodic layer's list).
    ``lookup``: one that holds ``found``'s records (by default one is built)."""
    look = Lookup(st, [found]) if lookup is None else lookup
    res: dict[str, list[tuple[float, Record]]] = {L: [] for L in layers}
    for L, (scores, ids) in found.layers.items():
        if k_of and L in k_of:
            scores, ids = scores[: k_of[L]], ids[: k_of[L]]
        res[L] = look.hits(scores, ids, now, domain)
    if found.leaves is not None:
        res["episodic"] += look.hits(*found.leaves, now, domain)
    return res


def visible(r: Record, now: float | None, domain: str | None) -> bool:
    """Whether a candidate passes the replay clock (the future is not known yet) and the
    domain gate (items tagged with another domain are blocked)."""
    return not (
        (now is not None and r.timestamp is not None and r.timestamp > now)
        or (domain is not None and r.domain is not None and r.domain != domain)
    )


def episodic_candidates(
    st: MemoryState,
    u: UserState,
    found: Scored,
    raw: Found,
    lookup: Lookup,
    turns: Fused | None,
    facts: Sequence[tuple[float, Record]] = (),
) -> tuple[Scored, set[int], set[int]]:
    """Episodic candidates: the turns of active leaves, each scored on its own (a leaf is as
    relevant as its best turn, and only its matching turns are shown), plus the layer's
    summaries (tree nodes, session summaries). Leaves themselves are not candidates.

    Turns are ranked by reciprocal-rank fusion (RRF, ``rrf_k``) of the dense (cosine of the
    turn) and lexical (BM25 over speaker + text) rankings. Each keeps a score on the cosine
    scale: the i-th turn in fused order gets the i-th largest cosine of the candidates (the
    layer's score distribution is unchanged — gate, floor and abstention read it as before —
    while the order follows both channels).

    Current facts (``facts``, the semantic layer's candidates) whose source turn belongs to
    an active episode are folded into that turn: a fact is derived from its turn, which holds
    the statement verbatim, so it takes the turn's place and rank (and renders as the turn,
    see :meth:`lamina.MemoryItem.turn_lines`) when the turn is a candidate, and is dropped when the
    turn is not — rankings follow the primary evidence, not the cosine of a short derived
    sentence. Facts that superseded another (the current value of something that changed:
    current beats stale) and facts whose turn has left the episodic layer stand on their own.

    ``raw``: the query's search results; ``turns``: its turns, fused and scored
    (:func:`fused_turns_many`, whose records ``lookup`` holds; only the best of them: the others
    are under the floor).

    Returns the candidates (in no particular order: the caller ranks them), the ids of the
    folded facts (the caller drops those from the semantic layer's list) and the ids of the
    turns among the candidates.
    """
    out = [(s, r) for s, r in found if r.kind != "segment"]
    folded: set[int] = set()
    via = {r.id for _, r in out if r.kind == "turn"}
    if raw.views is not None and raw.lexical is not None:  # (the user's episodes have turns)
        fact_of: dict[int, Record] = {}  # source turn -> its best-scored current fact
        resolved = u.staleness(st.recs).resolved
        for _, f in facts:
            t = u.by_src.get(f.sources[-1]) if f.kind == "fact" and f.sources else None
            if t is None or t not in u.seg_of or f.id in resolved:
                # its turn is not an active episode's, or it is the current value of
                # something that changed (current beats stale): it stands on its own
                continue
            folded.add(f.id)
            fact_of.setdefault(t, f)
        if turns is not None:
            recs = lookup.recs[turns.at].tolist()
            rest = set(turns.every.tolist())
            if fact_of:  # a turn with a current fact shows as the fact
                for p, t in enumerate(turns.ids.tolist()):
                    fact = fact_of.get(t)
                    if fact is not None:
                        recs[p] = fact
                rest.difference_update(fact_of)
            out.extend(zip(turns.scores.tolist(), recs))
            via |= rest
    return out, folded, via
