"""The in-memory record of one stored item, the namespace codes, and the one function that maps
(user, layer) to an arena namespace.

A :class:`Record` mirrors one row of the ``items`` table (:data:`ITEM_FIELDS`, plus the
embedding, which lives in the arenas). Records are mutable: the write path changes them in place
and tells the unit of work (:class:`lamina.memory.state.tx.Tx`) which columns changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core import _gc_untrack
from ...native.layer_index import NAMESPACE_BITS
from ...text._memo import frozen
from ..store.protocol import ITEM_COLUMNS
from ..types import LAYERS, format_day, turn_line

__all__ = [
    "StoredItem",
    "STORED_FIELDS",
    "Record",
    "NsCode",
    "namespace",
    "record_namespace",
    "ITEM_FIELDS",
    "ROOT",
    "NO_TREE",
    "TURN_KEY",
    "GENERAL_KINDS",
    "COMMITMENTS",
    "derived_commitment",
    "HEADER_TOKENS",
    "MIN_ITEM_TOKENS",
    "TokenCount",
    "norm_key",
    "unit",
    "text_key",
    "turn_tokens",
]


class NsCode(IntEnum):
    """Layer codes of arena namespaces (the low 3 bits of a namespace; the user's index above).

    The five stored layers keep :data:`lamina.memory.types.LAYERS`' codes. Two more index episodic
    leaves: ``TURN_VIEW`` holds the member turns of every active leaf one by one (keyed by the
    turn's id with :data:`TURN_KEY` set), so a leaf is found by its best-matching turn rather
    than the mean of its turns; ``LEAF`` holds the leaves themselves, apart from the episodic
    summaries, so a context's search of the episodic layer reads only the summaries (``search``
    of the episodic layer reads both).
    """

    WORKING = LAYERS["working"]
    EPISODIC = LAYERS["episodic"]
    SEMANTIC = LAYERS["semantic"]
    ARCHIVE = LAYERS["archive"]
    HISTORY = LAYERS["history"]
    TURN_VIEW = 5
    LEAF = 6


def namespace(user_idx: int, code: int) -> int:
    """The arena namespace of a user's layer: ``user_idx << 3 | code`` (the inverse is
    :func:`lamina.native.layer_index.layer_code`)."""
    return (user_idx << NAMESPACE_BITS) | code


def record_namespace(user_idx: int, r: Record) -> int:
    """Namespace of an active record's vector: its layer's (episodic leaves: ``LEAF``)."""
    code = NsCode.LEAF if r.kind == "segment" and r.layer == "episodic" else LAYERS[r.layer]
    return namespace(user_idx, code)


ROOT = 0  # parent id of the top-level nodes of a user's tree
NO_TREE = -1  # parent id of episodic items outside the tree (session summaries)
# Turn-view keys: a turn's item id with this bit set (item ids stay below 2**60).
TURN_KEY = 1 << 62
# Kinds that describe many turns at once (summaries, promoted notes, entity profiles): they
# enter a context only after the specific items (turns, facts).
GENERAL_KINDS = ("summary", "note", "profile")
# Dual-trace commitments: PERSIST (a plain memory), EPHEMERAL (purged when its session ends),
# VERIFY (surfaced with a recheck marker), CLARIFY (never injected: the agent asks instead).
COMMITMENTS = ("persist", "ephemeral", "verify", "clarify")


def derived_commitment(commitments: Iterable[str]) -> str:
    """The commitment of an item derived from turns: the most guarded of theirs (CLARIFY, then
    VERIFY; a derived item is otherwise PERSIST: EPHEMERAL turns are never consolidated)."""
    cs = set(commitments)
    return "clarify" if "clarify" in cs else "verify" if "verify" in cs else "persist"


# No item adds fewer tokens to a context than one word ("Speaker: text" under an open group
# header counts its words only); a group's "[YYYY-MM-DD HH:MM]" header costs 2 (1 when the
# time is unknown: counted as 2, never under-counted).
MIN_ITEM_TOKENS = 1
HEADER_TOKENS = 2

#: Columns of the ``items`` table a record holds (the embedding lives in the arenas).
ITEM_FIELDS = tuple(c for c in ITEM_COLUMNS if c != "embedding")


#: Tokens an item adds to a rendered context, and its group key (session, day) when it shows raw
#: turns under a shared ``[date time]`` header (None when it renders on its own).
TokenCount = tuple[int, "tuple[str | None, str] | None"]


@dataclass(eq=False)
class StoredItem:
    """The columns of one stored item that the in-memory :class:`Record` and the export entry
    (:class:`~lamina.memory.dump.entries.ItemEntry`) share, in the export format's order: every
    column of the ``items`` table (:data:`~lamina.memory.store.protocol.ITEM_COLUMNS`) but the
    embedding and the store's sequence number ``seq``. Both add their own fields.

    Its subclasses hold the fields in their own slots (``__slots__ = ()`` here: on Python 3.10 a
    slotted dataclass also re-declares its base's slots)."""

    __slots__ = ()

    user_id: str
    id: int
    layer: str
    kind: str
    status: str
    text: str
    session_id: str | None = None
    summary: str | None = None
    speaker: str | None = None
    source_id: str | None = None
    sources: tuple[str, ...] = ()
    members: tuple[int, ...] = ()
    created_at: float | None = None
    timestamp: float | None = None
    last_access: float | None = None
    access_count: int = 0
    interaction_len: float = 0.0
    strength: float = 1.0
    domain: str | None = None
    commitment: str = "persist"
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    superseded_by: int | None = None
    parent_id: int | None = None
    depth: int = 0
    decay_mark: int | None = None
    #: the caller's metadata, frozen (:data:`lamina.memory.metadata.Frozen`: sorted (key, value) pairs)
    metadata: tuple[tuple[str, Any], ...] = ()


#: The fields of :class:`StoredItem`, in its order.
STORED_FIELDS = tuple(f.name for f in fields(StoredItem))
assert set(ITEM_FIELDS) == {*STORED_FIELDS, "seq"}


@dataclass(slots=True, eq=False, kw_only=True)
class Record(StoredItem):
    """One stored item (see :class:`lamina.MemoryItem` for the public view of the same fields).

    ``nt`` and ``tk`` are read-path caches keyed by what they depend on (the token count and
    group key of :func:`lamina.memory.read.fill.item_tokens`, the normalised text of
    :func:`text_key`); they are not stored.

    Every field holds an atomic value (None, bool, int, float, str) or a tuple of them, so a
    record can never be part of a reference cycle, and it is untracked from the cyclic garbage
    collector when created (CPython's own rule for dicts and tuples of atomic values): a store
    keeps one record per turn, and a full collection visits every tracked object, so with the
    records tracked its pause grew with the store (about 0.7 µs per record here).
    """

    status: str = "active"
    seq: int
    nt: tuple[tuple[Any, ...], TokenCount] | None = None
    tk: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        _gc_untrack(self)

    def row(self, emb: npt.NDArray[np.float32]) -> dict[str, Any]:
        """The record as an ``items`` row (its embedding as float32 bytes)."""
        d = {k: getattr(self, k) for k in ITEM_FIELDS}
        d["embedding"] = np.ascontiguousarray(emb, dtype=np.float32).tobytes()
        return d


def norm_key(s: str) -> str:
    """Lower-cased, whitespace-normalised text (names, subjects, fact values)."""
    return " ".join(s.lower().split())


def unit(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (float32, contiguous)."""
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(n, 1e-12), dtype=np.float32)


def text_key(r: Record) -> str:
    """Normalised text of a turn (cached on the record, keyed by its text)."""
    hit = r.tk
    if hit is not None and hit[0] == r.text:
        return hit[1]
    k = norm_key(r.text)
    r.tk = frozen((r.text, k))
    return k


def turn_tokens(r: Record) -> TokenCount:
    """:func:`lamina.memory.read.fill.item_tokens` of a turn (cached on the record, keyed by its text,
    time and session): the words of its ``Speaker: text`` line and its (session, day) group."""
    key: tuple[Any, ...] = (r.text, r.timestamp, r.session_id)
    hit = r.nt
    if hit is not None and hit[0] == key:
        return hit[1]
    # MemoryItem.turn_lines() and group_key() of a turn, without building the item
    line = turn_line(r.speaker, r.text, r.timestamp) + (" [recheck]" if r.commitment == "verify" else "")
    val: TokenCount = (len(line.split()), (r.session_id, format_day(r.timestamp)))
    r.nt = frozen((key, val))
    return val
