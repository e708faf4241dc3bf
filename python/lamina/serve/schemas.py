"""Request and response bodies of the HTTP API (pydantic v2; they make the OpenAPI at ``/docs``).

Requests are validated by these models (unknown fields are refused: 422 ``validation_error``);
the values then go through :class:`lamina.Memory`'s own checks (400 ``invalid_input``). Responses
are the wire form of :mod:`lamina.client.wire`, which these models describe (a test checks each
response against its model).
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..memory.inputs import MAX_BUDGET, MAX_K
from ..memory.types import MemoryItem

__all__ = [
    "AuditEntryOut",
    "AuditOut",
    "Message",
    "AddRequest",
    "AddResponse",
    "EndSessionRequest",
    "SessionReportOut",
    "ContextRequest",
    "item_fields",
    "item_model",
    "ItemOut",
    "ContextOut",
    "SearchRequest",
    "ItemsOut",
    "UpdateRequest",
    "DeleteReportOut",
    "UsersOut",
    "ErrorOut",
    "HealthOut",
]

#: An event time: seconds since the Unix epoch, or an ISO-8601 string ("2023-05-08T13:56:00Z").
Time = float | str
#: Metadata of a message (lamina.memory.metadata, which checks it: 400 naming the key).
MetadataIn = dict[str, Any]
#: A filter on items (lamina.memory.metadata, which checks it: 400 naming the key or operator).
FiltersIn = dict[str, Any]
_FILTERS_DOC = (
    'Only items it admits: {"category": "work"}, {"category": {"in": [...]}}, {"priority": {"gte": 2}}, '
    '{"created_at": {"gte": "2024-01-01"}}, {"or": [...]} (see docs/guides/metadata.md).'
)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(_In):
    """One message of ``POST /v1/memories`` (``speaker``/``role``, ``text``/``content``)."""

    text: str | None = Field(None, description="The message text (or give it as `content`).")
    content: str | None = None
    speaker: str | None = Field(None, description="Who spoke (or give it as `role`).")
    role: str | None = None
    id: str | int | None = Field(None, description="Your id of the message (default `t<item id>`).")
    timestamp: Time | None = Field(None, description="Event time of the message.")
    domain: str | None = None
    commitment: Literal["persist", "ephemeral", "verify", "clarify"] | None = None
    metadata: MetadataIn | None = Field(None, description="str -> str | int | float | bool | list[str].")


class AddRequest(_In):
    user_id: str
    session_id: str | None = Field(None, description='Default "default": one running session per user.')
    messages: list[Message]
    timestamp: Time | None = Field(None, description="Event time of messages without one (default: now).")
    metadata: MetadataIn | None = Field(None, description="Metadata of every message (a message's own wins).")


class AddResponse(BaseModel):
    ids: list[int] = Field(description="Item ids of the new turns, in order.")


class EndSessionRequest(_In):
    user_id: str
    session_id: str
    now: Time | None = Field(None, description="Event time of the consolidation (default: the last turn's).")


class SessionReportOut(BaseModel):
    segments: int
    facts: int
    promoted: int
    evicted: int
    blend_drift: float
    purged: int = 0


class FirewallIn(_In):
    """The contextual firewall's settings (:class:`lamina.Firewall`)."""

    tau: float = Field(0.1, ge=-1.0, le=1.0, description="Similarity floor τ on the cosine to the query.")
    domain_gate: bool = True
    allow: list[str] = Field(
        default_factory=lambda: ["other"], description="Item domains that pass every query's gate."
    )
    constraints_cross: bool = Field(
        True, description="A stated constraint of another domain passes the gate into a plan request."
    )


class BlockedOut(BaseModel):
    item_id: int
    layer: str
    reason: str
    similarity: float
    domain: str | None


class FirewallReportOut(BaseModel):
    """What the firewall decided (:class:`lamina.FirewallReport`)."""

    query_domain: str | None
    tau: float
    domain_gate: bool
    blocked: list[BlockedOut]
    verify: list[int]
    clarify: list[int]


class _ContextOptions(_In):
    """The options of a context, one query or many (:meth:`lamina.Memory.context`)."""

    budget: int = Field(
        1024, le=MAX_BUDGET, description="Token budget (whitespace words of the rendered context), at most 10,000,000."
    )
    now: Time | None = None
    domain: str | None = None
    include_archive: bool = False
    filters: FiltersIn | None = Field(None, description=_FILTERS_DOC)

    def options(self) -> dict[str, Any]:
        """These options as keyword arguments of ``Memory.context`` / ``context_batch``."""
        return {k: getattr(self, k) for k in _ContextOptions.model_fields}


class ContextRequest(_ContextOptions):
    user_id: str
    query: str
    firewall: FirewallIn | None = None


def _wire_type(t: Any) -> Any:
    """The JSON form of a field type: a tuple of any length is a list (nested ones too)."""
    args = typing.get_args(t)
    if typing.get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[_wire_type(args[0])]  # type: ignore[misc]
    return t


def item_fields() -> dict[str, tuple[Any, Any]]:
    """The public item fields, the fields of :class:`lamina.MemoryItem` in its order: name ->
    (the field's JSON type, its default or :data:`dataclasses.MISSING`). The item schemas of the
    HTTP API (:class:`ItemOut`) and of the MCP tools derive from them."""
    hints = typing.get_type_hints(MemoryItem)
    return {
        f.name: (_wire_type(hints[f.name]), f.default if f.default_factory is MISSING else f.default_factory())
        for f in fields(MemoryItem)
    }


def item_model(
    name: str,
    doc: str,
    names: tuple[str, ...] | None = None,
    *,
    required: tuple[str, ...] | None = None,
    descriptions: dict[str, str] | None = None,
    module: str = __name__,
) -> type[BaseModel]:
    """A pydantic model of the public item fields (:func:`item_fields`): those of ``names`` in that
    order (default: every one), ``required`` without a default (default: every one), the others
    with the item's own default; ``descriptions`` for the schema; ``module``: where it is defined."""
    spec = item_fields()
    chosen = tuple(spec) if names is None else names
    must = chosen if required is None else required
    about = descriptions or {}
    defs: dict[str, Any] = {}
    for n in chosen:
        t, default = spec[n]
        kw: dict[str, Any] = {"description": about[n]} if n in about else {}
        if n in must:
            defs[n] = (t, Field(**kw)) if kw else t
        elif isinstance(default, (list, tuple)):
            defs[n] = (t, Field(default_factory=list, **kw))
        else:
            defs[n] = (t, Field(default=default, **kw)) if kw else (t, default)
    return create_model(name, __doc__=doc, __module__=module, **defs)


if TYPE_CHECKING:
    ItemOut = BaseModel
else:
    #: A memory item (:class:`lamina.MemoryItem`): every public field, each required.
    ItemOut = item_model(
        "ItemOut",
        "A memory item (:class:`lamina.MemoryItem`).",
        descriptions={"turns": "Raw turns shown with the item: [time, speaker, text]."},
    )


class ContextOut(BaseModel):
    """A budgeted context (:class:`lamina.Context`) and its rendered ``text``."""

    items: list[ItemOut]
    gates: dict[str, float]
    beta: float
    abstain: bool
    query: str
    budget: int
    text: str = Field(description="The context rendered for a prompt (empty when abstaining).")
    firewall: FirewallReportOut | None = None
    order: Literal["lost-in-the-middle", "score", "reversed"] = Field(
        "lost-in-the-middle", description="The order the items are in (lamina.memory.types.CONTEXT_ORDERS)."
    )


class SearchRequest(_In):
    user_id: str
    query: str
    k: int = Field(10, le=MAX_K, description="How many items, at most 100,000.")
    layers: list[str] | None = Field(None, description="Any of working, episodic, semantic, archive, history.")
    now: Time | None = None
    filters: FiltersIn | None = Field(None, description=_FILTERS_DOC)


class ItemsOut(BaseModel):
    items: list[ItemOut]


class AddBatchRequest(_In):
    requests: list[AddRequest] = Field(description="Adds run in order, each atomic (a failed one stops the rest).")


class AddBatchOut(BaseModel):
    ids: list[list[int]] = Field(description="Each add's item ids, in order.")


class ContextBatchRequest(_ContextOptions):
    queries: list[str]
    user_ids: str | list[str] = Field(description="One user for every query, or one per query.")


class ContextsOut(BaseModel):
    contexts: list[ContextOut]


class ListRequest(_In):
    user_id: str
    filters: FiltersIn | None = Field(None, description=_FILTERS_DOC)
    cursor: str | None = Field(None, description="The next_cursor of the page before (None: the first page).")
    limit: int = Field(100, ge=1, le=1000, description="Items per page, at most 1000.")


class PageOut(BaseModel):
    items: list[ItemOut]
    next_cursor: str | None = Field(description="Pass it as cursor for the next page; null on the last page.")


class DeleteMatchingRequest(_In):
    user_id: str
    filters: FiltersIn = Field(description=_FILTERS_DOC)


class NoteRevisionOut(BaseModel):
    tags: list[str]
    context: str
    changed_at: float | None
    cause: int | None = Field(description="The id of the turn whose arrival changed the note.")


class NoteBody(BaseModel):
    """A turn's A-Mem note (:class:`lamina.Note`)."""

    item_id: int
    keywords: list[str]
    tags: list[str]
    context: str
    updated_at: float | None
    history: list[NoteRevisionOut]


class NoteOut(BaseModel):
    note: NoteBody | None = Field(description="None: the item is not a turn, or has no note.")


class LinkOut(BaseModel):
    """A link of a turn's note (:class:`lamina.Link`), seen from ``item_id``."""

    item_id: int
    other_id: int
    weight: float = Field(description="Cosine of the two turns when the link was made.")
    shared: list[str]
    kind: Literal["related", "duplicate"]
    created_at: float | None
    newer: bool = Field(description="other_id is the newer turn (the link was made when it arrived).")


class LinksOut(BaseModel):
    links: list[LinkOut]


class UpdateRequest(_In):
    text: str
    timestamp: Time | None = None


class DeleteReportOut(BaseModel):
    deleted: int
    ids: list[int]


class ImportReportOut(BaseModel):
    """What an import wrote (:class:`lamina.memory.reports.ImportReport`)."""

    user_id: str = Field(description="The user the dump was imported as (the path's).")
    from_user_id: str = Field(description="The user's id in the dump.")
    items: int
    sessions: int
    revisions: int
    notes: int = Field(description="A-Mem notes written (of the dump's turns).")
    links: int = Field(description="Links between the dump's turns written.")
    reembedded: int = Field(description="Item vectors computed on import rather than taken from the dump.")
    replaced: bool = Field(description="Whether an existing user was deleted first.")
    ids: dict[str, int] = Field(description="The dump's item id -> the new item id.")


class UsersOut(BaseModel):
    users: list[str]


class AuditEntryOut(BaseModel):
    """One administrative action (:class:`lamina.serve.audit.AuditEntry`)."""

    seq: int = Field(description="Its number in the tenant's log: 1, 2, ... in the order the actions happened.")
    at: float = Field(description="When, seconds since the epoch.")
    action: str = Field(description="delete, delete_user, export, import, adopt or new_address.")
    who: str = Field(description="The key's id (sha256: and 16 hex digits of its hash), anonymous or operator.")
    address: str | None = Field(description="The client's address.")
    user_id: str | None = Field(description="The user the action was on (your id).")
    item_id: int | None = Field(description="The item deleted (its public id).")
    detail: str | None


class AuditOut(BaseModel):
    """A page of the tenant's audit log, oldest first."""

    entries: list[AuditEntryOut]
    total: int = Field(description="Entries in the log.")
    next: int | None = Field(description="Pass as ?after= for the next page (null: this page is the last).")


class ErrorOut(BaseModel):
    """Every error response: a stable ``code`` and a message for people."""

    code: str = Field(
        description="invalid_input, bad_dump, type_error, validation_error, unauthorized, forbidden, "
        "not_found, user_exists, too_large, too_many_messages, overloaded, store_busy, not_ready, internal"
    )
    message: str
    detail: list[dict[str, object]] | None = Field(None, description="Per-field errors of a validation_error.")


class HealthOut(BaseModel):
    status: str
