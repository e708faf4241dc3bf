"""The requests of the Memory API over HTTP: each call of :class:`lamina.Client` and
:class:`lamina.AsyncClient` as one :class:`_Call` (method, path, body, how to read the answer),
built and checked here once for both clients."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from ..errors import InvalidInput
from ..memory.dump.format import DumpHeader, UserDump, dump_lines
from ..memory.dump.reader import read_dump
from ..memory.inputs import TimeLike
from ..memory.read.firewall import Firewall
from ..memory.reports import DeleteReport, ImportReport, MemoryPage, SessionReport
from ..memory.types import Context, MemoryItem
from ..memory.write.notes import Link, Note
from ..native import _info
from .wire import (
    WireError,
    context_from_json,
    delete_report_from_json,
    firewall_to_json,
    import_report_from_json,
    item_from_json,
    links_from_json,
    note_from_json,
    session_report_from_json,
)

__all__ = ["_Api", "_Call"]

T = TypeVar("T")


def _time(t: TimeLike, what: str) -> float | int | str | None:
    """An event time as JSON (datetimes as ISO-8601; naive ones mean UTC, as in ``Memory``)."""
    if isinstance(t, _dt.datetime):
        return (t if t.tzinfo is not None else t.replace(tzinfo=_dt.timezone.utc)).isoformat()
    if t is None or isinstance(t, (float, int, str)):
        return t
    raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, got {type(t).__name__}")


def _user_path(user_id: str) -> str:
    if not isinstance(user_id, str):
        raise TypeError(f"user_id must be a str, got {type(user_id).__name__}")
    if not user_id.strip():
        raise InvalidInput("user_id must be a non-empty string")
    return quote(user_id, safe="")


def _item_id(item_id: int) -> int:
    if isinstance(item_id, bool) or not isinstance(item_id, int):
        raise TypeError(f"item_id must be an int, got {type(item_id).__name__}")
    return item_id


def _items(d: Any) -> list[MemoryItem]:
    if not isinstance(d, Mapping) or not isinstance(d.get("items"), list):
        raise WireError("expected an object with 'items'")
    return [item_from_json(x) for x in d["items"]]


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Mapping[str, Any] | None = None
    params: Mapping[str, Any] | None = None
    #: a body that is not JSON (a dump), sent as it is
    content: bytes | None = None
    #: ``parse`` reads the raw response body (bytes), not its JSON
    raw: bool = False

    def request_args(self) -> dict[str, Any]:
        if self.content is not None:
            return {"content": self.content, "params": self.params, "headers": {"Content-Type": _NDJSON}}
        return {"json": self.body, "params": self.params}


_NDJSON = "application/x-ndjson"


def _one_user(content: bytes) -> UserDump:
    """The user of an exported dump (a dump of another number of users is a :class:`WireError`)."""
    dump = read_dump(content.splitlines(keepends=True))
    if len(dump.users) != 1:
        raise WireError(f"an export holds one user, this one {len(dump.users)}")
    return dump.users[0]


def _dump_bytes(dump: UserDump, embedder: str) -> bytes:
    """A user's dump as JSONL, its header naming ``embedder`` (the vectors' embedder)."""
    if not isinstance(dump, UserDump):
        raise TypeError(f"dump must be a lamina.UserDump, got {type(dump).__name__}")
    if not isinstance(embedder, str):
        raise TypeError(f"embedder must be a str, got {type(embedder).__name__}")
    vecs = [it.embedding for it in dump.items if it.embedding is not None]
    header = DumpHeader(
        embedder=embedder,
        # (a dump without vectors has only turns and facts: the service embeds them, whatever dim)
        dim=int(vecs[0].shape[0]) if vecs else 1,
        vectors="all" if dump.items and len(vecs) == len(dump.items) else "derived",
        lamina_version=str(_info.build_info()["version"]),
        created_at=time.time(),
    )
    return "".join(dump_lines(header, [dump])).encode("utf-8")


def _dicts(xs: object, what: str, like: str) -> list[Mapping[str, Any]]:
    """``xs`` checked as a list of dicts (TypeError naming the bad entry)."""
    if isinstance(xs, (str, bytes, Mapping)) or not isinstance(xs, Sequence):
        raise TypeError(f"{what} must be a list of dicts like {like}")
    for i, x in enumerate(xs):
        if not isinstance(x, Mapping):
            raise TypeError(f"{what}[{i}] must be a dict, got {type(x).__name__}")
    return list(xs)


def _drop_none(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Api:
    """The requests of the Memory API (shared by the sync and the async client)."""

    @staticmethod
    def add(
        messages: Sequence[Mapping[str, Any]],
        *,
        user_id: str,
        session_id: str | None = None,
        timestamp: TimeLike = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _Call[list[int]]:
        """See :meth:`lamina.Memory.add`."""
        msgs = []
        for i, m in enumerate(_dicts(messages, "messages", "{'speaker': 'Alice', 'text': '...'}")):
            mm = dict(m)
            if "timestamp" in mm:
                mm["timestamp"] = _time(mm["timestamp"], f"messages[{i}]['timestamp']")
            msgs.append(mm)
        body = {
            "user_id": user_id,
            "session_id": session_id,
            "messages": msgs,
            "timestamp": _time(timestamp, "timestamp"),
            "metadata": None if metadata is None else dict(metadata),
        }
        return _Call("POST", "/v1/memories", lambda d: [int(i) for i in d["ids"]], _drop_none(body))

    @staticmethod
    def end_session(user_id: str, session_id: str, now: TimeLike) -> _Call[SessionReport]:
        body = {"user_id": user_id, "session_id": session_id, "now": _time(now, "now")}
        return _Call("POST", "/v1/sessions/end", session_report_from_json, _drop_none(body))

    @staticmethod
    def context(
        query: str,
        *,
        user_id: str,
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        firewall: Firewall | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> _Call[Context]:
        """See :meth:`lamina.Memory.context`."""
        if firewall is not None and not isinstance(firewall, Firewall):
            raise TypeError(f"firewall must be a lamina.Firewall or None, got {type(firewall).__name__}")
        body = {
            "user_id": user_id,
            "query": query,
            "budget": budget,
            "now": _time(now, "now"),
            "domain": domain,
            "include_archive": include_archive or None,
            "firewall": None if firewall is None else firewall_to_json(firewall),
            "filters": None if filters is None else dict(filters),
        }
        return _Call("POST", "/v1/context", context_from_json, _drop_none(body))

    @staticmethod
    def search(
        query: str,
        *,
        user_id: str,
        k: int = 10,
        layers: Sequence[str] | None = None,
        now: TimeLike = None,
        filters: Mapping[str, Any] | None = None,
    ) -> _Call[list[MemoryItem]]:
        """See :meth:`lamina.Memory.search`."""
        if isinstance(layers, str):
            raise TypeError("layers must be a list of layer names, e.g. ['archive']")
        body = {
            "user_id": user_id,
            "query": query,
            "k": k,
            "layers": None if layers is None else list(layers),
            "now": _time(now, "now"),
            "filters": None if filters is None else dict(filters),
        }
        return _Call("POST", "/v1/search", _items, _drop_none(body))

    @staticmethod
    def get(item_id: int, user_id: str | None) -> _Call[MemoryItem]:
        return _Call(
            "GET", f"/v1/memories/{_item_id(item_id)}", item_from_json, params=_drop_none({"user_id": user_id})
        )

    @staticmethod
    def update(item_id: int, text: str, user_id: str | None, timestamp: TimeLike) -> _Call[MemoryItem]:
        body = _drop_none({"text": text, "timestamp": _time(timestamp, "timestamp")})
        return _Call(
            "PATCH", f"/v1/memories/{_item_id(item_id)}", item_from_json, body, _drop_none({"user_id": user_id})
        )

    @staticmethod
    def delete(item_id: int, user_id: str | None) -> _Call[DeleteReport]:
        return _Call(
            "DELETE",
            f"/v1/memories/{_item_id(item_id)}",
            delete_report_from_json,
            params=_drop_none({"user_id": user_id}),
        )

    @staticmethod
    def history(item_id: int, user_id: str | None) -> _Call[list[MemoryItem]]:
        return _Call(
            "GET", f"/v1/memories/{_item_id(item_id)}/history", _items, params=_drop_none({"user_id": user_id})
        )

    @staticmethod
    def note(item_id: int, user_id: str | None) -> _Call[Note | None]:
        return _Call(
            "GET", f"/v1/memories/{_item_id(item_id)}/note", note_from_json, params=_drop_none({"user_id": user_id})
        )

    @staticmethod
    def links(item_id: int, user_id: str | None) -> _Call[list[Link]]:
        return _Call(
            "GET", f"/v1/memories/{_item_id(item_id)}/links", links_from_json, params=_drop_none({"user_id": user_id})
        )

    @staticmethod
    def facts(user_id: str, subject: str | None, current: bool) -> _Call[list[MemoryItem]]:
        params = _drop_none({"subject": subject, "current": "true" if current else "false"})
        return _Call("GET", f"/v1/users/{_user_path(user_id)}/facts", _items, params=params)

    @staticmethod
    def delete_user(user_id: str) -> _Call[DeleteReport]:
        return _Call("DELETE", f"/v1/users/{_user_path(user_id)}", delete_report_from_json)

    @staticmethod
    def add_batch(requests: Sequence[Mapping[str, Any]]) -> _Call[list[list[int]]]:
        """Several :meth:`add` calls in one request (``POST /v1/memories/batch``), in order:
        ``requests`` holds dicts of ``add``'s arguments (``messages``, ``user_id``, optionally
        ``session_id``, ``timestamp``, ``metadata``). Each add is atomic; a failing one stops
        the rest (those before it stay). Returns each add's ids."""
        bodies = []
        for i, a in enumerate(_dicts(requests, "requests", "{'messages': [...], 'user_id': 'alice'}")):
            unknown = set(a) - {"messages", "user_id", "session_id", "timestamp", "metadata"}
            if unknown:
                raise InvalidInput(f"requests[{i}] has unknown key {sorted(unknown)[0]!r}")
            uid = a.get("user_id")
            if not isinstance(uid, str):
                raise TypeError(f"requests[{i}]['user_id'] must be a str, got {type(uid).__name__}")
            one = _Api.add(
                a.get("messages", ()),
                user_id=uid,
                session_id=a.get("session_id"),
                timestamp=a.get("timestamp"),
                metadata=a.get("metadata"),
            )
            bodies.append(one.body)
        return _Call(
            "POST", "/v1/memories/batch", lambda d: [[int(i) for i in x] for x in d["ids"]], {"requests": bodies}
        )

    @staticmethod
    def context_batch(queries: Sequence[str], *, user_ids: str | Sequence[str], **options: Any) -> _Call[list[Context]]:
        """See :meth:`lamina.Memory.context_batch`: ``options`` are its ``budget``, ``now``,
        ``domain``, ``include_archive`` and ``filters`` (no firewall or query embeddings over
        HTTP; the service checks each, a bad one is the same error as in process)."""
        if isinstance(queries, str) or not isinstance(queries, Sequence):
            raise TypeError(f"queries must be a sequence of str, got {type(queries).__name__}")
        unknown = set(options) - {"budget", "now", "domain", "include_archive", "filters"}
        if unknown:
            raise TypeError(f"context_batch() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        body = options | {
            "queries": list(queries),
            "user_ids": user_ids if isinstance(user_ids, str) else list(user_ids),
        }
        body["now"] = _time(options.get("now"), "now")
        return _Call(
            "POST", "/v1/context/batch", lambda d: [context_from_json(c) for c in d["contexts"]], _drop_none(body)
        )

    @staticmethod
    def list_memories(
        *, user_id: str, filters: Mapping[str, Any] | None = None, cursor: str | None = None, limit: int = 100
    ) -> _Call[MemoryPage]:
        """See :meth:`lamina.Memory.list_memories` (``POST /v1/memories/list``)."""
        body = {"user_id": user_id, "filters": filters, "cursor": cursor, "limit": limit}
        page = lambda d: MemoryPage(items=_items(d), next_cursor=d["next_cursor"])  # noqa: E731
        return _Call("POST", "/v1/memories/list", page, _drop_none(body))

    @staticmethod
    def delete_memories(*, user_id: str, filters: Mapping[str, Any]) -> _Call[DeleteReport]:
        """See :meth:`lamina.Memory.delete_memories` (``POST /v1/memories/delete``)."""
        return _Call("POST", "/v1/memories/delete", delete_report_from_json, {"user_id": user_id, "filters": filters})

    @staticmethod
    def reset() -> _Call[DeleteReport]:
        """Delete every user of the caller's tenant (``POST /v1/reset``; see :meth:`lamina.Memory.reset`)."""
        return _Call("POST", "/v1/reset", delete_report_from_json, {})

    @staticmethod
    def users() -> _Call[list[str]]:
        return _Call("GET", "/v1/users", lambda d: [str(u) for u in d["users"]])

    @staticmethod
    def export_user(user_id: str, vectors: bool) -> _Call[UserDump]:
        params = {"vectors": "true" if vectors else "false"}
        return _Call("GET", f"/v1/users/{_user_path(user_id)}/export", _one_user, params=params, raw=True)

    @staticmethod
    def import_user(dump: UserDump, embedder: str, user_id: str | None, replace: bool) -> _Call[ImportReport]:
        content = _dump_bytes(dump, embedder)
        path = f"/v1/users/{_user_path(dump.user.user_id if user_id is None else user_id)}/import"
        params = {"replace": "true" if replace else "false"}
        return _Call("POST", path, import_report_from_json, params=params, content=content)
