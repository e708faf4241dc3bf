"""LangGraph's long-term memory store (``langgraph.store.base.BaseStore``) over :class:`lamina.Memory`.

A LangGraph namespace is a lamina user: ``("memories", "alice")`` is the user
``"memories.alice"`` (LangGraph forbids ``.`` in a namespace label, so the mapping goes both
ways), after an optional ``user_prefix``. An item is one raw turn of that user in the store's
session (``session_id``, default ``"langgraph-store"``): its key is the turn's source id, its
value the turn's text as JSON (sorted keys), its time the time of its last ``put``. So the items
a graph stores are the user's memories: ``Memory.context(query, user_id="memories.alice")`` reads
them, ranked and budgeted with the user's conversations.

``search`` with a ``query`` ranks the namespace's items by lamina's cosine search (the whole value
is embedded; LangGraph's per-field ``index`` is not supported and raises); a ``filter`` keeps the
items whose values match it (LangGraph's operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
``$lte``; nested dicts and lists compare as LangGraph's in-memory store compares them) and is
applied before the ranking is cut to ``offset + limit``, so a filter never starves the page.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..memory.dump.entries import ItemEntry
from ..memory.facade import Memory
from ..memory.inputs import MAX_K
from ._common import check_memory, missing_framework, session_turns

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
except ImportError as _e:  # pragma: no cover - exercised without the extra
    raise missing_framework("LangGraph", "langgraph", _e) from _e

__all__ = ["LaminaStore"]

_SEP = "."
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class LaminaStore(BaseStore):
    """A LangGraph ``BaseStore`` whose namespaces are lamina users.

    Parameters
    ----------
    memory : lamina.Memory
        The memory the items live in (the caller opens and closes it).
    session_id : str
        The session of each user that holds the store's items (default ``"langgraph-store"``);
        the user's other sessions are never read or written by the store.
    user_prefix : str
        Prepended to every user id (``"lg:"`` maps ``("alice",)`` to ``"lg:alice"``); namespaces
        are listed from the users that start with it. Default: none.

    Notes
    -----
    ``get`` / ``put`` / ``delete`` cost one listing of the namespace's items (O(n) in its items);
    ``search`` one listing per namespace under the prefix and, with a query, one lamina search
    per namespace. Puts of one batch apply in order after its reads, as LangGraph's stores do
    (the last put of a key wins). TTLs are not supported (``supports_ttl`` is False).

    Thread safety
    -------------
    Thread-safe as :class:`lamina.Memory` is; a ``put`` of an existing key replaces its value in
    place (``Memory.update``: one transaction, the item keeps its id and the earlier values stay
    in ``Memory.history``).
    """

    supports_ttl: bool = False

    def __init__(self, memory: Memory, *, session_id: str = "langgraph-store", user_prefix: str = "") -> None:
        self._memory = check_memory(memory)
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
        if not isinstance(user_prefix, str):
            raise TypeError(f"user_prefix must be a str, got {type(user_prefix).__name__}")
        self._session = session_id
        self._prefix = user_prefix

    @property
    def memory(self) -> Memory:
        """The wrapped memory."""
        return self._memory

    # ------------------------------------------------------------------ namespaces <-> users
    def user_id(self, namespace: tuple[str, ...]) -> str:
        """The lamina user of ``namespace`` (``user_prefix`` + labels joined by ``.``)."""
        if not isinstance(namespace, tuple) or not namespace:
            raise ValueError(f"a namespace must be a non-empty tuple of str, got {namespace!r}")
        return self._prefix + _SEP.join(namespace)

    def _namespace(self, user_id: str) -> tuple[str, ...] | None:
        if not user_id.startswith(self._prefix) or len(user_id) == len(self._prefix):
            return None
        labels = tuple(user_id[len(self._prefix) :].split(_SEP))
        return labels if all(labels) else None

    def _namespaces(self) -> list[tuple[str, ...]]:
        """Every namespace holding at least one item, sorted."""
        out = []
        for u in self._memory.users():
            ns = self._namespace(u)
            if ns is not None and self._entries(ns):
                out.append(ns)
        return sorted(out)

    # ------------------------------------------------------------------ items
    def _entries(self, namespace: tuple[str, ...]) -> dict[str, ItemEntry]:
        """key -> the turn holding its value."""
        out: dict[str, ItemEntry] = {}
        for e in session_turns(self._memory, user_id=self.user_id(namespace), session_id=self._session):
            if e.source_id is not None:
                out[e.source_id] = e
        return out

    def _item(
        self, namespace: tuple[str, ...], key: str, e: ItemEntry, *, search: bool, score: float | None = None
    ) -> Item:
        """The LangGraph item of turn ``e``: created at its first put, updated at its last
        (the time of its latest revision)."""
        created = e.timestamp if e.timestamp is not None else 0.0
        revised = [r.timestamp for r in self._memory.history(e.id)[:-1] if r.timestamp is not None]
        t0, t1 = (_dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc) for t in (created, max([created, *revised])))
        value = _decode(e.text)
        if not search:
            return Item(value=value, key=key, namespace=namespace, created_at=t0, updated_at=t1)
        return SearchItem(namespace=namespace, key=key, value=value, created_at=t0, updated_at=t1, score=score)

    def _put(self, op: PutOp) -> None:
        namespace, key = op.namespace, op.key
        if not isinstance(key, str) or not key:
            raise ValueError(f"a key must be a non-empty str, got {key!r}")
        if namespace and namespace[0] == "langgraph":
            raise ValueError(f'a namespace\'s first label cannot be "langgraph", got {namespace!r}')
        if op.index not in (None, False):
            raise ValueError(
                "LaminaStore embeds the whole value of every item: index=[fields] is not supported (pass index=None)"
            )
        if getattr(op, "ttl", None) is not None:
            raise ValueError("LaminaStore does not support TTLs (ttl must be None)")
        user = self.user_id(namespace)
        old = self._entries(namespace).get(key)
        if op.value is None:
            if old is not None:  # (a turn's delete takes every item of its source id: the key's)
                self._memory.delete(old.id, user_id=user)
            return
        text, now = _encode(op.value), time.time()
        if old is None:
            msg = {"speaker": "store", "text": text, "id": key, "timestamp": now}
            self._memory.add([msg], user_id=user, session_id=self._session)
        elif old.text != text:  # replaced in place (one transaction; the old value stays in its history)
            self._memory.update(old.id, text, user_id=user, timestamp=now)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if isinstance(op.limit, bool) or not isinstance(op.limit, int) or op.limit < 0:
            raise ValueError(f"limit must be an int >= 0, got {op.limit!r}")
        if isinstance(op.offset, bool) or not isinstance(op.offset, int) or op.offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {op.offset!r}")
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise TypeError(f"filter must be a dict, got {type(op.filter).__name__}")
        if op.query is not None and not isinstance(op.query, str):
            raise TypeError(f"query must be a str, got {type(op.query).__name__}")
        _check_filter(op.filter or {})
        prefix = tuple(op.namespace_prefix)
        found: list[tuple[tuple[str, ...], str, ItemEntry]] = []
        for ns in self._namespaces():
            if ns[: len(prefix)] != prefix:
                continue
            for key, e in self._entries(ns).items():
                if not op.filter or _matches(_decode(e.text), op.filter):
                    found.append((ns, key, e))
        if not op.query:
            page = found[op.offset : op.offset + op.limit]
            return [self._item(ns, key, e, search=True) for ns, key, e in page]
        by_id = {e.id: (ns, key, e) for ns, key, e in found}
        scored: list[tuple[float, tuple[str, ...], str, ItemEntry]] = []
        for ns in sorted({ns for ns, _, _ in found}):
            user = self.user_id(ns)
            n = sum(1 for f in found if f[0] == ns)
            for it in self._memory.search(op.query, user_id=user, k=min(MAX_K, n), layers=["archive"]):
                hit = by_id.pop(it.id, None)
                if hit is not None:
                    scored.append((float(it.score), *hit))
        scored.sort(key=lambda s: -s[0])  # (stable: the namespaces in order for equal scores)
        rest = [(math.nan, ns, key, e) for ns, key, e in by_id.values()]  # beyond a search's k: unscored
        page2 = (scored + rest)[op.offset : op.offset + op.limit]
        return [self._item(ns, key, e, search=True, score=None if math.isnan(s) else s) for s, ns, key, e in page2]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        for name, v in (("limit", op.limit), ("offset", op.offset)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        if op.max_depth is not None and (
            isinstance(op.max_depth, bool) or not isinstance(op.max_depth, int) or op.max_depth < 1
        ):
            raise ValueError(f"max_depth must be an int >= 1 or None, got {op.max_depth!r}")
        spaces = [ns for ns in self._namespaces() if all(_does_match(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            spaces = sorted({ns[: op.max_depth] for ns in spaces})
        return spaces[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ BaseStore
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (GetOp, SearchOp, ListNamespacesOp, PutOp) in order of kind: the reads
        first, in the order given, then the puts (the last put of a key wins), as LangGraph's
        stores do. Returns one result per op (None for a put)."""
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                e = self._entries(op.namespace).get(op.key) if op.namespace else None
                results.append(None if e is None else self._item(op.namespace, op.key, e, search=False))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                self.user_id(op.namespace)  # (an empty namespace raises before anything is written)
                if op.value is not None:
                    _encode(op.value)  # (so does a value that is not JSON)
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise TypeError(f"unknown store operation: {type(op).__name__}")
        for op in puts.values():
            self._put(op)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on a worker thread (the event loop does not block on the memory)."""
        return await asyncio.to_thread(self.batch, list(ops))


def _encode(value: Any) -> str:
    if not isinstance(value, Mapping):
        raise TypeError(f"a store value must be a dict, got {type(value).__name__}")
    try:
        return json.dumps(dict(value), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"a store value must be JSON-serializable (str keys, finite numbers): {e}") from e


def _decode(text: str) -> dict[str, Any]:
    """A stored value; a turn of the store's session that another writer left as plain text
    reads as ``{"text": ...}``."""
    try:
        v = json.loads(text)
    except ValueError:
        return {"text": text}
    return v if isinstance(v, dict) else {"text": text}


def _check_filter(flt: Mapping[str, Any]) -> None:
    for v in flt.values():
        if isinstance(v, Mapping):
            ops = [k for k in v if isinstance(k, str) and k.startswith("$")]
            bad = [k for k in ops if k not in _OPERATORS]
            if bad:
                raise ValueError(f"unsupported filter operator(s) {bad}; expected one of {list(_OPERATORS)}")
            if not ops:
                _check_filter(v)


def _matches(value: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
    return all(_compare(value.get(k), f) for k, f in flt.items())


def _compare(v: Any, f: Any) -> bool:
    """LangGraph's comparison of a value with a filter (as its in-memory store's)."""
    if isinstance(f, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in f):
            return all(_apply(v, op, x) for op, x in f.items())
        return isinstance(v, Mapping) and all(_compare(v.get(k), x) for k, x in f.items())
    if isinstance(f, (list, tuple)):
        return isinstance(v, (list, tuple)) and len(v) == len(f) and all(_compare(a, b) for a, b in zip(v, f))
    return bool(v == f)


def _apply(v: Any, op: str, x: Any) -> bool:
    if op == "$eq":
        return bool(v == x)
    if op == "$ne":
        return bool(v != x)
    try:
        a, b = float(v), float(x)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric value never passes a comparison
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b  # $lte (_check_filter refused the others)


def _does_match(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(ns, path)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path))
    else:
        raise ValueError(f"unsupported match type {cond.match_type!r}; expected 'prefix' or 'suffix'")
    return all(p == "*" or a == p for a, p in pairs)
