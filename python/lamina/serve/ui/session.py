"""The inspector's sessions: the API key in an HttpOnly, SameSite=Strict cookie, and the CSRF
token every mutating form carries.

The cookie holds what the browser sent to ``/ui/login`` (an API key; without keys configured, a
random token of the anonymous session). The CSRF token is an HMAC of the cookie's value: a page
of another site can neither read the cookie nor compute the token, and the token needs no
server-side state (``lamina serve --workers N`` shares nothing between its processes).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from ..auth import KeyRing
from ..service import Caller

__all__ = ["COOKIE", "UiSession", "csrf_token", "csrf_ok", "session_of", "anonymous_token"]

#: Name of the session cookie.
COOKIE = "lamina_ui"
_CSRF_MSG = b"lamina-ui-csrf-v1"
_ANON = "anon-"


def csrf_token(session: str) -> str:
    """The CSRF token of a session cookie value (64 hex digits)."""
    return hmac.new(session.encode("utf-8", "surrogatepass"), _CSRF_MSG, hashlib.sha256).hexdigest()


def csrf_ok(session: str, token: str | None) -> bool:
    """Whether ``token`` is the CSRF token of ``session`` (compared in constant time)."""
    if not token:
        return False
    return hmac.compare_digest(csrf_token(session), token)


def anonymous_token() -> str:
    """A fresh cookie value for a server without keys (the anonymous tenant)."""
    return _ANON + secrets.token_urlsafe(24)


@dataclass(frozen=True)
class UiSession:
    """A logged-in browser: its tenant and the CSRF token its forms carry."""

    caller: Caller
    csrf: str

    @property
    def tenant_label(self) -> str:
        """The tenant's name as shown (``anonymous`` without keys)."""
        return self.caller.tenant if self.caller.tenant is not None else "anonymous"


def session_of(keys: KeyRing, cookie: str | None) -> UiSession | None:
    """The session of a cookie value, or None (no cookie, an unknown key: log in again)."""
    if not cookie:
        return None
    if not keys.enabled:
        return UiSession(Caller(None), csrf_token(cookie)) if cookie.startswith(_ANON) else None
    tenant = keys.tenant_of(cookie)
    if tenant is None:
        return None
    return UiSession(Caller(tenant), csrf_token(cookie))
