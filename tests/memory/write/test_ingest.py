"""``add`` (lamina.memory.write.ingest): message checks, turns in working memory (a FIFO per live
session) and the archive, the overflow that hands the oldest half to consolidation."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

import lamina
from lamina import Memory, MemoryConfig
from lamina.errors import NotFoundError
from lamina.memory.write.ingest import Message, parse_messages
from memkit import FILLER, T0, active_leaves, chat, everything


@pytest.fixture
def mem() -> Memory:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=6))
    yield m
    m.close()


def test_add_returns_ids_and_archive_keeps_everything(mem: Memory) -> None:
    ids = chat(mem, "u", "s1", [("Alice", "I moved to Paris last week.")] + FILLER * 3, T0, "D1")
    assert len(ids) == 19 and len(set(ids)) == 19 and ids == sorted(ids)
    st = mem.stats(user_id="u")
    # 19 > C_w = 6: the oldest 19 - 6 + 3 = 16 turns were dequeued, 3 stay in working memory
    assert st.layers["working"] == 3 and st.layers["archive"] == 16 and st.archive_turns == 19
    assert [it.sources for it in sorted(everything(mem, "u", "working"), key=lambda it: it.id)] == [
        (f"D1:{i}",) for i in (16, 17, 18)
    ]
    hits = mem.search("moved to Paris", user_id="u", k=3, layers=["archive"])
    assert hits[0].sources == ("D1:0",) and hits[0].layer == "archive" and hits[0].kind == "turn"
    # the archive is every raw turn, live ones included
    assert len(mem.search("weather", user_id="u", k=100, layers=["archive"])) == 19
    it = mem.get(ids[0])
    assert it.text == "I moved to Paris last week." and it.speaker == "Alice" and it.timestamp == T0
    assert it.session_id == "s1" and it.user_id == "u" and it.kind == "turn" and it.commitment == "persist"


def test_working_memory_is_a_fifo_per_session(mem: Memory) -> None:
    for i in range(6):  # up to C_w: nothing leaves working memory
        mem.add(
            [{"speaker": "A", "text": f"line {i} about the garden", "id": f"a{i}"}],
            user_id="u",
            session_id="s1",
            timestamp=T0 + i,
        )
    assert mem.stats(user_id="u").layers["working"] == 6 and not active_leaves(mem)
    mem.add(
        [{"speaker": "A", "text": "line 6 about the garden", "id": "a6"}],
        user_id="u",
        session_id="s1",
        timestamp=T0 + 6,
    )
    # the 7th turn overflows: the oldest 7 - 6 + 3 = 4 are dequeued (down to half of C_w)
    working = sorted(everything(mem, "u", "working"), key=lambda it: it.id)
    assert [it.sources[0] for it in working] == ["a4", "a5", "a6"]
    assert {s for leaf in active_leaves(mem) for s in leaf.sources} == {"a0", "a1", "a2", "a3"}
    # another session of the same user has its own queue
    mem.add([{"speaker": "A", "text": "other session", "id": "b0"}], user_id="u", session_id="s2", timestamp=T0 + 7)
    assert mem.stats(user_id="u").layers["working"] == 4
    assert mem.stats(user_id="u").open_sessions == 2


def test_messages_role_content_ids_and_times(mem: Memory) -> None:
    before = time.time()
    ids = mem.add(
        [
            {"role": "user", "content": "I work as a nurse."},
            {"speaker": "Bob", "text": "no time given", "id": 42},
            {"speaker": "Bob", "text": "datetime", "timestamp": dt.datetime(2023, 5, 8, 12, 0)},
            {"speaker": "Bob", "text": "iso", "timestamp": "2023-05-08T12:00:00Z"},
            {"speaker": "Bob", "text": "seconds", "timestamp": T0, "domain": "work", "commitment": "verify"},
        ],
        user_id="u",
        session_id="s",
    )
    after = time.time()
    items = [mem.get(i) for i in ids]
    assert items[0].speaker == "user" and items[0].text == "I work as a nurse."
    assert items[0].sources == (f"t{ids[0]}",)  # default source id: t<item id>
    assert items[1].sources == ("42",)  # int ids become strings
    assert before <= items[0].timestamp <= after  # no time anywhere: the wall clock
    noon = dt.datetime(2023, 5, 8, 12, 0, tzinfo=dt.timezone.utc).timestamp()
    assert items[2].timestamp == items[3].timestamp == noon  # naive datetimes are UTC
    assert items[4].timestamp == T0 and items[4].domain == "work" and items[4].commitment == "verify"
    # the call's timestamp is the default for messages without one
    (j,) = mem.add([{"speaker": "A", "text": "later"}], user_id="u", session_id="s", timestamp="2023-05-09T00:00:00")
    assert mem.get(j).timestamp == dt.datetime(2023, 5, 9, tzinfo=dt.timezone.utc).timestamp()


def test_ephemeral_turns_serve_their_session_and_are_purged_at_its_end(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    mem = Memory(path, "hashing")
    chat(mem, "u", "s", FILLER[:2], T0, "D")
    (eph,) = mem.add(
        [{"speaker": "Alice", "text": "My pin code is 1234.", "id": "secret", "commitment": "ephemeral"}],
        user_id="u",
        session_id="s",
        timestamp=T0 + 600,
    )
    # during the session the turn is in working memory and reaches a context
    assert mem.get(eph).layer == "working"
    assert eph in [i.id for i in mem.context("what is the pin code?", user_id="u", budget=100).items]
    rep = mem.end_session(user_id="u", session_id="s")
    assert rep.segments == 2  # one leaf of the two kept turns, and the session summary
    assert rep.purged == 1
    with pytest.raises(NotFoundError):
        mem.get(eph)
    kept = [it for L in ("working", "episodic", "semantic", "archive") for it in everything(mem, "u", L)]
    assert kept and not any("secret" in it.sources or "1234" in it.text for it in kept)
    assert mem.end_session(user_id="u", session_id="s").purged == 0  # (ended: nothing to do)
    mem.close()
    # really forgotten: another handle does not see it, and the text is not in the file
    again = Memory(path, "hashing")
    with pytest.raises(NotFoundError):
        again.get(eph)
    assert all("1234" not in i.text for i in again.context("pin code", user_id="u", budget=100).items)
    again.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"pin code is 1234" not in raw


def test_an_ended_session_reopens_on_add(mem: Memory) -> None:
    chat(mem, "u", "s", FILLER[:2], T0, "D")
    mem.end_session(user_id="u", session_id="s")
    assert mem.stats(user_id="u").open_sessions == 0
    chat(mem, "u", "s", FILLER[2:4], T0 + 3600, "E")
    assert mem.stats(user_id="u").open_sessions == 1 and mem.stats(user_id="u").sessions == 1
    n_episodic = mem.stats(user_id="u").layers["episodic"]
    rep = mem.end_session(user_id="u", session_id="s")
    assert rep.segments == mem.stats(user_id="u").layers["episodic"] - n_episodic >= 2  # a leaf and a summary
    assert mem.stats(user_id="u").layers["working"] == 0


def test_parse_messages() -> None:
    msgs = parse_messages([{"role": "a", "content": "x", "id": 3, "timestamp": "2023-05-08T00:00:00"}, {"text": "y"}])
    assert msgs == [
        Message("x", "a", "3", dt.datetime(2023, 5, 8, tzinfo=dt.timezone.utc).timestamp(), None, "persist"),
        Message("y", None, None, None, None, "persist"),
    ]
    with pytest.raises(lamina.InvalidInput, match=r"messages\[1\] has empty text"):
        parse_messages([{"text": "x"}, {"text": " \n"}])
    with pytest.raises(lamina.InvalidInput, match="empty"):
        parse_messages([])
    with pytest.raises(TypeError, match=r"messages\[0\] must be a dict"):
        parse_messages(["x"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        parse_messages({"text": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="domain"):
        parse_messages([{"text": "x", "domain": 1}])
    with pytest.raises(TypeError, match="id"):
        parse_messages([{"text": "x", "id": True}])


@pytest.mark.parametrize("field", ["text", "content", "speaker", "role", "id", "domain"])
def test_parse_messages_refuses_text_not_encodable_as_utf8(field: str) -> None:
    name = {"content": "text", "role": "speaker"}.get(field, field)
    msg = {"text": "fine", "speaker": "A", field: "bad \ud800 text"}
    if field == "content":
        del msg["text"]
    if field == "role":
        del msg["speaker"]
    with pytest.raises(lamina.InvalidInput, match=rf"messages\[1\]\['{name}'\] is not valid Unicode text"):
        parse_messages([{"text": "ok"}, msg])


def test_add_refuses_times_the_render_cannot_show(mem: Memory) -> None:
    ok = [{"speaker": "A", "text": "hello"}]
    for kw, msgs, name in (
        ({"timestamp": 1e20}, ok, "timestamp"),
        ({"timestamp": -1e14}, ok, "timestamp"),
        ({}, [{"text": "x", "timestamp": "10000-01-01"}], "ISO-8601"),
        ({}, [{"text": "x"}, {"text": "y", "timestamp": 1e20}], r"messages\[1\]\['timestamp'\]"),
    ):
        with pytest.raises(lamina.InvalidInput, match=name):
            mem.add(msgs, user_id="u", session_id="s", **kw)  # type: ignore[arg-type]
    assert mem.users() == []
