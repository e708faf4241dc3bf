"""What the inspector's pages show, read from a :class:`~lamina.Memory` through its public calls
(``stats``, ``export_user``, ``search``, ``context``): typed view models, free of HTTP and HTML.
User ids here are the stored ones; the pages show the caller's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ...items import Context, MemoryItem
from ...memory import Memory
from ...memory.dump import ItemEntry, UserDump

__all__ = [
    "UserRow",
    "TreeNode",
    "FactChain",
    "UserView",
    "Candidate",
    "LayerCandidates",
    "Debug",
    "user_rows",
    "user_view",
    "debug_context",
    "ARCHIVE_PAGE",
]

#: Archive turns per page of the user page.
ARCHIVE_PAGE = 50
_SHOWN_LAYERS = ("working", "episodic", "semantic", "archive", "history")


@dataclass(frozen=True)
class UserRow:
    """One line of the users page.

    Attributes
    ----------
    user_id : the stored id
    items : every stored item (any layer or status)
    layers : active items per layer (``history``: superseded facts)
    archive_turns : raw turns ever added
    sessions : sessions of the user
    drift : the profile's accumulated drift (sum of ‖Δe‖²)
    """

    user_id: str
    items: int
    layers: dict[str, int]
    archive_turns: int
    sessions: int
    drift: float


@dataclass
class TreeNode:
    """An episodic item and the episodic items under it (the MemTree)."""

    item: ItemEntry
    children: list[TreeNode] = field(default_factory=list)


@dataclass(frozen=True)
class FactChain:
    """The facts on one subject + predicate, oldest first (superseded ones carry ``valid_to``)."""

    subject: str
    predicate: str
    facts: list[ItemEntry]


@dataclass(frozen=True)
class UserView:
    """The layers of one user side by side.

    Attributes
    ----------
    working : turns in working memory, oldest first (the FIFO's order)
    tree : roots of the episodic MemTree (summaries and segments), newest first
    chains : facts by subject + predicate with their supersession history
    notes : other semantic items (notes, profile), strongest first
    archive : one page of raw turns (newest first), filtered by ``query``
    archive_total : turns matching ``query``
    page, pages : this page (0-based) and how many there are
    query : the archive filter (substring, case-insensitive; empty: all)
    layers : active items per layer (``archive``: raw turns not deleted)
    last_activity : latest time of a turn or an access (None: nothing stored)
    items : every stored item
    heat : (bin start, turns in it, accesses of those turns) for the heat plot
    """

    working: list[ItemEntry]
    tree: list[TreeNode]
    chains: list[FactChain]
    notes: list[ItemEntry]
    archive: list[ItemEntry]
    archive_total: int
    page: int
    pages: int
    query: str
    layers: dict[str, int]
    last_activity: float | None
    items: int
    heat: list[tuple[float, int, int]]


def user_rows(mem: Memory, stored_ids: list[str]) -> list[UserRow]:
    """Counts of each user (``Memory.stats``); users deleted meanwhile are left out."""
    out = []
    for uid in stored_ids:
        try:
            s = mem.stats(user_id=uid)
        except KeyError:
            continue
        layers = {L: int(s.layers.get(L, 0)) for L in _SHOWN_LAYERS}
        out.append(UserRow(uid, s.items, layers, s.archive_turns, s.sessions, float(s.profile_drift.total)))
    return out


def _t(e: ItemEntry) -> float:
    return e.timestamp if e.timestamp is not None else (e.created_at or 0.0)


def _heat(turns: list[ItemEntry], bins: int = 40) -> list[tuple[float, int, int]]:
    ts = [e.timestamp for e in turns if e.timestamp is not None]
    if not ts:
        return []
    lo, hi = min(ts), max(ts)
    width = max((hi - lo) / bins, 86400.0)
    n = min(bins, int((hi - lo) // width) + 1)
    counts = [0] * n
    access = [0] * n
    for e in turns:
        if e.timestamp is None:
            continue
        i = min(n - 1, int((e.timestamp - lo) // width))
        counts[i] += 1
        access[i] += e.access_count
    return [(lo + i * width, counts[i], access[i]) for i in range(n)]


def user_view(ud: UserDump, *, page: int = 0, query: str = "") -> UserView:
    """The user page of one user's dump (``Memory.export_user``).

    Raises
    ------
    ValueError
        ``page`` < 0.
    """
    if page < 0:
        raise ValueError(f"page must be >= 0, got {page}")
    active = [e for e in ud.items if e.status == "active"]
    working = sorted((e for e in active if e.layer == "working"), key=lambda e: (_t(e), e.id))
    epi = {e.id: TreeNode(e) for e in active if e.layer == "episodic"}
    roots: list[TreeNode] = []
    for node in epi.values():
        parent = node.item.parent_id
        if parent is not None and parent in epi:
            epi[parent].children.append(node)
        else:
            roots.append(node)
    for node in epi.values():
        node.children.sort(key=lambda n: (_t(n.item), n.item.id))
    roots.sort(key=lambda n: (-_t(n.item), -n.item.id))
    by_key: dict[tuple[str, str], list[ItemEntry]] = {}
    notes = []
    for e in active:
        if e.kind == "fact" and e.layer in ("semantic", "history"):
            by_key.setdefault((e.subject or "", e.predicate or ""), []).append(e)
        elif e.layer == "semantic":
            notes.append(e)
    chains = [
        FactChain(s, p, sorted(fs, key=lambda e: (e.valid_from if e.valid_from is not None else -math.inf, e.id)))
        for (s, p), fs in sorted(by_key.items())
    ]
    notes.sort(key=lambda e: (-e.strength, e.id))
    turns = [e for e in ud.items if e.kind == "turn" and e.status != "deleted"]
    q = query.strip().casefold()
    matching = [e for e in turns if q in e.text.casefold()] if q else list(turns)
    matching.sort(key=lambda e: (-_t(e), -e.id))
    pages = max(1, -(-len(matching) // ARCHIVE_PAGE))
    page = min(page, pages - 1)
    layers = {L: 0 for L in _SHOWN_LAYERS}
    for e in active:
        if e.layer in layers:
            layers[e.layer] += 1
    layers["archive"] = len(turns)
    times = [t for e in ud.items for t in (e.timestamp, e.last_access) if t is not None]
    return UserView(
        working=working,
        tree=roots,
        chains=chains,
        notes=notes,
        archive=matching[page * ARCHIVE_PAGE : (page + 1) * ARCHIVE_PAGE],
        archive_total=len(matching),
        page=page,
        pages=pages,
        query=query,
        layers=layers,
        last_activity=max(times) if times else None,
        items=len(ud.items),
        heat=_heat(turns),
    )


@dataclass(frozen=True)
class Candidate:
    """A candidate of one layer for the query: its cosine similarity and what became of it.

    ``why`` is ``chosen`` (in the context), ``below floor`` (under ``min_similarity``: never
    enters), ``duplicate`` (its sources are covered by the chosen items) or ``budget`` (outscored
    once the layer's share and the rest of the budget were filled); all but ``chosen`` are read
    off the result, not reported by the fill.
    """

    item: MemoryItem
    score: float
    chosen: bool
    why: str


@dataclass(frozen=True)
class LayerCandidates:
    """One layer's gate γ and its top candidates."""

    layer: str
    gate: float
    candidates: list[Candidate]


@dataclass(frozen=True)
class Debug:
    """The context debugger's page: the context of a query and how it came about.

    Attributes
    ----------
    context : the :class:`~lamina.Context` ``Memory.context`` returned
    layers : per gated layer, γ and the top candidates (``Memory.search`` of that layer)
    entropy : H(γ) in nats
    max_entropy : the bound ε (None: unbounded)
    beta_config : β of the configuration (``context.beta`` is the one used)
    min_similarity : the similarity floor
    rendered : ``context.render()``
    tokens : ``context.tokens``
    latency_ms : wall time of the ``Memory.context`` call
    candidates : candidates shown per layer
    """

    context: Context
    layers: list[LayerCandidates]
    entropy: float
    max_entropy: float | None
    beta_config: float
    min_similarity: float
    rendered: str
    tokens: int
    latency_ms: float
    candidates: int


def debug_context(
    mem: Memory, *, user_id: str, query: str, budget: int, now: float | None = None, candidates: int = 12
) -> Debug:
    """Run ``Memory.context`` for ``query`` and gather its per-layer candidates (``Memory.search``
    of each gated layer, top ``candidates``) with what became of each."""
    t0 = time.perf_counter()
    ctx = mem.context(query, user_id=user_id, budget=budget, now=now)
    latency = (time.perf_counter() - t0) * 1000.0
    cfg = mem.config
    chosen = {it.id for it in ctx.items}
    covered: set[str] = set()
    for it in ctx.items:
        covered.update(it.sources)
    layers = []
    for layer, g in sorted(ctx.gates.items(), key=lambda kv: -kv[1]):
        hits = mem.search(query, user_id=user_id, k=candidates, layers=[layer], now=now)
        cands = []
        for it in hits:
            if it.id in chosen:
                why = "chosen"
            elif it.score < cfg.min_similarity:
                why = "below floor"
            elif it.sources and set(it.sources) <= covered:
                why = "duplicate"
            else:
                why = "budget"
            cands.append(Candidate(it, float(it.score), it.id in chosen, why))
        layers.append(LayerCandidates(layer, float(g), cands))
    gs = [g for g in ctx.gates.values() if g > 0]
    entropy = -sum(g * math.log(g) for g in gs)
    return Debug(
        context=ctx,
        layers=layers,
        entropy=entropy,
        max_entropy=cfg.max_entropy,
        beta_config=float(cfg.beta),
        min_similarity=float(cfg.min_similarity),
        rendered=ctx.render(),
        tokens=ctx.tokens,
        latency_ms=latency,
        candidates=candidates,
    )
