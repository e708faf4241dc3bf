"""Item ids are no oracle: a caller learns nothing about an id that is not theirs.

Every route and tool that takes an item id answers the same 404 ``not_found`` body,
``{"code": "not_found", "message": UNSEEN_ITEM}``, for an id that does not exist, was deleted,
was made by another database, or names an item of another of the caller's users or of another
tenant: a tenant cannot map which ids exist (ids are sequential within a database). The answer
is the same in the inspector (its 404 page) and over MCP (the tool error ``not found: ...``).

What this does not hide: the time an answer takes (an item of another tenant is read before it
is refused) and the ids a caller's own items carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import UNSEEN_ITEM, NotFoundError
from ..memory import Memory
from .tenancy import owns

__all__ = ["UNSEEN_ITEM", "unseen_item", "item_owner", "as_unseen"]

T = TypeVar("T")


def unseen_item() -> NotFoundError:
    """The error of an item id the caller cannot see (HTTP 404, :data:`~lamina.errors.UNSEEN_ITEM`)."""
    return NotFoundError(UNSEEN_ITEM)


def item_owner(memory: Memory, tenant: str | None, item_id: int) -> str:
    """The stored owner of item ``item_id`` when it lies in ``tenant``'s namespace.

    Raises
    ------
    NotFoundError
        :func:`unseen_item`, alike for a missing item and another tenant's.
    TypeError
        ``item_id`` is not an int.
    """
    try:
        stored = memory.get(item_id).user_id
    except NotFoundError:
        raise unseen_item() from None
    if not owns(tenant, stored):
        raise unseen_item()
    return stored


def as_unseen(fn: Callable[[], T]) -> T:
    """``fn()``, a memory call on one item, with each of its :class:`~lamina.NotFoundError` (an
    unknown item, user or user of the item) raised as :func:`unseen_item`."""
    try:
        return fn()
    except NotFoundError:
        raise unseen_item() from None
