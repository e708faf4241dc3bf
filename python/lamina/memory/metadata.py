"""Metadata of memories: what a caller may attach to a message (and so to its turn), checked once
here for every surface (Python, HTTP, MCP, import).

A metadata value is a ``str``, an ``int``, a ``float`` (finite), a ``bool`` or a list of ``str``
(:data:`MetadataValue`). Keys are non-empty strings of at most :data:`MAX_KEY_CHARS` characters,
not one of :data:`RESERVED_KEYS` (the built-in fields a filter names, and the filter operators
``and`` / ``or``). At most :data:`MAX_KEYS` keys per item and :data:`MAX_VALUE_CHARS` characters
per string.

A record holds its metadata frozen (:data:`Frozen`: a tuple of ``(key, value)`` pairs sorted by
key, lists as tuples), so a record stays a value of atomic fields (see
:class:`lamina.memory.state.records.Record`); :func:`as_dict` gives it back as a dict. Its
stored form (a JSON object) is the store's (:mod:`lamina.memory.store.protocol`).

Filters on memories: the ``filters`` argument of ``search``, ``context``, ``context_batch``,
``list_memories`` and ``delete_memories``, parsed and checked once here for every surface.

Syntax (a JSON-able dict, as mem0 takes it)::

    {"category": "work"}                              # equality
    {"category": {"in": ["work", "health"]}}          # one of
    {"priority": {"gte": 2, "lte": 5}}                # numbers: gte, gt, lte, lt
    {"created_at": {"gte": "2024-01-01"}}             # times: ISO-8601, datetime or epoch seconds
    {"category": {"ne": "spam"}}                      # not equal (an item without the key passes)
    {"or": [{"agent_id": "a1"}, {"agent_id": "a2"}]}  # and / or of filters (also AND / OR)

Several keys in one dict, or several operators on one key, must all hold (``and``). A key is a
metadata key (:mod:`lamina.memory.metadata`) or a built-in field (:data:`BUILTIN_FIELDS`).
Against a list-valued metadata value (``tags``), equality means "the list holds it" and ``in``
"the list holds one of them". An item without the key fails every operator but ``ne``.

A filter naming a metadata key that no memory of the user carries is an error (a misspelt key
must not read as "nothing matches"): :func:`unknown_keys` finds them, the read path raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from .inputs import check_text, to_time

__all__ = [
    "Filter",
    "Cond",
    "Group",
    "BUILTIN_FIELDS",
    "OPERATORS",
    "LOGIC",
    "parse_filters",
    "metadata_keys",
    "unknown_keys",
    "MetadataValue",
    "Metadata",
    "Frozen",
    "RESERVED_KEYS",
    "MAX_KEYS",
    "MAX_KEY_CHARS",
    "MAX_VALUE_CHARS",
    "check_metadata",
    "merge",
    "as_dict",
]

#: Fields of every item that a filter may name besides metadata keys, and their kind.
BUILTIN_FIELDS: dict[str, str] = {"created_at": "time", "session_id": "str", "speaker": "str", "kind": "str"}
#: Comparison operators.
OPERATORS = ("eq", "ne", "in", "gte", "gt", "lte", "lt")
_ORDER_OPS = ("gte", "gt", "lte", "lt")
#: The keys that combine filters, and the operation each names.
LOGIC = {"and": "and", "AND": "and", "or": "or", "OR": "or"}
Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Cond:
    """``key op value`` (``in``: ``value`` is a tuple; a time field's value is epoch seconds)."""

    key: str
    op: str
    value: Any

    def matches(self, r: Any, md: Any = None) -> bool:
        """Whether the record (anything with the built-in fields and ``metadata`` pairs) passes;
        ``md``: its metadata pairs when not ``r.metadata`` (a derived item's)."""
        if self.key in BUILTIN_FIELDS:
            v = getattr(r, self.key)
        else:
            v = None
            for k, x in r.metadata if md is None else md:
                if k == self.key:
                    v = x
                    break
        op = self.op
        if v is None:
            return op == "ne"
        if op == "eq":
            return _has(v, self.value)
        if op == "ne":
            return not _has(v, self.value)
        if op == "in":
            return any(_has(v, x) for x in self.value)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if op == "gte":
            return bool(v >= self.value)
        if op == "gt":
            return bool(v > self.value)
        if op == "lte":
            return bool(v <= self.value)
        return bool(v < self.value)

    def keys(self) -> set[str]:
        return {self.key}


@dataclass(frozen=True, slots=True)
class Group:
    """``and`` (every part holds) or ``or`` (some part holds) of filters."""

    op: str
    parts: tuple[Filter, ...]

    def matches(self, r: Any, md: Any = None) -> bool:
        hits = (p.matches(r, md) for p in self.parts)
        return all(hits) if self.op == "and" else any(hits)

    def keys(self) -> set[str]:
        return set().union(*(p.keys() for p in self.parts))


#: A parsed filter (hashable: equal filters share the read path's cache of matching ids).
Filter = Cond | Group


def _has(v: Any, want: Scalar) -> bool:
    """``v == want`` without bool/int confusion; a list value holds ``want``."""
    if isinstance(v, tuple):
        return any(_has(x, want) for x in v)
    if isinstance(v, bool) or isinstance(want, bool):
        return type(v) is type(want) and v == want
    return bool(v == want)


def parse_filters(filters: object, what: str = "filters") -> Filter | None:
    """``filters`` (see the module docstring) parsed and checked; None for None or ``{}``.

    Raises
    ------
    TypeError
        Not a dict; a value of a type no operator takes (naming where).
    InvalidInput
        An unknown operator, an empty ``in`` / ``and`` / ``or`` list, a non-number bound, a
        malformed time (naming the key and the operator).
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise TypeError(
            f"{what} must be a dict such as {{'category': 'work'}} or {{'priority': {{'gte': 2}}}}, "
            f"got {type(filters).__name__}"
        )
    if not filters:
        return None
    return _node(filters, what)


def _node(d: Mapping[Any, Any], what: str) -> Filter:
    parts: list[Filter] = []
    for key, val in d.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be str, got {type(key).__name__} ({key!r})")
        logic = LOGIC.get(key)
        if logic is not None:
            if isinstance(val, (str, bytes, Mapping)) or not isinstance(val, Sequence) or not val:
                raise InvalidInput(f"{what}[{key!r}] must be a non-empty list of filters")
            subs = []
            for i, x in enumerate(val):
                if not isinstance(x, Mapping) or not x:
                    raise InvalidInput(f"{what}[{key!r}][{i}] must be a non-empty filter dict")
                subs.append(_node(x, f"{what}[{key!r}][{i}]"))
            parts.append(subs[0] if len(subs) == 1 else Group(logic, tuple(subs)))
            continue
        if not key.strip():
            raise InvalidInput(f"{what} has an empty key")
        if isinstance(val, Mapping):
            if not val:
                raise InvalidInput(f"{what}[{key!r}] is an empty operator dict; expected some of {list(OPERATORS)}")
            for op, x in val.items():
                parts.append(_cond(key, op, x, f"{what}[{key!r}]"))
        else:
            parts.append(_cond(key, "eq", val, f"{what}[{key!r}]"))
    return parts[0] if len(parts) == 1 else Group("and", tuple(parts))


def _cond(key: str, op: object, x: object, what: str) -> Cond:
    if op not in OPERATORS:
        raise InvalidInput(f"{what} has unknown operator {op!r}; expected one of {list(OPERATORS)}")
    assert isinstance(op, str)
    at = f"{what}[{op!r}]" if op != "eq" else what
    kind = BUILTIN_FIELDS.get(key)
    if op in _ORDER_OPS:
        if kind == "time":
            return Cond(key, op, _scalar(key, kind, x, at))
        if kind == "str":
            raise InvalidInput(f"{at}: {key!r} is text; {op!r} compares numbers and times")
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise InvalidInput(f"{at} must be a number, got {type(x).__name__} {x!r:.60}")
        if not math.isfinite(x):
            raise InvalidInput(f"{at} must be finite, got {x}")
        return Cond(key, op, x)
    if op == "in":
        if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Sequence) or not x:
            raise InvalidInput(f"{at} must be a non-empty list of values")
        return Cond(key, op, tuple(_scalar(key, kind, v, f"{at}[{i}]") for i, v in enumerate(x)))
    return Cond(key, op, _scalar(key, kind, x, at))


def _scalar(key: str, kind: str | None, v: object, what: str) -> Scalar:
    if kind == "time":
        t = to_time(v, what)  # type: ignore[arg-type]
        assert t is not None
        return t
    if kind == "str":
        if not isinstance(v, str):
            raise TypeError(f"{what}: {key!r} is text, got {type(v).__name__} {v!r:.60}")
        return v
    if isinstance(v, float) and not math.isfinite(v):
        raise InvalidInput(f"{what} must be finite, got {v}")
    if not isinstance(v, (str, int, float, bool)):
        raise TypeError(f"{what} must be a str, int, float or bool, got {type(v).__name__}")
    return v


def metadata_keys(f: Filter) -> set[str]:
    """The metadata keys a filter names (its keys but the built-in fields)."""
    return {k for k in f.keys() if k not in BUILTIN_FIELDS}


def unknown_keys(f: Filter, known: set[str] | frozenset[str]) -> list[str]:
    """The metadata keys of ``f`` not among ``known`` (the keys the user's memories carry), sorted."""
    return sorted(metadata_keys(f) - known)


#: One metadata value.
MetadataValue = str | int | float | bool | list[str]
#: Metadata as callers give it and read it back.
Metadata = dict[str, MetadataValue]
#: Metadata as a record holds it: (key, value) pairs sorted by key; a list value as a tuple.
Frozen = tuple[tuple[str, str | int | float | bool | tuple[str, ...]], ...]

#: Keys a metadata dict may not use: the built-in fields filters name
#: (:data:`lamina.memory.metadata.BUILTIN_FIELDS`) and the filter operators.
RESERVED_KEYS = frozenset(BUILTIN_FIELDS) | frozenset(LOGIC)
MAX_KEYS = 64
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 4096


def check_metadata(v: object, what: str = "metadata") -> Frozen:
    """``v`` (a dict of :data:`MetadataValue`, or None) checked and frozen.

    Raises
    ------
    TypeError
        ``v`` is not a dict, a key not a str, a value of another type (naming the key).
    InvalidInput
        An empty, reserved or over-long key, a non-finite float, an over-long string, too many keys.
    """
    if v is None:
        return ()
    if not isinstance(v, Mapping):
        raise TypeError(f"{what} must be a dict of str -> str | int | float | bool | list[str], got {type(v).__name__}")
    if len(v) > MAX_KEYS:
        raise InvalidInput(f"{what} has {len(v)} keys; at most {MAX_KEYS} are allowed")
    out = []
    for key, val in v.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be str, got {type(key).__name__} ({key!r})")
        check_text(key, f"{what} key {key!r}")
        if not key.strip() or len(key) > MAX_KEY_CHARS:
            raise InvalidInput(f"{what} key {key!r} must be a non-empty string of at most {MAX_KEY_CHARS} characters")
        if key in RESERVED_KEYS:
            raise InvalidInput(
                f"{what} key {key!r} is reserved (a built-in field or a filter operator: "
                f"{sorted(RESERVED_KEYS)}); choose another name"
            )
        out.append((key, _value(val, f"{what}[{key!r}]")))
    out.sort(key=lambda kv: kv[0])
    return tuple(out)


def _value(val: object, what: str) -> str | int | float | bool | tuple[str, ...]:
    if isinstance(val, bool):
        return val
    if isinstance(val, int):
        if not -(2**63) <= val < 2**63:
            raise InvalidInput(f"{what} = {val} is outside the 64-bit integer range")
        return val
    if isinstance(val, float):
        if not math.isfinite(val):
            raise InvalidInput(f"{what} must be finite, got {val}")
        return val
    if isinstance(val, str):
        return _string(val, what)
    if isinstance(val, (list, tuple)):
        items = []
        for i, x in enumerate(val):
            if not isinstance(x, str):
                raise TypeError(f"{what}[{i}] must be a str (lists hold strings only), got {type(x).__name__}")
            items.append(_string(x, f"{what}[{i}]"))
        return tuple(items)
    raise TypeError(f"{what} must be a str, int, float, bool or list of str, got {type(val).__name__}")


def _string(s: str, what: str) -> str:
    check_text(s, what)
    if len(s) > MAX_VALUE_CHARS:
        raise InvalidInput(f"{what} has {len(s)} characters; at most {MAX_VALUE_CHARS} are allowed")
    return s


def merge(base: Frozen, over: Frozen) -> Frozen:
    """``base`` with the keys of ``over`` set (``over`` wins on a shared key)."""
    if not base:
        return over
    if not over:
        return base
    d = dict(base)
    d.update(over)
    return tuple(sorted(d.items(), key=lambda kv: kv[0]))


def as_dict(m: Frozen) -> Metadata:
    """Frozen metadata as a new dict (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in m}
