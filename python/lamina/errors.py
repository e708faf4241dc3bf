"""The exceptions of lamina's public API.

Every error lamina raises about a caller's input derives from :class:`LaminaError` and from the
built-in exception such code has always caught (``ValueError``, ``KeyError``), so that both
``except lamina.LaminaError`` and ``except ValueError`` / ``except KeyError`` work.
"""

from __future__ import annotations

__all__ = ["LaminaError", "InvalidInput", "NotFoundError", "StoreBusy", "AuthError", "PermissionDenied", "Overloaded"]


class LaminaError(Exception):
    """Base class of lamina's errors."""


class InvalidInput(LaminaError, ValueError):
    """An argument has the right type but a value lamina cannot accept (an empty text, a
    negative budget, a time that is not ISO-8601, ...). Nothing was written."""


class NotFoundError(LaminaError, KeyError):
    """An id names nothing: an unknown user or session, an item id that does not exist (or was
    deleted), an id of another database, or another user's item."""

    def __str__(self) -> str:  # KeyError's str() quotes its argument; show the message as written
        return str(self.args[0]) if self.args else ""


#: The one message for an item id a caller cannot see — missing, deleted, of another database, of
#: another user or of another tenant — so that a service's answer tells none of these apart.
UNSEEN_ITEM = "no item of yours has this id"


class StoreBusy(LaminaError, TimeoutError):
    """Another connection (another process, say) held the database's write lock for longer than
    the busy timeout (``lamina.Memory(busy_timeout=...)``). Nothing was written; retry later."""


class AuthError(LaminaError, PermissionError):
    """A lamina service refused the request's API key (missing or unknown; HTTP 401)."""


class PermissionDenied(LaminaError, PermissionError):
    """A lamina service refused access to an item or user of another tenant (HTTP 403)."""


class Overloaded(LaminaError, RuntimeError):
    """A lamina service is not ready or has too much queued work (HTTP 503); nothing was done.

    Attributes
    ----------
    retry_after : float or None
        Seconds the service asked the caller to wait before retrying (its ``Retry-After``).
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
