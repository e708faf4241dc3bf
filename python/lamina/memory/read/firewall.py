"""The contextual firewall: what may pass from retrieval into a prompt.

Retrieval finds what is *similar* to a query; not all of it should reach the model. Between
the per-layer candidates (:func:`lamina.memory.read.candidates.rank_layers`) and the budget fill,
:func:`screen` applies three checks to every candidate, in this order, and keeps the reason of
the first that fails:

1. ``domain`` — the domain gate: an item is blocked when it, or any turn it quotes (the
   sources of a segment, summary or fact), is labelled with a domain other than the query's
   that is not in ``Firewall.allow`` (unlabelled items pass; a health detail does not enter a
   work question, neither verbatim nor inside a summary). One exception
   (``Firewall.constraints_cross``): when the query asks for a plan, a schedule, a
   recommendation, advice or what to avoid (:func:`lamina.text.domains.asks_for_plan`), a
   foreign text that states a constraint of the user
   (:func:`~lamina.text.domains.states_constraint`: an allergy, a physical limit, a spending
   cap) passes when it bears on the query's domain: its words touch that domain (the
   classifier's points; "I cannot sit through long meetings" touches work), or the query names
   none (``other``). A plan in one domain must respect the limits stated in another: that is
   the cross-domain memory that *helps*. Beliefs never pass this way.
2. ``similarity`` — the floor τ on the cosine between the item's vector and the query's (weakly
   related memories are where cross-domain leaks and sycophancy triggers come from).
3. ``clarify`` — a dual-trace commitment: an item stored as CLARIFY (or quoting a CLARIFY turn)
   is never injected; when it would have passed, the report lists it so the agent abstains
   and asks.

Items stored as VERIFY pass and are listed (they render with a recheck marker); EPHEMERAL
items are purged when their session ends (:meth:`lamina.Memory.end_session`); PERSIST items are
plain memories. The decisions are returned in :attr:`lamina.Context.firewall`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...errors import InvalidInput
from ...native.search import inner_products
from ...text.domains import OTHER, DomainClassifier, asks_for_plan, states_constraint
from ..state.memstate import MemoryState, UserState
from ..state.records import Record
from ..types import Blocked, FirewallReport
from .candidates import Candidates

__all__ = ["Firewall", "screen", "empty_report"]


@dataclass(frozen=True)
class Firewall:
    """Settings of the contextual firewall (see the module docstring).

    Attributes
    ----------
    tau : float
        Similarity floor τ in [-1, 1]: candidates whose cosine to the query is below it are
        blocked (``-1`` disables the floor).
    domain_gate : bool
        Block items whose domain differs from the query's (``allow`` excepted).
    allow : tuple of str
        Item domains that pass the gate for every query (default: ``other``, the label of
        texts that name no domain).
    constraints_cross : bool
        Let a stated constraint of another domain through the gate when the query asks for a
        plan, a recommendation, advice or what to avoid and the constraint's words touch the
        query's domain (or the query names none); default True; ``beliefs`` never cross.
    """

    tau: float = 0.1
    domain_gate: bool = True
    allow: tuple[str, ...] = (OTHER,)
    constraints_cross: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)):
            raise TypeError(f"Firewall.tau must be a float, got {type(self.tau).__name__}")
        if not math.isfinite(self.tau) or not -1.0 <= self.tau <= 1.0:
            raise InvalidInput(f"Firewall.tau must be in [-1, 1], got {self.tau!r}")
        if not isinstance(self.domain_gate, bool):
            raise TypeError("Firewall.domain_gate must be a bool")
        if not isinstance(self.constraints_cross, bool):
            raise TypeError("Firewall.constraints_cross must be a bool")
        allow: object = self.allow
        if not isinstance(allow, (tuple, list, frozenset, set)) or not all(isinstance(d, str) for d in allow):
            raise TypeError("Firewall.allow must be a tuple of domain names (str)")
        object.__setattr__(self, "allow", tuple(self.allow))


_NEVER_CROSS = frozenset({"beliefs"})


def _traits(st: MemoryState, u: UserState, r: Record) -> tuple[list[Record], bool]:
    """The labelled records among an item and the turns it quotes; whether any is CLARIFY."""
    labelled = [r] if r.domain is not None else []
    clarify = r.commitment == "clarify"
    for src in r.sources:
        i = u.by_src.get(src)
        if i is not None and i != r.id:
            t = st.recs[i]
            if t.domain is not None:
                labelled.append(t)
            clarify = clarify or t.commitment == "clarify"
    return labelled, clarify


_DEFAULT_CLASSIFIER = DomainClassifier()


def _bears_on(text: str, query_domain: str, clf: DomainClassifier) -> bool:
    """Whether a constraint ``text`` bears on a query of ``query_domain``: it states a
    constraint and its words touch that domain (or the query names no domain)."""
    if not states_constraint(text):
        return False
    return query_domain == OTHER or clf.scores(text).get(query_domain, 0) > 0


def _gated(labelled: list[Record], query_domain: str, fw: Firewall, plan: bool, clf: DomainClassifier) -> bool:
    """Whether the domain gate blocks an item whose labelled parts are ``labelled``: some part is
    of a foreign domain (not the query's, not allowed) and is not a constraint that may cross
    (``plan``: the query asks for a plan)."""
    for t in labelled:
        d = t.domain
        if d == query_domain or d in fw.allow:
            continue
        if plan and d not in _NEVER_CROSS and _bears_on(t.text, query_domain, clf):
            continue
        return True
    return False


def empty_report(query_domain: str | None, fw: Firewall) -> FirewallReport:
    """The report of a query that had no candidates."""
    return FirewallReport(
        query_domain=query_domain, tau=float(fw.tau), domain_gate=fw.domain_gate, blocked=(), verify=(), clarify=()
    )


def screen(
    st: MemoryState,
    u: UserState,
    cands: Candidates,
    q: npt.NDArray[np.float32],
    query_domain: str | None,
    fw: Firewall,
    *,
    query: str | None = None,
    classifier: DomainClassifier | None = None,
) -> FirewallReport:
    """Remove blocked candidates from ``cands`` (in place) and report why.

    Parameters
    ----------
    st : the memory state (record vectors).
    u : the user's state (the turns that items quote).
    cands : per-layer candidates of one query; layers left empty lose their relevance entry.
    q : ndarray, shape (dim,) or (1, dim), float32
        The query vector.
    query_domain : the query's domain (None: the gate lets every labelled item through).
    fw : the settings.
    query : str, optional
        The query's text (with ``fw.constraints_cross``: whether it asks for a plan; None: it
        does not).
    classifier : DomainClassifier, optional
        Which domains a constraint's words touch (default: the default lexicon).
    """
    q = np.asarray(q, dtype=np.float32).reshape(-1)
    qn = float(np.linalg.norm(q, axis=-1)) or 1.0  # (with an axis: no BLAS call)
    blocked: list[Blocked] = []
    clarify: list[int] = []
    gate = fw.domain_gate and query_domain is not None
    plan = fw.constraints_cross and query is not None and asks_for_plan(query)
    clf = classifier if classifier is not None else _DEFAULT_CLASSIFIER
    for layer, scored in list(cands.per_layer.items()):
        if not scored:
            continue
        vecs = st.vecs([r.id for _, r in scored])
        norms = np.linalg.norm(vecs, axis=1)
        sims = inner_products(q.reshape(1, -1), vecs)[0] / (np.where(norms > 0, norms, 1.0) * qn)
        kept = []
        for (s, r), sim in zip(scored, sims.tolist()):
            labelled, is_clarify = _traits(st, u, r)
            if gate and _gated(labelled, query_domain or "", fw, plan, clf):
                reason = "domain"
            elif sim < fw.tau:
                reason = "similarity"
            elif is_clarify:
                reason = "clarify"
                clarify.append(r.id)
            else:
                kept.append((s, r))
                continue
            dom = r.domain if r.domain is not None else ",".join(sorted({str(t.domain) for t in labelled})) or None
            blocked.append(Blocked(item_id=r.id, layer=layer, reason=reason, similarity=sim, domain=dom))
        cands.per_layer[layer] = kept
        if not kept:
            cands.relevance.pop(layer, None)
    return FirewallReport(
        query_domain=query_domain,
        tau=float(fw.tau),
        domain_gate=fw.domain_gate,
        blocked=tuple(blocked),
        verify=(),
        clarify=tuple(clarify),
    )
