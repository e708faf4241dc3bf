"""The JSON form of lamina's results: what ``lamina serve`` sends and ``lamina.Client`` reads.

Each ``*_to_json`` turns a typed result into plain JSON values (dicts, lists, str, int, float,
bool, None); each ``*_from_json`` rebuilds the same typed object, so that a result that crossed
the wire compares equal to the one :class:`lamina.Memory` returned in process
(``item_from_json(item_to_json(it)) == it``). Stdlib only: the client needs no server package.

A malformed document (a missing field, a wrong type) raises :class:`WireError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from ..errors import LaminaError
from ..memory.read.firewall import Firewall
from ..memory.reports import DeleteReport, ImportReport, SessionReport
from ..memory.store.notestore import LINK_KINDS
from ..memory.types import CONTEXT_ORDERS, Blocked, Context, FirewallReport, MemoryItem
from ..memory.write.notes import Link, Note, NoteRevision

__all__ = [
    "WireError",
    "item_to_json",
    "item_from_json",
    "context_to_json",
    "context_from_json",
    "session_report_to_json",
    "session_report_from_json",
    "delete_report_to_json",
    "delete_report_from_json",
    "import_report_to_json",
    "import_report_from_json",
    "note_to_json",
    "note_from_json",
    "links_to_json",
    "links_from_json",
]

_ITEM_FIELDS = tuple(f.name for f in fields(MemoryItem))
_R = TypeVar("_R")


class WireError(LaminaError, ValueError):
    """A JSON document is not the wire form of the lamina result it should be."""


def _obj(d: object, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise WireError(f"{what} must be a JSON object, got {type(d).__name__}")
    return d


def _parse(d: object, what: str, build: Callable[[Mapping[str, Any]], _R], malformed: str = "") -> _R:
    """``build(d)`` for the JSON object ``d``, the wire form of ``what``: a missing or bad field is a
    :class:`WireError` saying ``malformed <what>: <malformed><the field or error>``."""
    o = _obj(d, what)
    try:
        return build(o)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:  # (a WireError too)
        raise WireError(f"malformed {what}: {malformed}{e}") from None


def item_to_json(it: MemoryItem, user_id: str | None = None) -> dict[str, Any]:
    """A :class:`MemoryItem` as a JSON object (``user_id`` replaces the item's own, e.g. the
    caller's id of a namespaced user). ``sources`` is a list of str, ``turns`` a list of
    ``[time, speaker, text]``."""
    d = dict(it.__dict__)  # (a plain dataclass: its fields, in order; a third of the cost of getattr)
    d["sources"] = list(it.sources)
    d["turns"] = [list(t) for t in it.turns]
    if user_id is not None:
        d["user_id"] = user_id
    return d


def item_from_json(d: object) -> MemoryItem:
    """The :class:`MemoryItem` of :func:`item_to_json`'s object."""
    o = _obj(d, "item")
    unknown = set(o) - set(_ITEM_FIELDS)
    if unknown:
        raise WireError(f"item has unknown fields {sorted(unknown)}")
    try:
        kw = dict(o)
        kw["sources"] = tuple(str(s) for s in o.get("sources", ()))
        kw["turns"] = tuple((t[0], t[1], t[2]) for t in o.get("turns", ()))
        return MemoryItem(**kw)
    except (TypeError, IndexError, KeyError) as e:
        raise WireError(f"malformed item: {e}") from None


def firewall_to_json(fw: Firewall) -> dict[str, Any]:
    """The settings of a :class:`~lamina.Firewall` as a JSON object."""
    return {
        "tau": fw.tau,
        "domain_gate": fw.domain_gate,
        "allow": list(fw.allow),
        "constraints_cross": fw.constraints_cross,
    }


def report_to_json(r: FirewallReport | None) -> dict[str, Any] | None:
    """A :class:`~lamina.FirewallReport` as a JSON object (None stays None)."""
    if r is None:
        return None
    return {
        "query_domain": r.query_domain,
        "tau": r.tau,
        "domain_gate": r.domain_gate,
        "blocked": [
            {"item_id": b.item_id, "layer": b.layer, "reason": b.reason, "similarity": b.similarity, "domain": b.domain}
            for b in r.blocked
        ],
        "verify": list(r.verify),
        "clarify": list(r.clarify),
    }


def report_from_json(d: object) -> FirewallReport | None:
    """The :class:`~lamina.FirewallReport` of :func:`report_to_json`'s object."""
    if d is None:
        return None
    o = _obj(d, "firewall report")
    qd = o["query_domain"]
    return FirewallReport(
        query_domain=None if qd is None else str(qd),
        tau=float(o["tau"]),
        domain_gate=bool(o["domain_gate"]),
        blocked=tuple(
            Blocked(
                item_id=int(b["item_id"]),
                layer=str(b["layer"]),
                reason=str(b["reason"]),
                similarity=float(b["similarity"]),
                domain=None if b["domain"] is None else str(b["domain"]),
            )
            for b in o["blocked"]
        ),
        verify=tuple(int(i) for i in o["verify"]),
        clarify=tuple(int(i) for i in o["clarify"]),
    )


def context_to_json(ctx: Context, user_id: str | None = None) -> dict[str, Any]:
    """A :class:`Context` as a JSON object, with ``text`` = ``ctx.render()``."""
    return {
        "items": [item_to_json(it, user_id) for it in ctx.items],
        "gates": dict(ctx.gates),
        "beta": ctx.beta,
        "abstain": ctx.abstain,
        "query": ctx.query,
        "budget": ctx.budget,
        "text": ctx.render(),
        "firewall": report_to_json(ctx.firewall),
        "order": ctx.order,
    }


def _order(x: object) -> str:
    if x not in CONTEXT_ORDERS:
        raise ValueError(f"order {x!r} is not one of {list(CONTEXT_ORDERS)}")
    return str(x)


def context_from_json(d: object) -> Context:
    """The :class:`Context` of :func:`context_to_json`'s object (``text`` is re-rendered from the items)."""
    return _parse(
        d,
        "context",
        lambda o: Context(
            items=[item_from_json(x) for x in o["items"]],
            gates={str(k): float(v) for k, v in o["gates"].items()},
            beta=float(o["beta"]),
            abstain=bool(o["abstain"]),
            query=str(o["query"]),
            budget=int(o["budget"]),
            firewall=report_from_json(o.get("firewall")),
            order=_order(o.get("order", "lost-in-the-middle")),
        ),
        "missing or bad field ",
    )


def session_report_to_json(r: SessionReport) -> dict[str, Any]:
    """A :class:`SessionReport` as a JSON object."""
    return r.to_dict()


def session_report_from_json(d: object) -> SessionReport:
    """The :class:`SessionReport` of :func:`session_report_to_json`'s object."""
    return _parse(
        d,
        "session report",
        lambda o: SessionReport(
            segments=int(o["segments"]),
            facts=int(o["facts"]),
            promoted=int(o["promoted"]),
            evicted=int(o["evicted"]),
            blend_drift=float(o["blend_drift"]),
            purged=int(o.get("purged", 0)),
        ),
    )


def delete_report_to_json(r: DeleteReport) -> dict[str, Any]:
    """A :class:`DeleteReport` as a JSON object."""
    return r.to_dict()


def delete_report_from_json(d: object) -> DeleteReport:
    """The :class:`DeleteReport` of :func:`delete_report_to_json`'s object."""
    return _parse(
        d, "delete report", lambda o: DeleteReport(deleted=int(o["deleted"]), ids=tuple(int(i) for i in o["ids"]))
    )


def import_report_to_json(r: ImportReport, user_id: str | None = None) -> dict[str, Any]:
    """An :class:`ImportReport` as a JSON object (``ids``' keys as strings); ``user_id``: the
    user id to show (a server shows the caller's, not the stored one)."""
    d = r.to_dict()
    if user_id is not None:
        d["user_id"] = user_id
    return d


def import_report_from_json(d: object) -> ImportReport:
    """The :class:`ImportReport` of :func:`import_report_to_json`'s object."""
    return _parse(
        d,
        "import report",
        lambda o: ImportReport(
            user_id=str(o["user_id"]),
            from_user_id=str(o["from_user_id"]),
            items=int(o["items"]),
            sessions=int(o["sessions"]),
            revisions=int(o["revisions"]),
            notes=int(o.get("notes", 0)),  # (a server before format version 2 writes none)
            links=int(o.get("links", 0)),
            reembedded=int(o["reembedded"]),
            replaced=bool(o["replaced"]),
            ids={int(k): int(v) for k, v in _obj(o["ids"], "import report ids").items()},
        ),
    )


def note_to_json(n: Note | None) -> dict[str, Any]:
    """A turn's :class:`~lamina.Note` (or its absence) as ``{"note": {...} | null}``."""
    if n is None:
        return {"note": None}
    return {
        "note": {
            "item_id": n.item_id,
            "keywords": list(n.keywords),
            "tags": list(n.tags),
            "context": n.context,
            "updated_at": n.updated_at,
            "history": [
                {"tags": list(h.tags), "context": h.context, "changed_at": h.changed_at, "cause": h.cause}
                for h in n.history
            ],
        }
    }


def _opt_float(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


def note_from_json(d: object) -> Note | None:
    """The :class:`~lamina.Note` (or None) of :func:`note_to_json`'s object."""
    o = _obj(d, "note response")
    if "note" not in o:
        raise WireError("note response has no 'note' field")
    if o["note"] is None:
        return None
    n = _obj(o["note"], "note")
    try:
        return Note(
            item_id=int(n["item_id"]),
            keywords=tuple(str(w) for w in n["keywords"]),
            tags=tuple(str(t) for t in n["tags"]),
            context=str(n["context"]),
            updated_at=_opt_float(n["updated_at"]),
            history=tuple(
                NoteRevision(
                    tags=tuple(str(t) for t in h["tags"]),
                    context=str(h["context"]),
                    changed_at=_opt_float(h["changed_at"]),
                    cause=None if h["cause"] is None else int(h["cause"]),
                )
                for h in map(lambda x: _obj(x, "note revision"), n["history"])
            ),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WireError(f"malformed note: {e}") from None


def links_to_json(links: list[Link]) -> dict[str, Any]:
    """A turn's :class:`~lamina.Link` s as ``{"links": [...]}``."""
    return {
        "links": [
            {
                "item_id": x.item_id,
                "other_id": x.other_id,
                "weight": x.weight,
                "shared": list(x.shared),
                "kind": x.kind,
                "created_at": x.created_at,
                "newer": x.newer,
            }
            for x in links
        ]
    }


def links_from_json(d: object) -> list[Link]:
    """The :class:`~lamina.Link` s of :func:`links_to_json`'s object."""
    o = _obj(d, "links response")
    try:
        out = []
        for x in map(lambda v: _obj(v, "link"), o["links"]):
            if x["kind"] not in LINK_KINDS or not isinstance(x["newer"], bool):
                raise ValueError(f"kind {x['kind']!r} / newer {x['newer']!r}")
            out.append(
                Link(
                    item_id=int(x["item_id"]),
                    other_id=int(x["other_id"]),
                    weight=float(x["weight"]),
                    shared=tuple(str(w) for w in x["shared"]),
                    kind=str(x["kind"]),
                    created_at=_opt_float(x["created_at"]),
                    newer=x["newer"],
                )
            )
        return out
    except (KeyError, TypeError, ValueError) as e:
        raise WireError(f"malformed links: {e}") from None
