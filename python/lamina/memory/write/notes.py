"""A-Mem notes: a note per raw turn (keywords, tags, a one-line context), links to related
earlier turns, and memory evolution of the linked notes (Xu et al., "A-Mem: Agentic Memory for
LLM Agents", 2025).

**The note** of a turn is rule-based (no LLM): its *keywords* are its content words (stop words
dropped, one per Porter stem), the names first (capitalised words inside a sentence, and the
user's known people anywhere), then the longer words, at most ``note_keywords``; its *tags* are
its domain (:mod:`lamina.text.domains`, when it has one) and its names; its *context* is one
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
with their turn (and their links with it), written anew when the turn's text is updated (its
history and the links it made go; tags it gained stay where the new text has the word), and
carried by an export (format version 2, :mod:`lamina.memory.dump.note_entries`: an imported turn has
its note, history and links; the turns of a version-1 dump are imported without notes, and gain
no links: a later turn links only to turns that have a note). **No note, revision or link row
holds text:** keywords are spans of the turn's own text, tags indices into the keywords, a
link's shared words spans of the newer turn's text, and the context line is composed when read.
So a deleted turn's words live nowhere but in its own item row, which the store wipes (SQLite
leaves copies of small rows in page free space when B-tree pages are rebalanced, even with
``secure_delete``; a note row holding the words let a deleted turn's word survive in the file).
The read path does not follow links: on LoCoMo a second hop along them lowered evidence recall
(see docs/evaluation/locomo.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ...native.lexical import STOP_WORDS
from ...text._stem import porter_stem
from ..state.memstate import UserState
from ..state.records import TURN_KEY, NsCode, Record
from ..state.tx import Tx
from ..store.notestore import LinkRow, NoteRevisionRow, NoteRow
from ..types import format_day

__all__ = ["Note", "NoteRevision", "Link", "describe", "link_new_turns", "renote", "note_of", "links_of"]

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


Span = tuple[int, int, int]  # (start, end, 1 when a name: kept as written, else lower-cased)


def _word(text: str, sp: Sequence[int]) -> str:
    """The keyword a span of a turn's text stands for."""
    w = text[sp[0] : sp[1]].replace("’", "'")
    return w if sp[2] else w.lower()


@dataclass(slots=True)
class _Draft:
    """A note being written: its keywords (words, their stems, their spans in the turn's text),
    which of them are its own tags (names) and which it gained (indices into the keywords, the
    oldest first), and when it last changed. Only spans and indices are stored (no text)."""

    keywords: list[str]
    stems: list[str]
    spans: list[Span]
    own: list[int]
    gained: list[int]
    updated_at: float | None

    def tags(self, domain: str | None) -> list[str]:
        return _tags(self.keywords, self.own, self.gained, domain)

    def row(self, item_id: int) -> NoteRow:
        return (
            item_id,
            json.dumps([list(x) for x in self.spans]),
            json.dumps({"own": self.own, "gained": self.gained}),
            self.updated_at,
        )


def _tags(keywords: Sequence[str], own: Sequence[int], gained: Sequence[int], domain: str | None) -> list[str]:
    out = ([domain] if domain else []) + [keywords[i] for i in own if i < len(keywords)]
    return out + [keywords[i] for i in gained if i < len(keywords) and keywords[i] not in out]


def _context(r: Record, keywords: Sequence[str], gained: Sequence[int]) -> str:
    """The note's line: who, when, about what (its first keywords), and what later turns shared."""
    about = ", ".join(keywords[:4]) if keywords else "small talk"
    base = f"{r.speaker or 'someone'} on {format_day(r.timestamp)}, about {about}"
    later = [keywords[i] for i in gained if i < len(keywords)]
    return f"{base}; later also: {', '.join(later)}" if later else base


def describe(text: str, people: Iterable[str], k: int) -> tuple[list[str], list[str], list[Span]]:
    """The rule-based keywords of a turn's text: (keywords, their Porter stems, their spans).

    Keywords are content words (stop words, words under three letters and numbers under four
    digits dropped), one per stem: names first — a capitalised word inside a sentence, or a word
    of ``people`` (lower-cased names the memory knows) anywhere —, then the longer words; at
    most ``k``. A span is (start, end, 1 for a name kept as written / 0 for a lower-cased word).
    """
    known = set(people)
    starts = {0} | {m.end() for m in _SENTENCE_END.finditer(text)}
    names: list[tuple[str, Span]] = []
    words: list[tuple[str, Span]] = []
    for m in _WORD.finditer(text):
        a, b = m.start(), m.end()
        w = m.group(0).replace("’", "'")
        if w.lower().endswith("'s"):
            w, b = w[:-2], b - 2
        low = w.lower()
        if len(low) < 3 or low in STOP_WORDS or low.isdigit() and len(low) < 4:
            continue
        if (w[0].isupper() and a not in starts) or low in known:
            names.append((w, (a, b, 1)))
        else:
            words.append((low, (a, b, 0)))
    lower_names = {n.lower() for n, _ in names}  # (a name said first at a sentence's start is the same name)
    words = [x for x in words if x[0] not in lower_names]
    chosen: dict[str, tuple[str, Span]] = {}
    for w, sp in names + sorted(words, key=lambda x: -len(x[0])):  # (stable: equal lengths keep text order)
        chosen.setdefault(porter_stem(w.lower()), (w, sp))
    picked = list(chosen.items())[:k]
    return [w for _, (w, _) in picked], [st for st, _ in picked], [sp for _, (_, sp) in picked]


def _people(u: UserState) -> list[str]:
    """The lower-cased words of the names the user's memory knows (:func:`describe`'s ``people``)."""
    return [w.lower() for name, _ in u.people.values() for w in name.split()]


def _draft(r: Record, people: list[str], k: int) -> _Draft:
    kw, stems, spans = describe(r.text, people, k)
    own = [i for i, sp in enumerate(spans) if sp[2] and kw[i].lower() != (r.speaker or "").lower()]
    return _Draft(kw, stems, spans, own, [], r.timestamp)


def _draft_of(row: NoteRow, text: str) -> _Draft:
    """A stored note, its words read from its turn's text."""
    _, spans_json, tags, updated = row
    spans = [(int(a), int(b), int(n)) for a, b, n in json.loads(spans_json)]
    kw = [_word(text, sp) for sp in spans]
    t = json.loads(tags)
    return _Draft(kw, [porter_stem(w.lower()) for w in kw], spans, list(t["own"]), list(t["gained"]), updated)


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
    drafts = {r.id: _draft(r, people, c.note_keywords) for r in recs}
    links, touched, revisions = _link(tx, u, recs, drafts)
    new = {r.id for r in recs}
    store = tx.store
    store.put_notes(u.user_id, [drafts[i].row(i) for i in [r.id for r in recs] + [t for t in touched if t not in new]])
    if revisions:
        store.add_note_revisions(u.user_id, revisions)
    if links:
        store.add_links(u.user_id, links)


def renote(tx: Tx, u: UserState, r: Record, old_text: str, changed_at: float) -> None:
    """A turn's text changed (:meth:`lamina.Memory.update`): its note is written anew from the
    new text. Tags it had gained stay where the new text still has the word (by stem); its
    history and the links it made on arrival go (they were about the old text, which
    :meth:`lamina.Memory.history` keeps); links later turns made to it stay."""
    st = tx.st
    row = tx.store.get_notes(u.user_id, [r.id]).get(r.id)
    if row is None:  # (a stored note is rewritten even with notes now off: its spans must fit the new text)
        return
    old = _draft_of(row, old_text)
    kept = {old.stems[i] for i in old.gained if i < len(old.stems)}
    d = _draft(r, _people(u), st.config.note_keywords)
    d.gained = [i for i, stem in enumerate(d.stems) if stem in kept and i not in d.own]
    d.updated_at = changed_at
    tx.store.forget_note_history(u.user_id, r.id)
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
        drafts[t] = _draft_of(row, st.recs[t].text)
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
            theirs = {stem: i for i, stem in enumerate(other.stems)}
            common = [i for i, stem in enumerate(mine.stems) if stem in theirs]
            if not common:
                continue
            dup = s >= c.duplicate_threshold and (st.recs[t].speaker or "") == (r.speaker or "")
            # (spans of the newer turn's text; a word the older note has as a name is shown as written)
            shared = json.dumps(
                [[*mine.spans[i][:2], max(mine.spans[i][2], other.spans[theirs[mine.stems[i]]][2])] for i in common]
            )
            rows.append((r.id, t, s, shared, "duplicate" if dup else "related", r.timestamp))
            made += 1
            gain = [theirs[mine.stems[i]] for i in common]  # (the older note's own words)
            if not dup and _strengthen(other, t, gain, r, c.note_tags, revisions):
                touched.append(t)
            if made >= c.note_links:
                break
    return rows, list(dict.fromkeys(touched)), revisions


def _strengthen(
    note: _Draft,
    item_id: int,
    shared: list[int],
    cause: Record,
    max_tags: int,
    revisions: list[NoteRevisionRow],
) -> bool:
    """Evolution of a linked note: its keywords the newcomer shares (``shared``, indices) join
    its tags; the oldest gained tags go past ``max_tags``; its earlier state kept as a revision.
    Returns whether it changed."""
    new = [i for i in dict.fromkeys(shared) if i not in note.own and i not in note.gained]
    if not new:
        return False
    before = json.dumps({"own": note.own, "gained": note.gained})
    gained = note.gained + new
    over = len(note.own) + len(gained) - max_tags
    if over > 0:
        gained = gained[min(over, len(gained)) :]
    if gained == note.gained:
        return False
    revisions.append((item_id, before, note.updated_at, cause.id))
    note.gained = gained
    note.updated_at = cause.timestamp
    return True


def note_of(r: Record, row: NoteRow | None, history: Sequence[tuple[str, float | None, int | None]]) -> Note | None:
    """The public note of a turn from its stored row and revision rows (None: no row); its words
    are read from the turn's text."""
    if row is None:
        return None
    d = _draft_of(row, r.text)

    def revision(tags: str, at: float | None, cause: int | None) -> NoteRevision:
        t = json.loads(tags)
        own, gained = list(t["own"]), list(t["gained"])
        return NoteRevision(tuple(_tags(d.keywords, own, gained, r.domain)), _context(r, d.keywords, gained), at, cause)

    return Note(
        item_id=r.id,
        keywords=tuple(d.keywords),
        tags=tuple(d.tags(r.domain)),
        context=_context(r, d.keywords, d.gained),
        updated_at=d.updated_at,
        history=tuple(revision(*h) for h in history),
    )


def links_of(item_id: int, rows: Sequence[LinkRow], text_of: Callable[[int], str | None]) -> list[Link]:
    """The public links of ``item_id`` from its stored link rows (either end), strongest first;
    ``text_of``: a turn's text (the shared words are spans of the newer turn's)."""
    out = []
    for src, dst, w, shared, kind, at in rows:
        newer = dst == item_id
        text = text_of(src)
        words = tuple(dict.fromkeys(_word(text, sp) for sp in json.loads(shared))) if text is not None else ()
        out.append(Link(item_id, int(src if newer else dst), float(w), words, kind, at, newer))
    out.sort(key=lambda x: (-x.weight, x.other_id))
    return out
