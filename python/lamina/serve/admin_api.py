"""Admin routes of ``lamina serve``, authenticated by the admin key (``lamina serve
--admin-key-file`` or ``LAMINA_ADMIN_KEY``), not by a tenant's API key:

* ``POST /v1/admin/tenants/{tenant}/adopt`` with ``{"users": [...]}`` (or ``{}``: every user
  that belongs to no tenant) moves those users into the tenant in one transaction
  (:func:`lamina.serve.adoption.adopt_users`; one ``adopt`` entry per user in the tenant's
  audit log) and answers the report, its item ids public (:mod:`lamina.serve.ids`). An unknown user is 404,
  a user the tenant already has 400 (nothing is moved then).

Without an admin key configured the routes answer 404; a missing or wrong key 401.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import AuthError, NotFoundError
from .adoption import adopt_users
from .auth import metrics_key_matches
from .service import ServiceDep
from .tenancy import TENANT_RE

__all__ = ["ADMIN_PREFIX", "ADMIN_WHO", "ENV_ADMIN_KEY", "admin_router", "AdoptIn", "AdoptOut"]

#: Path prefix of the admin routes (the tenants' key gate lets them through: they check their own key).
ADMIN_PREFIX = "/v1/admin"
#: ``who`` of the audit entries of an action taken with the admin key.
ADMIN_WHO = "admin"
#: Environment variable with the plain admin key.
ENV_ADMIN_KEY = "LAMINA_ADMIN_KEY"


class AdoptIn(BaseModel):
    """Which users to adopt (None: every user that belongs to no tenant)."""

    model_config = ConfigDict(extra="forbid")
    users: list[Annotated[str, Field(min_length=1)]] | None = None


class AdoptedUserOut(BaseModel):
    user_id: str
    items: int
    sessions: int
    ids: dict[str, int]


class AdoptOut(BaseModel):
    """What was moved (:class:`lamina.serve.adoption.AdoptReport`)."""

    tenant: str
    users: list[AdoptedUserOut]
    items: int


def admin_router(admin_key: str | None) -> APIRouter:
    """The admin routes; ``admin_key`` is the hash of the key they require (None: they answer 404)."""
    r = APIRouter(prefix=ADMIN_PREFIX, tags=["admin"])

    def check(request: Request) -> None:
        if admin_key is None:
            raise NotFoundError(
                "the admin routes are off: start lamina serve with --admin-key-file or LAMINA_ADMIN_KEY"
            )
        if not metrics_key_matches(admin_key, request.headers.get("authorization")):
            raise AuthError("the admin routes need the admin key: send 'Authorization: Bearer <admin key>'")

    @r.post(
        "/tenants/{tenant}/adopt", summary="Move users that belong to no tenant into a tenant", response_model=AdoptOut
    )
    async def adopt(
        request: Request,
        body: AdoptIn,
        svc: ServiceDep,
        tenant: Annotated[str, Path(pattern=f"^{TENANT_RE.pattern}$")],
    ) -> AdoptOut:
        check(request)
        report = await svc.call(
            None, lambda: adopt_users(svc.memory, tenant=tenant, user_ids=body.users, who=ADMIN_WHO)
        )
        out = report.to_dict()
        pub = svc.ids.public  # (old and new ids both public: internal ids never leave the service)
        for u in out["users"]:
            u["ids"] = {str(pub(int(old))): pub(new) for old, new in u["ids"].items()}
        return AdoptOut.model_validate(out)

    return r
