"""``lamina.Client`` and ``lamina.AsyncClient``: a ``lamina serve`` service with the API of
:class:`lamina.Memory` (needs ``httpx``, in the ``serve`` extra).

Results are the same typed objects ``Memory`` returns (:class:`~lamina.MemoryItem`,
:class:`~lamina.Context`, :class:`~lamina.SessionReport`, :class:`~lamina.DeleteReport`), rebuilt
from the wire form of :mod:`lamina.client.wire`; errors are lamina's exceptions, from the response's
``code``: ``InvalidInput`` (400, 409, 413, 422), ``TypeError`` (400 ``type_error``), ``AuthError``
(401), ``PermissionDenied`` (403), ``NotFoundError`` (404), ``Overloaded`` (503, with
``retry_after``), ``StoreBusy`` (503 ``store_busy``).

Both clients build each request and read each response through the same :class:`_Call`
description, so they cannot drift apart.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from ..errors import AuthError, InvalidInput, LaminaError, NotFoundError, Overloaded, PermissionDenied, StoreBusy
from ..memory.dump.format import UserDump
from ..memory.inputs import TimeLike
from ..memory.opening import AsyncClosing, Closing
from ..memory.reports import DeleteReport, ImportReport, SessionReport
from ..memory.types import MemoryItem
from ..memory.write.notes import Link, Note
from .calls import _Api, _Call
from .wire import WireError

__all__ = ["Client", "AsyncClient", "ServiceError"]

T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


class ServiceError(LaminaError, RuntimeError):
    """The service answered with an error lamina has no class for (a 500, a proxy's 502, ...).

    Attributes
    ----------
    status : int
    code : str
    """

    def __init__(self, message: str, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _error(resp: httpx.Response) -> Exception:
    """The lamina exception of an error response."""
    try:
        body = resp.json()
        code, msg = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, msg = f"http_{resp.status_code}", resp.text[:200] or resp.reason_phrase
    if code in ("invalid_input", "bad_dump", "user_exists", "validation_error", "too_large", "too_many_messages"):
        return InvalidInput(msg)
    if code == "type_error":
        return TypeError(msg)
    if code == "unauthorized":
        return AuthError(msg)
    if code == "forbidden":
        return PermissionDenied(msg)
    if code == "not_found":
        return NotFoundError(msg)
    if code == "store_busy":
        return StoreBusy(msg)
    if code in ("overloaded", "not_ready") or resp.status_code == 503:
        ra = resp.headers.get("retry-after")
        try:
            retry = float(ra) if ra is not None else None
        except ValueError:
            retry = None
        return Overloaded(msg, retry)
    return ServiceError(f"{resp.status_code} {code}: {msg}", resp.status_code, code)


try:  # orjson (in the serve extra) parses a context about 3x faster than json
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the installation
    _loads = json.loads


def _read(call: _Call[T], resp: httpx.Response) -> T:
    if resp.status_code >= 400:
        raise _error(resp)
    try:
        return call.parse(resp.content if call.raw else _loads(resp.content))
    except (ValueError, KeyError, TypeError) as e:
        if isinstance(e, LaminaError):
            raise
        raise WireError(f"{call.method} {call.path}: unreadable response ({e})") from None


def _as_method(call: F, build: Callable[..., Any]) -> F:
    """``call`` named, documented and signed as ``build`` with ``self`` first (what
    :func:`inspect.signature` and the API docs show)."""
    sig = inspect.signature(build)
    me = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    call.__name__, call.__qualname__, call.__doc__ = build.__name__, build.__name__, build.__doc__
    call.__signature__ = sig.replace(parameters=[me, *sig.parameters.values()])  # type: ignore[attr-defined]
    return call


def _blocking(build: Callable[P, _Call[T]]) -> Callable[Concatenate[Client, P], T]:
    """A :class:`Client` method that sends the request ``build`` describes (its signature and
    docstring are the method's)."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._do(build(*args, **kwargs))

    return _as_method(call, build)


def _awaiting(build: Callable[P, _Call[T]]) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """:func:`_blocking` for :class:`AsyncClient`."""

    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._do(build(*args, **kwargs))

    return _as_method(call, build)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client(Closing):
    """A ``lamina serve`` service with the API of :class:`lamina.Memory` (blocking, over httpx).

    Parameters
    ----------
    base_url : str
        E.g. ``"http://127.0.0.1:8420"``.
    api_key : str, optional
        The tenant's key (``Authorization: Bearer``); None for a server without keys.
    timeout : float
        Seconds per request (default 30).
    transport : httpx.BaseTransport, optional
        For tests and custom networking.

    User ids are the tenant's own: the service keeps them apart from other tenants'.

    Thread safety
    -------------
    Thread-safe (httpx's client pools connections across threads).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    def _do(self, call: _Call[T]) -> T:
        resp = self._http.request(call.method, call.path, **call.request_args())
        return _read(call, resp)

    def end_session(self, *, user_id: str, session_id: str, now: TimeLike = None) -> SessionReport:
        """See :meth:`lamina.Memory.end_session`."""
        return self._do(_Api.end_session(user_id, session_id, now))

    def get(self, item_id: int, *, user_id: str | None = None) -> MemoryItem:
        """See :meth:`lamina.Memory.get`."""
        return self._do(_Api.get(item_id, user_id))

    def update(self, item_id: int, text: str, *, user_id: str | None = None, timestamp: TimeLike = None) -> MemoryItem:
        """See :meth:`lamina.Memory.update`."""
        return self._do(_Api.update(item_id, text, user_id, timestamp))

    def delete(self, item_id: int, *, user_id: str | None = None) -> DeleteReport:
        """See :meth:`lamina.Memory.delete`."""
        return self._do(_Api.delete(item_id, user_id))

    def history(self, item_id: int, *, user_id: str | None = None) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.history`."""
        return self._do(_Api.history(item_id, user_id))

    def note(self, item_id: int, *, user_id: str | None = None) -> Note | None:
        """See :meth:`lamina.Memory.note`."""
        return self._do(_Api.note(item_id, user_id))

    def links(self, item_id: int, *, user_id: str | None = None) -> list[Link]:
        """See :meth:`lamina.Memory.links`."""
        return self._do(_Api.links(item_id, user_id))

    def facts(self, *, user_id: str, subject: str | None = None, current: bool = True) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.facts`."""
        return self._do(_Api.facts(user_id, subject, current))

    def delete_user(self, *, user_id: str) -> DeleteReport:
        """See :meth:`lamina.Memory.delete_user`."""
        return self._do(_Api.delete_user(user_id))

    add = _blocking(_Api.add)
    context = _blocking(_Api.context)
    search = _blocking(_Api.search)
    add_batch = _blocking(_Api.add_batch)
    context_batch = _blocking(_Api.context_batch)
    list_memories = _blocking(_Api.list_memories)
    delete_memories = _blocking(_Api.delete_memories)
    reset = _blocking(_Api.reset)

    def users(self) -> list[str]:
        """The tenant's user ids (see :meth:`lamina.Memory.users`)."""
        return self._do(_Api.users())

    def export_user(self, *, user_id: str, vectors: bool = False) -> UserDump:
        """See :meth:`lamina.Memory.export_user` (``GET /v1/users/{user_id}/export``)."""
        return self._do(_Api.export_user(user_id, vectors))

    def import_user(
        self, dump: UserDump, *, embedder: str, user_id: str | None = None, replace: bool = False
    ) -> ImportReport:
        """See :meth:`lamina.Memory.import_user` (``POST /v1/users/{user_id}/import``): the dump
        is sent as JSONL whose header names ``embedder``. An existing user without ``replace``
        raises :class:`~lamina.InvalidInput` (HTTP 409 ``user_exists``)."""
        return self._do(_Api.import_user(dump, embedder, user_id, replace))

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._http.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"


class AsyncClient(AsyncClosing):
    """:class:`Client` for asyncio (over ``httpx.AsyncClient``); the same methods, as coroutines.

    Thread safety
    -------------
    Use from one event loop.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport,
            limits=limits if limits is not None else httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )

    async def _do(self, call: _Call[T]) -> T:
        resp = await self._http.request(call.method, call.path, **call.request_args())
        if call.raw:  # a dump: parsing and checking it takes seconds for a large user, off the loop
            return await asyncio.to_thread(_read, call, resp)
        return _read(call, resp)

    async def end_session(self, *, user_id: str, session_id: str, now: TimeLike = None) -> SessionReport:
        """See :meth:`lamina.Memory.end_session`."""
        return await self._do(_Api.end_session(user_id, session_id, now))

    async def get(self, item_id: int, *, user_id: str | None = None) -> MemoryItem:
        """See :meth:`lamina.Memory.get`."""
        return await self._do(_Api.get(item_id, user_id))

    async def update(
        self, item_id: int, text: str, *, user_id: str | None = None, timestamp: TimeLike = None
    ) -> MemoryItem:
        """See :meth:`lamina.Memory.update`."""
        return await self._do(_Api.update(item_id, text, user_id, timestamp))

    async def delete(self, item_id: int, *, user_id: str | None = None) -> DeleteReport:
        """See :meth:`lamina.Memory.delete`."""
        return await self._do(_Api.delete(item_id, user_id))

    async def history(self, item_id: int, *, user_id: str | None = None) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.history`."""
        return await self._do(_Api.history(item_id, user_id))

    async def note(self, item_id: int, *, user_id: str | None = None) -> Note | None:
        """See :meth:`lamina.Memory.note`."""
        return await self._do(_Api.note(item_id, user_id))

    async def links(self, item_id: int, *, user_id: str | None = None) -> list[Link]:
        """See :meth:`lamina.Memory.links`."""
        return await self._do(_Api.links(item_id, user_id))

    async def facts(self, *, user_id: str, subject: str | None = None, current: bool = True) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.facts`."""
        return await self._do(_Api.facts(user_id, subject, current))

    async def delete_user(self, *, user_id: str) -> DeleteReport:
        """See :meth:`lamina.Memory.delete_user`."""
        return await self._do(_Api.delete_user(user_id))

    add = _awaiting(_Api.add)
    context = _awaiting(_Api.context)
    search = _awaiting(_Api.search)
    add_batch = _awaiting(_Api.add_batch)
    context_batch = _awaiting(_Api.context_batch)
    list_memories = _awaiting(_Api.list_memories)
    delete_memories = _awaiting(_Api.delete_memories)
    reset = _awaiting(_Api.reset)

    async def users(self) -> list[str]:
        """The tenant's user ids (see :meth:`lamina.Memory.users`)."""
        return await self._do(_Api.users())

    async def export_user(self, *, user_id: str, vectors: bool = False) -> UserDump:
        """See :meth:`Client.export_user` (the dump is read and checked off the event loop)."""
        return await self._do(_Api.export_user(user_id, vectors))

    async def import_user(
        self, dump: UserDump, *, embedder: str, user_id: str | None = None, replace: bool = False
    ) -> ImportReport:
        """See :meth:`Client.import_user` (the body is written off the event loop)."""
        return await self._do(await asyncio.to_thread(_Api.import_user, dump, embedder, user_id, replace))

    async def aclose(self) -> None:
        """Close the connections (idempotent)."""
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({self.base_url!r})"
