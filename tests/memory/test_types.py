"""lamina.memory.types: MemoryItem.render / turn_lines / group_key, render_grouped, and Context's
render, tokens and sources."""

from __future__ import annotations

from lamina.memory.types import Context, MemoryItem, format_day, format_time, render_grouped

T0 = 1_683_550_000.0  # 2023-05-08 12:46 UTC
DAY = 86_400.0


def _ctx(items: list[MemoryItem], abstain: bool = False) -> Context:
    return Context(items=items, gates={"episodic": 1.0}, beta=5.0, abstain=abstain, query="q", budget=100)


def test_times() -> None:
    assert format_time(T0) == "2023-05-08 12:46" and format_day(T0) == "2023-05-08"
    assert format_time(None) == format_day(None) == "?"


def test_times_that_cannot_be_shown_render_as_a_marker() -> None:
    """Values outside the years 1-9999 (stored by an older version) or not finite never raise."""
    for t in (1e20, -1e14, 253_402_300_800.0, -62_135_596_801.0, float("nan"), float("inf")):
        assert format_time(t) == format_day(t) == "?", t
    assert format_day(253_402_300_799.0) == "9999-12-31"
    it = MemoryItem(id=1, text="hi", layer="working", kind="turn", speaker="A", timestamp=1e20)
    assert it.render() == "[?] A: hi" and _ctx([it]).render() == "[?]\nA: hi"


def test_render_of_each_kind() -> None:
    turn = MemoryItem(id=1, text="hello", layer="working", kind="turn", timestamp=T0, speaker="Ann")
    assert turn.render() == "[2023-05-08 12:46] Ann: hello"
    assert MemoryItem(id=1, text="hello", layer="working", kind="turn").render() == "[?] hello"
    seg = MemoryItem(
        id=2, text="x", layer="episodic", kind="segment", turns=((T0, "Ann", "one"), (T0 + 60, None, "two"))
    )
    assert seg.render() == "[2023-05-08 12:46] Ann: one\n[2023-05-08 12:47] two"
    assert (
        MemoryItem(id=3, text="s", layer="episodic", kind="summary", timestamp=T0).render() == "[summary, 2023-05-08] s"
    )
    assert MemoryItem(id=4, text="n", layer="semantic", kind="note", timestamp=T0).render() == "[note, 2023-05-08] n"
    assert (
        MemoryItem(id=5, text="Ann: lives in Paris", layer="semantic", kind="profile", timestamp=T0).render()
        == "[profile, 2023-05-08] Ann: lives in Paris"
    )
    fact = MemoryItem(
        id=6,
        text="Ann lives in Paris",
        layer="semantic",
        kind="fact",
        valid_from=T0,
        turns=((T0, "Ann", "I moved to Paris."),),
    )
    assert (
        fact.current
        and fact.render() == '[fact, since 2023-05-08] Ann lives in Paris (current) (from Ann: "I moved to Paris.")'
    )
    old = MemoryItem(
        id=7, text="Ann lives in Rome", layer="history", kind="fact", valid_from=T0 - DAY, valid_to=T0, superseded_by=6
    )
    assert not old.current and old.render() == "[fact, since 2023-05-07] Ann lives in Rome (until 2023-05)"
    verify = MemoryItem(id=8, text="Ann is a pilot", layer="semantic", kind="fact", valid_from=T0, commitment="verify")
    assert verify.render() == "[fact, verify, since 2023-05-08] Ann is a pilot (current)"


def test_turn_lines_and_group_key() -> None:
    turn = MemoryItem(id=1, text="hello", layer="episodic", kind="turn", timestamp=T0, speaker="Ann", session_id="s")
    assert turn.turn_lines() == [(T0, "Ann: hello")] and turn.group_key() == ("s", "2023-05-08")
    seg = MemoryItem(
        id=2,
        text="x",
        layer="episodic",
        kind="segment",
        session_id="s",
        timestamp=T0 + 60,
        turns=((T0, "Ann", "one"), (T0 + 60, None, "two")),
    )
    assert seg.turn_lines() == [(T0, "Ann: one"), (T0 + 60, "two")]
    src = ((T0 + DAY, "Ann", "I moved to Paris."),)
    fact = MemoryItem(id=3, text="f", layer="semantic", kind="fact", session_id="s", timestamp=T0, turns=src)
    assert fact.turn_lines() == [(T0 + DAY, "Ann: I moved to Paris. (current)")]
    assert fact.group_key() == ("s", "2023-05-09")  # a fact groups by its source turn's day
    assert MemoryItem(id=4, text="f", layer="history", kind="fact", valid_to=T0, turns=src).turn_lines() is None
    assert (
        MemoryItem(id=5, text="f", layer="semantic", kind="fact", commitment="verify", turns=src).turn_lines() is None
    )
    assert MemoryItem(id=6, text="f", layer="semantic", kind="fact").turn_lines() is None  # no source turn
    assert MemoryItem(id=7, text="s", layer="episodic", kind="summary").turn_lines() is None
    assert MemoryItem(id=8, text="x", layer="episodic", kind="segment").turn_lines() is None  # no turns


def test_render_grouped_layout() -> None:
    a = MemoryItem(
        id=1, text="second", layer="episodic", kind="turn", session_id="s1", timestamp=T0 + 60, speaker="Ann"
    )
    b = MemoryItem(id=2, text="a fact", layer="semantic", kind="fact", timestamp=T0, valid_from=T0, subject="Ann")
    c = MemoryItem(id=3, text="first", layer="episodic", kind="turn", session_id="s1", timestamp=T0, speaker="Ben")
    d = MemoryItem(
        id=4, text="other day", layer="episodic", kind="turn", session_id="s2", timestamp=T0 + DAY, speaker="Ann"
    )
    out = render_grouped([a, b, c, d]).split("\n")
    # s1's turns gathered at the place of its first item, in time order, under the earliest time
    assert out == [
        "[2023-05-08 12:46]",
        "Ben: first",
        "Ann: second",
        "[fact, since 2023-05-08] a fact (current)",
        "[2023-05-09 12:46]",
        "Ann: other day",
    ]
    assert render_grouped([]) == ""
    untimed = MemoryItem(id=5, text="when?", layer="episodic", kind="turn", session_id="s3")
    assert render_grouped([untimed]) == "[?]\nwhen?"


def test_context_render_tokens_sources() -> None:
    items = [
        MemoryItem(
            id=1,
            text="I moved to Paris last week",
            layer="episodic",
            kind="turn",
            session_id="s",
            timestamp=T0,
            speaker="Ann",
            sources=("D1:0",),
        ),
        MemoryItem(
            id=2,
            text="Ann's summary of the week",
            layer="episodic",
            kind="summary",
            timestamp=T0,
            sources=("D1:0", "D1:1"),
        ),
        MemoryItem(
            id=3,
            text="Nice!",
            layer="episodic",
            kind="turn",
            session_id="s",
            timestamp=T0 + 60,
            speaker="Bob",
            sources=("D1:1",),
        ),
    ]
    ctx = _ctx(items)
    assert ctx.render() == (
        "[2023-05-08 12:46]\nAnn: I moved to Paris last week (last week = week of 2023-05-01)\nBob: Nice!\n"
        "[summary, 2023-05-08] Ann's summary of the week"
    )
    # counted by hand: header 2 + "Ann: I moved to Paris last week" 7 + its resolved time
    # "(last week = week of 2023-05-01)" 6 + "Bob: Nice!" 2 + summary 2 + 5
    assert ctx.tokens == 24
    assert ctx.sources == {"D1:0", "D1:1"} and len(ctx) == 3
    empty = _ctx(items, abstain=True)
    assert empty.render() == "" and empty.tokens == 0 and len(empty) == 3
