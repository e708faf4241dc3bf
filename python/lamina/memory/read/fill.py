"""The read path's choice: the layer gate γ = softmax(β·r) with the entropy bound ε (eq. 7,
``kernels.softmax_gate``), the budget fill (working memory first, then every layer by
gate-weighted score, duplicates dropped, aggregates last), the token count of what an item adds
to the rendered context, and the order against lost-in-the-middle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import eq, itemgetter
from typing import Any

import numpy as np

from ...native import kernels
from ...text._memo import frozen
from ..config import MemoryConfig
from ..state.memstate import MemoryState
from ..state.records import (
    GENERAL_KINDS,
    HEADER_TOKENS,
    MIN_ITEM_TOKENS,
    Record,
    TokenCount,
    norm_key,
    text_key,
    turn_tokens,
)
from ..types import arrange

__all__ = [
    "gate",
    "gate_rows",
    "fill",
    "take",
    "length_factor",
    "working_tokens",
    "item_tokens",
    "lost_in_the_middle",
]

Scored = list[tuple[float, Record]]


def gate(relevance: Mapping[str, float], layers: Sequence[str], config: MemoryConfig) -> tuple[dict[str, float], float]:
    """γ per layer (over ``layers`` that have a relevance, in that order) and the β used
    (raised past ``config.beta`` until the gate's entropy is at most ``config.max_entropy``)."""
    return gate_rows([relevance], layers, config)[0]


def gate_rows(
    relevances: Sequence[Mapping[str, float]], layers: Sequence[str], config: MemoryConfig
) -> list[tuple[dict[str, float], float]]:
    """:func:`gate` of many queries: one ``kernels.softmax_gate`` call per set of layers with a
    relevance (its rows are independent: the same bits as one query a call)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for j, rel in enumerate(relevances):
        groups.setdefault(tuple(L for L in layers if L in rel), []).append(j)
    out: list[tuple[dict[str, float], float]] = [({}, 0.0)] * len(relevances)
    for names, rows in groups.items():
        r_arr = np.array([[relevances[j][L] for L in names] for j in rows], dtype=np.float32)
        gamma, beta_used = kernels.softmax_gate(r_arr, float(config.beta), max_entropy=config.max_entropy)
        g64 = np.asarray(gamma, dtype=np.float64).reshape(len(rows), len(names)).tolist()
        b64 = np.asarray(beta_used, dtype=np.float64).reshape(-1).tolist()
        for j, g, b in zip(rows, g64, b64):
            out[j] = (dict(zip(names, g)), b)
    return out


def fill(
    st: MemoryState,
    per_layer: dict[str, Scored],
    gates: dict[str, float],
    beta: float,
    budget: int,
    demoted: Mapping[int, float] | None = None,
    reasons: dict[int, str] | None = None,
) -> tuple[Scored, int]:
    """Fill the budget: working memory first (at most its γ share, bounded by
    ``working_share``), then every layer's candidates in one order of gate-weighted score
    s·(γ_L/γ_max)^(1/β) = s·exp(r_L − r_max) (the gate as a prior over layers, so the budget
    follows item scores rather than fixed shares), a long candidate's times its
    :func:`length_factor` (value per token: the fill order only, scores unchanged); aggregates
    (summaries, notes, profiles) only fill what the specific items (turns, facts) above the
    floor leave; with ``config.fill_floor`` > 0 the pool keeps only the candidates whose
    gate-weighted score (before the length factor) reaches that share of the best one (working
    memory's first fill is not floored). ``demoted``: items the
    speaker scope ranks lower — on equal scores they come after the others (so that of two
    identical statements the named person's is the one kept).

    ``reasons``: when given, filled with why a candidate was passed over (record id ->
    ``budget``, ``duplicate`` or ``taken``, the last when it was chosen from another layer);
    candidates never tried (the budget ran out first) get no entry.

    The order is built here and walked by :func:`take` (a batch orders the candidates of all its
    queries at once, :meth:`lamina.memory.read.ranking.Ranked.pools`, and walks each with
    :func:`take` too)."""
    demoted = demoted or {}
    work = per_layer.get("working", []) if "working" in gates else []
    g_max = max(gates.values())
    prior = {L: (g / g_max) ** (1.0 / beta) if beta > 0 and g > 0 else 1.0 for L, g in gates.items()}
    # Aggregates go last: their long texts score high against almost any question (cosine
    # favours long, general texts) while holding none of the raw turns the answer needs.
    # Ties: the named person's first (not demoted), then the older. (The key is a total order,
    # so the pool's input order does not matter.)
    weighted = [(s * prior[L], s, r) for L in gates for s, r in per_layer.get(L, ())]
    floor = st.config.fill_floor
    if floor > 0 and weighted:
        best = max(x[0] for x in weighted)  # the best gate-weighted score
        if best > 0:
            cut = floor * best
            weighted = [x for x in weighted if x[0] >= cut]
    cfg = st.config
    per_token = cfg.fill_item_tokens > 0 and cfg.fill_length_power > 0  # (value per token)
    pool: list[tuple[bool, float, bool, int, int, float, Record]] = []
    for g, s, r in weighted:
        if per_token and g > 0:
            g *= length_factor(item_tokens(st, r)[0], cfg)
        pool.append((r.kind in GENERAL_KINDS, -g, r.id in demoted, r.seq, len(pool), s, r))
    pool.sort()  # (the position: a record in two layers, e.g. working and archive, never compares records)
    scores = [s for s, _ in work]
    recs = [r for _, r in work]
    if pool:
        _, _, _, _, _, ps, pr = zip(*pool)
        scores += ps
        recs += pr
    at, used = take(
        st, recs, budget, n_working=len(work), working=working_tokens(gates, budget, st.config), reasons=reasons
    )
    return [(scores[j], recs[j]) for j in at], used


def length_factor(tokens: int, config: MemoryConfig) -> float:
    """What a candidate's gate-weighted score is multiplied by in the fill order:
    (``config.fill_item_tokens`` / ``tokens``) ** ``config.fill_length_power`` for an item longer
    than ``fill_item_tokens`` tokens, else 1 (and 1 when either setting is 0). A 512-token
    answer at the defaults (128, 0.5) enters the fill at half its score: it spends the budget of
    several short items, so it goes first only when it is that much more relevant."""
    cap, power = config.fill_item_tokens, config.fill_length_power
    if cap <= 0 or power <= 0 or tokens <= cap:
        return 1.0
    return float((cap / tokens) ** power)


def working_tokens(gates: Mapping[str, float], budget: int, config: MemoryConfig) -> int:
    """The tokens working memory may fill first: its γ share (at most ``working_share``) of the
    budget, all of it when it is the only layer gated, 0 when it is not gated."""
    if "working" not in gates:
        return 0
    return int(min(gates["working"], config.working_share) * budget if len(gates) > 1 else budget)


def take(
    st: MemoryState,
    recs: Sequence[Record],
    budget: int,
    *,
    n_working: int = 0,
    working: int = 0,
    sizes: Sequence[TokenCount] | None = None,
    keys: Sequence[str | None] | None = None,
    least: Sequence[int] | None = None,
    reasons: dict[int, str] | None = None,
) -> tuple[list[int], int]:
    """The budget fill's walk (:func:`fill`): the first ``n_working`` candidates are working
    memory's, taken in order while the ``working`` tokens last; then the rest, the pool of every
    gated layer in fill order, until the budget is full. A candidate is passed over when it does
    not fit, was taken already (from another layer), or repeats what is in: a fact already
    stated or whose source turn is in, an item all of whose sources are in, a turn repeating the
    words of one taken. An item showing raw turns pays the ``[date time]`` header of its group
    when it opens the group.

    Parameters
    ----------
    recs : the candidates, working memory's first (a record may be twice: working and pool)
    budget : tokens
    n_working, working : working memory's candidates at the front of ``recs`` and their tokens
    sizes : :func:`item_tokens` of each candidate, when known (else read from the records)
    keys : :func:`~lamina.memory.state.records.text_key` of each candidate that is a turn (None for
        the others), when known (else read from the records)
    least : for each position of the pool, the fewest tokens of a candidate from there on (the
        walk ends when fewer are left: nothing after fits), when known; only with ``reasons``
        None (the candidates never tried get no reason)
    reasons : as :func:`fill` takes it

    Returns
    -------
    the positions in ``recs`` of the candidates taken, in the order taken, and the tokens used
    """
    chosen: list[int] = []
    taken: set[int] = set()
    covered: set[str] = set()
    fact_keys: set[tuple[str, str, str]] = set()
    seen_text: set[str] = set()  # a turn repeating the words of one already taken adds nothing
    groups: set[tuple[str | None, str]] = set()  # (session, day) groups already opened
    used = 0
    work_left = working  # working memory's tokens left
    for j in range(len(recs)):
        r = recs[j]
        size = None if sizes is None else sizes[j]
        if j < n_working:
            if work_left <= 0:
                continue  # (its share spent: working memory's other candidates are skipped)
            limit = min(work_left, budget - used)
        else:
            limit = budget - used
            if limit < MIN_ITEM_TOKENS or (least is not None and limit < least[j]):
                break  # no item is shorter than this (or than any left)
            # (once the budget is nearly full most turns fail on size: test that first, from
            # the sizes given or the record's cache, as turn_tokens would)
            if r.kind == "turn":
                if size is None:
                    nt = r.nt
                    if nt is not None:
                        key = nt[0]
                        if key[0] == r.text and key[1] == r.timestamp and key[2] == r.session_id:
                            size = nt[1]
                if size is not None and size[0] + (HEADER_TOKENS if size[1] not in groups else 0) > limit:
                    if reasons is not None and r.id not in taken:
                        reasons.setdefault(r.id, "budget")
                    continue
        n, gk = item_tokens(st, r) if size is None else size
        if gk is not None and gk not in groups:
            n += HEADER_TOKENS  # this item opens a new [date time] group
        kind, sources = r.kind, r.sources
        why = None  # why it is passed over
        tk = None
        if r.id in taken:
            why = "taken"
        elif n > limit:
            why = "budget"
        elif kind == "fact":
            fk = (norm_key(r.subject or ""), r.predicate or "", norm_key(r.object or ""))
            if fk in fact_keys or (sources and sources[-1] in covered):  # (the turn it renders verbatim)
                why = "duplicate"
        elif sources and covered.issuperset(sources):  # the raw text of all its sources is in
            why = "duplicate"
        if why is None and kind == "turn":
            tk = text_key(r) if keys is None else keys[j]
            if tk in seen_text:
                why = "duplicate"
        if why is not None:
            if reasons is not None:
                reasons.setdefault(r.id, why)  # (explain only: the first reason)
            continue
        if gk is not None:
            groups.add(gk)
        taken.add(r.id)
        if tk is not None:
            seen_text.add(tk)
        if kind == "turn" or kind == "segment":
            covered.update(sources)
        elif kind == "fact":
            if sources:
                covered.add(sources[-1])  # a fact renders its latest source turn
            fact_keys.add(fk)
        chosen.append(j)
        used += n
        if j < n_working:
            work_left -= n
    return chosen, used


def item_tokens(st: MemoryState, r: Record) -> TokenCount:
    """Whitespace tokens the item adds to :meth:`lamina.Context.render`, and its group key: for
    items showing raw turns, the ``Speaker: text`` lines only (a group's ``[date time]`` header
    is paid once per group, by the fill); for the others their whole rendering, and None.
    Cached on the record; the key covers what can change."""
    if r.kind == "turn":  # (a turn renders its speaker, immutable, and these)
        return turn_tokens(r)
    src = None  # a fact renders its latest source turn
    if r.kind == "fact" and r.sources:
        u = st.users.get(r.user_id)
        src = st.recs.get(u.by_src.get(r.sources[-1], -1)) if u is not None else None
    key: tuple[Any, ...] = (
        r.text,
        r.valid_to,
        r.superseded_by,
        len(r.members or ()),
        r.sources[-1] if r.sources else None,
        r.timestamp,
        r.session_id,
        r.valid_from,
        r.commitment,
        (src.text, src.timestamp, src.speaker) if src is not None else None,
    )
    hit = r.nt
    if hit is not None and hit[0] == key:
        return hit[1]
    it = st.item(r)
    lines = it.turn_lines()
    if lines is None:
        val: TokenCount = (len(it.render().split()), None)
    else:
        val = (sum(len(ln.split()) for _, ln in lines), it.group_key())
    r.nt = frozen((key, val))
    return val


def lost_in_the_middle(chosen: Scored) -> Scored:
    """Best first, second best last, the rest alternating inwards (weakest in the middle):
    :func:`lamina.memory.types.arrange` of the items ranked by score, ties the older first."""
    ranked = sorted(chosen, key=itemgetter(0), reverse=True)  # (stable: equal scores keep their order)
    scores = [s for s, _ in ranked]
    if any(map(eq, scores, scores[1:])):  # equal scores: the older first
        ranked = sorted(chosen, key=lambda x: (-x[0], x[1].seq))
    return arrange(ranked, order="lost-in-the-middle")
