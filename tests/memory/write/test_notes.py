"""lamina.memory.write.notes through the public API: A-Mem notes of turns, links to related earlier
turns, evolution of the linked notes (with history), and their life in the database (reopen,
delete, update, forget), on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lamina import InvalidInput, Link, Memory, MemoryConfig, Note, NotFoundError
from lamina.embedders import Embedder
from lamina.memory.write.notes import describe
from memkit import DAY, T0, chat, rows

# links between turns that share words (the hashing embedder's cosine is mostly shared words)
CFG = MemoryConfig(link_threshold=0.2)

LINES = [
    ("Alice", "I adopted a beagle named Max from the shelter in Portland."),
    ("Bob", "The weather was lovely this morning."),
    ("Bob", "What does Max the beagle like to eat?"),
]


def _note(m: Memory, i: int) -> Note:
    n = m.note(i)
    assert n is not None
    return n


def test_a_turn_gets_a_note_with_names_first_and_a_context_line(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        (a,) = chat(m, "u", "s1", LINES[:1], T0, "c")
        n = _note(m, a)
    assert n.item_id == a
    assert n.keywords[:2] == ("Max", "Portland")
    assert {"adopted", "beagle", "shelter"} <= set(n.keywords) and "the" not in n.keywords
    assert n.tags == ("Max", "Portland")
    assert n.context.startswith("Alice on 2023-05-08, about Max, Portland")
    assert n.updated_at == T0 and n.history == ()


def test_a_related_later_turn_links_both_ways_and_the_older_note_evolves(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, b, c = chat(m, "u", "s1", LINES, T0, "c")
        la = m.links(a)
        lc = m.links(c)
        na, nb = _note(m, a), _note(m, b)
    # the question about Max the beagle links to the adoption; small talk about the weather shares no word
    assert [(x.other_id, x.newer, x.kind) for x in la] == [(c, True, "related")]
    assert [(x.other_id, x.newer) for x in lc] == [(a, False)]
    assert la[0].weight == pytest.approx(lc[0].weight) and 0.2 <= la[0].weight <= 1.0
    assert set(la[0].shared) == {"Max", "beagle"} and la[0].created_at == T0 + 120
    assert all(isinstance(x, Link) for x in la + lc)
    assert nb.tags == () and nb.history == ()
    # evolution: the shared keyword that was not yet a tag joins the older note's tags; the
    # earlier state is kept, caused by the newer turn
    assert na.tags == ("Max", "Portland", "beagle")
    assert na.context.endswith("; later also: beagle")
    assert [(h.tags, h.cause, h.changed_at) for h in na.history] == [(("Max", "Portland"), c, T0)]
    assert na.updated_at == T0 + 120


def test_a_restatement_is_a_duplicate_link_and_changes_no_note(db: str) -> None:
    lines = [("Alice", "My beagle Max chewed my hiking boots."), ("Alice", "My beagle Max chewed my hiking boots!")]
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, b = chat(m, "u", "s1", lines, T0, "c")
        (link,) = m.links(b)
        assert link.other_id == a and link.kind == "duplicate" and link.weight >= 0.95
        assert _note(m, a).history == ()


def test_notes_and_links_survive_a_reopen_and_are_seen_by_a_second_handle(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, _, c = chat(m, "u", "s1", LINES, T0, "c")
        m.end_session(user_id="u", session_id="s1")
        before = (_note(m, a), m.links(a), _note(m, c))
        with Memory(db, embedder="hashing", config=CFG) as other:
            assert (_note(other, a), other.links(a), _note(other, c)) == before
    with Memory(db, embedder="hashing", config=CFG) as m2:
        assert (_note(m2, a), m2.links(a), _note(m2, c)) == before


def test_later_sessions_link_to_consolidated_turns(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, _, _ = chat(m, "u", "s1", LINES, T0, "c")
        m.end_session(user_id="u", session_id="s1")
        (d,) = chat(m, "u", "s2", [("Alice", "The shelter dog Max loves the Portland parks.")], T0 + DAY, "d")
        assert a in {x.other_id for x in m.links(d)}
        n = _note(m, a)
        assert n.history[-1].cause == d and n.tags[-1] == "shelter"  # (the word not yet a tag)


def test_deleting_a_turn_deletes_its_note_and_its_links(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, _, c = chat(m, "u", "s1", LINES, T0, "c")
        m.delete(c)
        assert m.links(a) == []
        with pytest.raises(NotFoundError):
            m.note(c)
    assert rows(db, "SELECT item_id FROM notes WHERE item_id=?", c) == []
    assert rows(db, "SELECT src FROM links WHERE src=? OR dst=?", c, c) == []
    assert rows(db, "SELECT item_id FROM note_revisions WHERE item_id=?", c) == []


def test_updating_a_turn_writes_its_note_anew(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        a, _, c = chat(m, "u", "s1", LINES, T0, "c")
        (d,) = chat(m, "u", "s1", [("Bob", "Is Max the beagle from the Portland shelter?")], T0 + 600, "d")
        assert {x.other_id for x in m.links(d)} >= {a}
        m.update(a, "I adopted a beagle called Luna in Seattle.", timestamp=T0 + DAY)
        n = _note(m, a)
        # the tags it gained stay where the new text still has the word (beagle), the rest go;
        # its history was about the old text (Memory.history keeps that); links to it stay
        assert n.keywords[:2] == ("Luna", "Seattle") and "Portland" not in n.keywords
        assert n.tags == ("Luna", "Seattle", "beagle") and n.history == () and n.updated_at == T0 + DAY
        assert n.context == "Alice on 2023-05-08, about Luna, Seattle, adopted, beagle; later also: beagle"
        assert {x.other_id for x in m.links(a)} >= {c, d}


def test_an_ephemeral_turn_gets_no_note_and_changes_none() -> None:
    with Memory(embedder="hashing", config=CFG) as m:
        a, _, _ = chat(m, "u", "s1", LINES, T0, "c")
        before = _note(m, a)
        msg = {
            "speaker": "Bob",
            "text": "Max the beagle from Portland has a secret shelter name.",
            "commitment": "ephemeral",
        }
        (e,) = m.add([{**msg, "timestamp": T0 + 600}], user_id="u", session_id="s1")
        assert m.note(e) is None and m.links(e) == [] and _note(m, a) == before
        (later,) = chat(m, "u", "s1", [("Bob", "Max the beagle from Portland has a shelter name.")], T0 + 900, "d")
        assert e not in {x.other_id for x in m.links(later)} and a in {x.other_id for x in m.links(later)}


def test_forgetting_a_user_leaves_no_note_or_link(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        chat(m, "u", "s1", LINES, T0, "c")
        chat(m, "v", "s1", LINES, T0, "c")
        m.delete_user(user_id="u")
    for table in ("notes", "note_revisions", "links"):
        assert rows(db, f"SELECT user_id FROM {table} WHERE user_id=?", "u") == [], table
    assert rows(db, "SELECT user_id FROM notes WHERE user_id=?", "v")


def test_users_do_not_link_to_each_other(db: str) -> None:
    with Memory(db, embedder="hashing", config=CFG) as m:
        (a,) = chat(m, "u", "s1", LINES[:1], T0, "c")
        (b,) = chat(m, "v", "s1", LINES[:1], T0, "c")
        assert m.links(a) == [] and m.links(b) == []
        with pytest.raises(NotFoundError):
            m.links(a, user_id="v")


def test_without_notes_nothing_is_noted_and_non_turns_have_none() -> None:
    with Memory(embedder="hashing", config=MemoryConfig(notes=False)) as m:
        a, _, c = chat(m, "u", "s1", LINES, T0, "c")
        assert m.note(a) is None and m.links(c) == []
    with Memory(embedder="hashing", config=CFG) as m:
        chat(m, "u", "s1", LINES, T0, "c")
        m.end_session(user_id="u", session_id="s1")
        other = [it for it in m.list_items(user_id="u", limit=None).items if it.kind != "turn"]
        assert other and all(m.note(it.id) is None and m.links(it.id) == [] for it in other)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"link_threshold": 1.5}, "link_threshold must be a cosine"),
        ({"duplicate_threshold": -2.0}, "duplicate_threshold must be a cosine"),
        ({"link_threshold": 0.9, "duplicate_threshold": 0.8}, "link_threshold must be <= duplicate_threshold"),
        ({"note_links": 0}, "note_links must be >= 1"),
        ({"note_tags": 0}, "note_tags must be >= 1"),
    ],
)
def test_bad_note_settings_are_refused(kw: dict[str, float], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        MemoryConfig(**kw)  # type: ignore[arg-type]


def test_notes_flag_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="notes must be a bool"):
        MemoryConfig(notes=1)  # type: ignore[arg-type]


def test_describe_finds_names_inside_sentences_and_known_people_anywhere() -> None:
    text = "Melanie went to Paris. Caroline loved the paintings there!"
    kw, stems, spans = describe(text, ["melanie"], 8)
    assert kw[:2] == ["Melanie", "Paris"]  # (Melanie: a known person; Paris: inside a sentence)
    assert "Caroline" not in kw and "caroline" in kw  # (a sentence's first word, nobody known)
    assert len(stems) == len(kw) == len(spans)
    for w, (a, b, name) in zip(kw, spans):  # (spans of the text: no note row holds words)
        assert (text[a:b] if name else text[a:b].lower()) == w
    assert describe("ok!", [], 8) == ([], [], [])


def _textless(v: object) -> bool:
    """Numbers, None, or JSON of numbers / lists / {"own", "gained"} objects: no words."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return False
    if isinstance(v, dict):
        return set(v) <= {"own", "gained"} and all(_textless(x) for x in v.values())
    if isinstance(v, list):
        return all(_textless(x) for x in v)
    return v is None or isinstance(v, (int, float))


def test_no_note_or_link_row_holds_text(db: str) -> None:
    """A deleted turn's words must not outlive it in the store files: the notes' rows hold spans
    and indices, never words (small rows leave copies in SQLite's page free space)."""
    with Memory(db, embedder="hashing", config=CFG) as m:
        chat(m, "u", "s1", LINES, T0, "c")
        chat(m, "u", "s2", [("Alice", "The shelter dog Max loves the Portland parks.")], T0 + DAY, "d")
    seen = 0
    for table in ("notes", "note_revisions", "links"):
        for row in rows(db, f"SELECT * FROM {table}"):
            seen += 1
            assert all(_textless(v) for k, v in row.items() if k not in ("user_id", "kind")), (table, row)
    assert seen >= 6


def test_an_update_with_notes_turned_off_rewrites_the_stored_note(tmp_path: Path) -> None:
    """Keywords are spans of the turn's text: a note written earlier must follow its text."""
    db = tmp_path / "m.db"
    with Memory(db, embedder="hashing", config=CFG) as m:
        (a,) = chat(m, "u", "s1", LINES[:1], T0, "c")
    with Memory(db, embedder="hashing", config=MemoryConfig(notes=False)) as m:
        m.update(a, "Luna the cat sleeps in Seattle all day.", timestamp=T0 + DAY)
        n = _note(m, a)
    text = "Luna the cat sleeps in Seattle all day."
    assert n.keywords[0] == "Seattle" and "luna" in n.keywords and all(w.lower() in text.lower() for w in n.keywords)


def test_the_default_thresholds_link_on_minilm(minilm_model: Embedder) -> None:
    """The defaults (``link_threshold`` 0.5, ``duplicate_threshold`` 0.95) are set for MiniLM:
    with it, a later question about the adopted beagle links to the adoption (Porter stems:
    "adoption" shares "adopted"), the same speaker's restatement is a duplicate, another
    speaker's the same words only related, and an unrelated line links to nothing."""
    lines = [
        ("Alice", "I adopted a beagle named Max from the shelter in Portland."),
        ("Bob", "The weather was lovely this morning."),
        ("Carol", "How is Max the beagle settling in after the adoption?"),
        ("Bob", "The weather was lovely this morning."),
        ("Dave", "My sister bought a new car last week."),
        ("Carol", "The weather was lovely this morning."),
    ]
    with Memory(None, embedder=minilm_model) as m:
        adopt, weather, ask, again, car, echo = chat(m, "u", "s1", lines, T0, "c")
        got = {i: [(x.other_id, x.kind, set(x.shared)) for x in m.links(i)] for i in (adopt, weather, car, echo)}
        weights = [x.weight for x in m.links(adopt)]
    assert got[adopt] == [(ask, "related", {"Max", "beagle", "adoption"})]
    assert 0.5 <= weights[0] < 0.95
    assert got[car] == []
    assert (again, "duplicate", {"weather", "lovely", "morning"}) in got[weather]
    assert {(o, k) for o, k, _ in got[echo]} == {(weather, "related"), (again, "related")}
