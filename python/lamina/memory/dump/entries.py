"""The records of the export format: the header, a user's entries (sessions, items, revisions;
the notes' entries come from :mod:`lamina.memory.dump.note_entries`), the footer, and the error a dump
that cannot be imported raises. :mod:`lamina.memory.dump.format` reads and writes their JSONL lines
(``docs/reference/export-format.md`` is the reference)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ...errors import InvalidInput
from ..state.records import StoredItem
from .note_entries import LinkEntry, NoteEntry, NoteRevisionEntry

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "VERSIONS",
    "TEXT_KINDS",
    "KINDS",
    "STATUSES",
    "VECTOR_MODES",
    "SESSION_STATUSES",
    "Vec",
    "DumpError",
    "DumpHeader",
    "UserEntry",
    "SessionEntry",
    "ItemEntry",
    "RevisionEntry",
    "DumpFooter",
    "UserDump",
    "Dump",
]

FORMAT = "lamina-memory-export"
FORMAT_VERSION = 3
#: The versions a reader takes: 1 (no notes), 2 (notes, their revisions, links) and 3 (items'
#: metadata; an item line of an older version has none).
VERSIONS = (1, 2, 3)
#: Kinds whose vector is the embedding of the item's own text (re-embedded when absent).
TEXT_KINDS = ("turn", "fact")
KINDS = ("turn", "segment", "summary", "note", "fact", "profile")
STATUSES = ("active", "evicted")
VECTOR_MODES = ("all", "derived")
SESSION_STATUSES = ("open", "ended")

Vec = npt.NDArray[np.float32]


class DumpError(InvalidInput):
    """A dump that cannot be imported: a malformed line, a missing or wrong field, a reference
    to an item the dump does not hold, a stream cut short. The message names the line number
    (1-based) and the field; nothing was imported."""


@dataclass(frozen=True, slots=True)
class DumpHeader:
    """The first line: what wrote the dump and in which vector space.

    Attributes
    ----------
    format, version : ``"lamina-memory-export"`` and the format version (:data:`FORMAT_VERSION`)
    lamina_version : the version of lamina that wrote it
    embedder, dim : the name and dimension of the embedder whose vectors the dump carries
    vectors : ``"all"`` (every item's vector) or ``"derived"`` (only those of items that are not
        :data:`TEXT_KINDS`; turns and facts are re-embedded on import)
    created_at : when the dump was written (seconds since the epoch)
    """

    embedder: str
    dim: int
    vectors: str
    lamina_version: str
    created_at: float
    format: str = FORMAT
    version: int = FORMAT_VERSION


@dataclass(frozen=True, slots=True)
class UserEntry:
    """A user and its stored statistics (profile drift, count of α decays)."""

    user_id: str
    drift_total: float = 0.0
    drift_last: float = 0.0
    drift_updates: int = 0
    decays: int = 0


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """A session of a user: status (``open`` / ``ended``), times, how often it was consolidated."""

    user_id: str
    session_id: str
    status: str
    started_at: float | None = None
    ended_at: float | None = None
    ends: int = 0


@dataclass(slots=True, eq=False)
class ItemEntry(StoredItem):
    """One stored item: every column of the ``items`` table but the store's bookkeeping
    (``seq``, the change-log ``version``): the fields of
    :class:`~lamina.memory.state.records.StoredItem`, in their order, then the vector. ``id`` is
    the exporting database's item id; ``embedding`` is None where the dump leaves the vector out
    (:data:`TEXT_KINDS` only)."""

    embedding: Vec | None = None


@dataclass(frozen=True, slots=True)
class RevisionEntry:
    """An earlier text of an item (set by ``Memory.update``), in the order they were replaced."""

    user_id: str
    item_id: int
    text: str
    changed_at: float


@dataclass(frozen=True, slots=True)
class DumpFooter:
    """The last line: how many users and items the dump holds."""

    users: int
    items: int


@dataclass(slots=True)
class UserDump:
    """Everything stored of one user (a version-1 dump has no notes, note revisions or links)."""

    user: UserEntry
    sessions: list[SessionEntry] = field(default_factory=list)
    items: list[ItemEntry] = field(default_factory=list)
    revisions: list[RevisionEntry] = field(default_factory=list)
    notes: list[NoteEntry] = field(default_factory=list)
    note_revisions: list[NoteRevisionEntry] = field(default_factory=list)
    links: list[LinkEntry] = field(default_factory=list)


@dataclass(slots=True)
class Dump:
    """A whole dump: its header and its users, in stream order."""

    header: DumpHeader
    users: list[UserDump]
