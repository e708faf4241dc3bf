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
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..errors import InvalidInput
from .filters import BUILTIN_FIELDS, LOGIC
from .inputs import check_text

__all__ = [
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

#: One metadata value.
MetadataValue = str | int | float | bool | list[str]
#: Metadata as callers give it and read it back.
Metadata = dict[str, MetadataValue]
#: Metadata as a record holds it: (key, value) pairs sorted by key; a list value as a tuple.
Frozen = tuple[tuple[str, str | int | float | bool | tuple[str, ...]], ...]

#: Keys a metadata dict may not use: the built-in fields filters name
#: (:data:`lamina.memory.filters.BUILTIN_FIELDS`) and the filter operators.
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
