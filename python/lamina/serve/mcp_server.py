"""lamina as an MCP server (Model Context Protocol, the official ``mcp`` SDK, 2.x line).

:func:`build_mcp_server` wraps a :class:`lamina.Memory` in an :class:`mcp.server.mcpserver.MCPServer`
with seven tools, each with a typed JSON schema for its input and its output:

==================  ==========================================================================
``add_memory``      add messages (turns) to a user's session → the new item ids
``get_context``     a budgeted context for a query (rendered text, items, gates, abstain)
``search_memory``   top-k items by similarity, optionally from given layers
``delete_memory``   delete one of the user's items (a turn takes what derives from it along)
``end_session``     consolidate a session → what consolidation did
``list_facts``      the user's semantic facts (current, or with their history)
``related_memories``  a turn's A-Mem note and the turns linked to it (:meth:`lamina.Memory.links`)
==================  ==========================================================================

Bad input never crashes the server: a value lamina refuses (an empty text, an unknown user or
item, another user's item, a bad time) comes back as a tool error (``isError``) whose message
says what was wrong; arguments that do not fit the schema are refused by the SDK the same way.

Transports: ``lamina mcp --db PATH`` serves it over stdio (:func:`run_stdio`);
:func:`mcp_http_app` gives its streamable-HTTP ASGI app. To mount the server inside another
ASGI app (``lamina serve`` mounts it at ``/mcp``), build the app with ``path="/"``, mount it
at ``/mcp``, and run ``server.session_manager.run()`` in the host app's lifespan (a mounted
app's own lifespan is not run by Starlette).

Tenants: ``user_id_map`` maps the ``user_id`` a tool receives, with the HTTP request that
carried the call (its headers, its ASGI scope: what the host's authentication attached), to the
one stored; a server that namespaces users per tenant passes its mapping. (The tool runs in the
MCP session's task, not the request's, so the request is the way to reach the caller's identity,
not a context variable.) Items are returned without their stored user id, and refusals name
the user as the caller did, so no tool shows the mapped ids.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context as ToolContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request

from ..errors import UNSEEN_ITEM, LaminaError, NotFoundError, Overloaded, StoreBusy
from ..memory.facade import Memory
from ..memory.inputs import MAX_BUDGET
from ..memory.reports import DeleteReport
from ..memory.types import Context, MemoryItem
from ..native import _info
from .ids import PublicIds, with_message_ids
from .schemas import DeleteReportOut, SessionReportOut, item_model

__all__ = [
    "build_mcp_server",
    "mcp_http_app",
    "run_stdio",
    "TOOLS",
    "UserIdMap",
    "Runner",
    "MessageIn",
    "ItemOut",
    "AddResult",
    "ContextResult",
    "SearchResult",
    "DeleteResult",
    "SessionResult",
    "FactsResult",
]

TOOLS = (
    "add_memory",
    "get_context",
    "search_memory",
    "delete_memory",
    "end_session",
    "list_facts",
    "related_memories",
)

INSTRUCTIONS = (
    "Long-term memory of conversations, per user. Call add_memory with each exchange (speaker and "
    "text per message) under a session id, end_session when a conversation ends (it consolidates "
    "episodes and facts), and get_context before answering to recall what matters for the question "
    "within a token budget. search_memory lists raw matches; list_facts the facts known about a user; "
    "delete_memory forgets an item; related_memories follows a remembered turn's links to the turns that share "
    "its topic (evidence spread over conversations)."
)

T = TypeVar("T")
#: Maps a tool call's ``user_id`` and the HTTP request that carried the call (None over stdio)
#: to the stored user id.
UserIdMap = Callable[[str, Request | None], str]
#: Logs an administrative action of a tool call: ``(action, user_id, public item id, request)``.
AuditHook = Callable[[str, str, int, Request | None], None]
#: Runs a blocking call off the event loop and awaits it (default: :func:`anyio.to_thread.run_sync`).
Runner = Callable[[Callable[[], Any]], Awaitable[Any]]
Layer = Literal["working", "episodic", "semantic", "archive", "history"]
UserId = Annotated[str, Field(min_length=1, description="The user whose memory this is (e.g. a person or agent id).")]
Time = Annotated[
    float | str | None,
    Field(description="Event time: seconds since the epoch or an ISO-8601 string; default: now."),
]


class MessageIn(BaseModel):
    """One message (turn) to remember (a field not listed here is an error, not dropped)."""

    model_config = ConfigDict(extra="forbid")

    speaker: str = Field(min_length=1, description="Who said it (a name or a role such as 'user').")
    text: str = Field(min_length=1, description="What was said.")
    id: str | None = Field(default=None, description="Your id of the message (provenance); default: assigned.")
    timestamp: float | str | None = Field(default=None, description="When it was said (epoch seconds or ISO-8601).")
    commitment: Literal["persist", "ephemeral", "verify", "clarify"] | None = Field(
        default=None,
        description="persist (default); ephemeral: never consolidated, gone at session end; verify: shown "
        "with a recheck marker; clarify: never injected by a firewalled context, which asks instead.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Your values, str -> str | int | float | bool | list[str]; filterable."
    )


#: A filter on items (lamina.memory.metadata checks it; a bad one is a tool error naming it).
Filters = Annotated[
    dict[str, Any] | None,
    Field(
        description='Only items it admits: {"category": "work"}, {"category": {"in": ["a", "b"]}}, '
        '{"priority": {"gte": 2}}, {"created_at": {"gte": "2024-01-01"}}, {"or": [...]}.'
    ),
]


#: The public item fields (:func:`lamina.serve.schemas.item_fields`) a tool returns, in this order.
ITEM_FIELDS = (
    *("id", "text", "layer", "kind", "score", "session_id", "speaker", "timestamp", "sources"),
    *("subject", "predicate", "object", "valid_from", "valid_to", "superseded_by", "metadata"),
)

if TYPE_CHECKING:
    ItemOut = BaseModel
else:
    #: A memory item as a tool returns it.
    ItemOut = item_model(
        "ItemOut",
        "A memory item as a tool returns it.",
        ITEM_FIELDS,
        required=("id", "text", "layer", "kind", "score"),
        descriptions={
            "id": "Item id (use it with delete_memory).",
            "layer": "working, episodic, semantic, archive or history.",
            "kind": "turn, segment, summary, note, fact or profile.",
            "timestamp": "Event time, seconds since the epoch.",
            "sources": "Ids of the messages it derives from.",
        },
        module=__name__,
    )


class AddResult(BaseModel):
    """The item ids of the added messages, in order."""

    ids: list[int]


class ContextResult(BaseModel):
    """A budgeted context: the text to put in a prompt, and what it holds."""

    text: str = Field(description="The rendered context (empty when abstaining).")
    abstain: bool = Field(description="True when nothing relevant enough was found.")
    tokens: int = Field(description="Whitespace tokens of the rendered text.")
    budget: int
    gates: dict[str, float] = Field(description="Share of the budget each layer got.")
    items: list[ItemOut]


class SearchResult(BaseModel):
    """Items by similarity, best first."""

    items: list[ItemOut]


class DeleteResult(DeleteReportOut):
    """What was deleted."""


class SessionResult(SessionReportOut):
    """What consolidating the session did."""


class FactsResult(BaseModel):
    """Semantic facts, by subject and predicate."""

    facts: list[ItemOut]


class LinkedOut(BaseModel):
    """A turn linked to the one asked about."""

    item: ItemOut
    weight: float = Field(description="Cosine similarity of the two turns when the link was made.")
    kind: Literal["related", "duplicate"] = Field(description="duplicate: the same speaker saying it again.")
    shared: list[str] = Field(description="The keywords the two turns share.")
    newer: bool = Field(description="The linked turn came later than the one asked about.")


class RelatedResult(BaseModel):
    """A turn's note (empty for an item that is not a turn) and its linked turns, strongest first."""

    keywords: list[str]
    tags: list[str]
    context: str | None = Field(description="One line: who, when, about what.")
    related: list[LinkedOut]


def _item(it: MemoryItem) -> ItemOut:
    """An item (its ids public already) as a tool returns it."""
    d = {k: getattr(it, k) for k in ITEM_FIELDS}
    return ItemOut(**d | {"score": float(it.score), "sources": list(it.sources)})


def _context(ctx: Context) -> ContextResult:
    """A context (its ids public already) as ``get_context`` returns it."""
    text = ctx.render()
    return ContextResult(
        text=text,
        abstain=ctx.abstain,
        tokens=len(text.split()),
        budget=ctx.budget,
        gates={k: float(v) for k, v in ctx.gates.items()},
        items=[_item(it) for it in ctx.items],
    )


def _guarded(call: Callable[[], T], user: tuple[str, str] | None = None) -> T:
    """``call()``, with a refused input raised as a tool error; ``user``: (stored id, the
    caller's id), so that the message names the user as the caller does."""
    try:
        return call()
    except (LaminaError, ValueError, TypeError, KeyError) as e:  # (StoreBusy is a LaminaError)
        raise _tool_error(e, user) from e


async def _guarded_run(run: Runner, call: Callable[[], T], user: tuple[str, str]) -> T:
    """:func:`_guarded` of ``call()`` run by ``run`` (off the event loop)."""
    try:
        out: T = await run(call)
        return out
    except (LaminaError, ValueError, TypeError, KeyError) as e:
        raise _tool_error(e, user) from e


def _unseen(call: Callable[[], T]) -> T:
    """``call()`` on one item id, every unknown-item answer alike (missing, deleted, another
    user's or tenant's: ``lamina.errors.UNSEEN_ITEM``), so that an id tells nothing."""
    try:
        return call()
    except NotFoundError:
        raise NotFoundError(UNSEEN_ITEM) from None


def _tool_error(e: Exception, user: tuple[str, str] | None) -> ToolError:
    """What the caller sees of a refused call (the message names the bad argument)."""
    busy = isinstance(e, (StoreBusy, Overloaded))
    kind = "not found" if isinstance(e, KeyError) else "busy" if busy else "invalid input"
    msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    if user is not None and user[0] != user[1]:
        msg = msg.replace(repr(user[0]), repr(user[1]))
    return ToolError(f"{kind}: {msg}")


def build_mcp_server(
    memory: Memory,
    *,
    user_id_map: UserIdMap | None = None,
    name: str = "lamina",
    default_budget: int = 1024,
    run: Runner | None = None,
    max_messages: int | None = None,
    ids: PublicIds | None = None,
    audit: AuditHook | None = None,
) -> MCPServer:
    """An MCP server whose tools read and write ``memory``.

    Parameters
    ----------
    memory : Memory
        Shared by every session of the server (it is thread-safe; each tool runs its memory call
        through ``run``, off the event loop, so the event loop never waits on the engine).
    user_id_map : callable ``(user_id, request) -> str``, optional
        Maps the ``user_id`` of a tool call to the stored one (tenant namespacing); ``request``
        is the Starlette request that carried the call over HTTP, None over stdio. It may raise
        ``ValueError``, ``KeyError`` or :class:`lamina.LaminaError` to refuse the call (a tool
        error then, with its message). It runs on the event loop: no blocking work in it.
    name : str
        The server's name in the MCP handshake.
    default_budget : int
        ``get_context``'s budget when the call gives none (tokens).
    run : callable, optional
        ``await run(fn)`` runs the blocking memory call ``fn()`` off the event loop (default:
        :func:`anyio.to_thread.run_sync`); ``lamina serve`` passes its bounded work pool (a full
        pool is a tool error ``busy: ...``).
    max_messages : int, optional
        Most messages one ``add_memory`` takes (a tool error past it); ``lamina serve`` passes
        its ``--max-messages``, the limit of ``POST /v1/memories``. Default: no limit.
    ids : PublicIds, optional
        The item ids the tools show and take (:mod:`lamina.serve.ids`); default: the public ids
        of ``memory``'s database (its key is read, or made, now), as ``lamina serve`` shows them.
    audit : callable ``(action, user_id, item_id, request)``, optional
        Called (through ``run``, in the same call) after ``delete_memory`` deleted an item, with
        ``"delete"``, the caller's user id, the public item id and the request (None over
        stdio): ``lamina serve`` logs it (:mod:`lamina.serve.audit`).

    Returns
    -------
    mcp.server.mcpserver.MCPServer
        Run it over stdio (:func:`run_stdio`) or HTTP (:func:`mcp_http_app`).
    """
    if not isinstance(memory, Memory):
        raise TypeError(f"memory must be a lamina.Memory, got {type(memory).__name__}")
    if isinstance(default_budget, bool) or not isinstance(default_budget, int) or not 1 <= default_budget <= MAX_BUDGET:
        raise ValueError(f"default_budget must be an int in 1..{MAX_BUDGET}, got {default_budget!r}")
    if max_messages is not None and (
        isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1
    ):
        raise ValueError(f"max_messages must be an int >= 1 or None, got {max_messages!r}")
    runner: Runner = run if run is not None else anyio.to_thread.run_sync
    pub = ids if ids is not None else PublicIds.of_memory(memory)
    server = MCPServer(
        name=name,
        instructions=INSTRUCTIONS,
        version=str(_info.build_info()["version"]),
        warn_on_duplicate_tools=True,
    )

    def user(uid: str, ctx: ToolContext[Any, Any]) -> str:
        if user_id_map is None:
            return uid
        req = ctx.request_context.request
        out = _guarded(lambda: user_id_map(uid, req if isinstance(req, Request) else None))
        if not isinstance(out, str) or not out:
            raise ToolError(f"invalid input: user_id {uid!r} maps to no user")
        return out

    async def for_user(user_id: str, ctx: ToolContext[Any, Any], work: Callable[[str], T]) -> T:
        """``work(stored user id)``, a memory call on the tool call's user, run off the event loop,
        its errors tool errors naming the user as the caller does."""
        uid = user(user_id, ctx)
        return await _guarded_run(runner, lambda: work(uid), (uid, user_id))

    def items(found: list[MemoryItem]) -> list[ItemOut]:
        """Items (their ids internal) as a tool returns them."""
        return [_item(it) for it in pub.items(found)]

    @server.tool(title="Add memory")
    async def add_memory(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        messages: Annotated[list[MessageIn], Field(min_length=1, description="The messages, in order.")],
        session_id: Annotated[
            str | None, Field(min_length=1, description='The conversation they belong to (default "default").')
        ] = None,
        timestamp: Time = None,
    ) -> AddResult:
        """Remember messages of a conversation (one atomic write). Returns their item ids."""
        if max_messages is not None and len(messages) > max_messages:
            raise ToolError(
                f"too many messages: {len(messages)} in one add_memory; at most {max_messages} (max_messages)"
            )
        msgs = with_message_ids([m.model_dump(exclude_none=True) for m in messages])
        added = await for_user(
            user_id, ctx, lambda uid: memory.add(msgs, user_id=uid, session_id=session_id, timestamp=timestamp)
        )
        return AddResult(ids=[pub.public(i) for i in added])

    @server.tool(title="Get context")
    async def get_context(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        query: Annotated[str, Field(min_length=1, description="The question or task to recall memories for.")],
        budget: Annotated[
            int | None, Field(ge=1, le=MAX_BUDGET, description="Token budget of the context (at most 10,000,000).")
        ] = None,
        now: Time = None,
        domain: Annotated[str | None, Field(description="Only items of this domain (and untagged ones).")] = None,
        filters: Filters = None,
    ) -> ContextResult:
        """A budgeted context of the user's memories for a query: rendered text to put in a
        prompt, the items it holds, and whether it abstains (nothing relevant)."""
        b = default_budget if budget is None else budget
        found = await for_user(
            user_id,
            ctx,
            lambda uid: memory.context(query, user_id=uid, budget=b, now=now, domain=domain, filters=filters),
        )
        return _context(pub.context(found))

    @server.tool(title="Search memory")
    async def search_memory(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        query: Annotated[str, Field(min_length=1, description="What to look for.")],
        k: Annotated[int, Field(ge=1, le=1000, description="How many items.")] = 10,
        layers: Annotated[
            list[Layer] | None, Field(description="Layers to search (default: working, episodic, semantic).")
        ] = None,
        filters: Filters = None,
    ) -> SearchResult:
        """The user's items most similar to the query, best first (no budget)."""
        found = await for_user(
            user_id, ctx, lambda uid: memory.search(query, user_id=uid, k=k, layers=layers, filters=filters)
        )
        return SearchResult(items=items(found))

    @server.tool(title="Delete memory")
    async def delete_memory(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        item_id: Annotated[int, Field(ge=1, description="The item to delete (an id a tool returned).")],
    ) -> DeleteResult:
        """Forget one of the user's items. A raw turn takes along what was derived from it
        (segments, summaries, facts), so its text leaves every layer."""
        req = ctx.request_context.request
        request = req if isinstance(req, Request) else None

        def delete(uid: str) -> DeleteReport:
            rep = _unseen(lambda: memory.delete(pub.internal(item_id), user_id=uid))
            if audit is not None:
                audit("delete", user_id, item_id, request)
            return rep

        rep = await for_user(user_id, ctx, delete)
        return DeleteResult(deleted=rep.deleted, ids=[pub.public(i) for i in rep.ids])

    @server.tool(title="End session")
    async def end_session(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        session_id: Annotated[str, Field(min_length=1, description="The conversation to consolidate.")],
        now: Time = None,
    ) -> SessionResult:
        """Consolidate a finished conversation into episodes and facts."""
        rep = await for_user(user_id, ctx, lambda uid: memory.end_session(user_id=uid, session_id=session_id, now=now))
        return SessionResult(**rep.to_dict())

    @server.tool(title="List facts")
    async def list_facts(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        subject: Annotated[str | None, Field(description="Only facts about this subject.")] = None,
        current: Annotated[bool, Field(description="Only current values (false: superseded ones too).")] = True,
    ) -> FactsResult:
        """The facts known about the user's world (subject, predicate, object), current ones by default."""
        facts = await for_user(user_id, ctx, lambda uid: memory.facts(user_id=uid, subject=subject, current=current))
        return FactsResult(facts=items(facts))

    @server.tool(title="Related memories")
    async def related_memories(
        ctx: ToolContext[Any, Any],
        user_id: UserId,
        item_id: Annotated[int, Field(ge=1, description="A remembered turn (an id a tool returned).")],
    ) -> RelatedResult:
        """The turns linked to a remembered turn — earlier or later turns of the user that share a
        keyword with it and are close in meaning — with the turn's note (keywords, tags, a context
        line). Follow them to gather what is spread over several conversations."""

        def read(uid: str) -> RelatedResult:
            iid = pub.internal(item_id)
            note = memory.note(iid, user_id=uid)
            linked = [
                LinkedOut(
                    item=_item(pub.item(memory.get(x.other_id, user_id=uid))),
                    weight=x.weight,
                    kind="duplicate" if x.kind == "duplicate" else "related",
                    shared=list(x.shared),
                    newer=x.newer,
                )
                for x in memory.links(iid, user_id=uid)
            ]
            if note is None:
                return RelatedResult(keywords=[], tags=[], context=None, related=linked)
            return RelatedResult(
                keywords=list(note.keywords), tags=list(note.tags), context=note.context, related=linked
            )

        return await for_user(user_id, ctx, lambda uid: _unseen(lambda: read(uid)))

    return server


def mcp_http_app(
    server: MCPServer,
    *,
    path: str = "/mcp",
    json_response: bool = False,
    host: str = "127.0.0.1",
    stateless: bool = False,
) -> Starlette:
    """The server's streamable-HTTP ASGI app, serving MCP at ``path``; its lifespan runs the
    server's session manager (mounted in another app, run ``server.session_manager.run()`` in
    that app's lifespan instead).

    ``host``: the address the app is served on. On a loopback address (the default) the SDK
    protects against DNS rebinding (it accepts only ``Host`` headers of loopback names); on any
    other it does not (a client reaches it by the server's name, and the host authenticates).
    ``stateless``: no MCP session is kept between requests (each request is answered on its
    own), so any of several server processes can answer any request; the tools need no session."""
    return server.streamable_http_app(
        streamable_http_path=path, json_response=json_response, host=host, stateless_http=stateless
    )


def run_stdio(server: MCPServer) -> None:
    """Serve over stdin/stdout until the client closes the stream."""
    server.run("stdio")
