"""The A-Mem notes in the export format (version 2): export -> import carries every note, its
history and the links between turns (ids remapped), on both backends; a version-1 dump still
imports (without notes); a note, note revision or link line that does not fit its turns is
refused naming its line and field, before anything is written; ephemeral turns have none; a
user's export carries only that user's notes."""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dumpkit import mapped_links, mapped_note, normalised
from lamina import Memory, MemoryConfig, Note
from lamina.memory.dump.format import FORMAT_VERSION, DumpError, dump_lines
from lamina.memory.dump.jsonl import export_jsonl, import_jsonl, iter_export
from lamina.memory.dump.reader import read_dump
from memkit import DAY, T0

# links between turns that share words (the hashing embedder's cosine is mostly shared words)
CFG = MemoryConfig(link_threshold=0.2)
FIRST = [
    ("Alice", "I adopted a beagle named Max from the shelter in Portland."),
    ("Bob", "The weather was lovely this morning."),
    ("Bob", "What does Max the beagle like to eat?"),
    ("Bob", "What does Max the beagle like to eat?"),  # (a restatement: a duplicate link)
]
LATER = [
    ("Alice", "Max the beagle loves chicken and rice."),
    ("Bob", "Did the shelter in Portland have other beagles?"),
]


def _msgs(lines: list[tuple[str, str]], t: float, **extra: Any) -> list[dict[str, Any]]:
    return [{"speaker": s, "text": x, "timestamp": t + 60 * i, **extra} for i, (s, x) in enumerate(lines)]


def _fill(m: Memory, user: str) -> list[int]:
    """A consolidated session, an open one linking back to it, an ephemeral turn, an update:
    notes, evolution history, related and duplicate links, segments (not turns)."""
    ids = m.add(_msgs(FIRST, T0), user_id=user, session_id="s1")
    m.end_session(user_id=user, session_id="s1", now=T0 + 600)
    ids += m.add(_msgs(LATER, T0 + DAY), user_id=user, session_id="s2")
    ids += m.add(
        _msgs([("Alice", "Max the beagle ate my sandwich in Portland.")], T0 + DAY + 600, commitment="ephemeral"),
        user_id=user,
        session_id="s2",
    )
    m.update(ids[1], "The weather in Portland was lovely this morning.", user_id=user, timestamp=T0 + DAY + 900)
    return ids


def _export(m: Memory, **kw: Any) -> str:
    buf = io.StringIO()
    export_jsonl(m, buf, **kw)
    return buf.getvalue()


def _causes(n: Note | None) -> list[int | None]:
    return [h.cause for h in n.history] if n is not None else []


@pytest.fixture(scope="module")
def source() -> tuple[Memory, str]:
    m = Memory(None, embedder="hashing", config=CFG)
    for user in ("ann", "bo"):
        _fill(m, user)
    return m, _export(m)


def _types(text: str) -> list[str]:
    return [json.loads(ln)["type"] for ln in text.splitlines()]


def test_the_source_has_what_the_round_trip_must_carry(source: tuple[Memory, str]) -> None:
    m, text = source
    lines = [json.loads(ln) for ln in text.splitlines()]
    assert lines[0]["version"] == FORMAT_VERSION == 3
    assert {d["kind"] for d in lines if d["type"] == "link"} == {"related", "duplicate"}
    assert any(d["cause"] is not None for d in lines if d["type"] == "note_revision")
    assert any(d["type"] == "item" and d["kind"] == "segment" for d in lines)
    # no line holds a note's words: the spans and indices only
    assert not any("beagle" in json.dumps(d) for d in lines if d["type"] in ("note", "note_revision", "link"))


def test_round_trip_gives_the_same_notes_and_links(source: tuple[Memory, str], db: str) -> None:
    a, text = source
    with Memory(db, embedder="hashing", config=CFG) as b:
        reports = import_jsonl(b, io.StringIO(text))
        ids = {old: new for r in reports for old, new in r.ids.items()}
        notes = links = history = 0
        for old, new in ids.items():
            n = a.note(old)
            assert b.note(new) == mapped_note(n, ids)
            assert b.links(new) == mapped_links(a.links(old), ids)
            notes += n is not None
            history += len(n.history) if n is not None else 0
            links += len(a.links(old))
        assert notes == 2 * 6 and history >= 2 and links >= 8  # (ephemeral turns: no note)
        # the reports count the rows written (a link has two ends, each counted above)
        assert sum(r.notes for r in reports) == notes and 2 * sum(r.links for r in reports) == links
        # what the target stores exports the same dump, ids aside (the target backend's rows)
        assert normalised(_export(b)) == normalised(_export(a))


def test_the_imported_notes_go_on_linking_and_evolving_as_the_exported_ones() -> None:
    a = Memory(None, embedder="hashing", config=CFG)
    _fill(a, "ann")
    b = Memory(None, embedder="hashing", config=CFG)
    (rep,) = import_jsonl(b, io.StringIO(_export(a)))
    ids = dict(rep.ids)
    line = _msgs([("Bob", "Max the beagle gets chicken from the shelter.")], T0 + 2 * DAY)
    (x,) = a.add(line, user_id="ann", session_id="s3")
    (y,) = b.add(line, user_id="ann", session_id="s3")
    ids[x] = y
    links = a.links(x)
    assert len(links) >= 2 and b.links(y) == mapped_links(links, ids)
    # (the older notes the new turn changed, the change caused by it: on both sides alike)
    evolved = [k.other_id for k in links if x in _causes(a.note(k.other_id))]
    assert evolved and all(b.note(ids[o]) == mapped_note(a.note(o), ids) for o in evolved)


def test_a_version_1_dump_imports_without_notes(source: tuple[Memory, str]) -> None:
    _, text = source
    lines = [json.loads(ln) for ln in text.splitlines()]
    v1 = [{**d, "version": 1} if d["type"] == "header" else d for d in lines]
    v1 = [d for d in v1 if d["type"] not in ("note", "note_revision", "link")]
    b = Memory(None, embedder="hashing", config=CFG)
    reports = import_jsonl(b, io.StringIO("".join(json.dumps(d) + "\n" for d in v1)))
    assert sum(r.items for r in reports) == sum(1 for d in lines if d["type"] == "item")
    assert all(b.note(new) is None and b.links(new) == [] for r in reports for new in r.ids.values())
    assert all(r.notes == r.links == 0 for r in reports)
    assert read_dump(io.StringIO(text)).header.version == FORMAT_VERSION
    # a version-1 dump written again (notes added in between) is written as the current version
    old = read_dump(io.StringIO("".join(json.dumps(d) + "\n" for d in v1)))
    assert old.header.version == 1
    full = read_dump(io.StringIO(text))
    again = "".join(dump_lines(old.header, full.users))
    assert read_dump(io.StringIO(again)).header.version == FORMAT_VERSION and "note" in _types(again)


# ------------------------------------------------------------------ bad lines write nothing
Lines = list[dict[str, Any]]


def _at(ls: Lines, kind: str, pred: Callable[[dict[str, Any]], bool] = lambda d: True) -> int:
    return next(i for i, d in enumerate(ls) if d["type"] == kind and pred(d))


def _item(ls: Lines, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return ls[_at(ls, "item", pred)]


def _set(line_type: str, /, **changes: Any) -> Callable[[Lines], int]:
    """Change fields of the first line of a type (a callable value: computed from the dump)."""

    def mutate(ls: Lines) -> int:
        i = _at(ls, line_type)
        ls[i].update({k: v(ls) if callable(v) else v for k, v in changes.items()})
        return i

    return mutate


def _note_twice(ls: Lines) -> int:
    i = _at(ls, "note")
    ls.insert(i + 1, dict(ls[i]))
    return i + 1


def _revision_first(ls: Lines) -> int:
    i, j = _at(ls, "note"), _at(ls, "note_revision", lambda d: d["user_id"] == "ann")
    ls.insert(i, ls.pop(j))
    return i


def _note_after_links(ls: Lines) -> int:
    revised = {d["item_id"] for d in ls if d["type"] == "note_revision"}
    i = _at(ls, "note", lambda d: d["item_id"] not in revised)
    j = max(k for k, d in enumerate(ls) if d["type"] == "link" and d["user_id"] == "ann")
    ls.insert(j, ls.pop(i))
    return j


def _second_link(ls: Lines) -> int:
    k = ls[_at(ls, "link")]
    j = max(i for i, d in enumerate(ls) if d["type"] == "link" and d["user_id"] == "ann")
    ls.insert(j + 1, dict(k))
    return j + 1


def _link_to_a_turn_without_note(ls: Lines) -> int:
    """Drop the note (and its revisions) of the first link's older turn: the first link that
    names that turn is then the line at fault."""
    t = ls[_at(ls, "link")]["dst"]
    ls[:] = [d for d in ls if not (d["type"] in ("note", "note_revision") and d["item_id"] == t)]
    return _at(ls, "link", lambda d: t in (d["src"], d["dst"]))


def _revision_caused_by_an_older_turn(ls: Lines) -> int:
    """The first revision made a revision of a later note (tags emptied: they fit any note),
    caused by the user's first noted turn."""
    noted = [d["item_id"] for d in ls if d["type"] == "note" and d["user_id"] == "ann"]
    i = _at(ls, "note_revision", lambda d: d["user_id"] == "ann")
    ls[i].update(item_id=noted[-1], own=[], gained=[], cause=noted[0])
    return i


CASES: list[tuple[str, Callable[[Lines], int], str]] = [
    ("note-missing-item", _set("note", item_id=12345), r"field 'item_id': item 12345 is not an item of user 'ann'"),
    (
        "note-of-a-segment",
        _set("note", item_id=lambda ls: _item(ls, lambda d: d["kind"] == "segment")["id"]),
        r"field 'item_id': item \d+ is a segment; only turns have notes",
    ),
    (
        "note-of-an-ephemeral-turn",
        _set("note", item_id=lambda ls: _item(ls, lambda d: d["commitment"] == "ephemeral")["id"]),
        r"field 'item_id': item \d+ is an ephemeral turn; ephemeral turns have no notes",
    ),
    ("note-twice", _note_twice, r"field 'item_id': turn \d+ has a note already"),
    (
        "span-past-the-text",
        _set("note", keywords=[[0, 10_000, 0]]),
        r"field 'keywords': span \[0, 10000, 0\] is outside",
    ),
    ("span-reversed", _set("note", keywords=[[5, 2, 0]]), r"field 'keywords': span \[5, 2, 0\] is outside the text"),
    ("span-shape", _set("note", keywords=[[0, 3]]), r"field 'keywords': expected a list of \[start, end, name\]"),
    ("span-flag", _set("note", keywords=[[0, 3, 2]]), r"field 'keywords': span \[0, 3, 2\]: its third value is 1"),
    ("tag-index", _set("note", own=[99]), r"field 'own': tag 99 is not a keyword index"),
    ("tag-twice", _set("note", own=[0], gained=[0]), r"field 'gained': keyword 0 is a tag twice"),
    ("tag-type", _set("note", gained=["beagle"]), r"field 'gained': expected a list of int, holds 'beagle'"),
    ("note-time", _set("note", updated_at=1e300), r"field 'updated_at': 1e\+300 is outside the years 1-9999"),
    ("note-field", _set("note", text="Max"), r"unknown field\(s\) 'text' for a 'note' line"),
    ("revision-before-its-note", _revision_first, r"field 'item_id': item \d+ has no note line before this one"),
    ("revision-index", _set("note_revision", gained=[40]), r"field 'gained': tag 40 is not a keyword index"),
    (
        "revision-self-cause",
        _set("note_revision", cause=lambda ls: ls[_at(ls, "note_revision")]["item_id"]),
        r"field 'cause': a note cannot be changed by its own turn",
    ),
    ("revision-cause-missing", _set("note_revision", cause=7), r"field 'cause': item 7 is not an item of user"),
    (
        "link-to-itself",
        _set("link", dst=lambda ls: ls[_at(ls, "link")]["src"]),
        r"field 'dst': a turn cannot be linked",
    ),
    ("link-missing-end", _set("link", dst=99), r"field 'dst': item 99 is not an item of user 'ann'"),
    (
        "link-to-a-segment",
        _set("link", dst=lambda ls: _item(ls, lambda d: d["kind"] == "segment")["id"]),
        r"field 'dst': item \d+ is a segment; only turns have links",
    ),
    ("link-twice", _second_link, r"field 'dst': turns \d+ and \d+ are linked twice"),
    (
        "link-to-a-turn-without-note",
        _link_to_a_turn_without_note,
        r"field '(src|dst)': turn \d+ has no note line before this one \(only noted turns are linked\)",
    ),
    ("link-shares-nothing", _set("link", shared=[]), r"field 'shared': the shared words must be some of turn \d+"),
    ("link-shares-a-non-keyword", _set("link", shared=[[0, 1, 0]]), r"field 'shared': the shared words must be some"),
    (
        "revision-caused-by-an-older-turn",
        _revision_caused_by_an_older_turn,
        r"field 'cause': turn \d+ comes before turn \d+: a note changes for later turns",
    ),
    (
        "link-older-src",
        lambda ls: _set("link", src=lambda s: s[_at(s, "link")]["dst"], dst=lambda s: s[_at(s, "link")]["src"])(ls),
        r"field 'src': turn \d+ comes before turn \d+ in the dump; src is the newer turn",
    ),
    (
        "link-span",
        _set("link", shared=[[0, 999, 1]]),
        r"field 'shared': span \[0, 999, 1\] is outside the text of turn",
    ),
    ("link-kind", _set("link", kind="cousin"), r"field 'kind': 'cousin' is not one of related, duplicate"),
    ("link-weight", _set("link", weight=5.0), r"field 'weight': a cosine, in -1..1; got 5.0"),
    ("link-time", _set("link", created_at=-1e300), r"field 'created_at': -1e\+300 is outside the years"),
    ("link-user", _set("link", user_id="bo"), r"field 'user_id': 'bo' is not the user of this block \('ann'\)"),
    ("note-after-links", _note_after_links, r"field 'type': 'note' lines come before the user's 'link' lines"),
    (
        "note-in-version-1",
        lambda ls: ls[0].update(version=1) or _at(ls, "note"),
        r"field 'type': 'note' lines need format version 2 \(the header says 1\)",
    ),
]


@pytest.fixture
def target(tmp_path: Path) -> Memory:
    """A memory with a user of its own (with notes) that a failed import must leave as it was."""
    m = Memory(tmp_path / "t.db", embedder="hashing", config=CFG)
    _fill(m, "zed")
    return m


def _state(m: Memory) -> tuple[Any, ...]:
    ids = [it.id for it in m.export_user(user_id="zed").items]
    notes = [(m.note(i), m.links(i)) for i in ids]
    return m.users(), m.stats().items, notes, _notes_rows(m)


def _notes_rows(m: Memory) -> tuple[int, ...]:
    assert m.path is not None
    with sqlite3.connect(f"file:{m.path}?mode=ro", uri=True) as c:
        return tuple(c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("notes", "note_revisions", "links"))


@pytest.mark.parametrize(("mutate", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_note_or_link_line_is_named_and_nothing_is_written(
    source: tuple[Memory, str], target: Memory, mutate: Callable[[Lines], int], message: str
) -> None:
    lines = [json.loads(ln) for ln in source[1].splitlines()]
    at = mutate(lines)
    before = _state(target)
    with pytest.raises(DumpError, match=rf"^line {at + 1}[,:] {message}"):
        import_jsonl(
            target, io.StringIO("".join(json.dumps(d) + "\n" for d in lines)), user_map={"ann": "x", "bo": "y"}
        )
    assert _state(target) == before
    target.close()


def test_a_dump_built_in_code_is_checked_before_the_write(source: tuple[Memory, str], target: Memory) -> None:
    dump = read_dump(io.StringIO(source[1]))
    ud = dump.users[0]
    n = ud.notes[0]
    bad = dataclasses.replace(ud, notes=[dataclasses.replace(n, keywords=((0, 10_000, 0),)), *ud.notes[1:]])
    before = _state(target)
    with pytest.raises(DumpError, match=rf"^the note of item {n.item_id}, field 'keywords': span \[0, 10000, 0\]"):
        target.import_user(bad, embedder=dump.header.embedder, user_id="x")
    k = ud.links[0]
    bad = dataclasses.replace(ud, links=[dataclasses.replace(k, dst=k.src), *ud.links[1:]])
    with pytest.raises(DumpError, match=rf"^the link of items {k.src} and {k.src}, field 'dst': a turn cannot be"):
        target.import_user(bad, embedder=dump.header.embedder, user_id="x")
    # malformed values of entries built in code: the same DumpError as a line's, no TypeError
    for field, bad_notes, bad_links in (
        ("keywords", [dataclasses.replace(n, keywords=((0, 3),))], ud.links),  # type: ignore[arg-type]
        ("own", [dataclasses.replace(n, own=("a",))], ud.links),  # type: ignore[arg-type]
        ("keywords", [dataclasses.replace(n, keywords=(("0", 3, 0),))], ud.links),  # type: ignore[arg-type]
        ("keywords", [dataclasses.replace(n, keywords=None)], ud.links),  # type: ignore[arg-type]
        ("weight", ud.notes, [dataclasses.replace(k, weight="0.5")]),  # type: ignore[arg-type]
        ("weight", ud.notes, [dataclasses.replace(k, weight=True)]),
        ("src", ud.notes, [dataclasses.replace(k, src=[k.src])]),  # type: ignore[arg-type]
    ):
        built = dataclasses.replace(ud, notes=[*bad_notes, *ud.notes[len(bad_notes) :]], links=bad_links)
        with pytest.raises(DumpError, match=rf"field '{field}': "):
            target.import_user(built, embedder=dump.header.embedder, user_id="x")
    stranger = dataclasses.replace(ud, links=[dataclasses.replace(k, user_id="bo")])
    with pytest.raises(DumpError, match=r"a session, revision, note or link of user 'bo' in the dump of user 'ann'"):
        target.import_user(stranger, embedder=dump.header.embedder, user_id="x")
    assert _state(target) == before
    target.close()


def test_a_failed_write_of_the_notes_rolls_the_user_back(
    source: tuple[Memory, str], target: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes are written in the user's transaction: a failure at its last write (the links)
    leaves no item, note or revision of the user."""
    from lamina.memory.store.sqlite import SQLiteStore

    def broken(self: Any, user_id: str, rows: Any) -> None:
        raise OSError("disk on fire")

    before = _state(target)
    monkeypatch.setattr(SQLiteStore, "add_links", broken)
    with pytest.raises(OSError, match="disk on fire"):
        import_jsonl(target, io.StringIO(source[1]), user_map={"ann": "x", "bo": "y"})
    monkeypatch.undo()
    assert _state(target) == before
    target.close()


# ------------------------------------------------------------------ what is (not) exported
def test_ephemeral_turns_have_no_notes_or_links_in_the_dump(source: tuple[Memory, str]) -> None:
    a, text = source
    lines = [json.loads(ln) for ln in text.splitlines()]
    eph = {d["id"] for d in lines if d["type"] == "item" and d["commitment"] == "ephemeral"}
    assert len(eph) == 2  # (one per user, in its open session)
    referenced = {d["item_id"] for d in lines if d["type"] in ("note", "note_revision")}
    referenced |= {d.get("cause") for d in lines if d["type"] == "note_revision"}
    referenced |= {x for d in lines if d["type"] == "link" for x in (d["src"], d["dst"])}
    assert not eph & referenced
    b = Memory(None, embedder="hashing", config=CFG)
    reports = import_jsonl(b, io.StringIO(text))
    for old in eph:
        new = next(r.ids[old] for r in reports if old in r.ids)
        assert b.note(new) is None and b.links(new) == [] and a.note(old) is None
    b.end_session(user_id="ann", session_id="s2")  # (purges the imported ephemeral turn)
    assert normalised(_export(b, user_ids=["bo"])) == normalised(_export(a, user_ids=["bo"]))


def test_a_users_export_carries_only_its_notes(source: tuple[Memory, str]) -> None:
    a, _ = source
    text = "".join(iter_export(a, user_ids=["bo"]))
    lines = [json.loads(ln) for ln in text.splitlines()]
    items = {d["id"] for d in lines if d["type"] == "item"}
    notes = [d for d in lines if d["type"] in ("note", "note_revision", "link")]
    assert notes and {d["user_id"] for d in notes} == {"bo"}
    assert {d.get("item_id", d.get("src")) for d in notes} <= items
    b = Memory(None, embedder="hashing", config=CFG)
    (rep,) = import_jsonl(b, io.StringIO(text))
    assert b.users() == ["bo"]
    assert all(b.note(new) == mapped_note(a.note(old), rep.ids) for old, new in rep.ids.items())


def test_a_cause_deleted_since_is_exported_as_none(tmp_path: Path) -> None:
    a = Memory(tmp_path / "a.db", embedder="hashing", config=CFG)
    first, _, cause, _ = a.add(_msgs(FIRST, T0), user_id="ann", session_id="s1")
    note = a.note(first)
    assert note is not None and [h.cause for h in note.history] == [cause]
    a.delete(cause, user_id="ann")
    b = Memory(None, embedder="hashing", config=CFG)
    (rep,) = import_jsonl(b, io.StringIO(_export(a)))
    got = b.note(rep.ids[first])
    assert got is not None and [h.cause for h in got.history] == [None]
    assert got.tags == note.tags and got.context == note.context


def test_a_stored_note_that_no_longer_fits_its_turn_is_left_out(tmp_path: Path) -> None:
    """A note whose spans run past its turn's text (a database written before notes were
    rewritten on every update) cannot be imported: the export leaves it out with its history and
    its links (a link joins two noted turns), the rest imports."""
    a = Memory(tmp_path / "a.db", embedder="hashing", config=CFG)
    first, *_ = a.add(_msgs(FIRST, T0), user_id="ann", session_id="s1")
    a.close()
    with sqlite3.connect(tmp_path / "a.db") as c:
        c.execute(
            "UPDATE notes SET keywords='[[0, 9999, 0]]', tags='{\"own\": [], \"gained\": []}' WHERE item_id=?", (first,)
        )
    a = Memory(tmp_path / "a.db", embedder="hashing", config=CFG)
    text = _export(a)
    assert _types(text).count("note") == 3 and "note_revision" not in _types(text)
    b = Memory(None, embedder="hashing", config=CFG)
    (rep,) = import_jsonl(b, io.StringIO(text))
    assert b.note(rep.ids[first]) is None
    assert a.links(first) and b.links(rep.ids[first]) == []
    turns = [it.id for it in a.list_items(user_id="ann", kinds=["turn"], limit=None).items]
    every = sum(len(a.links(t)) for t in turns) // 2  # (each link seen from both ends)
    assert _types(text).count("link") == every - len(a.links(first)) > 0
    a.close()
