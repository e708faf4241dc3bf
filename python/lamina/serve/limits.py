"""What the service accepts and how much work it queues.

* :class:`Limits` — the numbers (body size, messages per add, worker threads, queued requests,
  how long a request may wait for a thread).
* :class:`WorkPool` — runs the memory's blocking calls on a bounded thread pool: at most
  ``threads`` run, at most ``max_pending`` wait or run; one more is refused at once with
  :class:`~lamina.Overloaded` (HTTP 503 with ``Retry-After``), and so is one that waited
  ``queue_timeout`` seconds for a thread. A call that has started always finishes (native work
  cannot be interrupted, and a write must not half-happen), even if its caller went away.
* :class:`BodyLimit` — ASGI middleware refusing bodies over ``max_body_bytes`` (413) by their
  ``Content-Length`` before reading them; a chunked body is read (up to the limit) and replayed.
  Routes that take large bodies (``POST /v1/users/{user_id}/import``: ``max_import_bytes``) get
  a limit of their own, counted as the route reads the body (nothing is buffered here).
* :class:`ImportSlots` — at most ``max_imports`` import bodies are received or held at once
  (one more: 503 ``overloaded`` with ``Retry-After``), so imports hold at most
  ``max_imports × max_import_bytes`` of bodies in memory (plus what their parsing makes).

With API keys configured, :class:`~lamina.serve.auth.KeyGate` runs before these: a request
without a known key is refused (401) before any body is read.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidInput, Overloaded

__all__ = ["Limits", "WorkPool", "BodyLimit", "RequestTooLarge", "ImportSlots"]

T = TypeVar("T")


class RequestTooLarge(InvalidInput):
    """A request is larger than the service accepts (HTTP 413): its messages, say.

    Attributes
    ----------
    code : str
        ``too_many_messages`` (messages of one add) or ``too_large``.
    """

    def __init__(self, message: str, code: str = "too_large") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Limits:
    """The service's limits (``lamina serve`` flags of the same names).

    Attributes
    ----------
    max_body_bytes : int
        Largest request body (default 4 MiB); larger ones get 413 ``too_large``.
    max_messages : int
        Most messages in one ``POST /v1/memories`` (default 1000); more get 413 ``too_many_messages``.
    threads : int
        Memory calls running at once (default 4; the core releases the GIL in its searches).
    max_pending : int
        Memory calls running or waiting (default 256); one more gets 503 ``overloaded``.
    queue_timeout : float
        Seconds a call may wait for a thread before it gets 503 ``overloaded`` (default 10).
    retry_after : int
        The ``Retry-After`` seconds of a 503 (default 1).
    max_import_bytes : int
        Largest body of ``POST /v1/users/{user_id}/import`` (a JSONL dump; default 512 MiB: a
        user of 40,000 turns exports to about 74 MB, 156 MB with every vector); larger ones get
        413 ``too_large``. The whole dump is held in memory while it is checked.
    max_imports : int
        Import bodies received or held at once (default 2); one more gets 503 ``overloaded``.
        Imports hold at most about ``max_imports × max_import_bytes`` of bodies in memory.
    """

    max_body_bytes: int = 4 << 20
    max_messages: int = 1000
    threads: int = 4
    max_pending: int = 256
    queue_timeout: float = 10.0
    retry_after: int = 1
    max_import_bytes: int = 512 << 20
    max_imports: int = 2

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_messages",
            "threads",
            "max_pending",
            "retry_after",
            "max_import_bytes",
            "max_imports",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"Limits.{name} must be an int >= 1, got {v!r}")
        if not isinstance(self.queue_timeout, (int, float)) or not self.queue_timeout > 0:
            raise InvalidInput(f"Limits.queue_timeout must be > 0 seconds, got {self.queue_timeout!r}")


class WorkPool:
    """A bounded thread pool for the memory's blocking calls (see the module docstring).

    ``timing(waited, ran)``, if given, gets each call's seconds waiting for a thread and running
    on it (the ``lamina_queue_seconds`` and ``lamina_call_seconds`` metrics).

    Thread safety: use from one event loop; :meth:`run` is a coroutine.
    """

    def __init__(self, limits: Limits, *, timing: Callable[[float, float], None] | None = None) -> None:
        self.limits = limits
        self.timing = timing
        self._executor = ThreadPoolExecutor(max_workers=limits.threads, thread_name_prefix="lamina-serve")
        self._slots: asyncio.Semaphore | None = None
        self._pending = 0
        self._running = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Calls running or waiting for a thread now."""
        return self._pending

    @property
    def running(self) -> int:
        """Calls running on a thread now."""
        return self._running

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a pool thread.

        Raises
        ------
        Overloaded
            ``max_pending`` calls are already pending, or no thread came free in ``queue_timeout``.
        """
        lim = self.limits
        if self._pending >= lim.max_pending:
            raise Overloaded(f"the server has {self._pending} requests pending (max_pending)", lim.retry_after)
        if self._slots is None:
            self._slots = asyncio.Semaphore(lim.threads)
        slots = self._slots
        self._pending += 1
        entered = time.perf_counter()
        try:
            try:
                await asyncio.wait_for(slots.acquire(), lim.queue_timeout)
            except asyncio.TimeoutError:
                raise Overloaded(
                    f"no worker came free within {lim.queue_timeout:g} s (queue_timeout)", lim.retry_after
                ) from None
            loop = asyncio.get_running_loop()
            with self._lock:
                self._running += 1
            waited = time.perf_counter() - entered
            try:
                cf: Future[T] = self._executor.submit(self._timed, waited, fn, *args)
            except BaseException:
                self._release(slots, loop)
                raise
            # the slot is freed when the thread is done, even if this coroutine is cancelled
            cf.add_done_callback(lambda _f: self._release(slots, loop))
            return await asyncio.shield(asyncio.wrap_future(cf))
        finally:
            self._pending -= 1

    def _timed(self, waited: float, fn: Callable[..., T], *args: Any) -> T:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            if self.timing is not None:
                self.timing(waited, time.perf_counter() - t0)

    def _release(self, slots: asyncio.Semaphore, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._running -= 1
        if loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(slots.release)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def shutdown(self) -> None:
        """Wait for the running calls, then stop the threads."""
        self._executor.shutdown(wait=True, cancel_futures=False)


class ImportSlots:
    """At most ``limits.max_imports`` import bodies received or held at once (see the module
    docstring): :meth:`take` a slot before reading a body, :meth:`give` it back when done.

    Thread safety: use from one event loop.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.held = 0

    def take(self) -> None:
        """Take a slot for the body of one import.

        Raises
        ------
        Overloaded
            All ``max_imports`` slots are taken (HTTP 503 with ``Retry-After``).
        """
        lim = self.limits
        if self.held >= lim.max_imports:
            raise Overloaded(f"{self.held} imports are in progress (max_imports); retry later", lim.retry_after)
        self.held += 1

    def give(self) -> None:
        """Give back a slot :meth:`take` took."""
        self.held -= 1


class BodyLimit:
    """ASGI middleware: 413 ``too_large`` for HTTP bodies over ``max_body_bytes``.

    Parameters
    ----------
    app : ASGI app
    max_body_bytes : int
        The limit of every request but those ``larger`` names.
    larger : sequence of (method, path pattern, limit, setting name)
        Requests of that method whose path fully matches the pattern get that limit instead
        (the setting's name goes into the 413's message). Their bodies are not buffered here:
        the route reads them, and the read raises :class:`RequestTooLarge` (413) past the limit.
    """

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, larger: Sequence[tuple[str, re.Pattern[str], int, str]] = ()
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.larger = tuple(larger)

    def _limit(self, scope: Scope) -> tuple[int, str, bool]:
        for method, pattern, limit, name in self.larger:
            if scope.get("method") == method and pattern.fullmatch(scope.get("path", "")):
                return limit, name, True
        return self.max_body_bytes, "max_body_bytes", False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, name, streamed = self._limit(scope)
        length: int | None = None
        for k, v in scope["headers"]:
            if k == b"content-length":
                try:
                    length = int(v)
                except ValueError:
                    length = None
        if length is not None:
            if length > limit:
                await _send_413(send, limit, name)
                return
            await self.app(scope, receive, send)  # the server reads no more than Content-Length
            return
        if streamed:  # counted as the route reads it
            seen_streamed = 0

            async def counted() -> Message:
                nonlocal seen_streamed
                msg = await receive()
                if msg["type"] == "http.request":
                    seen_streamed += len(msg.get("body", b""))
                    if seen_streamed > limit:
                        raise RequestTooLarge(f"request body larger than {limit} bytes ({name})")
                return msg

            await self.app(scope, counted, send)
            return
        # a body without Content-Length (chunked): read it here, up to the limit, then replay it
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client went away
                return
            body = msg.get("body", b"")
            seen += len(body)
            if seen > limit:
                await _send_413(send, limit, name)
                return
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _send_413(send: Send, limit: int, name: str) -> None:
    msg = {"code": "too_large", "message": f"request body larger than {limit} bytes ({name})"}
    body = json.dumps(msg).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
