"""Reading a dump: :func:`read_dump` parses and checks the JSONL lines of
:mod:`~lamina.memory.dump.format` into a :class:`~lamina.memory.dump.entries.Dump` (a bad line
raises :class:`~lamina.memory.dump.entries.DumpError` naming the line number and the field), and
:func:`check_references` checks that a user's entries refer only to each other (what an import
of one user runs too)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from ...errors import InvalidInput
from ..inputs import MAX_TIME, MIN_TIME
from ..metadata import check_metadata
from ..state.records import COMMITMENTS, NO_TREE, ROOT
from ..types import LAYERS
from .entries import (
    FORMAT,
    KINDS,
    SESSION_STATUSES,
    STATUSES,
    TEXT_KINDS,
    VECTOR_MODES,
    VERSIONS,
    Dump,
    DumpError,
    DumpHeader,
    ItemEntry,
    RevisionEntry,
    SessionEntry,
    UserDump,
    UserEntry,
    Vec,
)
from .format import (
    _BOUNDED,
    _FLOAT_FIELDS,
    _FOOTER,
    _HEADER,
    _INT_MAX,
    _INT_MIN,
    _ITEM,
    _LINK,
    _NOTE,
    _NOTE_REVISION,
    _REVISION,
    _SECTIONS,
    _SESSION,
    _TIME_FIELDS,
    _USER,
    MAX_COUNT,
    MAX_DEPTH,
    MAX_DIM,
    Schema,
)
from .note_entries import EntryProblem, LinkEntry, NoteEntry, NoteRevisionEntry, NotesCheck, indices, spans

__all__ = ["read_dump", "check_references"]


# ---------------------------------------------------------------------------- reading
class _Line:
    """One parsed line, with its number for error messages."""

    __slots__ = ("no", "d")

    def __init__(self, no: int, d: dict[str, Any]) -> None:
        self.no = no
        self.d = d

    def fail(self, msg: str, name: str | None = None) -> DumpError:
        where = f"line {self.no}" + (f", field {name!r}" if name else "")
        return DumpError(f"{where}: {msg}")

    def fields(self, schema: Schema) -> dict[str, Any]:
        """The schema's fields of the line, type-checked (unknown fields are refused)."""
        extra = sorted(set(self.d) - set(schema) - {"type"})
        if extra:
            raise self.fail(f"unknown field(s) {', '.join(map(repr, extra))} for a {self.d['type']!r} line")
        out: dict[str, Any] = {}
        for name, (types, nullable) in schema.items():
            if name not in self.d:
                raise self.fail("missing", name)
            v: Any = self.d[name]
            if v is None:
                if not nullable:
                    raise self.fail("must not be null", name)
            elif isinstance(v, bool) or not isinstance(v, types):
                want = " or ".join(t.__name__ for t in types) + (" or null" if nullable else "")
                raise self.fail(f"expected {want}, got {type(v).__name__} {v!r:.60}", name)
            elif name in _FLOAT_FIELDS:
                try:
                    v = float(self.d[name])
                except OverflowError:  # an int beyond any float
                    v = math.inf
                if not math.isfinite(v):
                    raise self.fail(f"must be a finite number, got {self.d[name]!r:.60}", name)
                if name in _TIME_FIELDS and not MIN_TIME <= v <= MAX_TIME:
                    raise self.fail(
                        f"{self.d[name]!r:.60} is outside the years 1-9999 UTC (seconds since the epoch in "
                        f"[{MIN_TIME:.0f}, {MAX_TIME:.0f}])",
                        name,
                    )
            elif isinstance(v, int) and not _INT_MIN <= v <= _INT_MAX:
                raise self.fail(f"{v!r:.60} is outside the 64-bit integer range", name)
            out[name] = v
        return out

    def one_of(self, d: dict[str, Any], name: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        if d[name] not in allowed:
            raise self.fail(f"{d[name]!r} is not one of {', '.join(allowed)}", name)

    def non_negative(self, d: dict[str, Any], *names: str) -> None:
        for name in names:
            if d[name] is not None and d[name] < 0:
                raise self.fail(f"must be >= 0, got {d[name]}", name)

    def at_most(self, d: dict[str, Any], limit: float, *names: str) -> None:
        for name in names:
            if d[name] is not None and d[name] > limit:
                raise self.fail(f"must be <= {limit:g}, got {d[name]!r:.60}", name)

    def non_empty(self, d: dict[str, Any], *names: str) -> None:
        for name in names:
            if d[name] is not None and not d[name].strip():
                raise self.fail("must be a non-empty string", name)


def _parse(lines: Iterable[str | bytes]) -> Iterator[_Line]:
    for no, raw in enumerate(lines, 1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DumpError(f"line {no}: not UTF-8 ({e})") from None
        if not raw.strip():
            raise DumpError(f"line {no}: empty line (a dump has one JSON object per line)")
        try:
            d = json.loads(raw)
        except json.JSONDecodeError as e:
            raise DumpError(f"line {no}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(d, dict):
            raise DumpError(f"line {no}: expected a JSON object, got {type(d).__name__}")
        if "type" not in d:
            raise DumpError(f"line {no}, field 'type': missing")
        yield _Line(no, d)


def _header(ln: _Line) -> DumpHeader:
    if ln.d["type"] != "header":
        raise ln.fail(f"the first line must be the header (type 'header'), got type {ln.d['type']!r}", "type")
    d = ln.fields(_HEADER)
    if d["format"] != FORMAT:
        raise ln.fail(f"not a lamina export: {d['format']!r} (expected {FORMAT!r})", "format")
    if d["version"] not in VERSIONS:
        readable = ", ".join(map(str, VERSIONS))
        raise ln.fail(f"format version {d['version']} is not supported (this lamina reads {readable})", "version")
    ln.one_of(d, "vectors", VECTOR_MODES)
    if not 1 <= d["dim"] <= MAX_DIM:
        raise ln.fail(f"must be in 1..{MAX_DIM}, got {d['dim']}", "dim")
    return DumpHeader(**d)


def _vector(ln: _Line, text: str, dim: int) -> Vec:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ln.fail(f"not base64 ({e})", "embedding") from None
    if len(raw) != 4 * dim:
        raise ln.fail(f"{len(raw)} bytes, expected {4 * dim} ({dim} float32 values)", "embedding")
    v = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(v)):
        raise ln.fail("holds a NaN or infinite value", "embedding")
    with np.errstate(over="ignore"):
        sq = np.dot(v, v)  # (in float32, as the index computes it)
    if not np.isfinite(sq):
        raise ln.fail("its squared norm overflows float32 (values too large)", "embedding")
    return v


def _item(ln: _Line, header: DumpHeader) -> ItemEntry:
    if header.version < 3 and "metadata" not in ln.d:  # (metadata came with version 3)
        ln.d["metadata"] = {}
    d = ln.fields(_ITEM)
    try:
        d["metadata"] = check_metadata(d["metadata"], "metadata")
    except (TypeError, InvalidInput) as e:
        raise ln.fail(str(e), "metadata") from None
    ln.one_of(d, "layer", LAYERS)
    ln.one_of(d, "kind", KINDS)
    ln.one_of(d, "status", STATUSES)
    ln.one_of(d, "commitment", COMMITMENTS)
    ln.non_negative(d, "access_count", "depth", "interaction_len", "strength", "decay_mark")
    ln.at_most(d, MAX_COUNT, *_BOUNDED)
    ln.at_most(d, MAX_DEPTH, "depth")
    if d["id"] <= 0:
        raise ln.fail(f"must be a positive item id, got {d['id']}", "id")
    for name in ("sources", "members"):
        want = str if name == "sources" else int
        bad = [x for x in d[name] if isinstance(x, bool) or not isinstance(x, want)]
        if bad:
            raise ln.fail(f"expected a list of {want.__name__}, holds {bad[0]!r:.60}", name)
    big = [m for m in d["members"] if not _INT_MIN <= m <= _INT_MAX]
    if big:
        raise ln.fail(f"{big[0]!r:.60} is outside the 64-bit integer range", "members")
    d["sources"] = tuple(d["sources"])
    d["members"] = tuple(d["members"])
    if d["kind"] == "turn" and not d["session_id"]:
        raise ln.fail("a turn needs its session_id", "session_id")
    if d["kind"] in ("fact", "profile") and not d["subject"]:
        raise ln.fail(f"a {d['kind']} needs its subject", "subject")
    if d["kind"] == "fact" and not d["predicate"]:
        raise ln.fail("a fact needs its predicate", "predicate")
    if d["layer"] == "working" and d["kind"] != "turn":
        raise ln.fail(f"only turns are in the working layer, not a {d['kind']}", "layer")
    text = d.pop("embedding")
    if text is None:
        if d["kind"] not in TEXT_KINDS:
            raise ln.fail(f"a {d['kind']} must carry its vector (it is not the embedding of its text)", "embedding")
        if header.vectors == "all":
            raise ln.fail("missing: the header says the dump carries every vector", "embedding")
    return ItemEntry(**d, embedding=None if text is None else _vector(ln, text, header.dim))


def check_references(ud: UserDump, where: Mapping[int, int] | None = None) -> None:
    """Check that a user's dump is whole: item ids unique, every id an item names (``members``,
    ``parent_id``, ``superseded_by``) and every revision's item an item of the same user in the
    dump, every entry of that user, every turn's session present, every note, note revision and
    link fitting its turns (:class:`~lamina.memory.dump.note_entries.NotesCheck`). :func:`read_dump` runs
    it on each user (``where``: item id -> line, for the message; the notes' lines it has checked
    as they came, to name them); an import runs it again on a dump built by other means.

    Raises
    ------
    DumpError
    """
    _check_items(ud, where)
    _check_notes(ud)


def _check_items(ud: UserDump, where: Mapping[int, int] | None) -> None:
    """:func:`check_references` but the notes' part."""
    uid = ud.user.user_id

    def at(item_id: int, name: str) -> str:
        return f"line {where[item_id]}, field {name!r}" if where is not None else f"item {item_id}, field {name!r}"

    ids: set[int] = set()
    for it in ud.items:
        if it.id in ids:
            raise DumpError(f"{at(it.id, 'id')}: item id {it.id} appears twice")
        ids.add(it.id)
    sessions = {s.session_id for s in ud.sessions}
    entries: list[SessionEntry | RevisionEntry | NoteEntry | NoteRevisionEntry | LinkEntry] = [
        *ud.sessions,
        *ud.revisions,
        *ud.notes,
        *ud.note_revisions,
        *ud.links,
    ]
    others = [e.user_id for e in entries if e.user_id != uid]
    if others:
        raise DumpError(f"a session, revision, note or link of user {others[0]!r} in the dump of user {uid!r}")
    kinds = {it.id: it.kind for it in ud.items}
    ends = {s.session_id: s.ends for s in ud.sessions}
    for s in ud.sessions:
        if s.ends > ud.user.decays:
            raise DumpError(
                f"session {s.session_id!r}, field 'ends': {s.ends} consolidations, more than the user's "
                f"{ud.user.decays} decays (one per consolidation)"
            )
    for it in ud.items:
        if it.user_id != uid:
            raise DumpError(f"{at(it.id, 'user_id')}: {it.user_id!r} in the dump of user {uid!r}")
        for m in it.members:
            if m not in ids:
                raise DumpError(f"{at(it.id, 'members')}: item {m} is not an item of user {uid!r} in the dump")
            if m == it.id:
                raise DumpError(f"{at(it.id, 'members')}: an item cannot be its own member")
            if it.kind == "segment" and kinds[m] != "turn":
                raise DumpError(f"{at(it.id, 'members')}: item {m} is a {kinds[m]}; a segment's members are turns")
        if it.decay_mark is not None:
            level = ud.user.decays - ends.get(it.session_id or "", 0)
            if not 0 <= it.decay_mark <= level:
                raise DumpError(
                    f"{at(it.id, 'decay_mark')}: {it.decay_mark} is not a decay level of its session "
                    f"(0..{level}: the user's decays less its session's consolidations)"
                )
        for name in ("parent_id", "superseded_by"):
            ref = getattr(it, name)
            if ref is not None and (name == "superseded_by" or ref not in (ROOT, NO_TREE)) and ref not in ids:
                raise DumpError(f"{at(it.id, name)}: item {ref} is not an item of user {uid!r} in the dump")
        if it.parent_id == it.id:
            raise DumpError(f"{at(it.id, 'parent_id')}: an item cannot be its own parent")
        if it.kind == "turn" and it.session_id not in sessions:
            raise DumpError(f"{at(it.id, 'session_id')}: session {it.session_id!r} has no session entry")
        if it.superseded_by == it.id:
            raise DumpError(f"{at(it.id, 'superseded_by')}: an item cannot supersede itself")
    for name in ("parent_id", "superseded_by"):
        cycle = _cycle({it.id: getattr(it, name) for it in ud.items})
        if cycle is not None:
            path = " -> ".join(str(i) for i in cycle)
            raise DumpError(f"{at(cycle[0], name)}: the items' {name} links form a cycle ({path})")
    for rv in ud.revisions:
        if rv.item_id not in ids:
            raise DumpError(f"a revision of item {rv.item_id}, which is not an item of user {uid!r} in the dump")


E = TypeVar("E")


def _checked(check: Callable[[E], None], entry: E, what: str) -> None:
    try:
        check(entry)
    except EntryProblem as p:
        raise DumpError(f"{what}, field {p.field!r}: {p.message}") from None


def _check_notes(ud: UserDump) -> None:
    """Check a user's notes, note revisions and links against its items (:class:`NotesCheck`)."""
    check = NotesCheck(ud.user.user_id, ud.items)
    for n in ud.notes:
        _checked(check.note, n, f"the note of item {n.item_id}")
    for nr in ud.note_revisions:
        _checked(check.revision, nr, f"a note revision of item {nr.item_id}")
    for lk in ud.links:
        _checked(check.link, lk, f"the link of items {lk.src} and {lk.dst}")


def _cycle(links: Mapping[int, int | None]) -> list[int] | None:
    """A cycle of ``id -> links[id]`` (its ids, the first repeated last), or None."""
    done: set[int] = set()
    for start in links:
        if start in done:
            continue
        path: list[int] = []
        on_path: dict[int, int] = {}
        x: int | None = start
        while x is not None and x in links and x not in done:
            if x in on_path:
                loop = path[on_path[x] :]
                return [*loop, x]
            on_path[x] = len(path)
            path.append(x)
            x = links[x]
        done.update(path)
    return None


_NOTE_SECTIONS = ("note", "note_revision", "link")


def _note_line(ln: _Line, kind: str, cur: UserDump, check: NotesCheck) -> None:
    """Parse a note, note revision or link line of ``cur``'s block, check it (``check``: the
    block's, fed in stream order) and add it to the block."""
    try:
        if kind == "note":
            d = ln.fields(_NOTE)
            n = NoteEntry(**d | _tag_fields(d) | {"keywords": spans(d["keywords"], "keywords")})
            check.note(n)
            cur.notes.append(n)
        elif kind == "note_revision":
            d = ln.fields(_NOTE_REVISION)
            nr = NoteRevisionEntry(**d | _tag_fields(d))
            check.revision(nr)
            cur.note_revisions.append(nr)
        else:
            d = ln.fields(_LINK)
            lk = LinkEntry(**{**d, "shared": spans(d["shared"], "shared")})
            check.link(lk)
            cur.links.append(lk)
    except EntryProblem as p:
        raise ln.fail(p.message, p.field) from None


def _tag_fields(d: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    return {"own": indices(d["own"], "own"), "gained": indices(d["gained"], "gained")}


def read_dump(lines: Iterable[str | bytes]) -> Dump:
    """Parse and validate a whole dump (an open text or binary file, or any iterable of lines).

    Returns
    -------
    Dump

    Raises
    ------
    DumpError
        The first problem found, naming the line and the field: a line that is not a JSON
        object, a missing header or footer, an unknown or mistyped field, an out-of-range value,
        a vector of the wrong size, a duplicate user, session or item id, an entry outside its
        user's block, a reference to an item the dump does not hold, counts that disagree with
        the footer; a note, note revision or link that does not fit its turns
        (:class:`~lamina.memory.dump.note_entries.NotesCheck`), or one in a version-1 dump.
    """
    it = _parse(lines)
    first = next(it, None)
    if first is None:
        raise DumpError("line 1: the dump is empty (expected a header line)")
    header = _header(first)
    users: list[UserDump] = []
    seen_users: set[str] = set()
    where: dict[int, int] = {}  # item id -> its line (this user's), for the reference checks
    cur: UserDump | None = None
    section = 0  # (the index in _SECTIONS of the block's last line)
    notes: NotesCheck | None = None  # (the block's, made at its first note, revision or link line)
    footer: _Line | None = None
    n_items = 0

    def close(ud: UserDump | None) -> None:
        if ud is not None:
            _check_items(ud, where)  # (its note, note revision and link lines were checked as read)

    for ln in it:
        if footer is not None:
            raise ln.fail(f"a {ln.d['type']!r} line after the end line (line {footer.no})")
        kind = ln.d["type"]
        if kind == "user":
            close(cur)
            where, section, notes = {}, 0, None
            d = ln.fields(_USER)
            ln.non_empty(d, "user_id")
            ln.non_negative(d, "drift_updates", "decays", "drift_total", "drift_last")
            ln.at_most(d, MAX_COUNT, "drift_updates", "decays", "drift_total", "drift_last")
            if d["user_id"] in seen_users:
                raise ln.fail(f"user {d['user_id']!r} appears twice", "user_id")
            seen_users.add(d["user_id"])
            cur = UserDump(UserEntry(**d))
            users.append(cur)
            continue
        if kind == "end":
            d = ln.fields(_FOOTER)
            close(cur)
            if d["users"] != len(users):
                raise ln.fail(f"the end line counts {d['users']} users, the dump holds {len(users)}", "users")
            if d["items"] != n_items:
                raise ln.fail(f"the end line counts {d['items']} items, the dump holds {n_items}", "items")
            footer = ln
            continue
        if kind not in _SECTIONS:
            raise ln.fail(f"unknown line type {kind!r} (header, user, {', '.join(_SECTIONS)}, end)", "type")
        if cur is None:
            raise ln.fail(f"a {kind!r} line before any 'user' line", "type")
        uid = ln.d.get("user_id")
        if uid != cur.user.user_id:
            raise ln.fail(f"{uid!r} is not the user of this block ({cur.user.user_id!r})", "user_id")
        if _SECTIONS.index(kind) < section:
            raise ln.fail(f"{kind!r} lines come before the user's {_SECTIONS[section]!r} lines", "type")
        section = _SECTIONS.index(kind)
        if kind in _NOTE_SECTIONS:
            if header.version < 2:
                raise ln.fail(f"{kind!r} lines need format version 2 (the header says {header.version})", "type")
            notes = notes or NotesCheck(cur.user.user_id, cur.items)
            _note_line(ln, kind, cur, notes)
        elif kind == "session":
            d = ln.fields(_SESSION)
            ln.non_empty(d, "session_id")
            ln.one_of(d, "status", SESSION_STATUSES)
            ln.non_negative(d, "ends")
            ln.at_most(d, MAX_COUNT, "ends")
            if any(s.session_id == d["session_id"] for s in cur.sessions):
                raise ln.fail(f"session {d['session_id']!r} appears twice", "session_id")
            cur.sessions.append(SessionEntry(**d))
        elif kind == "item":
            item = _item(ln, header)
            if item.id in where:
                raise ln.fail(f"item id {item.id} appears twice (first on line {where[item.id]})", "id")
            if item.kind == "turn" and not any(s.session_id == item.session_id for s in cur.sessions):
                raise ln.fail(f"session {item.session_id!r} has no session line", "session_id")
            where[item.id] = ln.no
            cur.items.append(item)
            n_items += 1
        else:
            d = ln.fields(_REVISION)
            if d["item_id"] not in where:
                raise ln.fail(f"item {d['item_id']} is not an item of user {uid!r} in the dump", "item_id")
            cur.revisions.append(RevisionEntry(**d))
    if footer is None:
        raise DumpError("the dump ends without its end line: it was cut short (nothing was imported)")
    return Dump(header, users)
