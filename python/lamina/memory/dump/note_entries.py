"""The A-Mem notes in the export format (version 2): the entries of a user's notes, their
revisions and the links between its turns, and the checks an import runs on them.

The entries hold what the note store holds (:mod:`lamina.memory.store.notestore`), and no text: a
note's keywords are spans ``(start, end, name)`` of its turn's text (``name``: 1 for a name
kept as written, 0 for a lower-cased word), its tags indices into those keywords (``own``: its
names; ``gained``: what evolution added, the oldest first), a revision the tags a note had
before a later turn (``cause``) changed them, a link's shared words spans of its newer turn's
(``src``) text. Item ids are the exporting database's, as everywhere in a dump.

:class:`NotesCheck` checks the entries of one user, in stream order (notes, then revisions,
then links), against its items: a problem raises :class:`EntryProblem` naming the field, which
:mod:`lamina.memory.dump.format` turns into a :class:`~lamina.memory.dump.format.DumpError` naming the line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..store.notestore import LINK_KINDS

__all__ = [
    "Span",
    "MAX_COSINE",
    "NoteEntry",
    "NoteRevisionEntry",
    "LinkEntry",
    "EntryProblem",
    "NotesCheck",
    "spans",
    "indices",
]

#: A keyword: (start, end, 1 for a name kept as written / 0 for a lower-cased word) in a turn's text.
Span = tuple[int, int, int]
#: The largest link weight (a cosine) a dump may hold: 1 and float32 rounding.
MAX_COSINE = 1.001


@dataclass(frozen=True, slots=True)
class NoteEntry:
    """The note of a turn (``item_id``): keyword spans, tags as indices into them, last change."""

    user_id: str
    item_id: int
    keywords: tuple[Span, ...]
    own: tuple[int, ...]
    gained: tuple[int, ...]
    updated_at: float | None


@dataclass(frozen=True, slots=True)
class NoteRevisionEntry:
    """An earlier state of a note's tags (indices into its keywords), before the arrival of the
    turn ``cause`` changed them (None: that turn is gone); in the order they were replaced."""

    user_id: str
    item_id: int
    own: tuple[int, ...]
    gained: tuple[int, ...]
    changed_at: float | None
    cause: int | None


@dataclass(frozen=True, slots=True)
class LinkEntry:
    """A link between a newer turn (``src``) and an older one (``dst``): the cosine when it was
    made, the shared keywords as spans of the newer turn's text, ``related`` or ``duplicate``."""

    user_id: str
    src: int
    dst: int
    weight: float
    shared: tuple[Span, ...]
    kind: str
    created_at: float | None


class ItemLike(Protocol):
    """What the checks read of a dump's item (:class:`lamina.memory.dump.format.ItemEntry`)."""

    @property
    def id(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def commitment(self) -> str: ...
    @property
    def text(self) -> str: ...


class EntryProblem(ValueError):
    """A note, revision or link entry that cannot be imported (``field``: the field at fault)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def spans(value: Sequence[Any], field: str) -> tuple[Span, ...]:
    """A JSON list of ``[start, end, name]`` lists as spans (their shape checked, not their range)."""
    out: list[Span] = []
    for sp in value:
        if not (isinstance(sp, list) and len(sp) == 3 and all(type(x) is int for x in sp)):
            raise EntryProblem(field, f"expected a list of [start, end, name] integer triples, holds {sp!r:.60}")
        out.append((sp[0], sp[1], sp[2]))
    return tuple(out)


def indices(value: Sequence[Any], field: str) -> tuple[int, ...]:
    """A JSON list of integers (their range is checked against the note's keywords)."""
    bad = [x for x in value if type(x) is not int]
    if bad:
        raise EntryProblem(field, f"expected a list of int, holds {bad[0]!r:.60}")
    return tuple(value)


def _seq(value: object, field: str) -> Sequence[Any]:
    """``value`` as a list or tuple (an entry built in code may hold either), else the problem."""
    if not isinstance(value, (list, tuple)):
        raise EntryProblem(field, f"expected a list, got {type(value).__name__}")
    return value


def _check_id(value: object, field: str) -> None:
    if type(value) is not int:
        raise EntryProblem(field, f"expected an item id (int), got {value!r:.60}")


def _check_spans(sps: Iterable[Span], text: str, field: str, item_id: int) -> None:
    for sp in _seq(sps, field):
        if not (isinstance(sp, (list, tuple)) and len(sp) == 3 and all(type(x) is int for x in sp)):
            raise EntryProblem(field, f"expected [start, end, name] integer triples, holds {sp!r:.60}")
        a, b, name = sp
        if name not in (0, 1):
            raise EntryProblem(field, f"span [{a}, {b}, {name}]: its third value is 1 (a name) or 0, not {name}")
        if not 0 <= a < b <= len(text):
            raise EntryProblem(
                field, f"span [{a}, {b}, {name}] is outside the text of turn {item_id} ({len(text)} characters)"
            )


class NotesCheck:
    """The checks of a user's note, revision and link entries against its items (all of them
    known first), fed in stream order; each method raises :class:`EntryProblem`."""

    def __init__(self, user_id: str, items: Sequence[ItemLike]) -> None:
        self.user_id = user_id
        self.items: Mapping[int, ItemLike] = {it.id: it for it in items}
        self.order = {it.id: i for i, it in enumerate(items)}
        self.notes: dict[int, NoteEntry] = {}
        self.pairs: set[tuple[int, int]] = set()

    def _turn(self, item_id: int, field: str, what: str) -> ItemLike:
        _check_id(item_id, field)
        it = self.items.get(item_id)
        if it is None:
            raise EntryProblem(field, f"item {item_id} is not an item of user {self.user_id!r} in the dump")
        if it.kind != "turn":
            raise EntryProblem(field, f"item {item_id} is a {it.kind}; only turns have {what}")
        if it.commitment == "ephemeral":
            raise EntryProblem(field, f"item {item_id} is an ephemeral turn; ephemeral turns have no {what}")
        return it

    def _tags(self, own: Sequence[int], gained: Sequence[int], n_keywords: int) -> None:
        seen: set[int] = set()
        for field, ids in (("own", own), ("gained", gained)):
            for i in _seq(ids, field):
                if type(i) is not int:
                    raise EntryProblem(field, f"expected keyword indices (int), holds {i!r:.60}")
                if not 0 <= i < n_keywords:
                    raise EntryProblem(field, f"tag {i} is not a keyword index (the note has {n_keywords} keywords)")
                if i in seen:
                    raise EntryProblem(field, f"keyword {i} is a tag twice")
                seen.add(i)

    def note(self, e: NoteEntry) -> None:
        """A note: of a turn of the user (not ephemeral), once, its spans inside the turn's text,
        its tags distinct indices into its keywords."""
        it = self._turn(e.item_id, "item_id", "notes")
        if e.item_id in self.notes:
            raise EntryProblem("item_id", f"turn {e.item_id} has a note already")
        _check_spans(e.keywords, it.text, "keywords", e.item_id)
        self._tags(e.own, e.gained, len(e.keywords))
        self.notes[e.item_id] = e

    def revision(self, e: NoteRevisionEntry) -> None:
        """A note's earlier tags: of a note before it, indices into that note's keywords, caused
        by a later turn of the user (or by none: a turn deleted since)."""
        _check_id(e.item_id, "item_id")
        note = self.notes.get(e.item_id)
        if note is None:
            raise EntryProblem("item_id", f"item {e.item_id} has no note line before this one")
        self._tags(e.own, e.gained, len(note.keywords))
        if e.cause is not None:
            if e.cause == e.item_id:
                raise EntryProblem("cause", "a note cannot be changed by its own turn")
            self._turn(e.cause, "cause", "notes")
            if self.order[e.cause] < self.order[e.item_id]:
                raise EntryProblem(
                    "cause", f"turn {e.cause} comes before turn {e.item_id}: a note changes for later turns"
                )

    def link(self, e: LinkEntry) -> None:
        """A link: between two distinct turns of the user (not ephemeral), the newer (``src``)
        after the older in the dump, both with a note line before it, once per pair, its shared
        words some of the newer note's keywords (at least one)."""
        if e.src == e.dst:
            raise EntryProblem("dst", "a turn cannot be linked to itself")
        src = self._turn(e.src, "src", "links")
        self._turn(e.dst, "dst", "links")
        if self.order[e.src] < self.order[e.dst]:
            raise EntryProblem("src", f"turn {e.src} comes before turn {e.dst} in the dump; src is the newer turn")
        pair = (min(e.src, e.dst), max(e.src, e.dst))
        if pair in self.pairs:
            raise EntryProblem("dst", f"turns {e.src} and {e.dst} are linked twice")
        for end, field in ((e.src, "src"), (e.dst, "dst")):
            if end not in self.notes:
                raise EntryProblem(field, f"turn {end} has no note line before this one (only noted turns are linked)")
        w = e.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and abs(w) <= MAX_COSINE):
            raise EntryProblem("weight", f"a cosine, in -1..1; got {e.weight!r:.60}")
        if e.kind not in LINK_KINDS:
            raise EntryProblem("kind", f"{e.kind!r} is not one of {', '.join(LINK_KINDS)}")
        _check_spans(e.shared, src.text, "shared", e.src)
        own = {(a, b) for a, b, _ in self.notes[e.src].keywords}
        if not e.shared or any((a, b) not in own for a, b, _ in e.shared):
            raise EntryProblem(
                "shared", f"the shared words must be some of turn {e.src}'s note keywords (one at least)"
            )
        self.pairs.add(pair)
