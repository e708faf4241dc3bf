"""The audit log of ``lamina serve``: a tenant's administrative actions, append-only.

Each entry says what was done (:data:`ACTIONS`), when (seconds since the epoch), by which key
(``who``: the key's id, ``sha256:`` and the first 16 hex digits of its hash — never the key;
``anonymous`` on a server without keys; ``operator`` for a command run on the database), from
which address (the connection's, or the one a trusted proxy names), and on what (the caller's
user id, a public item id, a short detail):

==============  ================================================================================
``delete``      an item deleted (``DELETE /v1/memories/{id}``, the ``delete_memory`` tool, the inspector)
``delete_user`` a user deleted (``DELETE /v1/users/{id}``, the inspector's forget)
``export``      a user exported (``GET /v1/users/{id}/export``, the inspector)
``import``      a dump imported as a user (``POST /v1/users/{id}/import``; detail: ``replace``)
``adopt``       a database's users adopted into the tenant (:func:`record` from the command that does it)
``new_address`` a key used from an address it was not used from before (first request from it)
==============  ================================================================================

The log of a tenant is kept in the memory's database (SQLite or PostgreSQL: the service
records of :mod:`lamina.memory.service_records`), one committed write per entry before the
response is sent: it survives a restart and a ``kill -9``, and every worker and replica on the
database appends to the same log, numbered in the order the writes committed. A tenant reads
its own log only (``GET /v1/audit``, :func:`entries`; all of it as JSONL: ``GET /v1/audit/export``,
:func:`export_lines`); nothing removes an entry (deleting a user
leaves the entries about it). The addresses a key was seen from are kept too (at most
:data:`MAX_ADDRESSES` per tenant, the oldest forgotten first), so that a restart does not log
them again.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidInput
from ..memory import Memory

__all__ = ["ACTIONS", "AuditEntry", "record", "entries", "export_lines", "AddressBook", "MAX_ADDRESSES", "OPERATOR"]

#: What the log records.
ACTIONS = ("delete", "delete_user", "export", "import", "adopt", "new_address")
#: ``who`` of an action taken on the database by a command, not by a key.
OPERATOR = "operator"
#: Addresses remembered per tenant (key, address pairs) before the oldest is forgotten.
MAX_ADDRESSES = 10_000
_ANON = "-"  # (the log name of the anonymous tenant: no tenant name is "-")


def _log(tenant: str | None) -> str:
    return "audit:" + (_ANON if tenant is None else tenant)


@dataclass(frozen=True)
class AuditEntry:
    """One administrative action.

    Attributes
    ----------
    seq : int
        Its number in the tenant's log (1 for the first; the order of the writes).
    at : float
        When, seconds since the epoch.
    action : str
        One of :data:`ACTIONS`.
    who : str
        The key's id (``sha256:`` + 16 hex digits), ``anonymous`` or :data:`OPERATOR`.
    address : str or None
        The client's address.
    user_id : str or None
        The caller's user id the action was on.
    item_id : int or None
        The public item id (``delete``).
    detail : str or None

    Thread safety: immutable, thread-safe.
    """

    seq: int
    at: float
    action: str
    who: str
    address: str | None = None
    user_id: str | None = None
    item_id: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object."""
        return asdict(self)


def record(
    memory: Memory,
    *,
    tenant: str | None,
    action: str,
    who: str,
    address: str | None = None,
    user_id: str | None = None,
    item_id: int | None = None,
    detail: str | None = None,
) -> AuditEntry:
    """Append an action to ``tenant``'s log (committed when this returns; blocking: call it off
    the event loop). ``user_id`` is the caller's (never the stored one), ``item_id`` public.

    Raises
    ------
    InvalidInput
        ``action`` is not one of :data:`ACTIONS`, or ``who`` is empty.
    """
    if action not in ACTIONS:
        raise InvalidInput(f"audit action {action!r} is not one of {list(ACTIONS)}")
    if not isinstance(who, str) or not who:
        raise InvalidInput("an audit entry needs who (a key id, 'anonymous' or 'operator')")
    at = time.time()
    body = {"at": at, "action": action, "who": who, "address": address, "user_id": user_id}
    body |= {"item_id": item_id, "detail": detail}
    seq = memory.append_service_log(_log(tenant), json.dumps(body, ensure_ascii=False))
    return AuditEntry(seq=seq, **body)  # type: ignore[arg-type]


def _entry(seq: int, raw: str) -> AuditEntry:
    d = json.loads(raw)
    return AuditEntry(
        seq=seq,
        at=float(d["at"]),
        action=str(d["action"]),
        who=str(d["who"]),
        address=d.get("address"),
        user_id=d.get("user_id"),
        item_id=d.get("item_id"),
        detail=d.get("detail"),
    )


def entries(memory: Memory, tenant: str | None, *, after: int = 0, limit: int = 100) -> tuple[list[AuditEntry], int]:
    """``tenant``'s entries numbered after ``after``, oldest first (at most ``limit``, 1 to
    1,000), and how many the log holds."""
    rows, total = memory.service_log(_log(tenant), after=after, limit=limit)
    return [_entry(seq, raw) for seq, raw in rows], total


def export_lines(memory: Memory, tenant: str | None) -> Iterator[str]:
    """Every entry of ``tenant``'s log as JSONL lines (each ending in a newline), oldest first:
    what an export of the tenant carries."""
    after = 0
    while True:
        page, total = entries(memory, tenant, after=after, limit=1000)
        for e in page:
            yield json.dumps(e.to_json(), ensure_ascii=False) + "\n"
        if not page or page[-1].seq >= total:
            return
        after = page[-1].seq


class AddressBook:
    """Which (key, address) pairs were seen, to log a key's first use from an address once.

    The pairs are kept per tenant in the database (a record of the memory, so a restart, another
    worker or a replica does not log them again) and cached in the process. A pair is marked
    seen, then its entry appended, in two transactions: concurrent first uses log it once, and a
    crash between the two loses that one ``new_address`` entry (never a duplicate).

    Thread safety: thread-safe; :meth:`seen` is blocking on a miss (call it off the event loop).
    """

    def __init__(self) -> None:
        self._known: set[tuple[str | None, str, str]] = set()
        self._lock = threading.Lock()

    def known(self, tenant: str | None, who: str, address: str) -> bool:
        """Whether the pair is known to this process (no database access)."""
        with self._lock:
            return (tenant, who, address) in self._known

    def seen(self, memory: Memory, tenant: str | None, who: str, address: str) -> AuditEntry | None:
        """Note a request of key ``who`` from ``address``: the ``new_address`` entry logged when
        the pair is new to the database, else None."""
        pair = f"{who} {address}"
        fresh = False

        def add(raw: str | None) -> str | None:
            nonlocal fresh
            pairs: list[str] = json.loads(raw) if raw else []
            fresh = pair not in pairs
            if not fresh:
                return raw
            pairs.append(pair)
            return json.dumps(pairs[-MAX_ADDRESSES:])

        memory.update_service_record("audit_addresses:" + (_ANON if tenant is None else tenant), add)
        with self._lock:
            self._known.add((tenant, who, address))
            if len(self._known) > 4 * MAX_ADDRESSES:
                self._known.clear()
        if not fresh:
            return None
        return record(memory, tenant=tenant, action="new_address", who=who, address=address)
