"""The state one server process holds — the :class:`~lamina.Memory`, the keys, the work pool,
the metrics — and :class:`Caller`, the tenant a request speaks for.

Routes (this package's :mod:`~lamina.serve.app`, and routers mounted on it later, e.g. export and
import) reach them with the FastAPI dependencies :func:`get_service` and :func:`get_caller`::

    @router.get("/v1/users/{user_id}/something")
    async def something(user_id: str, svc: ServiceDep, caller: CallerDep) -> ...:
        uid = caller.uid(user_id)                   # the stored id, in the caller's namespace
        return await svc.call(caller, lambda: svc.memory.facts(user_id=uid))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import UNSEEN_ITEM, AuthError, LaminaError, NotFoundError, Overloaded
from ..memory import ClosedError, Memory
from .audit import AddressBook, record
from .auth import KeyRing, bearer_key, hash_key, key_id
from .ids import PublicIds
from .limits import ImportSlots, Limits, WorkPool
from .metrics import ServeMetrics
from .tenancy import SEP, owns, public_user_id, stored_user_id

__all__ = ["Service", "Caller", "get_service", "get_caller", "ServiceDep", "CallerDep", "CallTypeError"]

T = TypeVar("T")


class CallTypeError(LaminaError, TypeError):
    """A memory call refused a value's type (HTTP 400 ``type_error``)."""


@dataclass(frozen=True)
class Caller:
    """The tenant of a request (None: the anonymous tenant of a server without keys), the id of
    the key it came with (:func:`~lamina.serve.auth.key_id`; None without keys) and the client's
    address (None where unknown): who the audit log names (:mod:`~lamina.serve.audit`).

    Thread safety: immutable, thread-safe.
    """

    tenant: str | None
    key: str | None = None
    address: str | None = None

    @property
    def who(self) -> str:
        """The audit log's ``who`` of this caller: its key's id, or ``anonymous``."""
        return self.key or "anonymous"

    def uid(self, user_id: str) -> str:
        """The stored id of the caller's ``user_id`` (TypeError / InvalidInput for a bad id)."""
        return stored_user_id(self.tenant, user_id)

    def public(self, stored: str) -> str:
        """The caller's id of a stored user id of theirs."""
        return public_user_id(self.tenant, stored)

    def scrub(self, exc: BaseException) -> None:
        """Show the caller's user ids in ``exc``'s message (a stored id carries the tenant)."""
        if self.tenant is None or not exc.args or not isinstance(exc.args[0], str):
            return
        msg = exc.args[0].replace(repr(self.tenant + SEP)[1:-1], "").replace(self.tenant + SEP, "")
        exc.args = (msg, *exc.args[1:])

    def check_owner(self, stored: str, item_id: int) -> None:
        """Raise :class:`~lamina.NotFoundError` (the one answer of :mod:`~lamina.serve.ids` for an
        id the caller cannot see) unless the item's owner is the caller's."""
        if not owns(self.tenant, stored):
            raise NotFoundError(UNSEEN_ITEM)


class Service:
    """What one server process serves (see the module docstring).

    Parameters
    ----------
    keys : KeyRing
        Empty: no authentication, every request is the anonymous tenant's.
    limits : Limits
    metrics : ServeMetrics
    memory : Memory, optional
        Set now, or by the app's startup (:func:`lamina.serve.app.create_app`).
    metrics_key : str, optional
        The hash of the key ``/metrics`` requires when keys are on (``ServeConfig.metrics_key``).

    Thread safety: ``call`` from the event loop only; the memory itself is thread-safe.
    """

    def __init__(
        self,
        keys: KeyRing,
        limits: Limits,
        metrics: ServeMetrics,
        memory: Memory | None = None,
        *,
        metrics_key: str | None = None,
    ) -> None:
        self.keys = keys
        self.metrics_key = metrics_key
        self.limits = limits
        self.metrics = metrics
        self.pool = WorkPool(limits, timing=self._timing)
        self.imports = ImportSlots(limits)
        self.addresses = AddressBook()
        self._memory: Memory | None = None
        self._ids: PublicIds | None = None
        self.ready = False
        self.set_memory(memory)

    def _timing(self, waited: float, ran: float) -> None:
        self.metrics.queue_seconds.observe(waited)
        self.metrics.call_seconds.observe(ran)

    @property
    def memory(self) -> Memory:
        """The memory (raises :class:`~lamina.ClosedError`, HTTP 503, before startup or after shutdown)."""
        if self._memory is None or not self.ready:
            raise ClosedError("the server is not ready (starting or shutting down)")
        return self._memory

    @property
    def ids(self) -> PublicIds:
        """The public item ids of the memory's database (:mod:`~lamina.serve.ids`; ClosedError,
        HTTP 503, before startup or after shutdown)."""
        if self._ids is None or not self.ready:
            raise ClosedError("the server is not ready (starting or shutting down)")
        return self._ids

    def set_memory(self, memory: Memory | None) -> None:
        """Serve ``memory`` (None: none); reads (or makes) its database's public-id key."""
        self._ids = None if memory is None else PublicIds.of_memory(memory)
        self._memory = memory
        self.ready = memory is not None

    async def call(self, caller: Caller | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the work pool (503 when it is full) for ``caller``: a ``TypeError``
        it raises becomes :class:`CallTypeError` (HTTP 400), and the messages of lamina's
        errors name the caller's user ids, not the stored ones."""
        m = self.metrics
        m.pending.inc()
        try:
            return await self.pool.run(_typed, fn, *args)
        except Overloaded:
            m.rejected.labels("overloaded").inc()
            raise
        except LaminaError as e:
            if caller is not None and caller.tenant is not None:
                caller.scrub(e)
            raise
        finally:
            m.pending.dec()

    def caller(self, credentials: HTTPAuthorizationCredentials | None) -> Caller:
        """The tenant of a request's bearer key (:class:`~lamina.AuthError` when keys are on and
        it is missing or unknown)."""
        if not self.keys.enabled:
            return Caller(None)
        if credentials is None or not credentials.credentials:
            raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
        tenant = self.keys.tenant_of(credentials.credentials)
        if tenant is None:
            raise AuthError("unknown API key")
        return Caller(tenant, key_id(hash_key(credentials.credentials)))

    def audit(
        self,
        caller: Caller,
        action: str,
        *,
        user_id: str | None = None,
        item_id: int | None = None,
        detail: str | None = None,
    ) -> None:
        """Log an administrative action of ``caller`` (:func:`lamina.serve.audit.record`; blocking:
        call it on the work pool, in the call that acted). ``user_id``: the caller's id,
        ``item_id``: the public one."""
        record(
            self.memory,
            tenant=caller.tenant,
            action=action,
            who=caller.who,
            address=caller.address,
            user_id=user_id,
            item_id=item_id,
            detail=detail,
        )

    async def note_address(self, caller: Caller) -> None:
        """Log the first use of the caller's key from its address (a database write the first
        time a process sees the pair; nothing without keys)."""
        if caller.key is None or caller.address is None:
            return
        if self.addresses.known(caller.tenant, caller.key, caller.address):
            return
        mem = self.memory
        await asyncio.to_thread(self.addresses.seen, mem, caller.tenant, caller.key, caller.address)

    def caller_from_header(self, authorization: str | None) -> Caller:
        """:meth:`caller` from a raw ``Authorization`` header value: for sub-applications mounted
        on the app (they get no FastAPI dependencies, so they authenticate with this)."""
        key = bearer_key(authorization)
        creds = None if key is None else HTTPAuthorizationCredentials(scheme="Bearer", credentials=key)
        return self.caller(creds)


def _typed(fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except TypeError as e:
        if isinstance(e, LaminaError):
            raise
        raise CallTypeError(str(e)) from e


_bearer = HTTPBearer(
    auto_error=False, description="An API key of your tenant (none when the server runs without keys)."
)


# The dependencies are coroutines: FastAPI runs a plain-def dependency on its thread pool, a
# hop per dependency per request (measured: a third of the server's time per context).
async def get_service(request: Request) -> Service:
    """FastAPI dependency: the app's :class:`Service`."""
    svc: Service = request.app.state.lamina
    return svc


async def get_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """FastAPI dependency: the request's :class:`Caller` (401 without a valid key when keys are on),
    with the client's address; a key's first request from an address is logged
    (:class:`~lamina.serve.audit.AddressBook`)."""
    svc: Service = request.app.state.lamina
    caller = svc.caller(credentials)
    address = request.client.host if request.client else None
    caller = Caller(caller.tenant, caller.key, address)
    await svc.note_address(caller)
    return caller


#: ``svc: ServiceDep`` in a route's parameters: the app's :class:`Service`.
ServiceDep = Annotated[Service, Depends(get_service)]
#: ``caller: CallerDep`` in a route's parameters: the request's :class:`Caller`.
CallerDep = Annotated[Caller, Depends(get_caller)]
