"""The inspector's sessions: a random server-side token in an HttpOnly, SameSite=Strict cookie,
never the API key, and the CSRF tokens of its forms.

* Logging in (``POST /ui/login`` with an API key) makes a new random token (32 bytes): the
  cookie holds it, the database holds only its SHA-256 with the tenant, the hash of the key it
  was made with and two times (:class:`SessionStore`, in the memory's service records, so every
  worker and every replica on the database sees it). A login replaces the session the browser
  had (rotation). Logging out removes it: the cookie is worthless from then on.
* A session ends after ``idle`` seconds without a request (default 30 minutes) and ``absolute``
  seconds after its login (default 12 hours), and as soon as its API key leaves the keys.
* The token is not an API key: ``/v1`` and ``/mcp`` take bearer keys only, and a cookie there is
  ignored (no route reads it).
* The cookie is ``Secure`` when the request came over HTTPS, as the connection or a trusted proxy
  (``lamina serve --forwarded-allow-ips``) says.
* CSRF: a form of a session carries an HMAC of its token; the login form carries an HMAC of a
  random pre-login cookie (SameSite=Strict: a page of another site can neither send it nor read
  the form), so no foreign page can log a browser into the attacker's tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...memory import Memory
from ..auth import KeyRing, key_id
from ..service import Caller

__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "UiSession",
    "SessionStore",
    "csrf_token",
    "csrf_ok",
    "new_login_token",
    "IDLE_SECONDS",
    "ABSOLUTE_SECONDS",
]

#: Name of the session cookie.
COOKIE = "lamina_ui"
#: Name of the pre-login cookie the login form's CSRF token is bound to.
LOGIN_COOKIE = "lamina_ui_login"
#: A session ends after this many seconds without a request ...
IDLE_SECONDS = 30 * 60.0
#: ... and this many seconds after its login.
ABSOLUTE_SECONDS = 12 * 3600.0
_CSRF_MSG = b"lamina-ui-csrf-v1"
_RECORD = "ui_sessions"
_TOUCH_SECONDS = 60.0  # (a session's last use is written at most once a minute)
_MAX_SESSIONS = 10_000


def csrf_token(secret: str) -> str:
    """The CSRF token of a session token or a pre-login cookie (64 hex digits)."""
    return hmac.new(secret.encode("utf-8", "surrogatepass"), _CSRF_MSG, hashlib.sha256).hexdigest()


def csrf_ok(secret: str | None, token: str | None) -> bool:
    """Whether ``token`` is the CSRF token of ``secret`` (compared in constant time)."""
    if not secret or not token:
        return False
    return hmac.compare_digest(csrf_token(secret), token)


def new_login_token() -> str:
    """A fresh pre-login cookie value."""
    return secrets.token_urlsafe(24)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class UiSession:
    """A logged-in browser: its tenant and the CSRF token its forms carry.

    Thread safety: immutable, thread-safe.
    """

    caller: Caller
    csrf: str

    @property
    def tenant_label(self) -> str:
        """The tenant's name as shown (``anonymous`` without keys)."""
        return self.caller.tenant if self.caller.tenant is not None else "anonymous"


class SessionStore:
    """The sessions of the inspector, kept (hashed) in the memory's database.

    Parameters
    ----------
    memory : callable
        Returns the memory (the service's, once it is open).
    keys : KeyRing
    idle, absolute : float
        Seconds (see the module docstring).
    clock : callable
        Seconds since the epoch (``time.time``).

    Thread safety: thread-safe; blocking (database calls): call it off the event loop.
    """

    def __init__(
        self,
        memory: Callable[[], Memory],
        keys: KeyRing,
        *,
        idle: float = IDLE_SECONDS,
        absolute: float = ABSOLUTE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._memory = memory
        self.keys = keys
        self.idle = idle
        self.absolute = absolute
        self.clock = clock

    def _live(self, entry: list[object], now: float) -> bool:
        tenant, key_hash, created, seen = entry
        assert isinstance(created, (int, float)) and isinstance(seen, (int, float))
        if now - created > self.absolute or now - seen > self.idle:
            return False
        if self.keys.enabled:  # (a key taken out of the keys ends its sessions)
            return bool(tenant) and self.keys.tenants_by_hash.get(str(key_hash)) == tenant
        return tenant == ""

    def _load(self, raw: str | None) -> dict[str, list[object]]:
        try:
            d = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return d if isinstance(d, dict) else {}

    def open(self, token: str | None) -> UiSession | None:
        """The session of a cookie's token, or None (none, ended, revoked: log in again)."""
        if not token or len(token) > 200:
            return None
        h = _digest(token)
        now = self.clock()
        entry = self._load(self._memory().service_record(_RECORD)).get(h)
        if not isinstance(entry, list) or len(entry) != 4 or not self._live(entry, now):
            return None
        seen = entry[3]
        if isinstance(seen, (int, float)) and now - seen > _TOUCH_SECONDS:

            def touch(raw: str | None) -> str | None:
                d = self._load(raw)
                if h in d:
                    d[h][3] = now
                return json.dumps(d)

            self._memory().update_service_record(_RECORD, touch)
        tenant = str(entry[0]) or None
        return UiSession(Caller(tenant, key_id(str(entry[1])) if entry[1] else None), csrf_token(token))

    def create(self, tenant: str | None, key_hash: str | None, *, replaces: str | None = None) -> str:
        """A new session's token (the session ``replaces`` had, if any, ends: rotation)."""
        token = secrets.token_urlsafe(32)
        h = _digest(token)
        old = _digest(replaces) if replaces else None
        now = self.clock()

        def add(raw: str | None) -> str | None:
            d = {k: v for k, v in self._load(raw).items() if isinstance(v, list) and len(v) == 4 and self._live(v, now)}
            d.pop(old or "", None)
            while len(d) >= _MAX_SESSIONS:  # (the oldest logins go first)
                d.pop(min(d, key=lambda k: float(d[k][2])))  # type: ignore[arg-type]
            d[h] = [tenant or "", key_hash or "", now, now]
            return json.dumps(d)

        self._memory().update_service_record(_RECORD, add)
        return token

    def revoke(self, token: str | None) -> None:
        """End the session of ``token`` (nothing when there is none)."""
        if not token:
            return
        h = _digest(token)

        def drop(raw: str | None) -> str | None:
            d = self._load(raw)
            d.pop(h, None)
            return json.dumps(d) if d else None

        self._memory().update_service_record(_RECORD, drop)
