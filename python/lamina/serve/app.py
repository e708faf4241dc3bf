"""The HTTP API of ``lamina serve``: :func:`create_app` builds the FastAPI app.

Every route that touches the memory runs its call on the service's bounded work pool
(:class:`~lamina.serve.limits.WorkPool`): the event loop never blocks on native work, and a full
queue answers 503 at once. Responses are the wire form of :mod:`lamina.client.wire` (described by the
models of :mod:`~lamina.serve.schemas`), serialised once, without a second validation pass.

User ids in paths and bodies are the caller's; the service stores them in the caller's tenant
namespace (:mod:`~lamina.serve.tenancy`). Item ids in paths and answers are public ids, and item
routes answer one 404 for another tenant's item and a missing one (:mod:`~lamina.serve.ids`).
Deletes, exports and imports are logged in the tenant's audit log, read at ``GET /v1/audit``
(:mod:`~lamina.serve.audit`).

Besides the routes here: a user's export and import (:mod:`~lamina.serve.dump_api`) and, unless
``ServeConfig.mcp`` is off, the MCP server at ``/mcp`` (:mod:`~lamina.serve.mcp`), on the same
memory with the same keys and tenants.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from ..client.wire import (
    context_to_json,
    delete_report_to_json,
    item_to_json,
    links_to_json,
    note_to_json,
    session_report_to_json,
)
from ..errors import InvalidInput
from ..memory import Firewall, Memory, MemoryConfig
from ..memory.opening import database_embedder
from ..memory.reports import DeleteReport
from ..memory.service_records import MAX_LOG_PAGE
from ..memory.store.dburl import is_postgres_url
from ..memory.types import MemoryItem
from . import schemas as S
from .admin_api import ADMIN_PREFIX, admin_router
from .audit import entries as audit_entries
from .audit import export_lines as audit_lines
from .auth import KeyGate, KeyRing, check_hash, metrics_key_matches
from .bulk_api import bulk_router
from .dump_api import IMPORT_PATH, transfer_router
from .http_errors import error_response, install_error_handlers
from .ids import as_unseen, item_owner, with_message_ids
from .limits import BodyLimit, Limits, RequestTooLarge
from .metrics import MetricsMiddleware, ServeMetrics, TenantCollector, TimedEmbedder
from .ratelimit import DEFAULT_RATE_LIMIT, RateGate, RateLimits, RateState
from .service import Caller, CallerDep, Service, ServiceDep
from .tenancy import owns

__all__ = ["ServeConfig", "create_app", "app_from_env", "ENV_CONFIG"]

#: Environment variable through which ``lamina serve --workers N`` hands its options to each worker.
ENV_CONFIG = "LAMINA_SERVE_CONFIG"
_MAX_ID = 2**63 - 1
T = TypeVar("T")
_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": S.ErrorOut} for s in (400, 401, 404, 413, 422, 503)}


@dataclass(frozen=True)
class ServeConfig:
    """What ``lamina serve`` serves.

    Attributes
    ----------
    db : str or None
        SQLite file (None: in memory, gone at shutdown).
    embedder : str
        ``auto`` (the database's own; a new one: MiniLM, float32 when installed, else int8),
        ``hashing``, ``minilm``, ``minilm-int8``, ``mpnet``.
    keys : KeyRing
        Empty: no authentication (the command line then binds to loopback only).
    limits : Limits
    config : MemoryConfig, optional
    tenant_metrics_max_age : float
        Seconds ``/metrics`` reuses its count of users and items per tenant (default 15).
    mcp : bool
        Serve the MCP server at ``/mcp`` (:mod:`~lamina.serve.mcp`; default True).
    host : str
        The address served (the MCP transport's DNS-rebinding protection is on for loopback).
    metrics_key : str or None
        The hash (``sha256:...``, :func:`~lamina.serve.auth.hash_key`) of the bearer key
        ``/metrics`` requires when ``keys`` are configured (``lamina serve --metrics-key`` or
        ``LAMINA_METRICS_KEY``). With keys and without it, ``/metrics`` answers 404 (its counts
        name every tenant); without keys (loopback only) it is open.
    ui : bool
        Serve the memory inspector at ``/ui`` (:mod:`~lamina.serve.ui`; default True; needs Jinja2).
    eval_results : str or None
        A ``lamina eval`` results file (JSON) the inspector plots (``lamina serve --eval``).
    max_loaded_users : int or None
        The most users a worker keeps loaded in its native arenas (``lamina serve
        --max-loaded-users``; the least recently used beyond it are evicted and loaded again when
        next used; see :class:`lamina.Memory`). None: no limit.
    rate_limits : RateLimits
        Budgets of failed authentications and of writes (``lamina serve --rate-limit``;
        :mod:`~lamina.serve.ratelimit`).
    admin_key : str or None
        The hash of the bearer key the admin routes require (:mod:`~lamina.serve.admin_api`:
        adopting users into a tenant; ``lamina serve --admin-key-file`` or ``LAMINA_ADMIN_KEY``).
        None: they answer 404.
    """

    db: str | None
    embedder: str = "auto"
    keys: KeyRing = field(default_factory=KeyRing)
    limits: Limits = field(default_factory=Limits)
    config: MemoryConfig | None = None
    tenant_metrics_max_age: float = 15.0
    mcp: bool = True
    host: str = "127.0.0.1"
    metrics_key: str | None = None
    ui: bool = True
    eval_results: str | None = None
    max_loaded_users: int | None = None
    rate_limits: RateLimits = field(default_factory=RateLimits)
    admin_key: str | None = None

    def __post_init__(self) -> None:
        if self.metrics_key is not None:
            object.__setattr__(self, "metrics_key", check_hash(self.metrics_key, "ServeConfig.metrics_key"))
        if self.admin_key is not None:
            object.__setattr__(self, "admin_key", check_hash(self.admin_key, "ServeConfig.admin_key"))

    def to_env(self) -> str:
        """This configuration as JSON for :data:`ENV_CONFIG` (keys travel as their hashes)."""
        return json.dumps(
            {
                "db": self.db,
                "embedder": self.embedder,
                "keys": dict(self.keys.tenants_by_hash),
                "limits": {k: getattr(self.limits, k) for k in self.limits.__dataclass_fields__},
                "tenant_metrics_max_age": self.tenant_metrics_max_age,
                "mcp": self.mcp,
                "host": self.host,
                "metrics_key": self.metrics_key,
                "ui": self.ui,
                "eval_results": self.eval_results,
                "max_loaded_users": self.max_loaded_users,
                "rate_limits": self.rate_limits.spec(),
                "admin_key": self.admin_key,
            }
        )

    @classmethod
    def from_env(cls, raw: str) -> ServeConfig:
        d = json.loads(raw)
        return cls(
            db=d["db"],
            embedder=d["embedder"],
            keys=KeyRing(d["keys"]),
            limits=Limits(**d["limits"]),
            tenant_metrics_max_age=float(d["tenant_metrics_max_age"]),
            mcp=bool(d["mcp"]),
            host=str(d["host"]),
            metrics_key=d.get("metrics_key"),
            ui=bool(d.get("ui", True)),
            eval_results=d.get("eval_results"),
            max_loaded_users=d.get("max_loaded_users"),
            rate_limits=RateLimits.parse(d.get("rate_limits", DEFAULT_RATE_LIMIT)),
            admin_key=d.get("admin_key"),
        )


def _plain(x: object) -> object:
    """A numpy scalar as the Python number it holds (JSON knows no numpy types)."""
    item = getattr(x, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def _dumps_std(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_plain).encode()


try:  # orjson (in the serve extra) serialises a context about 7x faster than json
    import orjson

    def _dumps(obj: object) -> bytes:
        return orjson.dumps(obj, default=_plain, option=orjson.OPT_SERIALIZE_NUMPY)
except ImportError:  # pragma: no cover - depends on the installation
    _dumps = _dumps_std


def _json(obj: object, status: int = 200) -> Response:
    return Response(_dumps(obj), status, media_type="application/json")


def _item(svc: Service, caller: Caller, it: MemoryItem) -> dict[str, Any]:
    """An item as the caller sees it: their user id, its public ids (:mod:`~lamina.serve.ids`)."""
    return item_to_json(svc.ids.item(it), caller.public(it.user_id))


def _items(svc: Service, caller: Caller, items: Sequence[MemoryItem]) -> Response:
    return _json({"items": [_item(svc, caller, it) for it in items]})


ItemId = Annotated[int, Path(ge=-_MAX_ID, le=_MAX_ID, description="An item id (a public id: :mod:`lamina.serve.ids`).")]
OfUser = Annotated[str | None, Query(description="Only if the item is this user's (404 otherwise).")]


@dataclass(frozen=True)
class _OneItem:
    """A request on one item: the path's item id (public and internal) and the ``user_id``
    query, for the caller."""

    svc: Service
    caller: Caller
    item_id: int
    iid: int
    user_id: str | None

    def owner(self) -> str:
        """The stored owner of the item, the caller's (the one 404 of :mod:`~lamina.serve.ids`
        for a missing item and another tenant's alike); with ``user_id``, that user."""
        stored = item_owner(self.svc.memory, self.caller.tenant, self.iid)
        return stored if self.user_id is None else self.caller.uid(self.user_id)

    async def call(self, fn: Callable[[int, str], T]) -> T:
        """``fn(internal id, stored owner)``, a memory call on the item, on the work pool (its
        :class:`~lamina.NotFoundError` answers the same 404)."""
        return await self.svc.call(self.caller, lambda: as_unseen(lambda: fn(self.iid, self.owner())))


def _one_item(item_id: ItemId, svc: ServiceDep, caller: CallerDep, user_id: OfUser = None) -> _OneItem:
    return _OneItem(svc, caller, item_id, svc.ids.internal(item_id), user_id)


#: ``ref: OneItem`` in a route's parameters: the path's item, the ``user_id`` query.
OneItem = Annotated[_OneItem, Depends(_one_item)]


def _routes() -> APIRouter:
    r = APIRouter(responses=_ERRORS)

    @r.post("/v1/memories", response_model=S.AddResponse, tags=["memories"], summary="Add messages (turns)")
    async def add(req: S.AddRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        if len(req.messages) > svc.limits.max_messages:
            raise RequestTooLarge(
                f"{len(req.messages)} messages in one add; at most {svc.limits.max_messages} (max_messages)",
                "too_many_messages",
            )
        msgs = with_message_ids([m.model_dump(exclude_none=True) for m in req.messages])
        uid = caller.uid(req.user_id)
        mem = svc.memory
        ids = await svc.call(
            caller,
            lambda: mem.add(
                msgs, user_id=uid, session_id=req.session_id, timestamp=req.timestamp, metadata=req.metadata
            ),
        )
        return _json({"ids": [svc.ids.public(i) for i in ids]})

    @r.post(
        "/v1/sessions/end", response_model=S.SessionReportOut, tags=["memories"], summary="End (consolidate) a session"
    )
    async def end_session(req: S.EndSessionRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(req.user_id)
        mem = svc.memory
        rep = await svc.call(caller, lambda: mem.end_session(user_id=uid, session_id=req.session_id, now=req.now))
        return _json(session_report_to_json(rep))

    @r.post("/v1/context", response_model=S.ContextOut, tags=["read"], summary="A budgeted context for a query")
    async def context(req: S.ContextRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(req.user_id)
        mem = svc.memory

        def work() -> dict[str, Any]:
            fw = None if req.firewall is None else Firewall(**req.firewall.model_dump())
            ctx = mem.context(req.query, user_id=uid, firewall=fw, **req.options())
            return context_to_json(svc.ids.context(ctx), req.user_id)

        return _json(await svc.call(caller, work))

    @r.post("/v1/search", response_model=S.ItemsOut, tags=["read"], summary="Top-k items by similarity")
    async def search(req: S.SearchRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(req.user_id)
        mem = svc.memory
        items = await svc.call(
            caller,
            lambda: mem.search(req.query, user_id=uid, k=req.k, layers=req.layers, now=req.now, filters=req.filters),
        )
        return _items(svc, caller, items)

    @r.get("/v1/memories/{item_id}", response_model=S.ItemOut, tags=["memories"], summary="One item")
    async def get_item(ref: OneItem) -> Response:
        mem = ref.svc.memory
        it = await ref.call(lambda iid, owner: mem.get(iid, user_id=owner))
        return _json(_item(ref.svc, ref.caller, it))

    @r.patch("/v1/memories/{item_id}", response_model=S.ItemOut, tags=["memories"], summary="Replace an item's text")
    async def update_item(req: S.UpdateRequest, ref: OneItem) -> Response:
        mem = ref.svc.memory
        it = await ref.call(lambda iid, owner: mem.update(iid, req.text, user_id=owner, timestamp=req.timestamp))
        return _json(_item(ref.svc, ref.caller, it))

    @r.delete("/v1/memories/{item_id}", response_model=S.DeleteReportOut, tags=["memories"], summary="Delete an item")
    async def delete_item(ref: OneItem) -> Response:
        svc, mem = ref.svc, ref.svc.memory

        def work() -> DeleteReport:
            stored = ref.owner()
            rep = as_unseen(lambda: mem.delete(ref.iid, user_id=stored))
            svc.audit(ref.caller, "delete", user_id=ref.caller.public(stored), item_id=ref.item_id)
            return rep

        rep = await svc.call(ref.caller, work)
        return _json(delete_report_to_json(svc.ids.delete_report(rep)))

    @r.get(
        "/v1/memories/{item_id}/history", response_model=S.ItemsOut, tags=["memories"], summary="Versions of an item"
    )
    async def history(ref: OneItem) -> Response:
        mem = ref.svc.memory
        items = await ref.call(lambda iid, owner: mem.history(iid, user_id=owner))
        return _items(ref.svc, ref.caller, items)

    @r.get("/v1/memories/{item_id}/note", response_model=S.NoteOut, tags=["memories"], summary="A turn's A-Mem note")
    async def note(ref: OneItem) -> Response:
        mem = ref.svc.memory
        n = await ref.call(lambda iid, owner: mem.note(iid, user_id=owner))
        return _json(note_to_json(ref.svc.ids.note(n)))

    @r.get(
        "/v1/memories/{item_id}/links", response_model=S.LinksOut, tags=["memories"], summary="A turn's linked turns"
    )
    async def links(ref: OneItem) -> Response:
        mem = ref.svc.memory
        found = await ref.call(lambda iid, owner: mem.links(iid, user_id=owner))
        return _json(links_to_json(ref.svc.ids.links(found)))

    @r.get("/v1/users", response_model=S.UsersOut, tags=["users"], summary="The caller's user ids")
    async def users(svc: ServiceDep, caller: CallerDep) -> Response:
        all_ids = await svc.call(caller, svc.memory.users)
        return _json({"users": [caller.public(u) for u in all_ids if owns(caller.tenant, u)]})

    @r.get("/v1/users/{user_id:path}/facts", response_model=S.ItemsOut, tags=["users"], summary="A user's facts")
    async def facts(
        user_id: str,
        svc: ServiceDep,
        caller: CallerDep,
        subject: str | None = None,
        current: bool = True,
    ) -> Response:
        uid = caller.uid(user_id)
        mem = svc.memory
        items = await svc.call(caller, lambda: mem.facts(user_id=uid, subject=subject, current=current))
        return _items(svc, caller, items)

    @r.delete("/v1/users/{user_id:path}", response_model=S.DeleteReportOut, tags=["users"], summary="Delete a user")
    async def delete_user(user_id: str, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(user_id)
        mem = svc.memory

        def work() -> DeleteReport:
            rep = mem.delete_user(user_id=uid)
            svc.audit(caller, "delete_user", user_id=user_id, detail=f"{rep.deleted} items")
            return rep

        rep = await svc.call(caller, work)
        return _json(delete_report_to_json(svc.ids.delete_report(rep)))

    @r.get("/v1/audit", response_model=S.AuditOut, tags=["audit"], summary="The tenant's audit log")
    async def audit_log(
        svc: ServiceDep,
        caller: CallerDep,
        after: Annotated[int, Query(ge=0, description="Entries numbered after this one (0: from the first).")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LOG_PAGE, description="Most entries in the page.")] = 100,
    ) -> Response:
        mem = svc.memory
        page, total = await svc.call(caller, lambda: audit_entries(mem, caller.tenant, after=after, limit=limit))
        last = page[-1].seq if page else after
        return _json({"entries": [e.to_json() for e in page], "total": total, "next": last if last < total else None})

    @r.get(
        "/v1/audit/export",
        tags=["audit"],
        summary="The tenant's whole audit log as JSONL",
        response_class=Response,
        responses={200: {"content": {"application/x-ndjson": {}}, "description": "One entry per line, oldest first."}},
    )
    async def audit_export(svc: ServiceDep, caller: CallerDep) -> Response:
        mem = svc.memory
        lines = await svc.call(caller, lambda: "".join(audit_lines(mem, caller.tenant)))
        return Response(lines.encode("utf-8"), media_type="application/x-ndjson")

    @r.get("/healthz", response_model=S.HealthOut, tags=["ops"], summary="The process is alive")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @r.get("/readyz", response_model=S.HealthOut, tags=["ops"], summary="The memory is open and serving")
    async def readyz(svc: ServiceDep) -> Response:
        if not svc.ready:
            return error_response(503, "not_ready", "starting or shutting down", {"Retry-After": "1"})
        return _json({"status": "ready"})

    @r.get("/metrics", tags=["ops"], summary="Prometheus metrics", response_class=Response)
    async def metrics(request: Request, svc: ServiceDep) -> Response:
        if svc.keys.enabled:  # (the counts name every tenant: not for anonymous callers)
            if svc.metrics_key is None:
                return error_response(
                    404, "not_found", "/metrics is off: the server has API keys and no metrics key (--metrics-key)"
                )
            if not metrics_key_matches(svc.metrics_key, request.headers.get("authorization")):
                return error_response(
                    401,
                    "unauthorized",
                    "/metrics needs the metrics key: send 'Authorization: Bearer <metrics key>'",
                    {"WWW-Authenticate": "Bearer"},
                )
        data = await asyncio.to_thread(generate_latest, svc.metrics.registry)
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    return r


def _tenant_counts(svc: Service) -> list[tuple[str, int]]:
    if not svc.ready:
        return []
    return list(svc.memory.item_counts().items())  # (users a worker has not loaded are counted in the store)


def create_app(
    config: ServeConfig,
    *,
    memory: Memory | None = None,
    routers: Sequence[APIRouter] = (),
    mounts: Mapping[str, ASGIApp] | None = None,
    lifespans: Sequence[Callable[[FastAPI], AbstractAsyncContextManager[None]]] = (),
    metrics: ServeMetrics | None = None,
) -> FastAPI:
    """The ASGI app of ``lamina serve``.

    Parameters
    ----------
    config : ServeConfig
    memory : Memory, optional
        Serve this memory (the caller closes it); by default the app opens ``config.db`` at
        startup and closes it at shutdown, after the in-flight calls finished.
    routers : sequence of fastapi.APIRouter
        More routes (the export and import routes of :mod:`~lamina.serve.dump_api` are always
        included); they reach the service with
        :func:`~lamina.serve.service.get_service` and :func:`~lamina.serve.service.get_caller`.
    mounts : mapping of path to ASGI app
        Sub-applications mounted under a path (an admin UI, say; the MCP server at ``/mcp`` is
        built in: ``config.mcp``). They get no authentication from this app: they read the
        ``Authorization`` header and call ``app.state.lamina.caller_from_header(...)``
        themselves, and reach the memory through ``app.state.lamina`` (a
        :class:`~lamina.serve.service.Service`).
    lifespans : sequence of callables
        ``lifespan(app)`` async context managers entered after the memory opens and exited
        before it closes, in order (Starlette runs no lifespan of a mounted sub-application:
        its session manager, say, is started here). With ``config.mcp``, the MCP endpoint's
        (:class:`~lamina.serve.mcp.McpEndpoint`) comes last.
    metrics : ServeMetrics, optional
        The metrics to report (default: new ones); give those a ``memory``'s
        :class:`~lamina.serve.metrics.TimedEmbedder` reports to.

    Returns
    -------
    fastapi.FastAPI
        Its ``.state.lamina`` is the :class:`~lamina.serve.service.Service`.
    """
    metrics = metrics if metrics is not None else ServeMetrics()
    svc = Service(config.keys, config.limits, metrics, memory, metrics_key=config.metrics_key)
    metrics.registry.register(TenantCollector(lambda: _tenant_counts(svc), config.tenant_metrics_max_age))
    extra_lifespans = list(lifespans)
    mcp_routes: list[Route] = []
    if config.mcp:
        from .mcp import MCP_PATH, McpEndpoint

        endpoint = McpEndpoint(svc, host=config.host)
        extra_lifespans.append(endpoint.lifespan)
        mcp_routes = [Route(p, endpoint, include_in_schema=False) for p in (MCP_PATH, MCP_PATH + "/")]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = memory is None
        if owned:
            emb = TimedEmbedder(await asyncio.to_thread(database_embedder, config.db, config.embedder), metrics)
            opened = await asyncio.to_thread(
                Memory, config.db, emb, config.config, max_loaded_users=config.max_loaded_users
            )
            await asyncio.to_thread(svc.set_memory, opened)  # (reads or makes the public-id key)
        try:
            async with AsyncExitStack() as stack:
                for extra in extra_lifespans:
                    await stack.enter_async_context(extra(app))
                yield
        finally:
            # uvicorn has stopped accepting and waited for the open requests; the pool's
            # threads finish what they run, then the memory writes its pending statistics
            mem = svc._memory
            svc.ready = False
            await asyncio.to_thread(svc.pool.shutdown)
            rates.close()
            if owned and mem is not None:
                mem.close()
                svc.set_memory(None)

    app = FastAPI(
        title="lamina",
        version=_version(),
        summary="Long-term memory for LLM agents, as a service",
        lifespan=lifespan,
    )
    app.state.lamina = svc
    install_error_handlers(app)
    app.include_router(_routes())
    app.include_router(transfer_router())
    app.include_router(admin_router(config.admin_key))
    app.include_router(bulk_router(_json))
    for extra in routers:
        app.include_router(extra)
    ui_prefixes: tuple[str, ...] = ()
    if config.ui:
        from .ui import PREFIX, load_eval, ui_router

        results = load_eval(config.eval_results) if config.eval_results is not None else None
        app.include_router(ui_router(svc, eval_results=results))
        ui_prefixes = (PREFIX,)
    app.router.routes.extend(mcp_routes)
    for path, sub in (mounts or {}).items():
        app.mount(path, sub)
    app.add_middleware(
        BodyLimit,
        max_body_bytes=config.limits.max_body_bytes,
        larger=[("POST", IMPORT_PATH, config.limits.max_import_bytes, "max_import_bytes")],
    )
    # with keys, a request without a known key is refused before anything reads its body
    # (on PostgreSQL the budgets are the database's: every worker and replica shares them)
    rates = RateState(config.rate_limits, metrics, shared=config.db if is_postgres_url(config.db) else None)
    app.add_middleware(
        KeyGate, keys=config.keys, self_authenticated=(*ui_prefixes, ADMIN_PREFIX), on_refused=rates.failed_auth
    )
    # before the key is looked at: an address out of its failed-authentication budget gets 429s
    app.add_middleware(RateGate, state=rates)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # the outermost: it times the others too
    return app


def _version() -> str:
    from ..native._info import build_info

    return str(build_info()["version"])


def app_from_env() -> FastAPI:
    """The app of the configuration in :data:`ENV_CONFIG` (uvicorn's factory for ``--workers N``)."""
    raw = os.environ.get(ENV_CONFIG)
    if not raw:
        raise InvalidInput(f"{ENV_CONFIG} is not set (lamina serve sets it for its workers)")
    return create_app(ServeConfig.from_env(raw))
