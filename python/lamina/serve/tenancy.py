"""Tenants share one store: the service namespaces their user ids.

A tenant's user ``alice`` is stored as ``"acme\\x1falice"`` (tenant, the unit separator U+001F,
the caller's id). Callers can never send U+001F in an id (:func:`stored_user_id` refuses it), so
no id a client chooses can reach into another tenant's namespace; an item belongs to a tenant
when its stored owner carries the tenant's prefix (:func:`owns`). The anonymous tenant of a
server without keys (``tenant=None``) sees exactly the user ids without a separator: a database
built in process with :class:`lamina.Memory` is served as it is.
"""

from __future__ import annotations

import re

from ..errors import InvalidInput
from ..memory.inputs import check_id

__all__ = ["SEP", "TENANT_RE", "check_tenant", "stored_user_id", "public_user_id", "owns"]

#: Separates the tenant from the caller's user id in a stored user id.
SEP = "\x1f"
#: What a tenant name may look like (it appears in metrics labels and keys files).
TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_tenant(name: str) -> str:
    """``name`` if it is a valid tenant name, else :class:`~lamina.InvalidInput`."""
    if not isinstance(name, str) or TENANT_RE.fullmatch(name) is None:
        raise InvalidInput(f"tenant name {name!r} must match {TENANT_RE.pattern} (letters, digits, '_', '.', '-')")
    return name


def stored_user_id(tenant: str | None, user_id: str) -> str:
    """The stored id of the caller's ``user_id`` in ``tenant``'s namespace.

    Raises
    ------
    TypeError, InvalidInput
        ``user_id`` is not a non-empty str, or contains the separator U+001F.
    """
    check_id(user_id, "user_id")
    if SEP in user_id:
        raise InvalidInput("user_id must not contain the control character U+001F")
    return user_id if tenant is None else f"{tenant}{SEP}{user_id}"


def owns(tenant: str | None, stored: str) -> bool:
    """Whether the stored user id ``stored`` lies in ``tenant``'s namespace."""
    if tenant is None:
        return SEP not in stored
    return stored.startswith(tenant + SEP) and SEP not in stored[len(tenant) + 1 :]


def public_user_id(tenant: str | None, stored: str) -> str:
    """The caller's user id of a stored user id of ``tenant`` (see :func:`owns`)."""
    return stored if tenant is None else stored[len(tenant) + 1 :]
