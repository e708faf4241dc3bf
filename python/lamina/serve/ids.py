"""Item ids are no oracle: a caller learns nothing from an id, theirs or not.

Public ids
    The service never shows an internal item id (``(database tag << 40) | sequence number``:
    sequential, so consecutive adds would tell a tenant how much every other tenant wrote in
    between). Every route, MCP tool and inspector page shows, and takes, the **public id**
    instead: :class:`PublicIds`, a keyed permutation of the 62-bit id space (an 8-round
    Feistel network, its round function BLAKE2b keyed with a random 256-bit key kept in the
    database's service records, made on first use, shared by every worker and replica on the
    database). Public ids stay JSON integers (``1 <= id < 2**62``), so every client, the MCP
    tools' schemas and :class:`lamina.MemoryItem` keep ``int`` ids; consecutive adds give ids
    in no visible order, and without the key no id can be derived from another. The mapping
    is stable for the life of the database (a dump keeps its ids opaque too: its lines carry
    public ids, and an import maps them to fresh ones as it always did).

    The ids of messages added without one (a turn's ``sources``) are random
    (:func:`with_message_ids`), not ``t<internal id>``; a database filled in process by
    :class:`lamina.Memory` keeps the ``t<internal id>`` source ids it was given.

One 404
    Every route and tool that takes an item id answers the same 404 ``not_found`` body,
    ``{"code": "not_found", "message": UNSEEN_ITEM}``, for an id that does not exist, was
    deleted, is no public id at all, or names an item of another of the caller's users or of
    another tenant. The answer is the same in the inspector (its 404 page) and over MCP (the
    tool error ``not found: ...``).

What this does not hide: the time an answer takes (an item of another tenant is read before it
is refused) and how many items a database holds (``/metrics``, to the metrics key's holder).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from ..errors import UNSEEN_ITEM, InvalidInput, NotFoundError
from ..memory import Memory
from ..memory.dump.format import UserDump
from ..memory.reports import DeleteReport, ImportReport
from ..memory.state.records import NO_TREE, ROOT
from ..memory.types import Context, FirewallReport, MemoryItem
from ..memory.write.notes import Link, Note
from .tenancy import owns

__all__ = [
    "UNSEEN_ITEM",
    "unseen_item",
    "item_owner",
    "as_unseen",
    "PublicIds",
    "ID_BITS",
    "with_message_ids",
]

T = TypeVar("T")

#: Public and internal item ids lie in ``[1, 2**ID_BITS)``.
ID_BITS = 62
_HALF = ID_BITS // 2
_MASK = (1 << _HALF) - 1
_ROUNDS = 8
_RECORD = "public_id_key"


def unseen_item() -> NotFoundError:
    """The error of an item id the caller cannot see (HTTP 404, :data:`~lamina.errors.UNSEEN_ITEM`)."""
    return NotFoundError(UNSEEN_ITEM)


def item_owner(memory: Memory, tenant: str | None, item_id: int) -> str:
    """The stored owner of item ``item_id`` (an internal id) when it lies in ``tenant``'s namespace.

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


class _Records(Protocol):
    def update_service_record(self, name: str, update: Callable[[str | None], str | None]) -> str | None: ...


def with_message_ids(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (dicts of an add) with a random ``id`` for each that has none: the memory's
    default, ``t<internal id>``, would show the internal id in the turn's ``sources``."""
    return [dict(m) if m.get("id") is not None else {**m, "id": "m" + secrets.token_hex(8)} for m in messages]


class PublicIds:
    """The keyed permutation between internal and public item ids (see the module docstring),
    and the results of the memory with their ids made public.

    Parameters
    ----------
    key : bytes
        16 to 64 bytes; :meth:`of_memory` reads (or makes) a database's.

    Thread safety: immutable but for its caches (thread-safe); thread-safe.
    """

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or not 16 <= len(key) <= 64:
            raise InvalidInput("a public-id key must be 16 to 64 bytes")
        self._mac = hashlib.blake2b(key=key, digest_size=8)
        self.public = lru_cache(maxsize=1 << 16)(self._public)
        self.public.__doc__ = self._public.__doc__

    @classmethod
    def of_memory(cls, memory: _Records) -> PublicIds:
        """The public ids of a memory's database: its key is made on first use (one write
        transaction: concurrent first uses by several processes agree on one key)."""
        raw = memory.update_service_record(_RECORD, lambda cur: cur or secrets.token_hex(32))
        assert raw is not None
        return cls(bytes.fromhex(raw))

    def _round(self, i: int, half: int) -> int:
        h = self._mac.copy()  # (a copy of the keyed state: the key is absorbed once)
        h.update(((half << 8) | i).to_bytes(5, "little"))
        return int.from_bytes(h.digest(), "little") & _MASK

    def _permute(self, x: int) -> int:
        left, right = x >> _HALF, x & _MASK
        for i in range(_ROUNDS):
            left, right = right, left ^ self._round(i, right)
        return (left << _HALF) | right

    def _unpermute(self, y: int) -> int:
        left, right = y >> _HALF, y & _MASK
        for i in reversed(range(_ROUNDS)):
            left, right = right ^ self._round(i, left), left
        return (left << _HALF) | right

    def _public(self, internal: int) -> int:
        """The public id of an internal one (both in ``[1, 2**62)``; 0 is walked past)."""
        if not 0 < internal < 1 << ID_BITS:
            raise ValueError(f"internal item id {internal} is outside [1, 2**{ID_BITS})")
        y = self._permute(internal)
        while y == 0:  # (cycle walking: the permutation of [0, 2**62) restricted to [1, 2**62))
            y = self._permute(y)
        return y

    def internal(self, public: int) -> int:
        """The internal id of a public one.

        Raises
        ------
        NotFoundError
            :func:`unseen_item` for a value that is no public id (not an int in ``[1, 2**62)``):
            the answer of an id of nothing.
        """
        if isinstance(public, bool) or not isinstance(public, int) or not 0 < public < 1 << ID_BITS:
            raise unseen_item()
        x = self._unpermute(public)
        while x == 0:
            x = self._unpermute(x)
        return x

    def _opt(self, internal: int | None) -> int | None:
        return None if internal is None else self.public(internal)

    def _tree_ref(self, ref: int | None) -> int | None:
        return ref if ref is None or ref in (ROOT, NO_TREE) else self.public(ref)

    # -- results with public ids --------------------------------------------------------------
    def item(self, it: MemoryItem) -> MemoryItem:
        """``it`` with its id and ``superseded_by`` public."""
        return dataclasses.replace(it, id=self.public(it.id), superseded_by=self._opt(it.superseded_by))

    def items(self, items: Sequence[MemoryItem]) -> list[MemoryItem]:
        """:meth:`item` of each."""
        return [self.item(it) for it in items]

    def firewall(self, r: FirewallReport | None) -> FirewallReport | None:
        """A firewall report with the item ids it names public."""
        if r is None:
            return None
        return dataclasses.replace(
            r,
            blocked=tuple(dataclasses.replace(b, item_id=self.public(b.item_id)) for b in r.blocked),
            verify=tuple(self.public(i) for i in r.verify),
            clarify=tuple(self.public(i) for i in r.clarify),
        )

    def context(self, ctx: Context) -> Context:
        """A context with its items' and its firewall report's ids public."""
        return dataclasses.replace(ctx, items=self.items(ctx.items), firewall=self.firewall(ctx.firewall))

    def note(self, n: Note | None) -> Note | None:
        """A note with its turn's id and its revisions' causes public."""
        if n is None:
            return None
        history = tuple(dataclasses.replace(h, cause=self._opt(h.cause)) for h in n.history)
        return dataclasses.replace(n, item_id=self.public(n.item_id), history=history)

    def links(self, links: Sequence[Link]) -> list[Link]:
        """Links with both turns' ids public."""
        return [dataclasses.replace(x, item_id=self.public(x.item_id), other_id=self.public(x.other_id)) for x in links]

    def delete_report(self, r: DeleteReport) -> DeleteReport:
        """A delete report with the deleted ids public."""
        return dataclasses.replace(r, ids=tuple(self.public(i) for i in r.ids))

    def import_report(self, r: ImportReport) -> ImportReport:
        """An import report whose new ids (the values of ``ids``) are public; its keys are the dump's."""
        return dataclasses.replace(r, ids={old: self.public(new) for old, new in r.ids.items()})

    def dump(self, ud: UserDump) -> UserDump:
        """A user's dump whose item ids, and every reference to one, are public (an import
        remaps a dump's ids to fresh ones: they only link its lines)."""
        p, opt = self.public, self._opt
        return UserDump(
            user=ud.user,
            sessions=ud.sessions,
            items=[
                dataclasses.replace(
                    it,
                    id=p(it.id),
                    members=tuple(p(m) for m in it.members),
                    parent_id=self._tree_ref(it.parent_id),
                    superseded_by=opt(it.superseded_by),
                )
                for it in ud.items
            ],
            revisions=[dataclasses.replace(rv, item_id=p(rv.item_id)) for rv in ud.revisions],
            notes=[dataclasses.replace(n, item_id=p(n.item_id)) for n in ud.notes],
            note_revisions=[
                dataclasses.replace(r, item_id=p(r.item_id), cause=opt(r.cause)) for r in ud.note_revisions
            ],
            links=[dataclasses.replace(k, src=p(k.src), dst=p(k.dst)) for k in ud.links],
        )
