"""Typed results of the memory's write and inspection calls (each with ``to_dict()``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .types import Context, MemoryItem

__all__ = [
    "MemoryPage",
    "SessionReport",
    "DeleteReport",
    "ProfileDrift",
    "MemoryStats",
    "ImportReport",
    "Candidate",
    "ContextExplanation",
]


@dataclass(slots=True)
class SessionReport:
    """What :meth:`lamina.Memory.end_session` did.

    Attributes
    ----------
    segments : int
        Net change of the active episodic items (new leaves, tree nodes and the session summary,
        less those evicted), at least 0.
    facts : int
        Facts inserted (new values, superseded or not; restatements only strengthen).
    promoted : int
        Hot episodes promoted to semantic notes (heat > τ).
    evicted : int
        Items the capacity projection took out of the active layers.
    blend_drift : float
        ‖Δe‖² of the EMA blend of the session summary into the matching earlier one (0: none).
    purged : int
        EPHEMERAL turns of the session deleted at its end.
    """

    segments: int = 0
    facts: int = 0
    promoted: int = 0
    evicted: int = 0
    blend_drift: float = 0.0
    purged: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class MemoryPage:
    """One page of :meth:`lamina.Memory.list_memories`.

    Attributes
    ----------
    items : list of MemoryItem
        The page's items, in the order they were stored.
    next_cursor : str or None
        Pass it as ``cursor`` for the next page; None on the last page.
    """

    items: list[MemoryItem]
    next_cursor: str | None = None


@dataclass(slots=True)
class DeleteReport:
    """What :meth:`lamina.Memory.delete` / :meth:`~lamina.Memory.delete_user` removed.

    Attributes
    ----------
    deleted : int
        Items deleted (a raw turn takes what was derived from it along).
    ids : tuple of int
        Their item ids, ascending (``deleted == len(ids)``).
    """

    deleted: int
    ids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"deleted": self.deleted, "ids": list(self.ids)}


@dataclass(slots=True)
class ProfileDrift:
    """The damped profile updates (eq. 9–10): sum and last ‖Δe‖², how many, and λ."""

    total: float
    last: float | None
    updates: int
    lambda_: float

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "last": self.last, "updates": self.updates, "lambda": self.lambda_}


@dataclass(slots=True)
class MemoryStats:
    """Counts and state of a memory (or of one user), from :meth:`lamina.Memory.stats`.

    Attributes
    ----------
    embedder, dim, path : the embedder's name and dimension, the database file (None: in memory)
    users, sessions, open_sessions : counts
    items : every stored item (any layer or status)
    layers : active items per layer (``history``: superseded facts)
    kinds : active items per kind
    archive_turns : raw turns ever added (and not deleted)
    facts_current, facts_superseded : semantic facts
    evicted : items the capacity projection took out of the active layers
    profile_drift : :class:`ProfileDrift` (``last`` only for one user)
    ann_layers : ``user/layer`` served by hnswlib (past ``ann_threshold``)
    llm, llm_fallbacks : the LLM in use (repr) and how often its replies fell back to the defaults
    config : the :class:`~lamina.MemoryConfig` as a dict
    """

    embedder: str
    dim: int
    path: str | None
    users: int
    sessions: int
    open_sessions: int
    items: int
    layers: dict[str, int]
    kinds: dict[str, int]
    archive_turns: int
    facts_current: int
    facts_superseded: int
    evicted: int
    profile_drift: ProfileDrift
    ann_layers: list[str]
    llm: str | None
    llm_fallbacks: int
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["profile_drift"] = self.profile_drift.to_dict()
        return d


@dataclass(slots=True)
class ImportReport:
    """What :meth:`lamina.Memory.import_user` wrote (one user of a dump).

    Attributes
    ----------
    user_id : the user the dump was imported as
    from_user_id : the user's id in the dump
    items, sessions, revisions : rows written
    notes, links : A-Mem notes and links between turns written (a version-1 dump has none)
    reembedded : item vectors computed on import (the dump left them out, or they were of
        another embedder) rather than taken from the dump
    replaced : whether an existing user of that id was deleted first
    ids : the dump's item id -> the new item id
    """

    user_id: str
    from_user_id: str
    items: int
    sessions: int
    revisions: int
    notes: int
    links: int
    reembedded: int
    replaced: bool
    ids: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["ids"] = {str(k): v for k, v in self.ids.items()}
        return d


@dataclass(slots=True)
class Candidate:
    """One candidate of a context, as :meth:`lamina.Memory.explain_context` saw it.

    Attributes
    ----------
    item : MemoryItem
        The candidate (``score``: its adjusted similarity, the one the fill ranks by).
    layer : str
        The layer it was a candidate of (an archived turn found through its episode: ``episodic``).
    chosen : bool
        Whether it is in the context.
    reason : str
        ``chosen``; or why not: ``budget`` (did not fit what was left, or never reached),
        ``duplicate`` (its source turns, its fact or its words were already in), ``taken``
        (chosen as another layer's candidate).
    firewall : bool
        Ranked lower by the attribution firewall (the query names someone else).
    """

    item: MemoryItem
    layer: str
    chosen: bool
    reason: str
    firewall: bool = False


@dataclass(slots=True)
class ContextExplanation:
    """How :meth:`lamina.Memory.context` builds a context: the context itself (the same items,
    scores, gates and β) and what it was chosen from.

    Attributes
    ----------
    context : Context
    candidates : dict[str, list[Candidate]]
        Per layer, its candidates above the similarity floor, best first.
    relevance : dict[str, float]
        r_i per layer (the mean of its best ``relevance_top`` specific scores).
    max_entropy : float or None
        ε, the bound on the gate's entropy (nats; None: no bound); β was raised until H(γ) <= ε.
    entropy : float
        H(γ) of the gates used (nats).
    used_tokens : int
        Tokens the fill counted for the chosen items.
    """

    context: Context
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    relevance: dict[str, float] = field(default_factory=dict)
    max_entropy: float | None = None
    entropy: float = 0.0
    used_tokens: int = 0
