"""The export format of a memory: the JSONL lines of users' stored state, written from the typed
entries of :mod:`lamina.memory.dump.entries` (re-exported here) by :func:`dump_lines`, read back
by :mod:`lamina.memory.dump.reader`.

A dump is a stream of JSON objects, one per line (``docs/reference/export-format.md`` is the reference):

* a :class:`DumpHeader` first (format name, version, lamina version, the embedder that made
  the vectors, its dimension, which vectors the dump carries);
* per user: one :class:`UserEntry`, then its :class:`SessionEntry` lines, its
  :class:`ItemEntry` lines (every stored item of every layer and status, in creation order)
  and its :class:`RevisionEntry` lines (earlier texts of updated items), then (version 2) the
  A-Mem notes of its turns: :class:`~lamina.memory.dump.note_entries.NoteEntry`,
  :class:`~lamina.memory.dump.note_entries.NoteRevisionEntry` and
  :class:`~lamina.memory.dump.note_entries.LinkEntry` lines;
* a :class:`DumpFooter` last (counts: a stream cut short is refused).

Item ids in a dump are the exporting database's; they only link the lines of one user
(``members``, ``parent_id``, ``superseded_by``, a revision's ``item_id``, a note's or note
revision's ``item_id`` and ``cause``, a link's ``src`` and ``dst``). An import allocates fresh
ids and remaps these references (:mod:`lamina.memory.dump.user_transfer`). Writing always writes
:data:`FORMAT_VERSION`; reading takes every version of :data:`VERSIONS` (a version-1 dump
holds no notes).

Vectors: the items whose vector is the embedding of their own text (:data:`TEXT_KINDS`: turns
and facts) carry one only with ``vectors="all"``; every other item (segments, summaries, notes,
profiles: their vectors are centroids, blends and damped updates the loop computed) always
carries its vector, since it cannot be computed from the text again. Vectors are little-endian
float32, base64-encoded.

:func:`~lamina.memory.dump.reader.read_dump` parses and validates a whole stream before anything
is imported: a bad line raises :class:`DumpError` naming the line number and the field.
"""

from __future__ import annotations

import base64
import json
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ...errors import InvalidInput
from ..metadata import as_dict
from .entries import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    STATUSES,
    TEXT_KINDS,
    VERSIONS,
    Dump,
    DumpError,
    DumpFooter,
    DumpHeader,
    ItemEntry,
    RevisionEntry,
    SessionEntry,
    UserDump,
    UserEntry,
    Vec,
)
from .note_entries import LinkEntry, NoteEntry, NoteRevisionEntry

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "VERSIONS",
    "TEXT_KINDS",
    "KINDS",
    "STATUSES",
    "DumpError",
    "DumpHeader",
    "UserEntry",
    "SessionEntry",
    "ItemEntry",
    "RevisionEntry",
    "NoteEntry",
    "NoteRevisionEntry",
    "LinkEntry",
    "DumpFooter",
    "UserDump",
    "Dump",
    "dump_lines",
]

# ---------------------------------------------------------------------------- field schemas
# name -> (accepted JSON types, nullable). bool is checked apart (it is an int in Python).
Schema = dict[str, tuple[tuple[type, ...], bool]]
_STR: tuple[type, ...] = (str,)
_INT: tuple[type, ...] = (int,)
_NUM: tuple[type, ...] = (int, float)


def _schema_of(entry: type, **json_types: tuple[type, ...]) -> Schema:
    """The schema of an entry dataclass's fields, in its order, from their types (``X | None``:
    nullable; a tuple: a JSON list); ``json_types`` for fields stored in another JSON type."""
    out: Schema = {}
    for name, t in typing.get_type_hints(entry).items():
        args = [a for a in typing.get_args(t) if a is not type(None)]
        nullable = typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) < len(typing.get_args(t))
        base = args[0] if nullable else t
        if name in json_types:
            out[name] = (json_types[name], nullable)
        elif typing.get_origin(base) is tuple:
            out[name] = ((list,), nullable)
        else:
            out[name] = ({str: _STR, int: _INT, float: _NUM}[base], nullable)
    return out


#: An item line: the fields of :class:`ItemEntry` (the embedding as base64 text).
_ITEM: Schema = _schema_of(ItemEntry, embedding=_STR, metadata=(dict,))
#: The other lines: the fields of their entries, in their order.
_USER: Schema = _schema_of(UserEntry)
_SESSION: Schema = _schema_of(SessionEntry)
_REVISION: Schema = _schema_of(RevisionEntry)
_NOTE: Schema = _schema_of(NoteEntry)
_NOTE_REVISION: Schema = _schema_of(NoteRevisionEntry)
_LINK: Schema = _schema_of(LinkEntry)
#: The lines of a user's block, in the order they come (a version-1 dump has the first three).
_SECTIONS = ("session", "item", "revision", "note", "note_revision", "link")
#: The header line, in the order it is written (which is not :class:`DumpHeader`'s).
_HEADER: Schema = {
    "format": (_STR, False),
    "version": (_INT, False),
    "lamina_version": (_STR, False),
    "embedder": (_STR, False),
    "dim": (_INT, False),
    "vectors": (_STR, False),
    "created_at": (_NUM, False),
}
_FOOTER: Schema = _schema_of(DumpFooter)
_FLOAT_FIELDS = {
    k
    for s in (_USER, _SESSION, _ITEM, _REVISION, _HEADER, _NOTE, _NOTE_REVISION, _LINK)
    for k, (t, _) in s.items()
    if t is _NUM
}
#: Event times: in the years 1-9999 UTC, as the API takes them (:func:`lamina.memory.inputs.to_time`).
_TIME_FIELDS = frozenset(
    {
        "created_at",
        "timestamp",
        "last_access",
        "valid_from",
        "valid_to",
        "started_at",
        "ended_at",
        "changed_at",
        "updated_at",
    }
)
#: The largest count (accesses, consolidations, decays), interaction length, strength or drift
#: a dump may hold: far above what a memory reaches, low enough that scores stay finite.
MAX_COUNT = 10**15
#: The deepest tree node a dump may hold.
MAX_DEPTH = 10_000
#: The largest vector dimension a dump may name.
MAX_DIM = 1 << 16
#: Bounds of every integer field: SQLite's 64-bit integers.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_BOUNDED = ("access_count", "interaction_len", "strength", "decay_mark")


# ---------------------------------------------------------------------------- writing
def _vec_text(v: Vec) -> str:
    return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")


def _line(kind: str, d: dict[str, Any]) -> str:
    try:
        return json.dumps({"type": kind, **d}, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as e:  # NaN or infinity in a float field
        raise InvalidInput(f"cannot export a {kind} entry of user {d.get('user_id')!r}: {e}") from e


def _item_dict(it: ItemEntry) -> dict[str, Any]:
    d = {k: getattr(it, k) for k in _ITEM if k != "embedding"}
    d["sources"] = list(it.sources)
    d["members"] = list(it.members)
    d["metadata"] = as_dict(it.metadata)
    d["embedding"] = None if it.embedding is None else _vec_text(it.embedding)
    return d


def dump_lines(header: DumpHeader, users: Iterable[UserDump]) -> Iterator[str]:
    """The JSONL lines of a dump (each ending in ``\\n``): the header, each user's entries, the
    footer. ``users`` is consumed lazily, one user at a time. The header says
    :data:`FORMAT_VERSION` whatever ``header.version`` says (a version-1 dump read and written
    again is a version-2 dump: its users may have gained notes in between)."""
    yield _line("header", {k: getattr(header, k) for k in _HEADER} | {"version": FORMAT_VERSION})
    n_users = n_items = 0
    for ud in users:
        n_users += 1
        yield _line("user", {k: getattr(ud.user, k) for k in _USER})
        for s in ud.sessions:
            yield _line("session", {k: getattr(s, k) for k in _SESSION})
        for it in ud.items:
            n_items += 1
            yield _line("item", _item_dict(it))
        for rv in ud.revisions:
            yield _line("revision", {k: getattr(rv, k) for k in _REVISION})
        for n in ud.notes:
            yield _line("note", {k: getattr(n, k) for k in _NOTE})
        for nr in ud.note_revisions:
            yield _line("note_revision", {k: getattr(nr, k) for k in _NOTE_REVISION})
        for lk in ud.links:
            yield _line("link", {k: getattr(lk, k) for k in _LINK})
    yield _line("end", {"users": n_users, "items": n_items})
