"""The read path for many queries at once: :meth:`lamina.Memory.context_batch` and
:meth:`lamina.Memory.search_batch` (and the one-query :meth:`~lamina.Memory.context` and
:meth:`~lamina.Memory.search`, which are batches of one).

A batch of (query, user) pairs is answered in stages, each over every pair: the caller embeds
the queries in one call; :func:`lamina.memory.read.candidates.search` runs the native candidate
searches of all pairs together (each arena's namespaces of many pairs in one call, the same bits
as one pair at a time); the episodic fusion of all pairs in numpy steps
(:func:`lamina.memory.read.candidates.fused_turns_many`); the ranking, for :data:`RANK_MANY` pairs or more
in numpy steps over all of them (:func:`lamina.memory.read.ranking.rank_many`), else pair by pair
(:func:`lamina.memory.read.candidates.rank`), and the firewall; the gates of all pairs in one
``softmax_gate`` call per set of layers (:func:`lamina.memory.read.fill.gate_rows`); the fill order
of all ranked pairs sorted at once (:meth:`lamina.memory.read.ranking.Ranked.pools`); last, in the
pairs' order, the budget fill (:func:`lamina.memory.read.fill.take`), the items and the visits they
count (:func:`bump`). The cyclic collector is paused while a batch of more than one pair runs.

Equal to the pairs one at a time: what a context reads (candidates, scores, gates, fill) does
not depend on the visits earlier contexts counted — those feed heat, which only the write path
reads — so the stages may run across pairs; only the items' ``access_count`` and
``last_access`` show earlier visits, and the items of each pair are built after the visits of
the pairs before it and before its own, as in a loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import InvalidInput
from ...text.domains import DomainClassifier
from ..config import ACTIVE_LAYERS
from ..inputs import MAX_BUDGET, TimeLike, check_count, check_id, check_text, to_time, wall_clock
from ..metadata import BUILTIN_FIELDS, Filter, unknown_keys
from ..reports import ContextExplanation
from ..state.gcquiet import collector_paused
from ..state.memstate import MemoryState, UserState
from ..state.records import Record
from ..types import Context, FirewallReport, MemoryItem
from . import candidates as retrieve
from . import fill, ranking
from .candidates import Candidates
from .explain import explanation
from .firewall import Firewall, empty_report, screen

__all__ = ["pairs", "options", "query_domains", "contexts", "searches", "bump", "allowed", "check_keys", "RANK_MANY"]

#: From this many queries on, a batch ranks its candidates in numpy steps over all queries
#: (:func:`lamina.memory.read.ranking.rank_many`); fewer are ranked one by one, as one query alone
#: is (the same results: the numpy steps cost more than they save for a few queries).
RANK_MANY = 4

Vec = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


def pairs(queries: Sequence[str], user_ids: str | Sequence[str]) -> tuple[list[str], list[str]]:
    """The checked (query, user) pairs of a batch: ``user_ids`` one id for every query, or one
    per query. Raises TypeError for a non-sequence, a non-str query or id, ValueError
    (InvalidInput) for an empty query, mismatched lengths or a bad id, naming the entry."""
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise TypeError(f"queries must be a sequence of str, got {type(queries).__name__}")
    qs = list(queries)
    for i, query in enumerate(qs):
        check_text(query, f"queries[{i}]")
        if not query.strip():
            raise InvalidInput(f"queries[{i}] is empty")
    if isinstance(user_ids, str):
        uids = [check_id(user_ids, "user_ids")] * len(qs)
    elif not isinstance(user_ids, Sequence):
        raise TypeError(f"user_ids must be a str or a sequence of str, got {type(user_ids).__name__}")
    else:
        if len(user_ids) != len(qs):
            raise InvalidInput(
                f"user_ids has {len(user_ids)} entries but queries has {len(qs)}: pass one user_id "
                "for every query, or a single str"
            )
        uids = [check_id(u, f"user_ids[{i}]") for i, u in enumerate(user_ids)]
    return qs, uids


def options(
    budget: int, now: TimeLike, domain: str | None, firewall: Firewall | None
) -> tuple[int, float | None, str | None]:
    """The checked ``budget``, ``now`` (seconds) and ``domain`` of a context call."""
    budget = check_count(budget, "budget", " (tokens)", MAX_BUDGET)
    t_now = to_time(now, "now")
    if domain is not None and not isinstance(domain, str):
        raise TypeError("domain must be a str or None")
    if domain is not None:
        check_text(domain, "domain")
    if firewall is not None and not isinstance(firewall, Firewall):
        raise TypeError(f"firewall must be a lamina.Firewall or None, got {type(firewall).__name__}")
    return budget, t_now, domain


def query_domains(
    classifier: DomainClassifier, queries: Sequence[str], domain: str | None, firewall: Firewall | None
) -> list[str | None]:
    """Each query's domain: ``domain``, or the classifier's label for ``"auto"`` (and for None
    with a firewall)."""
    if domain == "auto" or (firewall is not None and domain is None):
        return [classifier.classify(q) for q in queries]
    return [domain] * len(queries)


def contexts(
    st: MemoryState,
    users: Sequence[UserState],
    queries: Sequence[str],
    Q: Vec,
    domains: Sequence[str | None],
    *,
    budget: int,
    t_now: float | None,
    include_archive: bool,
    firewall: Firewall | None,
    explain: bool = False,
    classifier: DomainClassifier | None = None,
    filters: Filter | None = None,
) -> list[tuple[Context, ContextExplanation | None]]:
    """The contexts of many queries (see the module docstring), with their explanations when
    ``explain`` (which then counts no visit). The caller holds the memory's lock.

    Parameters
    ----------
    st : the memory state
    users : each query's user state (an unknown user is refused before: NotFoundError)
    queries : the query texts
    Q : ndarray, shape (len(queries), dim), float32 — the query vectors
    domains : each query's domain (:func:`query_domains`)
    budget, t_now, include_archive, firewall : as :meth:`lamina.Memory.context` takes them
    classifier : the memory's domain classifier (the firewall reads which domains a constraint
        touches with it; None: the default lexicon)
    filters : only the items it admits are candidates (pushed into the searches:
        :func:`lamina.memory.read.candidates.search`'s ``allow``); None: every item

    Notes
    -----
    For more than one query the cyclic garbage collector is paused while the batch runs
    (:func:`lamina.memory.state.gcquiet.collector_paused`): a batch allocates many short-lived
    objects (lists, tuples, arrays per query), which would otherwise start young collections
    that walk the items already built for the batch's earlier queries.
    """
    with collector_paused() if len(queries) > 1 else nullcontext():
        c = st.config
        n = len(queries)
        layers = [L for L in ACTIVE_LAYERS if L in c.layers] + (["archive"] if include_archive else [])
        # enough candidates to fill the budget unless items average under 4 tokens (a turn
        # on its own renders as "[date time]" + "Speaker: word"); a shallower first search
        # with a deeper retry was measured slower (the retry ran for half the queries of
        # bench/bench_memory.py) and lost recall on LoCoMo (shallower fusion lists)
        m = max(c.candidates, -(-budget // 4))
        jobs: list[retrieve.Job] = [(u, layers, q) for u, q in zip(users, queries)]
        found = retrieve.search(st, jobs, Q, m, views=True, allow=_allow(st, jobs, filters))
        lookup = retrieve.Lookup(st, found)  # (the records found, asked once for the batch)
        # with a firewall the domain gate is its own
        search_domains = [d if firewall is None else None for d in domains]
        turns = retrieve.fused_turns_many(st, lookup, Q, found, list(queries), t_now, search_domains)
        cands: list[Candidates | None] = [None] * n
        reports: list[FirewallReport | None] = [None] * n
        relevance: dict[int, dict[str, float]] = {}  # query -> its layer relevances, when it has candidates
        lazy: ranking.Ranked | None = None  # (many queries: each one's candidates built when it is filled)
        if n >= RANK_MANY:
            lazy = ranking.rank_many(
                st, [j[0] for j in jobs], [j[2] for j in jobs], layers, found, m, t_now, search_domains, lookup, turns
            )
            if firewall is not None:  # (the firewall screens the candidates before the gate)
                cands = [lazy.candidates(i) for i in range(n)]
                lazy = None
            else:
                relevance = {i: lazy.relevance[i] for i in range(n) if not lazy.empty(i)}
        else:
            for i, ((u, _, query), raw, dom) in enumerate(zip(jobs, found, search_domains)):
                cands[i] = retrieve.rank(
                    st, u, Q[i], query, layers, raw, m, t_now, dom, u.staleness(st.recs), lookup, turns.one(i)
                )
        cd: Candidates | None
        if lazy is None:
            for i, u in enumerate(users):
                cd = cands[i]
                if cd is not None and firewall is not None:
                    reports[i] = screen(
                        st, u, cd, Q[i : i + 1].copy(), domains[i], firewall, query=queries[i], classifier=classifier
                    )
                if cd is not None:
                    relevance[i] = cd.relevance
        gated = [i for i in range(n) if relevance.get(i)]
        gates = dict(zip(gated, fill.gate_rows([relevance[i] for i in gated], layers, c)))
        out: list[tuple[Context, ContextExplanation | None]] = []
        made = _Items(st, remember=n > 1)
        # (many queries, nothing to explain: every query's fill order sorted at once)
        pools = None if lazy is None or explain else lazy.pools(st, {i: gates[i] for i in gated})
        for i in range(n):
            u, report, query = users[i], reports[i], queries[i]
            if i not in gates:
                ctx = Context(items=[], gates={}, beta=float(c.beta), abstain=True, query=query, budget=budget)
                if firewall is not None:
                    ctx.firewall = report if report is not None else empty_report(domains[i], firewall)
                out.append((ctx, None))
                continue
            g, b_used = gates[i]
            reasons: dict[int, str] | None = {} if explain else None
            cd = None
            if pools is not None:
                assert lazy is not None
                a, b = pools.starts[i], pools.ends[i]
                recs, scores = pools.recs, pools.scores
                at, used = fill.take(
                    st,
                    recs[a:b],
                    budget,
                    n_working=pools.working_ends[i] - a,
                    working=fill.working_tokens(g, budget, c),
                    sizes=pools.sizes[a:b],
                    keys=pools.keys[a:b],
                    least=pools.least[a:b],
                )
                chosen = [(scores[a + j], recs[a + j]) for j in at]
                demoted = lazy.demoted(i)
                via = {recs[a + j].id for j in at if pools.via[a + j]}  # (those shown: what is asked of it)
            else:
                cd = cands[i] if lazy is None else lazy.candidates(i)
                assert cd is not None
                chosen, used = fill.fill(st, cd.per_layer, g, b_used, budget, cd.demoted, reasons)
                demoted, via = cd.demoted, cd.via
            if demoted:
                chosen = [(demoted.get(r.id, s), r) for s, r in chosen]
            items: list[MemoryItem] = []
            if chosen:
                ordered = fill.lost_in_the_middle(chosen)
                items = [made.item(r, s, r.id in via) for s, r in ordered]
                if not explain:
                    bump(st, u, ordered, via, t_now if t_now is not None else wall_clock())
                if report is not None:
                    report = replace(report, verify=tuple(r.id for _, r in ordered if r.commitment == "verify"))
            ctx = Context(
                items=items, gates=g, beta=b_used, abstain=not chosen, query=query, budget=budget, firewall=report
            )
            ex = None
            if reasons is not None:
                assert cd is not None
                ex = explanation(st, ctx, layers, cd, chosen, reasons, used, c.max_entropy)
            out.append((ctx, ex))
        return out


def searches(
    st: MemoryState,
    users: Sequence[UserState],
    Q: Vec,
    names: Sequence[str],
    k: int,
    t_now: float | None,
    archive_only: bool,
    filters: Filter | None = None,
) -> list[list[MemoryItem]]:
    """The top-``k`` items of each query's user over the layers ``names`` (no gate, floor or
    visit), the native searches of all queries together; with ``filters`` among the items it
    admits only (pushed into the searches). The caller holds the memory's lock."""
    jobs: list[retrieve.Job] = [(u, names, "") for u in users]
    found = retrieve.search(st, jobs, Q, k, leaves=True, allow=_allow(st, jobs, filters))
    lookup = retrieve.Lookup(st, found)
    out: list[list[MemoryItem]] = [[] for _ in users]
    for i, raw in enumerate(found):
        hits: list[tuple[float, Record]] = []
        for lst in retrieve.layer_hits(st, raw, names, t_now, None, lookup=lookup).values():
            hits.extend(lst)
        if archive_only:
            hits = [(s, r) for s, r in hits if r.kind == "turn"]
        hits.sort(key=lambda x: (-x[0], x[1].seq))
        for s, r in hits[:k]:
            it = st.item(r, s)
            if archive_only:
                it.layer = "archive"
            out[i].append(it)
    return out


# ---------------------------------------------------------------------------- filters
# Which items of a user a filter admits (lamina.memory.metadata), for the searches (pushed into
# the native candidate search as an allow list) and listings: kept on the user's state with the
# user version (every committed write of the user moves it) and the place in the user's journal
# of touched records (UserState.touch) they were computed at. A read of an unchanged user costs a
# dictionary lookup; after a write, only the records touched since are matched again (the cost
# follows the change, not the user). The user's metadata keys likewise.
_KEYS = "keys"  # (the cache entry of the user's metadata keys)


def _since(u: UserState, hit: tuple[Any, ...] | None) -> list[int] | None:
    """The journal entries after a cache entry's place (None: it cannot be brought up to date:
    none, or the journal was emptied since)."""
    if hit is None or hit[2] != u.journal_gen or hit[3] > len(u.journal):
        return None
    return u.journal[hit[3] :]


def user_keys(st: MemoryState, u: UserState) -> frozenset[str]:
    """The metadata keys some item of ``u`` carries."""
    hit = u.filtered.get(_KEYS)
    if hit is not None and hit[0] == u.version:
        keys: frozenset[str] = hit[1]
        return keys
    recs = st.recs
    since = _since(u, hit)
    if since is not None and min(since, default=0) >= 0:  # (records added or changed, none removed)
        found = set(hit[1]) if hit is not None else set()
        ids: Iterable[int] = {i for i in since if i in u.ids}
    else:
        found, ids = set(), u.ids
    for i in ids:
        md = recs[i].metadata
        if md:
            found.update(k for k, _ in md)
    keys = frozenset(found)
    u.filtered[_KEYS] = (u.version, keys, u.journal_gen, len(u.journal))
    return keys


def check_keys(st: MemoryState, u: UserState, f: Filter) -> None:
    """Raise :class:`lamina.InvalidInput` when ``f`` names a metadata key no item of ``u`` carries."""
    bad = unknown_keys(f, user_keys(st, u))
    if bad:
        known = sorted(user_keys(st, u))
        raise InvalidInput(
            f"filters name unknown key {bad[0]!r}: no memory of user {u.user_id!r} has metadata "
            f"{bad[0]!r} (its keys: {known}; built-in fields: {', '.join(BUILTIN_FIELDS)})"
        )


def allowed(st: MemoryState, u: UserState, f: Filter) -> I64:
    """The ids of ``u``'s items that ``f`` admits, sorted ascending, shape (n,), int64 (checked
    by :func:`check_keys` first)."""
    hit = u.filtered.get(f)
    if hit is not None and hit[0] == u.version:
        ids: I64 = hit[1]
        return ids
    check_keys(st, u, f)
    recs = st.recs
    match = f.matches
    meta = st.metadata_of
    since = _since(u, hit)
    if since is not None and hit is not None:  # the last answer, less the touched ids, plus those passing
        touched = sorted({-j - 1 if j < 0 else j for j in since})
        passing = np.array([i for i in touched if i in u.ids and match(recs[i], meta(recs[i]))], dtype=np.int64)
        ids = _merge_sorted(hit[1], np.array(touched, dtype=np.int64), passing)
    else:
        ids = np.array(sorted(i for i in u.ids if match(recs[i], meta(recs[i]))), dtype=np.int64)
    if len(u.filtered) > 64:  # (a bounded cache: many distinct filters of one user)
        u.filtered = {_KEYS: u.filtered[_KEYS]} if _KEYS in u.filtered else {}
    u.filtered[f] = (u.version, ids, u.journal_gen, len(u.journal))
    return ids


def _merge_sorted(old: I64, touched: I64, passing: I64) -> I64:
    """``old`` (sorted, unique) less ``touched`` plus ``passing`` (both sorted, ``passing`` a
    subset of ``touched``), sorted: binary searches and one copy (few touched ids, many old)."""
    pos = np.searchsorted(old, touched)
    hit = pos < len(old)
    hit[hit] = old[pos[hit]] == touched[hit]
    kept = np.delete(old, pos[hit])
    return np.insert(kept, np.searchsorted(kept, passing), passing)


def _allow(st: MemoryState, jobs: Sequence[retrieve.Job], filters: Filter | None) -> list[I64 | None] | None:
    """Per job, the ids ``filters`` admits of its user (:func:`allowed`)."""
    if filters is None:
        return None
    return [allowed(st, u, filters) for u, _, _ in jobs]


class _Items:
    """The items of a batch's contexts: a record's item is built once
    (:meth:`~lamina.memory.state.memstate.MemoryState.item`) and copied for each context that shows it,
    with that context's score and the visits counted so far (a batch changes nothing else of a
    record: its contexts only count visits)."""

    __slots__ = ("_st", "_made", "_remember")

    def __init__(self, st: MemoryState, remember: bool = True) -> None:
        self._st = st
        self._made: dict[int, dict[str, object]] = {}
        self._remember = remember  # (False: one context, which shows a record once)

    def item(self, r: Record, score: float, via: bool = False) -> MemoryItem:
        """``st.item(r, score)``; ``via``: the record is a turn found through its episode (an
        active archive turn then shows in the episodic layer, on its own)."""
        fields = self._made.get(r.id)
        if fields is None:
            it = self._st.item(r, score)
            if self._remember:
                self._made[r.id] = dict(vars(it))
        else:  # (a copy of the fields: a third of the cost of the dataclass' __init__)
            it = object.__new__(MemoryItem)
            vars(it).update(fields)
            it.score = score
            it.access_count = int(r.access_count)
            it.last_access = r.last_access
        if via and r.status == "active" and r.layer == "archive":
            it.layer = "episodic"
        return it


def bump(st: MemoryState, u: UserState, shown: list[tuple[float, Record]], via: set[int], t: float) -> None:
    """Visits: the items shown, and the episode of a turn shown for its episode (heat feeds
    promotion and eviction). Applied in memory now, written with the next write (or
    :meth:`lamina.Memory.flush` / :meth:`~lamina.Memory.close`): reads stay off the disk path."""
    heated: dict[int, Record] = {}
    for _, r in shown:
        heated[r.id] = r
        leaf = u.seg_of.get(r.id) if r.id in via else None
        if leaf is not None:
            heated[leaf] = st.recs[leaf]
    for r in heated.values():
        r.access_count += 1
        r.last_access = t
        st.pending[r.id] = r
