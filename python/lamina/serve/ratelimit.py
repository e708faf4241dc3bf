"""Rate limits: budgets of failed authentications and of writes, ``429`` with ``Retry-After``.

Two budgets, each a token bucket (``N`` requests per ``T`` seconds, refilled continuously, a burst
of ``N`` at most), configured with ``lamina serve --rate-limit`` (:meth:`RateLimits.parse`):

* ``auth``, per client address: every answer ``401`` to a request that offered a key (an
  unknown API key on ``/v1``, ``/mcp`` or ``/metrics``, a failed inspector login) takes one
  token; a request without any key (a browser's ``/favicon.ico``) guesses nothing and takes none. An address without a
  token left gets ``429 rate_limited`` for every request but ``/healthz`` and ``/readyz`` until
  a token is back — its valid keys included: a budget that let a right key through would keep
  answering a guesser which guess was right. A legitimate client on another address is not
  affected; clients behind one address (a NAT) share its budget.
* ``writes``, per API key and per client address (both must have a token): requests that change
  the memory — ``POST``, ``PATCH``, ``PUT`` and ``DELETE`` under ``/v1`` (but the reads sent as
  ``POST``: ``/v1/context``, ``/v1/search``), every ``POST`` to ``/mcp`` (a tool call may write),
  and the inspector's forms (but its login).

The client address is the connection's, or the one a trusted proxy names
(``lamina serve --forwarded-allow-ips``: uvicorn rewrites the address before the app sees it).
Each 429 counts in ``lamina_rate_limited_total{budget}`` and each 401 in
``lamina_auth_failures_total`` (:mod:`~lamina.serve.metrics`).

Where the counters live: on a SQLite database (or in memory) in the process, so with
``--workers N`` each worker keeps its own (an address may get up to ``N`` budgets). On
PostgreSQL in the database (:class:`SharedBuckets` over
:class:`~lamina.memory.store.pgbuckets.PgBuckets`): every worker and every replica on the
database draws from one budget per key and per address. Each token taken is one round trip to
PostgreSQL (a failed authentication, a write); the check before a request asks the database at
most every :data:`SHARED_TTL` seconds per identity, and never while the identity is known to be
out of tokens (a bucket only empties faster than predicted), so a replica learns of another
replica's takes within that time or at its own next take.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidInput
from .auth import bearer_key
from .http_errors import error_response
from .metrics import ServeMetrics

__all__ = [
    "RateLimits",
    "Buckets",
    "SharedBuckets",
    "RateState",
    "RateGate",
    "DEFAULT_RATE_LIMIT",
    "is_write",
    "SHARED_TTL",
]

#: ``lamina serve --rate-limit``'s default: 30 failed authentications a minute per address.
DEFAULT_RATE_LIMIT = "auth=30/60s"
_SPEC = re.compile(r"(auth|writes)=(\d+)/(\d+(?:\.\d+)?)(s|m|min|h)?")
_UNIT = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_READ_POSTS = frozenset({"/v1/context", "/v1/search"})
_UNLIMITED_PATHS = frozenset({"/healthz", "/readyz"})
#: Seconds a process trusts what it last read of a shared bucket that had tokens.
SHARED_TTL = 0.5


@dataclass(frozen=True)
class RateLimits:
    """The budgets (0 requests: no limit).

    Attributes
    ----------
    auth : int
        Failed authentications per client address per ``auth_seconds``.
    auth_seconds : float
    writes : int
        Writes per API key and per client address per ``writes_seconds``.
    writes_seconds : float

    Thread safety: immutable, thread-safe.
    """

    auth: int = 30
    auth_seconds: float = 60.0
    writes: int = 0
    writes_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("auth", "writes"):
            n, t = getattr(self, name), getattr(self, name + "_seconds")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise InvalidInput(f"rate limit {name}: {n!r} requests is not a count >= 0")
            if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                raise InvalidInput(f"rate limit {name}: the period must be a positive number of seconds, got {t!r}")

    @property
    def enabled(self) -> bool:
        """Whether any budget is set."""
        return self.auth > 0 or self.writes > 0

    @classmethod
    def parse(cls, spec: str) -> RateLimits:
        """Budgets from ``lamina serve --rate-limit``: ``off``, or comma-separated
        ``auth=N/T`` and ``writes=N/T`` (``N`` requests per ``T`` seconds; ``T`` may end in
        ``s``, ``m`` or ``h``). A budget not named is off: ``writes=600/1m`` alone turns the
        failed-authentication budget off.

        Raises
        ------
        InvalidInput
            A spec of another form (the message shows the expected one).
        """
        if not isinstance(spec, str):
            raise InvalidInput(f"--rate-limit must be a string, got {type(spec).__name__}")
        text = spec.strip().lower()
        if text in ("off", "none", "0"):
            return cls(auth=0, writes=0)
        values: dict[str, float] = {}
        for part in (p.strip() for p in text.split(",")):
            m = _SPEC.fullmatch(part)
            if m is None:
                raise InvalidInput(
                    f"--rate-limit: {part!r} is not 'auth=N/T' or 'writes=N/T' (N requests per T seconds, "
                    "e.g. auth=30/60s,writes=600/1m), nor 'off'"
                )
            values[m.group(1)] = int(m.group(2))
            values[m.group(1) + "_seconds"] = float(m.group(3)) * _UNIT[m.group(4)]
        return cls(
            auth=int(values.get("auth", 0)),
            auth_seconds=values.get("auth_seconds", 60.0),
            writes=int(values.get("writes", 0)),
            writes_seconds=values.get("writes_seconds", 60.0),
        )

    def spec(self) -> str:
        """The :meth:`parse` form of these budgets."""
        parts = [f"{k}={getattr(self, k)}/{getattr(self, k + '_seconds'):f}s" for k in ("auth", "writes")]
        return ",".join(p for p, k in zip(parts, ("auth", "writes")) if getattr(self, k) > 0) or "off"


class Buckets:
    """Token buckets by identity: ``n`` tokens per ``seconds``, at most ``n`` held.

    Parameters
    ----------
    n : int
        The burst and the refill per period (>= 1).
    seconds : float
    max_entries : int
        Identities tracked; past it, the full buckets are forgotten (a full bucket is the state
        of an identity never seen), then the oldest half.
    clock : callable
        Seconds, monotonic (``time.monotonic``).

    Thread safety: thread-safe (one lock).
    """

    def __init__(
        self, n: int, seconds: float, *, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.n = float(n)
        self.rate = n / seconds
        self.max_entries = max_entries
        self.clock = clock
        self._tokens: dict[str, tuple[float, float]] = {}  # identity -> (tokens, at)
        self._lock = threading.Lock()

    def _level(self, key: str, now: float) -> float:
        tokens, at = self._tokens.get(key, (self.n, now))
        return min(self.n, tokens + (now - at) * self.rate)

    def wait(self, key: str) -> float:
        """Seconds until ``key`` has a token (0: it has one now); takes nothing."""
        with self._lock:
            level = self._level(key, self.clock())
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def take(self, key: str) -> None:
        """Take one token of ``key`` (its level may go below zero: a longer wait)."""
        with self._lock:
            now = self.clock()
            self._tokens[key] = (self._level(key, now) - 1.0, now)
            if len(self._tokens) > self.max_entries:
                self._forget(now)

    def _forget(self, now: float) -> None:
        full = [k for k in self._tokens if self._level(k, now) >= self.n]
        for k in full:
            del self._tokens[k]
        if len(self._tokens) > self.max_entries // 2:
            by_age = sorted(self._tokens, key=lambda k: self._tokens[k][1])
            for k in by_age[: len(by_age) // 2]:
                del self._tokens[k]


class SharedBuckets:
    """:class:`Buckets` kept in PostgreSQL, shared by every process on the database (see the
    module docstring), with what this process last read of each cached.

    Parameters
    ----------
    url : str
        The database (``postgresql://...``).
    budget : str
        ``auth`` or ``writes``.
    n : int
    seconds : float
    clock : callable
        Seconds, monotonic (``time.monotonic``): how old a cached level is.

    Thread safety: thread-safe; blocking on a cache miss and on every take.
    """

    def __init__(
        self, url: str, budget: str, n: int, seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        from ..memory.store.pgbuckets import PgBuckets

        self.n = float(n)
        self.rate = n / seconds
        self.clock = clock
        self.store = PgBuckets(url, budget, n, seconds)
        self._seen: dict[str, tuple[float, float]] = {}  # identity -> (level, at): what was last read
        self._lock = threading.Lock()

    def _note(self, key: str, level: float) -> None:
        with self._lock:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[key] = (level, self.clock())

    def wait(self, key: str) -> float:
        """Seconds until ``key`` has a token (0: it has one now); takes nothing."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None:
            level, at = seen
            predicted = min(self.n, level + (now - at) * self.rate)  # (an upper bound: others only take)
            if predicted < 1.0:
                return (1.0 - predicted) / self.rate
            if now - at < SHARED_TTL:
                return 0.0
        level = self.store.level(key)
        self._note(key, level)
        return 0.0 if level >= 1.0 else (1.0 - level) / self.rate

    def take(self, key: str) -> None:
        """Take one token of ``key`` in the database."""
        self._note(key, self.store.take(key))


def is_write(method: str, path: str) -> bool:
    """Whether a request counts against the ``writes`` budget (see the module docstring)."""
    if method not in ("POST", "PATCH", "PUT", "DELETE"):
        return False
    if path.startswith("/v1/"):
        return path not in _READ_POSTS
    if path == "/mcp" or path.startswith("/mcp/"):
        return True
    return path.startswith("/ui/") and path != "/ui/login"


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class RateState:
    """The buckets of one process's :class:`RateLimits` and what counts in them.

    Parameters
    ----------
    limits : RateLimits
    metrics : ServeMetrics
        Its ``rate_limited`` and ``auth_failures`` counters.
    shared : str, optional
        A PostgreSQL URL: the buckets are the database's (:class:`SharedBuckets`), shared by
        every process on it; default: this process's (:class:`Buckets`).

    Thread safety: thread-safe (the buckets are).
    """

    def __init__(self, limits: RateLimits, metrics: ServeMetrics, *, shared: str | None = None) -> None:
        self.limits = limits
        self.metrics = metrics
        self.auth = self._buckets(shared, "auth", limits.auth, limits.auth_seconds)
        self.writes = self._buckets(shared, "writes", limits.writes, limits.writes_seconds)

    @staticmethod
    def _buckets(shared: str | None, budget: str, n: int, seconds: float) -> Buckets | SharedBuckets | None:
        if n <= 0:
            return None
        return Buckets(n, seconds) if shared is None else SharedBuckets(shared, budget, n, seconds)

    def close(self) -> None:
        """Close the database connections of shared buckets (nothing for the process's own)."""
        for b in (self.auth, self.writes):
            if isinstance(b, SharedBuckets):
                b.store.close()

    def failed_auth(self, scope: Scope) -> None:
        """Count a refused authentication of the request ``scope`` (once per request)."""
        if scope.get(_COUNTED):
            return
        scope[_COUNTED] = True
        self.metrics.auth_failures.inc()
        if self.auth is not None:
            self.auth.take("a:" + _client(scope))


_COUNTED = "lamina.auth_failure_counted"


class RateGate:
    """ASGI middleware applying :class:`RateLimits` (see the module docstring).

    The gate of the API keys (:class:`~lamina.serve.auth.KeyGate`, inside this one) counts its
    401s with :meth:`RateState.failed_auth` as it decides them, so that concurrent wrong keys
    cannot overrun the budget; the other 401s (the inspector's login, ``/metrics``, the MCP
    endpoint) are counted as their answers start.

    Parameters
    ----------
    app : ASGI app
    state : RateState

    Thread safety: an ASGI app; the buckets are thread-safe.
    """

    def __init__(self, app: ASGIApp, state: RateState) -> None:
        self.app = app
        self.state = state
        self.metrics = state.metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "") in _UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        st = self.state
        addr = "a:" + _client(scope)
        if st.auth is not None:
            wait = st.auth.wait(addr)
            if wait > 0:
                message = "too many failed authentications from this address"
                await self._refuse("auth", message, wait, scope, receive, send)
                return
        if st.writes is not None and is_write(scope.get("method", ""), scope.get("path", "")):
            who = [addr]
            key = bearer_key(_header(scope, b"authorization"))
            if key is not None:
                who.append("k:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest())
            wait = max(st.writes.wait(w) for w in who)
            if wait > 0:
                await self._refuse("writes", "too many writes from this key or address", wait, scope, receive, send)
                return
            for w in who:
                st.writes.take(w)

        # a 401 for a request that offered a key (a bearer header, the inspector's login form)
        # is a failed authentication; one without (a browser's /favicon.ico) guessed nothing
        offered = _header(scope, b"authorization") is not None or scope.get("path") == "/ui/login"

        async def watch(message: Message) -> None:
            if offered and message["type"] == "http.response.start" and message["status"] == 401:
                st.failed_auth(scope)
            await send(message)

        await self.app(scope, receive, watch)

    async def _refuse(self, budget: str, message: str, wait: float, scope: Scope, receive: Receive, send: Send) -> None:
        self.metrics.rate_limited.labels(budget).inc()
        scope["lamina.route"] = "rate_limited"  # (the metrics' route label)
        retry = max(1, math.ceil(wait))
        await error_response(
            429, "rate_limited", f"{message}: retry after {retry} s", {"Retry-After": str(retry)}, budget=budget
        )(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return bytes(v).decode("latin-1")
    return None
