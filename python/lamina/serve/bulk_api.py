"""Batch and whole-collection routes of ``lamina serve``: several adds in one request
(``POST /v1/memories/batch``), the contexts of many queries (``POST /v1/context/batch``), a
user's items page by page with filters (``POST /v1/memories/list``), deleting what a filter
admits (``POST /v1/memories/delete``) and deleting every user of the caller's tenant
(``POST /v1/reset``: a tenant's key resets its tenant; without keys, every user).

Item ids and page cursors are public (:mod:`~lamina.serve.ids`: a cursor names the public id of
the page's last item); deletes and resets are logged in the tenant's audit log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from ..client.wire import context_to_json, delete_report_to_json, item_to_json
from ..errors import InvalidInput, NotFoundError
from ..memory.bulk import cursor_position, page_cursor
from ..memory.reports import DeleteReport
from . import schemas as S
from .ids import with_message_ids
from .limits import RequestTooLarge
from .service import CallerDep, Service, ServiceDep
from .tenancy import owns

__all__ = ["bulk_router"]

_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": S.ErrorOut} for s in (400, 401, 404, 413, 422, 503)}


def _each(uids: str | list[str], out: Sequence[Any]) -> list[str]:
    """The stored user of each result of a batch (``uids``: one for all, or one per result)."""
    return [uids] * len(out) if isinstance(uids, str) else uids


def _public_cursor(svc: Service, cursor: str | None) -> str | None:
    return None if cursor is None else page_cursor(svc.ids.public(cursor_position(cursor)))


def _internal_cursor(svc: Service, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return page_cursor(svc.ids.internal(cursor_position(cursor)))
    except NotFoundError:  # (a well-formed cursor of no public id: still not one a page returned)
        raise InvalidInput(f"cursor {cursor[:40]!r} is not one a page of list_memories returned") from None


def bulk_router(_json: Callable[[object], Response]) -> APIRouter:
    """The batch, listing, filtered-delete and reset routes (see the module docstring);
    ``_json`` makes a JSON response (the app's serialiser)."""
    r = APIRouter(responses=_ERRORS)

    @r.post("/v1/memories/batch", response_model=S.AddBatchOut, tags=["memories"], summary="Several adds in order")
    async def add_batch(req: S.AddBatchRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        n = sum(len(a.messages) for a in req.requests)
        if n > svc.limits.max_messages:
            raise RequestTooLarge(
                f"{n} messages in one batch; at most {svc.limits.max_messages} (max_messages)", "too_many_messages"
            )
        adds = [
            (a, with_message_ids([m.model_dump(exclude_none=True) for m in a.messages]), caller.uid(a.user_id))
            for a in req.requests
        ]
        mem = svc.memory

        def work() -> list[list[int]]:
            return [
                [
                    svc.ids.public(i)
                    for i in mem.add(
                        msgs, user_id=uid, session_id=a.session_id, timestamp=a.timestamp, metadata=a.metadata
                    )
                ]
                for a, msgs, uid in adds
            ]

        return _json({"ids": await svc.call(caller, work)})

    @r.post("/v1/context/batch", response_model=S.ContextsOut, tags=["read"], summary="Contexts of many queries")
    async def context_batch(req: S.ContextBatchRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uids = caller.uid(req.user_ids) if isinstance(req.user_ids, str) else [caller.uid(u) for u in req.user_ids]
        mem = svc.memory

        def work() -> dict[str, Any]:
            ctxs = mem.context_batch(req.queries, user_ids=uids, **req.options())
            return {
                "contexts": [
                    context_to_json(svc.ids.context(c), caller.public(c_uid))
                    for c, c_uid in zip(ctxs, _each(uids, ctxs))
                ]
            }

        return _json(await svc.call(caller, work))

    @r.post("/v1/memories/list", response_model=S.PageOut, tags=["memories"], summary="A page of a user's items")
    async def list_memories(req: S.ListRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(req.user_id)
        mem = svc.memory

        def work() -> dict[str, Any]:  # (the page's JSON built off the event loop too)
            cursor = _internal_cursor(svc, req.cursor)
            page = mem.list_memories(user_id=uid, filters=req.filters, cursor=cursor, limit=req.limit)
            items = [item_to_json(it, caller.public(it.user_id)) for it in svc.ids.items(page.items)]
            return {"items": items, "next_cursor": _public_cursor(svc, page.next_cursor)}

        return _json(await svc.call(caller, work))

    @r.post(
        "/v1/memories/delete",
        response_model=S.DeleteReportOut,
        tags=["memories"],
        summary="Delete what a filter admits",
    )
    async def delete_memories(req: S.DeleteMatchingRequest, svc: ServiceDep, caller: CallerDep) -> Response:
        uid = caller.uid(req.user_id)
        mem = svc.memory

        def work() -> DeleteReport:
            rep = mem.delete_memories(user_id=uid, filters=req.filters)
            svc.audit(caller, "delete", user_id=req.user_id, detail=f"{rep.deleted} items matching a filter")
            return rep

        rep = await svc.call(caller, work)
        return _json(delete_report_to_json(svc.ids.delete_report(rep)))

    @r.post("/v1/reset", response_model=S.DeleteReportOut, tags=["users"], summary="Delete every user of the caller")
    async def reset(svc: ServiceDep, caller: CallerDep) -> Response:
        mem = svc.memory

        def work() -> DeleteReport:  # (the caller's users only: a tenant's key resets its tenant)
            users = [u for u in mem.users() if owns(caller.tenant, u)]
            rep = mem.reset(user_ids=users)
            svc.audit(caller, "delete_user", detail=f"reset: {len(users)} users, {rep.deleted} items")
            return rep

        return _json(delete_report_to_json(svc.ids.delete_report(await svc.call(caller, work))))

    return r
