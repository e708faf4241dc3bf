"""A-Mem notes: a note per raw turn (keywords, tags, a one-line context), links to related
earlier turns, and memory evolution of the linked notes (Xu et al., "A-Mem: Agentic Memory for
LLM Agents", 2025).

**The note** of a turn is rule-based (no LLM): its *keywords* are its content words (stop words
dropped, one per Porter stem), the names first (capitalised words inside a sentence, and the
user's known people anywhere), then the longer words, at most ``note_keywords``; its *tags* are
its domain (:mod:`lamina.memory.domains`, when it has one) and its names; its *context* is one
line: who said it, on which day, about what (its first keywords).

**Links.** When turns are added, each is searched against the user's earlier turns — the
active episodic turns (one vector per turn of every active leaf) and the open sessions' working
turns — and linked to at most ``note_links`` of them: among its 4 × ``note_links`` nearest turns
in each of those layers, the ones with a cosine of at least ``link_threshold`` *that share a
keyword stem* (an entity, a topic word or an event word), the closest first.
A link whose cosine is at least ``duplicate_threshold`` with the same speaker is a ``duplicate``
(a restatement), the others ``related``. Links are undirected: :meth:`lamina.Memory.links`
lists them from either end.

**Evolution** (A-Mem's strengthen / merge / prune, by rule): a new note *strengthens* each
related neighbour — the keywords they share join the neighbour's tags, and its context names the
newer turn's topic; a duplicate *merges* nothing but the link (the older note stays as it was,
the link records the restatement); a neighbour with more than ``note_tags`` tags is *pruned*: the
oldest tags gained by evolution go first (its own tags, domain and names, stay). Every change of
a note keeps its earlier tags and context as a revision, with the id of the turn whose arrival
changed it (:attr:`Note.history`).

An ephemeral turn (``commitment="ephemeral"``, purged at its session's end) gets no note and
no link, so nothing of it outlives the session. The tags a turn gives its neighbours are words
those neighbours say themselves (the keywords they share), so deleting the turn deletes its
note and links and leaves no word of it behind.

Notes are derived data: they are written in the same transaction as the turns (so a crash keeps
both or neither), read from the database on request (so every process sees the same), deleted
with their turn (and their links with it), written anew when the turn's text is updated, and not
part of an export: imported turns have no notes (turns added after the import link to them only
through their own notes, so an imported turn gains no links).
The read path does not follow links: on LoCoMo a second hop along them lowered evidence recall
(see the README's "LoCoMo" section).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .._stem import porter_stem
from ..items import format_day
from ..lexical import STOP_WORDS
from .notestore import LinkRow, NoteRevisionRow, NoteRow
from .records import TURN_KEY, NsCode, Record
from .state import UserState
from .tx import Tx

__all__ = ["Note", "NoteRevision", "Link", "describe", "link_new_turns", "renote", "note_of", "links_of"]

LINK_KINDS = ("related", "duplicate")
#: Nearest turns searched per link a note may make (the keyword test then filters them).
CANDIDATES_PER_LINK = 4

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+")


@dataclass(frozen=True, slots=True)
class NoteRevision:
    """An earlier state of a note: its tags and context before ``cause``'s arrival changed them."""

    tags: tuple[str, ...]
    context: str
    changed_at: float | None
    cause: int | None  # the id of the turn whose note changed this one


@dataclass(frozen=True, slots=True)
class Note:
    """The A-Mem note of a turn.

    Attributes
    ----------
    item_id : int
        The turn's id.
    keywords : tuple of str
        Its content words, names first (at most ``MemoryConfig.note_keywords``).
    tags : tuple of str
        Its domain and names, then the keywords later notes shared with it (evolution).
    context : str
        One line: who, when, about what (and what later related turns were about).
    updated_at : float or None
        Event time of the last change (the turn's own time until a later note changes it).
    history : tuple of NoteRevision
        Earlier tags and contexts, oldest first.
    """

    item_id: int
    keywords: tuple[str, ...]
    tags: tuple[str, ...]
    context: str
    updated_at: float | None
    history: tuple[NoteRevision, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """A link between two turns' notes, seen from ``item_id``.

    Attributes
    ----------
    item_id, other_id : int
        The turn asked about and the linked turn.
    weight : float
        Cosine similarity of the two turns' vectors when the link was made.
    shared : tuple of str
        The keywords (by stem) the two notes share.
    kind : {"related", "duplicate"}
        ``duplicate``: the same speaker saying nearly the same thing again.
    created_at : float or None
        Event time of the newer turn (when the link was made).
    newer : bool
        ``other_id`` is the newer turn of the two (the link was made when it arrived).
    """

    item_id: int
    other_id: int
    weight: float
    shared: tuple[str, ...]
    kind: str
    created_at: float | None
    newer: bool


@dataclass(slots=True)
class _Draft:
    """A note being written: keywords with their stems, own tags, tags gained, the base line."""

    keywords: list[str]
    stems: list[str]
    own: list[str]
    gained: list[str]
    base: str
    updated_at: float | None

    def tags(self) -> list[str]:
        return self.own + [t for t in self.gained if t not in self.own]

    def context(self) -> str:
        if not self.gained:
            return self.base
        return f"{self.base}; later also: {', '.join(self.gained)}"

    def row(self, item_id: int) -> NoteRow:
        return (
            item_id,
            json.dumps(self.keywords),
            json.dumps({"own": self.own, "gained": self.gained, "base": self.base}),
            self.context(),
            self.updated_at,
        )


def describe(
    text: str, speaker: str | None, timestamp: float | None, domain: str | None, people: Iterable[str], k: int
) -> tuple[list[str], list[str], list[str], str]:
    """The rule-based note of a turn: (keywords, their stems, own tags, the context line).

    Parameters
    ----------
    text, speaker, timestamp, domain
        The turn's fields.
    people : iterable of str
        Lower-cased names the memory knows (its speakers): a name at a sentence's start is a
        name too.
    k : int
        Keywords kept, at most.
    """
    known = set(people)
    starts = {0} | {m.end() for m in _SENTENCE_END.finditer(text)}
    names: list[str] = []
    words: list[str] = []
    for m in _WORD.finditer(text):
        w = m.group(0).replace("’", "'")
        if w.lower().endswith("'s"):
            w = w[:-2]
        low = w.lower()
        if len(low) < 3 or low in STOP_WORDS or low.isdigit() and len(low) < 4:
            continue
        name = (w[0].isupper() and m.start() not in starts) or low in known
        (names if name else words).append(w if name else low)
    lower_names = {n.lower() for n in names}  # (a name said first at a sentence's start is the same name)
    words = [w for w in words if w not in lower_names]
    stems: dict[str, str] = {}
    for w in names + sorted(words, key=lambda x: -len(x)):  # (stable: equal lengths keep text order)
        s = porter_stem(w.lower())
        if s not in stems:
            stems[s] = w
    chosen = list(stems.items())[:k]
    keywords = [w for _, w in chosen]
    own = ([domain] if domain else []) + list(dict.fromkeys(n for n in names if n.lower() != (speaker or "").lower()))
    about = ", ".join(keywords[:4]) if keywords else "small talk"
    base = f"{speaker or 'someone'} on {format_day(timestamp)}, about {about}"
    return keywords, [s for s, _ in chosen], own, base


def _draft_of(row: NoteRow) -> _Draft:
    _, kw, tags, context, updated = row
    keywords = list(json.loads(kw))
    t = json.loads(tags)
    stems = [porter_stem(w.lower()) for w in keywords]
    return _Draft(keywords, stems, list(t["own"]), list(t["gained"]), str(t["base"]), updated)


def _people(u: UserState) -> list[str]:
    """The lower-cased words of the names the user's memory knows (:func:`describe`'s ``people``)."""
    return [w.lower() for name, _ in u.people.values() for w in name.split()]


def link_new_turns(tx: Tx, u: UserState, ids: Sequence[int]) -> None:
    """Note the turns just added (``ids``, in order), link each to its related earlier turns and
    let the linked notes evolve (module docstring); written in ``tx``'s transaction."""
    st = tx.st
    c = st.config
    if not c.notes or not ids:
        return
    # (an ephemeral turn is purged at its session's end: it leaves no note, link or tag behind)
    recs = [r for r in (st.recs[i] for i in ids) if r.commitment != "ephemeral"]
    if not recs:
        return
    people = _people(u)
    drafts: dict[int, _Draft] = {}
    for r in recs:
        kw, stems, own, base = describe(r.text, r.speaker, r.timestamp, r.domain, people, c.note_keywords)
        drafts[r.id] = _Draft(kw, stems, own, [], base, r.timestamp)
    links, touched, revisions = _link(tx, u, recs, drafts)
    old = [i for i in touched if i not in {r.id for r in recs}]
    store = tx.store
    store.put_notes(u.user_id, [drafts[i].row(i) for i in [r.id for r in recs] + old])
    if revisions:
        store.add_note_revisions(u.user_id, revisions)
    if links:
        store.add_links(u.user_id, links)


def renote(tx: Tx, u: UserState, r: Record, changed_at: float) -> None:
    """A turn's text changed (:meth:`lamina.Memory.update`): its note is written anew from the
    text (tags gained from later notes stay; its links stay as they were made), the earlier
    state kept as a revision caused by the turn itself."""
    st = tx.st
    row = tx.store.get_notes(u.user_id, [r.id]).get(r.id)
    if row is None or not st.config.notes:
        return
    d = _draft_of(row)
    kw, stems, own, base = describe(r.text, r.speaker, r.timestamp, r.domain, _people(u), st.config.note_keywords)
    tx.store.add_note_revisions(u.user_id, [(r.id, json.dumps(d.tags()), d.context(), d.updated_at, r.id)])
    d.keywords, d.stems, d.own, d.base, d.updated_at = kw, stems, own, base, changed_at
    tx.store.put_notes(u.user_id, [d.row(r.id)])


def _link(
    tx: Tx, u: UserState, recs: list[Record], drafts: dict[int, _Draft]
) -> tuple[list[LinkRow], list[int], list[NoteRevisionRow]]:
    """Links of the new turns and the evolution of the notes they reach: (link rows, ids of the
    notes changed, revision rows of the older notes changed)."""
    st = tx.st
    c = st.config
    k = CANDIDATES_PER_LINK * c.note_links
    Q = np.ascontiguousarray(st.vecs([r.id for r in recs]), dtype=np.float32)
    # (exact: the active turns are bounded by the capacities, and the working layer holds a large
    # batch only for the moment of its add — no graph is built for it; there a new turn also meets
    # itself and the rest of its batch, hence the larger k)
    views = st.vectors.search_batch(Q, [[u.ns(NsCode.TURN_VIEW)]] * len(recs), k, scan=True)
    work = st.vectors.search_batch(Q, [[u.ns(NsCode.WORKING)]] * len(recs), k + len(recs), scan=True)
    found = [v + w for v, w in zip(views, work)]
    cand: list[list[tuple[float, int]]] = []
    want: set[int] = set()
    for r, per_ns in zip(recs, found):
        best: dict[int, float] = {}
        for sc, ids in per_ns:
            for s, i in zip(sc.tolist(), ids.tolist()):
                t = int(i) & ~TURN_KEY
                o = st.recs.get(t)
                if o is None or o.kind != "turn" or t >= r.id or s < c.link_threshold or o.commitment == "ephemeral":
                    continue
                best[t] = max(best.get(t, -2.0), float(s))
        pairs = sorted(((s, t) for t, s in best.items()), key=lambda x: (-x[0], x[1]))
        cand.append(pairs)
        want.update(t for _, t in pairs if t not in drafts)
    stored = tx.store.get_notes(u.user_id, sorted(want)) if want else {}
    for t, row in stored.items():
        drafts[t] = _draft_of(row)
    rows: list[LinkRow] = []
    touched: list[int] = []
    revisions: list[NoteRevisionRow] = []
    for r, pairs in zip(recs, cand):
        mine = drafts[r.id]
        made = 0
        for s, t in pairs:
            other = drafts.get(t)
            if other is None:  # (a turn added before notes existed: no note to share words with)
                continue
            theirs = dict(zip(other.stems, other.keywords))
            # (the shared words as the older note wrote them: its name "Max" for a sentence's "max")
            shared = [
                theirs[s_] if theirs[s_][:1].isupper() else w
                for w, s_ in zip(mine.keywords, mine.stems)
                if s_ in theirs
            ]
            if not shared:
                continue
            dup = s >= c.duplicate_threshold and (st.recs[t].speaker or "") == (r.speaker or "")
            rows.append((r.id, t, s, json.dumps(shared), "duplicate" if dup else "related", r.timestamp))
            made += 1
            if not dup and _strengthen(other, t, shared, r, c.note_tags, revisions):
                touched.append(t)
            if made >= c.note_links:
                break
    return rows, list(dict.fromkeys(touched)), revisions


def _strengthen(
    note: _Draft,
    item_id: int,
    shared: list[str],
    cause: Record,
    max_tags: int,
    revisions: list[NoteRevisionRow],
) -> bool:
    """Evolution of a linked note: the shared keywords join its tags; the oldest gained tags
    go past ``max_tags``; its earlier state kept as a revision. Returns whether it changed."""
    tags = note.tags()
    have = {t.lower() for t in tags}
    new = [w for w in dict.fromkeys(shared) if w.lower() not in have]
    if not new:
        return False
    before = (json.dumps(tags), note.context(), note.updated_at)
    note.gained.extend(new)
    over = len(note.tags()) - max_tags
    if over > 0:
        note.gained = note.gained[min(over, len(note.gained)) :]
    if note.tags() == json.loads(before[0]):
        return False
    revisions.append((item_id, before[0], before[1], before[2], cause.id))
    note.updated_at = cause.timestamp
    return True


def note_of(row: NoteRow | None, history: Sequence[tuple[str, str, float | None, int | None]]) -> Note | None:
    """The public note of a stored row and its revision rows (None: no row)."""
    if row is None:
        return None
    d = _draft_of(row)
    return Note(
        item_id=int(row[0]),
        keywords=tuple(d.keywords),
        tags=tuple(d.tags()),
        context=d.context(),
        updated_at=d.updated_at,
        history=tuple(NoteRevision(tuple(json.loads(t)), ctx, at, cause) for t, ctx, at, cause in history),
    )


def links_of(item_id: int, rows: Sequence[LinkRow]) -> list[Link]:
    """The public links of ``item_id`` from its stored link rows (either end), strongest first."""
    out = []
    for src, dst, w, shared, kind, at in rows:
        newer = dst == item_id
        out.append(Link(item_id, int(src if newer else dst), float(w), tuple(json.loads(shared)), kind, at, newer))
    out.sort(key=lambda x: (-x.weight, x.other_id))
    return out
