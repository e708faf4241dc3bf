"""Memory items and the context returned by ``Memory.context``."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar, get_args

from ..text.timeref import annotate

__all__ = [
    "MemoryItem",
    "Context",
    "ContextOrder",
    "CONTEXT_ORDERS",
    "context_order",
    "arrange",
    "unarrange",
    "Blocked",
    "FirewallReport",
    "LAYERS",
    "format_time",
    "format_day",
    "render_grouped",
    "turn_line",
]

#: Layer names and their arena layer codes. ``history`` holds superseded facts (never current).
LAYERS: dict[str, int] = {"working": 0, "episodic": 1, "semantic": 2, "archive": 3, "history": 4}
LAYER_NAMES: dict[int, str] = {v: k for k, v in LAYERS.items()}


#: The orders a context's items can be shown in (see :func:`arrange`).
ContextOrder = Literal["lost-in-the-middle", "score", "reversed"]
#: Every :data:`ContextOrder`, the default (``Memory.context``'s order) first.
CONTEXT_ORDERS: tuple[str, ...] = get_args(ContextOrder)

_ORDERS: dict[str, ContextOrder] = {
    "lost-in-the-middle": "lost-in-the-middle",
    "score": "score",
    "reversed": "reversed",
}
_T = TypeVar("_T")


def context_order(name: str) -> ContextOrder:
    """``name`` as a :data:`ContextOrder` (for orders read from a command line or a file).

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`CONTEXT_ORDERS`.
    """
    o = _ORDERS.get(name)
    if o is not None:
        return o
    raise ValueError(f"unknown context order {name!r}; expected one of {list(CONTEXT_ORDERS)}")


def _check_order(order: str) -> None:
    context_order(order)


def arrange(ranked: Sequence[_T], *, order: str) -> list[_T]:
    """Place items ranked best first in a context order.

    Parameters
    ----------
    ranked : sequence
        The items, best first.
    order : {"lost-in-the-middle", "score", "reversed"}
        ``lost-in-the-middle`` (``Memory.context``'s order): the best first, the second best
        last, the rest alternating inwards, so the weakest sit in the middle (the positions a
        reader attends to least); ``score``: best first, descending; ``reversed``: ascending,
        the best last (nearest the question that follows the context).

    Returns
    -------
    list
        The same items, only their order changed.

    Raises
    ------
    ValueError
        ``order`` is not one of :data:`CONTEXT_ORDERS`.
    """
    _check_order(order)
    items = list(ranked)
    if order == "score":
        return items
    if order == "reversed":
        return items[::-1]
    return items[0::2] + items[1::2][::-1]


def unarrange(items: Sequence[_T], *, order: str) -> list[_T]:
    """The inverse of :func:`arrange`: items placed in ``order`` back to best first.

    Parameters
    ----------
    items : sequence
        Items as :func:`arrange` placed them.
    order : {"lost-in-the-middle", "score", "reversed"}
        The order they are in.

    Returns
    -------
    list
        The items ranked best first (ties keep the rank they had, so
        ``unarrange(arrange(r, order=o), order=o) == list(r)`` for every order).

    Raises
    ------
    ValueError
        ``order`` is not one of :data:`CONTEXT_ORDERS`.
    """
    xs = list(items)
    # arrange's permutation of the ranks 0..n-1: the rank of the item at each position
    ranks = arrange(range(len(xs)), order=order)
    out = xs.copy()
    for at, rank in enumerate(ranks):
        out[rank] = xs[at]
    return out


def _strftime(t: float | None, fmt: str) -> str:
    if t is None:
        return "?"
    try:
        return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime(fmt)
    except (OverflowError, ValueError, OSError):  # outside the years 1-9999 (an older database), NaN
        return "?"


def format_time(t: float | None) -> str:
    """Event time (seconds since the Unix epoch, UTC) as ``YYYY-MM-DD HH:MM``; ``?`` if None or
    not showable (outside the years 1–9999, which ``lamina.Memory`` refuses, or not finite)."""
    return _strftime(t, "%Y-%m-%d %H:%M")


def format_day(t: float | None) -> str:
    """Event day as ``YYYY-MM-DD``; ``?`` where :func:`format_time` shows ``?``."""
    return _strftime(t, "%Y-%m-%d")


@dataclass
class MemoryItem:
    """One stored memory (a row of one layer).

    Attributes
    ----------
    id : int
        Item id (unique in its database; ids of other databases are refused).
    text : str
        The item's text: the raw turn, a segment's turns, a summary, or a fact sentence.
    layer : str
        ``working``, ``episodic``, ``semantic``, ``archive`` or ``history`` (superseded facts).
    kind : str
        ``turn``, ``segment``, ``summary``, ``fact``, ``note`` or ``profile``.
    score : float
        Retrieval score (cosine similarity, after the staleness penalty) when returned by a
        search; 0 otherwise.
    sources : tuple of str
        Source turn ids this item came from (the caller's message ids, or ``t<item id>``).
    timestamp : float or None
        Event time, seconds since the Unix epoch (UTC). For segments and summaries: the last turn.
    speaker, subject, predicate, object : str or None
        Where known (turns have speakers; facts have subject / predicate / object).
    valid_from, valid_to : float or None
        Validity of a fact; ``valid_to`` is set when the fact was superseded.
    superseded_by : int or None
        Id of the fact that replaced this one.
    metadata : dict
        The caller's metadata (:data:`lamina.memory.metadata.Metadata`): a turn carries its
        message's; a derived item (segment, summary, fact, note) the pairs its source turns agree on.
    """

    id: int
    text: str
    layer: str
    kind: str
    user_id: str = ""
    session_id: str | None = None
    score: float = 0.0
    sources: tuple[str, ...] = ()
    timestamp: float | None = None
    speaker: str | None = None
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    superseded_by: int | None = None
    summary: str | None = None
    access_count: int = 0
    last_access: float | None = None
    #: the caller's metadata of the item (a turn: its message's; a derived item: what its turns agree on)
    metadata: dict[str, Any] = field(default_factory=dict)
    strength: float = 1.0
    domain: str | None = None
    commitment: str = "persist"
    #: raw turns rendered with the item: a segment's turns, or a fact's latest source turn
    turns: tuple[tuple[float | None, str | None, str], ...] = field(default=(), repr=False)

    @property
    def current(self) -> bool:
        """For facts: True while not superseded."""
        return self.valid_to is None and self.superseded_by is None

    def render(self) -> str:
        """Prompt text with dates and speakers."""
        if self.kind == "fact":
            tag = "fact, verify" if self.commitment == "verify" else "fact"
            out = f"[{tag}, since {format_day(self.valid_from)}] {self.text} {self.validity()}"
            if self.turns:  # the latest source turn, verbatim
                t, sp, tx = self.turns[-1]
                out += f' (from {sp + ": " if sp else ""}"{tx}")'
            return out
        if self.kind in ("note", "profile"):
            return f"[{self.kind}, {format_day(self.timestamp)}] {self.text}"
        if self.kind == "summary":
            return f"[summary, {format_day(self.timestamp)}] {self.text}"
        if self.kind == "segment" and self.turns:
            return "\n".join(f"[{format_time(t)}] {turn_line(sp, tx, t)}" for t, sp, tx in self.turns)
        return f"[{format_time(self.timestamp)}] {turn_line(self.speaker, self.text, self.timestamp)}"

    # -- grouped rendering (Context.render): raw turns of one session and day share a header
    def turn_lines(self) -> list[tuple[float | None, str]] | None:
        """For items that show raw turns in a context: (time, ``"Speaker: text"``) per turn;
        None for the others (they render on their own).

        ``turn`` and ``segment`` items show their turns; a *current* fact shows the turn it was
        extracted from (its statement, attributed by the speaker line — the fact sentence would
        repeat it); a superseded fact, or one without a source turn, renders as a fact line with
        its validity (:meth:`render`)."""
        if self.kind == "segment" and self.turns:
            return [(t, turn_line(sp, tx, t)) for t, sp, tx in self.turns]
        if self.kind == "turn":
            line = turn_line(self.speaker, self.text, self.timestamp)
            return [(self.timestamp, line + " [recheck]" if self.commitment == "verify" else line)]
        if self.kind == "fact" and self.current and self.turns and self.commitment != "verify":
            t, sp, tx = self.turns[-1]
            return [(t, f"{turn_line(sp, tx, t)} {self.validity()}")]
        return None

    def validity(self) -> str:
        """For facts: ``(current)``, or ``(until YYYY-MM)`` (the month it was superseded; ``?``
        when unknown) — how a context marks a fact's value as the present one or a past one."""
        return "(current)" if self.current else f"(until {_strftime(self.valid_to, '%Y-%m')})"

    def group_key(self) -> tuple[str | None, str]:
        """Turns with the same key are rendered under one ``[date time]`` header."""
        t = self.turns[-1][0] if self.kind == "fact" and self.turns else self.timestamp
        return (self.session_id, format_day(t))


def turn_line(speaker: str | None, text: str, t: float | None) -> str:
    """A raw turn as a context shows it: ``Speaker: text``, then its relative time expressions
    resolved against ``t`` (:func:`lamina.text.timeref.annotate`: ``" (last year = 2022)"``)."""
    line = f"{speaker}: {text}" if speaker else text
    return line + annotate(text, t)


def group_header(t: float | None) -> str:
    """Header line of a group of raw turns: ``[YYYY-MM-DD HH:MM]`` of its earliest turn."""
    return f"[{format_time(t)}]"


def render_grouped(items: list[MemoryItem]) -> str:
    """Render items in their order; raw turns (``turn`` / ``segment`` items) of the same session
    and day are gathered under one ``[date time]`` header at the place of the first of them,
    in time order, one ``Speaker: text`` line each. Facts, summaries, notes and profiles render
    on their own (:meth:`MemoryItem.render`)."""
    blocks: list[Any] = []
    groups: dict[tuple[str | None, str], list[tuple[float | None, int, str]]] = {}
    for it in items:
        lines = it.turn_lines()
        if lines is None:
            blocks.append(it.render())
            continue
        key = it.group_key()
        g = groups.get(key)
        if g is None:
            g = groups[key] = []
            blocks.append(g)
        for t, ln in lines:
            g.append((t, len(g), ln))
    out: list[str] = []
    for b in blocks:
        if isinstance(b, str):
            out.append(b)
            continue
        b.sort(key=lambda x: (x[0] if x[0] is not None else float("-inf"), x[1]))
        ts = [t for t, _, _ in b if t is not None]
        out.append(group_header(min(ts) if ts else None))
        out.extend(ln for _, _, ln in b)
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Blocked:
    """A candidate the contextual firewall kept out of a context.

    Attributes
    ----------
    item_id : int
    layer : str
    reason : str
        ``"domain"`` (the domain gate), ``"similarity"`` (under the floor τ) or ``"clarify"``
        (a CLARIFY commitment: the agent should ask instead).
    similarity : float
        Cosine between the item and the query.
    domain : str or None
        The item's domain label (for an unlabelled derived item: the labels of the turns it
        quotes, comma-separated).
    """

    item_id: int
    layer: str
    reason: str
    similarity: float
    domain: str | None


@dataclass(frozen=True)
class FirewallReport:
    """What the contextual firewall decided for one query (see :mod:`lamina.memory.read.firewall`).

    Attributes
    ----------
    query_domain : str or None
        The query's domain (given, or classified with ``domain="auto"``).
    tau : float
        The similarity floor applied.
    domain_gate : bool
    blocked : tuple of Blocked
        Every candidate kept out, with its reason.
    verify : tuple of int
        Chosen items stored as VERIFY (rendered with a recheck marker).
    clarify : tuple of int
        CLARIFY items that would have been chosen: the agent should abstain and ask.
    """

    query_domain: str | None
    tau: float
    domain_gate: bool
    blocked: tuple[Blocked, ...]
    verify: tuple[int, ...]
    clarify: tuple[int, ...]

    @property
    def needs_clarification(self) -> bool:
        """True when a CLARIFY memory matched the query."""
        return bool(self.clarify)


@dataclass
class Context:
    """A budgeted context for one query.

    Attributes
    ----------
    items : list of MemoryItem
        Selected items in the context's ``order``; ``Memory.context`` returns them ordered
        against lost-in-the-middle (the best first, the second best last, the weakest in the
        middle). Each has ``layer``, ``score``, ``sources`` and times. :meth:`reordered` shows
        the same items in another order.
    gates : dict[str, float]
        γ per layer (eq. 7), over the layers that had candidates.
    beta : float
        β used by the gate (raised when the gate entropy exceeded ε).
    abstain : bool
        True when nothing cleared the similarity floor (``items`` is then empty).
    query : str
    budget : int
        Token budget (whitespace words).
    firewall : FirewallReport or None
        The contextual firewall's decisions, when one was applied.
    order : str
        The order ``items`` are in (one of :data:`CONTEXT_ORDERS`, see :func:`arrange`).
    """

    items: list[MemoryItem]
    gates: dict[str, float]
    beta: float
    abstain: bool
    query: str
    budget: int
    firewall: FirewallReport | None = None
    order: str = "lost-in-the-middle"

    @property
    def ranked(self) -> list[MemoryItem]:
        """The items best first (the fill's ranking; ties as the fill broke them)."""
        return unarrange(self.items, order=self.order)

    def reordered(self, *, order: ContextOrder) -> Context:
        """The same context with its items in another order.

        Parameters
        ----------
        order : {"lost-in-the-middle", "score", "reversed"}
            See :func:`arrange`. The items, budget and token count stay the same; only where
            each item (or each group of raw turns, see :meth:`render`) stands changes.

        Returns
        -------
        Context
            A new context; this one is unchanged.

        Raises
        ------
        ValueError
            ``order`` is not one of :data:`CONTEXT_ORDERS`.
        """
        return replace(self, items=arrange(self.ranked, order=order), order=order)

    def render(self) -> str:
        """Prompt text with dates and speakers: items in their order, raw turns of the same
        session and day under one ``[date time]`` header (see :func:`render_grouped`)."""
        if self.abstain:
            return ""
        return render_grouped(self.items)

    @property
    def tokens(self) -> int:
        """Whitespace-separated words of :meth:`render`."""
        return len(self.render().split())

    @property
    def sources(self) -> set[str]:
        """Union of the source turn ids of all items."""
        out: set[str] = set()
        for it in self.items:
            out.update(it.sources)
        return out

    def __len__(self) -> int:
        return len(self.items)
