"""The MCP server (:mod:`lamina.serve.mcp_server`) at ``/mcp`` of ``lamina serve`` (streamable HTTP).

It serves the process's one :class:`~lamina.Memory`, the one the HTTP routes serve, with the
same API keys and tenants:

* :class:`McpEndpoint`, the ASGI app at ``/mcp`` (and ``/mcp/``), authenticates each request
  itself (a sub-application gets no FastAPI dependency): without a valid
  ``Authorization: Bearer <key>`` (when the server has keys) it answers 401 ``unauthorized``,
  the JSON error of every route, before the MCP transport sees the request;
* the tools' ``user_id`` is the caller's, stored in the caller's tenant namespace
  (:mod:`~lamina.serve.tenancy`): the map reads the key of the HTTP request that carried the
  tool call again, so a tenant's MCP session reaches only that tenant's users, and a tool
  refuses a call whose request has no valid key (a tool error);
* the transport is stateless (no MCP session lives in the process between requests), so with
  ``--workers N`` any worker answers any request of a client's session;
* ``add_memory`` takes at most ``--max-messages`` messages, as ``POST /v1/memories`` does (a
  tool error past it);
* the tools run the memory's calls on the service's bounded work pool, as the HTTP routes do
  (:class:`~lamina.serve.limits.WorkPool`): never on the event loop, at most ``--threads`` at
  once, and a full queue is a tool error ``busy: ...`` (the routes' 503).

The MCP server and its session manager are built when the app starts (after the memory opens)
and stopped before the memory closes: :meth:`McpEndpoint.lifespan` is one of the app's
lifespans. Disable with ``lamina serve --no-mcp``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import AuthError, LaminaError
from .http_errors import error_response, status_of
from .mcp_server import build_mcp_server, mcp_http_app
from .service import Caller, Service

__all__ = ["McpEndpoint", "MCP_PATH"]

#: Where ``lamina serve`` serves MCP.
MCP_PATH = "/mcp"


class McpEndpoint:
    """The ASGI app serving MCP at :data:`MCP_PATH` for a :class:`~lamina.serve.service.Service`.

    Parameters
    ----------
    service : Service
        Its memory, keys and tenants are the MCP server's.
    host : str
        The address the service binds (the SDK's DNS-rebinding protection is on for loopback).
    default_budget : int
        ``get_context``'s budget when a call gives none.

    Thread safety: an ASGI app, for one event loop.
    """

    def __init__(self, service: Service, *, host: str = "127.0.0.1", default_budget: int = 1024) -> None:
        self.service = service
        self.host = host
        self.default_budget = default_budget
        self._app: ASGIApp | None = None

    def user_id_map(self, user_id: str, request: Request | None) -> str:
        """The stored id of a tool call's ``user_id`` in the tenant of the request's key
        (:class:`~lamina.AuthError` without a valid key; over HTTP only)."""
        if request is None:
            raise AuthError("the MCP endpoint of lamina serve takes calls over HTTP only")
        caller = self.service.caller_from_header(request.headers.get("authorization"))
        return caller.uid(user_id)

    def caller_of(self, authorization: str | None, client: tuple[str, int] | None) -> Caller:
        """The caller of a request's ``Authorization`` header, with the client's address."""
        caller = self.service.caller_from_header(authorization)
        return Caller(caller.tenant, caller.key, client[0] if client else None)

    def audit(self, action: str, user_id: str, item_id: int, request: Request | None) -> None:
        """Log a tool call's administrative action (on the work pool) for the request's caller."""
        if request is None:
            return
        caller = self.caller_of(request.headers.get("authorization"), request.client)
        self.service.audit(caller, action, user_id=user_id, item_id=item_id)

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        """Build the MCP server on the service's memory and run its session manager (a manager
        runs once: each start of the app builds a new one)."""
        svc = self.service

        async def run(fn: Callable[[], Any]) -> Any:
            return await svc.call(None, fn)

        server = build_mcp_server(
            svc.memory,
            user_id_map=self.user_id_map,
            default_budget=self.default_budget,
            run=run,
            max_messages=svc.limits.max_messages,  # (the limit of POST /v1/memories)
            ids=svc.ids,  # (the public ids of the HTTP routes)
            audit=self.audit,
        )
        # stateless: any worker of ``lamina serve --workers N`` answers any request of a client
        app = mcp_http_app(server, path=MCP_PATH, host=self.host, stateless=True)
        async with server.session_manager.run():
            self._app = app
            try:
                yield
            finally:
                self._app = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # (the MCP transport serves HTTP only)
            return
        app = self._app
        if app is None:
            await error_response(503, "not_ready", "starting or shutting down", {"Retry-After": "1"})(
                scope, receive, send
            )
            return
        auth: str | None = None
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                auth = v.decode("latin-1")
        try:
            caller = self.caller_of(auth, scope.get("client"))
        except LaminaError as e:
            status, code, headers = status_of(e)
            await error_response(status, code, str(e), headers)(scope, receive, send)
            return
        await self.service.note_address(caller)  # (a key's first use from this address is logged)
        inner: dict[str, Any] = dict(scope)
        inner["path"] = MCP_PATH  # (``/mcp/`` too: the transport's route is ``/mcp``)
        inner["raw_path"] = MCP_PATH.encode()
        inner["root_path"] = ""
        await app(inner, receive, send)
