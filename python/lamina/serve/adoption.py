"""Adopting a database's un-namespaced users into a tenant.

A database written in process (:class:`lamina.Memory`, ``lamina demo``) stores its users as they
are named (``alice``); a server with API keys sees only the users of the caller's tenant, stored
as ``tenant\\x1fuser`` (:mod:`~lamina.serve.tenancy`), so those users are invisible to it.
:func:`adopt_users` moves them into a tenant, all in one transaction (SQLite and PostgreSQL):
either every named user is moved or, on any error, none. ``lamina tenant adopt`` and
``POST /v1/admin/tenants/{tenant}/adopt`` (with the admin key) call it.

Adoption rewrites a user's rows under the new id, so its item ids change (the report maps the
old ones to the new ones); its contexts stay the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput, NotFoundError
from ..memory import Memory
from .audit import OPERATOR, record
from .tenancy import SEP, check_tenant, owns, public_user_id, stored_user_id

__all__ = ["AdoptedUser", "AdoptReport", "adopt_users", "tenants_of"]


@dataclass(frozen=True)
class AdoptedUser:
    """One user moved into a tenant.

    Attributes
    ----------
    user_id : the user's id, before and after (now in the tenant's namespace)
    items, sessions : rows moved
    ids : the old item id -> the new item id
    """

    user_id: str
    items: int
    sessions: int
    ids: dict[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "items": self.items,
            "sessions": self.sessions,
            "ids": {str(k): v for k, v in self.ids.items()},
        }


@dataclass(frozen=True)
class AdoptReport:
    """What :func:`adopt_users` moved.

    Attributes
    ----------
    tenant : the tenant the users now belong to
    users : one entry per user moved, in id order (empty: there was nothing to adopt)
    """

    tenant: str
    users: tuple[AdoptedUser, ...]

    @property
    def items(self) -> int:
        """Items moved in all."""
        return sum(u.items for u in self.users)

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "users": [u.to_dict() for u in self.users], "items": self.items}


def adopt_users(
    memory: Memory, *, tenant: str, user_ids: Sequence[str] | None = None, who: str = OPERATOR
) -> AdoptReport:
    """Move un-namespaced users into ``tenant``, in one transaction.

    Parameters
    ----------
    memory : Memory
    tenant : str
        A tenant name (:data:`~lamina.serve.tenancy.TENANT_RE`).
    user_ids : sequence of str, optional
        The users to adopt (default: every user that belongs to no tenant).
    who : str
        Who adopts, for the tenant's audit log (:mod:`lamina.serve.audit`: one ``adopt`` entry
        per user moved): :data:`~lamina.serve.audit.OPERATOR` for a command on the database.

    Raises
    ------
    InvalidInput
        A bad tenant name, a user id that belongs to a tenant already, or a user the tenant
        already has (nothing is moved).
    NotFoundError
        A named user does not exist (nothing is moved).
    """
    check_tenant(tenant)
    if isinstance(user_ids, str):
        raise TypeError("user_ids must be a list of user ids, not one str")
    stored = memory.users()
    if user_ids is None:
        olds = sorted(u for u in stored if owns(None, u))
    else:
        olds = sorted(set(user_ids))
        have = set(stored)
        for u in olds:
            if not isinstance(u, str):
                raise TypeError(f"user ids must be str, got {type(u).__name__}")
            if SEP in u:
                raise InvalidInput(f"user {u!r} belongs to a tenant already")
            if u not in have:
                raise NotFoundError(f"unknown user_id {u!r} (no un-namespaced user of that id)")
    reports = memory.rename_users({u: stored_user_id(tenant, u) for u in olds}) if olds else []
    for r in reports:  # (after the move commits: the log says what happened, never what was tried)
        detail = f"{r.items} items, {r.sessions} sessions"
        record(memory, tenant=tenant, action="adopt", who=who, user_id=r.from_user_id, detail=detail)
    return AdoptReport(
        tenant=tenant,
        users=tuple(AdoptedUser(r.from_user_id, r.items, r.sessions, dict(r.ids)) for r in reports),
    )


def tenants_of(user_ids: Sequence[str], user_id: str) -> list[str]:
    """The tenants among the stored ``user_ids`` that have a user ``user_id``."""
    out = []
    for stored in user_ids:
        tenant, sep, rest = stored.partition(SEP)
        if sep and rest == user_id and public_user_id(tenant, stored) == user_id:
            out.append(tenant)
    return sorted(out)
