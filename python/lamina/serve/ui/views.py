"""What the inspector's pages show, read from a :class:`~lamina.Memory` through its public calls
(``stats``, ``list_items``, ``activity``, ``explain_context``): typed view models, free of HTTP
and HTML.
User ids here are the stored ones; the pages show the caller's.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from ...errors import NotFoundError
from ...memory import ContextExplanation, Firewall, ItemPage, Memory
from ...memory.dump.format import ItemEntry
from ...memory.types import Blocked, Context, FirewallReport, MemoryItem

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
    "NO_EXPLAIN",
    "Paged",
    "ARCHIVE_PAGE",
    "WORKING_PAGE",
    "TREE_PAGE",
    "TREE_NODES",
    "FACTS_PAGE",
    "NOTES_PAGE",
]

#: Archive turns per page of the user page.
ARCHIVE_PAGE = 50
#: Working-memory turns per page.
WORKING_PAGE = 40
#: Roots of the episodic MemTree per page.
TREE_PAGE = 30
#: MemTree nodes a page shows (the page's roots and what is below them, breadth first).
TREE_NODES = 40
#: Fact chains (subject + predicate) per page.
FACTS_PAGE = 50
#: Notes and profiles per page.
NOTES_PAGE = 50
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
    """An episodic item and the episodic items under it (the MemTree) that the page shows.

    Attributes
    ----------
    item : the node
    children : the children shown, oldest first
    below : nodes under it in all (shown or not)
    hidden : children not shown (open the node's subtree to see them)
    """

    item: ItemEntry
    children: list[TreeNode] = field(default_factory=list)
    below: int = 0
    hidden: int = 0


@dataclass(frozen=True)
class FactChain:
    """The facts on one subject + predicate, oldest first (superseded ones carry ``valid_to``)."""

    subject: str
    predicate: str
    facts: list[ItemEntry]


@dataclass(frozen=True)
class Paged:
    """Where a paged list of the user page is: this page (0-based), how many there are, and
    how many entries in all."""

    page: int
    pages: int
    total: int


@dataclass(frozen=True)
class UserView:
    """The layers of one user side by side, each long list one page of it.

    Attributes
    ----------
    working : one page of the turns in working memory, oldest first (the FIFO's order)
    working_paged : where ``working`` is
    tree : one page of the roots of the episodic MemTree (summaries and segments), newest
        first, or the node ``tree_root``; each with the nodes below it, breadth first,
        :data:`TREE_NODES` in all (open a node to see more)
    tree_paged : where ``tree`` is among the roots
    tree_root : the node the tree is shown from (None: the roots)
    tree_path : the ancestors of ``tree_root``, top first
    chains : one page of the facts by subject + predicate with their supersession history
    chains_paged : where ``chains`` is
    notes : one page of the other semantic items (notes, profile), strongest first
    notes_paged : where ``notes`` is
    archive : one page of raw turns (newest first), filtered by ``query``
    archive_paged : where ``archive`` is among the turns matching ``query``
    query : the archive filter (substring, case-insensitive; empty: all)
    layers : active items per layer (``archive``: raw turns not deleted)
    last_activity : latest time of a turn or an access (None: nothing stored)
    items : every stored item
    heat : (bin start, turns in it, accesses of those turns) for the heat plot
    """

    working: list[ItemEntry]
    working_paged: Paged
    tree: list[TreeNode]
    tree_paged: Paged
    tree_root: int | None
    tree_path: list[ItemEntry]
    chains: list[FactChain]
    chains_paged: Paged
    notes: list[ItemEntry]
    notes_paged: Paged
    archive: list[ItemEntry]
    archive_paged: Paged
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


def _paged(total: int, page: int, size: int) -> Paged:
    pages = max(1, -(-total // size))
    return Paged(min(page, pages - 1), pages, total)


def _tree(entries: list[ItemEntry], root: int | None, page: int) -> tuple[list[TreeNode], Paged, list[ItemEntry]]:
    """The MemTree nodes a page shows: one page of the roots (newest first; or the node
    ``root``), then their descendants breadth first, :data:`TREE_NODES` nodes in all; with the
    page's paging and the ancestors of ``root`` (top first)."""
    by_id = {e.id: e for e in entries}
    kids: dict[int, list[ItemEntry]] = {e.id: [] for e in entries}
    tops: list[ItemEntry] = []
    for e in entries:  # (in time order: children come out oldest first)
        if e.parent_id is not None and e.parent_id in by_id:
            kids[e.parent_id].append(e)
        else:
            tops.append(e)
    below: dict[int, int] = {}
    for e in sorted(entries, key=lambda e: -e.depth):  # (children are deeper than their parent)
        below[e.id] = sum(1 + below.get(c.id, 0) for c in kids[e.id])
    path: list[ItemEntry] = []
    if root is not None:
        if root not in by_id:
            raise NotFoundError(f"no active episodic item {root} of this user")
        up = by_id[root].parent_id
        while up is not None and up in by_id:
            path.append(by_id[up])
            up = by_id[up].parent_id
        path.reverse()
        tops = [by_id[root]]
    tops.reverse()
    paged = _paged(len(tops), page, TREE_PAGE)
    budget = TREE_NODES
    shown = []
    queue: deque[TreeNode] = deque()
    for e in tops[paged.page * TREE_PAGE : (paged.page + 1) * TREE_PAGE]:
        node = TreeNode(e, [], below[e.id], len(kids[e.id]))
        shown.append(node)
        queue.append(node)
        budget -= 1
    while queue and budget > 0:
        n = queue.popleft()
        for c in kids[n.item.id]:
            if budget <= 0:
                break
            child = TreeNode(c, [], below[c.id], len(kids[c.id]))
            n.children.append(child)
            n.hidden -= 1
            queue.append(child)
            budget -= 1
    return shown, paged, path


def user_view(
    mem: Memory,
    user_id: str,
    *,
    page: int = 0,
    query: str = "",
    working_page: int = 0,
    tree_page: int = 0,
    tree_root: int | None = None,
    facts_page: int = 0,
    notes_page: int = 0,
) -> UserView:
    """The user page of one user, read with ``Memory.list_items``, ``Memory.activity`` and
    ``Memory.stats`` (nothing is read or built per stored item but the pages shown and the
    episodic and semantic layers the tree and the chains are made of). ``tree_root``: show
    the MemTree from this episodic item down (None: from its roots).

    Raises
    ------
    ValueError
        A page < 0.
    NotFoundError
        Unknown user, or ``tree_root`` is no active episodic item of the user.
    """
    asked = {"page": page, "working_page": working_page, "tree_page": tree_page}
    asked.update(facts_page=facts_page, notes_page=notes_page)
    for name, v in asked.items():
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    stats = mem.stats(user_id=user_id)
    active = ["active"]
    fifo = mem.list_items(
        user_id=user_id, layers=["working"], statuses=active, offset=working_page * WORKING_PAGE, limit=WORKING_PAGE
    )
    working_paged = _paged(fifo.total, working_page, WORKING_PAGE)
    if working_paged.page != working_page:  # past the last page: the last one
        fifo = mem.list_items(
            user_id=user_id,
            layers=["working"],
            statuses=active,
            offset=working_paged.page * WORKING_PAGE,
            limit=WORKING_PAGE,
        )
    tree, tree_paged, path = _tree(
        mem.list_items(user_id=user_id, layers=["episodic"], statuses=active, limit=None).items, tree_root, tree_page
    )
    by_key: dict[tuple[str, str], list[ItemEntry]] = {}
    notes = []
    for e in mem.list_items(user_id=user_id, layers=["semantic", "history"], statuses=active, limit=None).items:
        if e.kind == "fact":
            by_key.setdefault((e.subject or "", e.predicate or ""), []).append(e)
        elif e.layer == "semantic":
            notes.append(e)
    keys = sorted(by_key)
    chains_paged = _paged(len(keys), facts_page, FACTS_PAGE)
    chains = [
        FactChain(
            s, p, sorted(by_key[(s, p)], key=lambda e: (e.valid_from if e.valid_from is not None else -math.inf, e.id))
        )
        for s, p in keys[chains_paged.page * FACTS_PAGE : (chains_paged.page + 1) * FACTS_PAGE]
    ]
    notes.sort(key=lambda e: (-e.strength, e.id))
    notes_paged = _paged(len(notes), notes_page, NOTES_PAGE)
    q = query.strip()

    def turns(page: int) -> ItemPage:
        return mem.list_items(
            user_id=user_id,
            kinds=["turn"],
            contains=q,
            offset=page * ARCHIVE_PAGE,
            limit=ARCHIVE_PAGE,
            newest_first=True,
        )

    got = turns(page)
    archive_paged = _paged(got.total, page, ARCHIVE_PAGE)
    if archive_paged.page != page:  # past the last page: the last one
        got = turns(archive_paged.page)
    archive = got.items
    layers = {L: int(stats.layers.get(L, 0)) for L in _SHOWN_LAYERS}
    layers["archive"] = int(stats.archive_turns)
    act = mem.activity(user_id=user_id, kinds=["turn"], bins=40)
    return UserView(
        working=fifo.items,
        working_paged=working_paged,
        tree=tree,
        tree_paged=tree_paged,
        tree_root=tree_root,
        tree_path=path,
        chains=chains,
        chains_paged=chains_paged,
        notes=notes[notes_paged.page * NOTES_PAGE : (notes_paged.page + 1) * NOTES_PAGE],
        notes_paged=notes_paged,
        archive=archive,
        archive_paged=archive_paged,
        query=query,
        layers=layers,
        last_activity=act.last_activity,
        items=int(stats.items),
        heat=[(b.start, b.items, b.accesses) for b in act.bins],
    )


@dataclass(frozen=True)
class Candidate:
    """A candidate of one layer for the query and what became of it.

    Attributes
    ----------
    item : the item (``item.score``: as ``score``)
    layer : the layer it was a candidate of
    score : the adjusted similarity the fill ranks by; for a candidate the firewall blocked,
        its cosine to the query (the firewall screens before the fill)
    chosen : whether it is in the context
    why : ``chosen``, or why not, as :meth:`lamina.Memory.explain_context` reports it:
        ``budget`` (did not fit what was left, or never reached), ``duplicate`` (its source
        turns, its fact or its words were already in), ``taken`` (chosen as another layer's
        candidate); or ``firewall: domain`` / ``firewall: similarity`` / ``firewall: clarify``
        (kept out by the contextual firewall, :attr:`lamina.Context.firewall`)
    demoted : ranked lower by the attribution firewall (the query names someone else)
    """

    item: MemoryItem
    layer: str
    score: float
    chosen: bool
    why: str
    demoted: bool = False


@dataclass(frozen=True)
class LayerCandidates:
    """One layer's gate γ, relevance r and candidates (chosen ones and the best others).

    Attributes
    ----------
    layer : the layer
    gate : γ of the layer (0.0: not gated, e.g. every candidate blocked)
    relevance : r of the layer (None: no candidate passed the firewall)
    candidates : the candidates shown, best first (ranked ones, then blocked ones)
    total : candidates of the layer (ranked and blocked)
    blocked : candidates the contextual firewall kept out
    """

    layer: str
    gate: float
    relevance: float | None
    candidates: list[Candidate]
    total: int
    blocked: int


@dataclass(frozen=True)
class Debug:
    """The context debugger's page: the context of a query and how it came about.

    Attributes
    ----------
    context : the :class:`~lamina.Context` (equal to ``Memory.context``'s for the same
        arguments)
    layers : per layer, γ, r and the candidates (``Memory.explain_context``)
    entropy : H(γ) in nats
    max_entropy : the bound ε (None: unbounded)
    beta_config : β of the configuration (``context.beta`` is the one used)
    min_similarity : the similarity floor
    rendered : ``context.render()``
    tokens : ``context.tokens``
    used_tokens : tokens the fill counted for the chosen items
    latency_ms : wall time of the ``Memory.explain_context`` call
    shown : candidates shown per layer besides the chosen ones (and as many blocked ones)
    firewall : the contextual firewall's report (None: no firewall)
    explained : whether the memory explained its context (False: only ``Memory.context`` ran,
        see ``note``)
    note : why candidates are missing, when they are
    """

    context: Context
    layers: list[LayerCandidates]
    entropy: float
    max_entropy: float | None
    beta_config: float
    min_similarity: float
    rendered: str
    tokens: int
    used_tokens: int
    latency_ms: float
    shown: int
    firewall: FirewallReport | None
    explained: bool = True
    note: str | None = None


#: The message of a memory that cannot explain its contexts.
NO_EXPLAIN = (
    "this memory has no explain_context: the candidates and why each was chosen or not are not "
    "available; shown is Memory.context's result (which counts a visit of the chosen items)"
)


def debug_context(
    mem: Memory,
    *,
    user_id: str,
    query: str,
    budget: int,
    now: float | None = None,
    firewall: Firewall | None = None,
    shown: int = 25,
) -> Debug:
    """The context of ``query`` explained (``Memory.explain_context``: read-only, it counts no
    visit): per layer, every chosen candidate and the best ``shown`` others with why each was
    not chosen; with a ``firewall``, the best ``shown`` of the candidates it blocked too
    (``Context.firewall``).

    A memory without ``explain_context`` (another backend) gets ``Memory.context``'s result
    and :data:`NO_EXPLAIN` as the note, not an error.

    Raises
    ------
    ValueError
        ``shown`` < 0.
    """
    if shown < 0:
        raise ValueError(f"shown must be >= 0, got {shown}")
    cfg = mem.config
    explain = getattr(mem, "explain_context", None)
    t0 = time.perf_counter()
    ex: ContextExplanation | None = None
    if callable(explain):
        ex = explain(query, user_id=user_id, budget=budget, now=now, firewall=firewall)
        ctx = ex.context
    else:
        ctx = mem.context(query, user_id=user_id, budget=budget, now=now, firewall=firewall)
    latency = (time.perf_counter() - t0) * 1000.0
    report = ctx.firewall
    layers: list[LayerCandidates] = []
    if ex is not None:
        blocked: dict[str, list[Blocked]] = {}
        for b in report.blocked if report is not None else ():
            blocked.setdefault(b.layer, []).append(b)
        names = list(ctx.gates) + [L for L in ex.candidates if L not in ctx.gates]
        names += [L for L in blocked if L not in names]
        for layer in names:
            ranked = ex.candidates.get(layer, [])
            out = [
                Candidate(c.item, layer, float(c.item.score), c.chosen, c.reason, c.firewall)
                for i, c in enumerate(ranked)
                if c.chosen or i < shown
            ]
            bl = sorted(blocked.get(layer, []), key=lambda b: -b.similarity)
            for b in bl[:shown]:
                it = mem.get(b.item_id)
                out.append(Candidate(it, layer, float(b.similarity), False, f"firewall: {b.reason}"))
            layers.append(
                LayerCandidates(
                    layer=layer,
                    gate=float(ctx.gates.get(layer, 0.0)),
                    relevance=ex.relevance.get(layer),
                    candidates=out,
                    total=len(ranked) + len(bl),
                    blocked=len(bl),
                )
            )
        layers.sort(key=lambda lc: -lc.gate)
        entropy, used = ex.entropy, ex.used_tokens
    else:
        gs = [g for g in ctx.gates.values() if g > 0]
        entropy, used = -sum(g * math.log(g) for g in gs), ctx.tokens
    return Debug(
        context=ctx,
        layers=layers,
        entropy=float(entropy),
        max_entropy=cfg.max_entropy,
        beta_config=float(cfg.beta),
        min_similarity=float(cfg.min_similarity),
        rendered=ctx.render(),
        tokens=ctx.tokens,
        used_tokens=int(used),
        latency_ms=latency,
        shown=shown,
        firewall=report,
        explained=ex is not None,
        note=None if ex is not None else NO_EXPLAIN,
    )
