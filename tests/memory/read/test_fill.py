"""The read path's choice (lamina.memory.read.fill): the layer gate, the budget fill (specific items
before aggregates, duplicates dropped), token accounting of the grouped rendering, and the order
against lost-in-the-middle."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamina import Memory, MemoryConfig, MemoryItem
from lamina.memory.read.fill import gate, item_tokens, lost_in_the_middle
from lamina.memory.state.memstate import MemoryState, UserState
from lamina.memory.state.records import Record
from memkit import CHAT_WORDS, DAY, FILLER, KITTEN_CHAT, T0, chat, day_session, random_turns, words


def expected_tokens(items: Sequence[MemoryItem]) -> int:
    """Words of a context counted from its items, not from its rendering: each (session, day)
    group of raw turns pays a ``[YYYY-MM-DD HH:MM]`` header (2 words) once, plus its
    ``Speaker: text`` lines; every other item its own rendering."""
    groups: set[object] = set()
    n = 0
    for it in items:
        lines = it.turn_lines()
        if lines is None:
            n += words(it.render())
            continue
        if it.group_key() not in groups:
            groups.add(it.group_key())
            n += 2
        n += sum(words(ln) for _, ln in lines)
    return n


def test_context_budget_gates_render_and_bumps() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=6))
    chat(m, "u", "s1", [("Alice", "My dog is called Max and he loves the beach.")] + FILLER * 2, T0, "D1")
    m.end_session(user_id="u", session_id="s1")
    q = "What is the name of Alice's dog?"
    shown: Counter[int] = Counter()
    for budget in (5, 40, 400):
        ctx = m.context(q, user_id="u", budget=budget, now=T0 + DAY)
        shown.update(it.id for it in ctx.items)
        assert ctx.budget == budget and ctx.query == q
        assert ctx.tokens == words(ctx.render()) == expected_tokens(ctx.items) <= budget
    assert set(ctx.gates) == {"episodic", "semantic"}  # working memory is empty after the session
    assert math.isclose(sum(ctx.gates.values()), 1.0, rel_tol=1e-5)
    assert "Max" in ctx.render() and "2023-05-08" in ctx.render()
    assert "D1:0" in ctx.sources and ctx.sources == {s for it in ctx.items for s in it.sources}
    # lost-in-the-middle order: best first, second best last
    wide = m.context("weather football bakery croissants mystery novel author", user_id="u", budget=400, now=T0 + DAY)
    shown.update(it.id for it in wide.items)
    scores = [it.score for it in wide.items]
    assert len(scores) >= 3 and scores[0] == max(scores) and scores[-1] == sorted(scores)[-2]
    # returned items were bumped, once per context that showed them
    for i, n in shown.items():
        assert m.get(i).access_count == n and m.get(i).last_access == T0 + DAY
    # no duplicate raw sources among raw items
    raw = [s for it in wide.items if it.kind in ("turn", "segment") for s in it.sources]
    assert len(raw) == len(set(raw))
    m.close()


@pytest.fixture(scope="module")
def shared_memory() -> Memory:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=6))
    rng = random.Random(0)
    for s in range(20):
        day_session(m, s, random_turns(rng, 12))
    m.add(
        [{"speaker": "Ann", "text": "I moved to Lisbon last week.", "timestamp": T0 + 40 * DAY}],
        user_id="u",
        session_id="live",
    )
    yield m
    m.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(budget=st.integers(1, 400), seed=st.integers(0, 10_000))
def test_grouped_render_never_exceeds_the_budget(shared_memory: Memory, budget: int, seed: int) -> None:
    rng = random.Random(seed)
    q = " ".join(rng.choice(CHAT_WORDS) for _ in range(3))
    ctx = shared_memory.context(q, user_id="u", budget=budget, now=T0 + 60 * DAY)
    text = ctx.render()
    assert ctx.tokens == words(text) == expected_tokens(ctx.items) <= budget
    for it in ctx.items:  # every raw turn shown is in the text verbatim
        if it.kind in ("turn", "segment"):
            for _, sp, tx in it.turns or ((it.timestamp, it.speaker, it.text),):
                assert f"{sp}: {tx}" in text


def test_short_items_fill_the_budget() -> None:
    """One-word turns ("A: word", 2 tokens each under a shared header, mostly repeats): the
    distinct ones are taken once each, and summaries fill what is left."""
    m = Memory(embedder="hashing", config=MemoryConfig(layers=("working", "episodic"), min_similarity=-1.0))
    rng = random.Random(1)
    said = set()
    for s in range(30):
        msgs = [
            {"speaker": "A", "text": rng.choice(CHAT_WORDS), "id": f"{s}:{i}", "timestamp": T0 + s * DAY + i}
            for i in range(10)
        ]
        said.update(x["text"] for x in msgs)
        m.add(msgs, user_id="u", session_id=f"s{s}")
        m.end_session(user_id="u", session_id=f"s{s}")
    ctx = m.context("coffee", user_id="u", budget=256, now=T0 + 99 * DAY)
    lines = [ln for ln in ctx.render().split("\n") if ln.startswith("A: ")]
    assert "A: coffee" in lines and len(lines) == len(set(lines)) and set(lines) <= {f"A: {w}" for w in said}
    assert sum(1 for it in ctx.items if it.kind == "summary") >= 1
    assert 256 * 3 // 4 < ctx.tokens <= 256
    m.close()


def test_aggregates_only_after_specific_items() -> None:
    """Summaries fill only what the turns above the floor leave: with room for one item, it is
    the best turn, although long summaries can score higher."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working", "episodic")))
    for s in range(1, 4):
        day_session(m, s, KITTEN_CHAT)
    for query in ("who adopted the grey kitten", "weather football bakery novel author", "mystery novel"):
        ctx = m.context(query, user_id="u", budget=14, now=T0 + 9 * DAY)
        best_turn = max(h.score for h in m.search(query, user_id="u", k=50, layers=["archive"]))
        assert [it.kind for it in ctx.items] == ["turn"] and abs(ctx.items[0].score - best_turn) < 1e-5
        big = m.context(query, user_id="u", budget=10_000, now=T0 + 9 * DAY)
        kinds = [it.kind for it in sorted(big.items, key=lambda it: -it.score)]
        assert "summary" in kinds  # with room left, aggregates do come in
    m.close()


def test_repeated_turn_text_shown_once() -> None:
    """A turn repeating the words of a turn already in the context is skipped (budget goes to new text)."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working", "episodic")))
    for s in range(1, 4):
        day_session(m, s, [("Alice", "Work has been hectic lately.")] + KITTEN_CHAT)
    ctx = m.context("how has work been", user_id="u", budget=60, now=T0 + 9 * DAY)
    texts = [it.text for it in ctx.items if it.kind == "turn"]
    assert texts.count("Work has been hectic lately.") == 1
    assert len(texts) == len(set(texts)) and len(ctx.items) >= 2  # the budget went to other items
    m.close()


def test_token_count_follows_an_updated_source_turn() -> None:
    """A current fact renders its source turn: after update() of that turn the fill counts the
    new text (the cached count was keyed on the fact alone), so the budget still holds."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=2, min_segment_turns=1, max_segment_turns=1))
    (d1,) = m.add(
        [{"speaker": "Ann", "text": "My dog is called Max.", "id": "d1", "timestamp": T0}], user_id="u", session_id="s1"
    )
    m.add(
        [{"speaker": "Ann", "text": "I work as a nurse.", "id": "d2", "timestamp": T0 + 60}],
        user_id="u",
        session_id="s1",
    )
    m.end_session(user_id="u", session_id="s1")
    fact = next(f for f in m.facts(user_id="u") if f.sources == ("d1",))
    m.context("what is Ann's dog called", user_id="u", budget=64)  # caches the fact's token count
    long = "My dog is called Max " + " ".join(f"word{i}" for i in range(30))
    m.update(d1, long)
    assert m.get(fact.id).turns[-1][2] == long  # the fact now renders the new text
    for budget in (8, 16, 32, 40, 64):
        ctx = m.context("what is Ann's dog called", user_id="u", budget=budget)
        assert ctx.tokens == words(ctx.render()) == expected_tokens(ctx.items) <= budget
    m.close()


def test_item_tokens_of_a_fact_follow_its_source_turn() -> None:
    st = MemoryState(MemoryConfig(), 4)
    u = UserState("u", 1)
    st.users["u"] = u
    turn = Record(
        id=1,
        user_id="u",
        layer="archive",
        kind="turn",
        text="My dog is called Max.",
        seq=1,
        speaker="Ann",
        session_id="s",
        source_id="d1",
        sources=("d1",),
        timestamp=T0,
    )
    fact = Record(
        id=2,
        user_id="u",
        layer="semantic",
        kind="fact",
        text="Ann's dog is called Max",
        seq=2,
        subject="Ann",
        predicate="dog_name",
        object="Max",
        sources=("d1",),
        session_id="s",
        timestamp=T0,
        valid_from=T0,
    )
    for r in (turn, fact):
        st.recs[r.id] = r
        u.ids.add(r.id)
        st.index(u, r)
    assert item_tokens(st, turn) == (6, ("s", "2023-05-08"))  # "Ann: My dog is called Max."
    assert item_tokens(st, fact) == (7, ("s", "2023-05-08"))  # a current fact shows its turn, "(current)"
    turn.text = "My dog is called Max and he is great"
    assert item_tokens(st, turn)[0] == 10 and item_tokens(st, fact)[0] == 11  # cache keyed by what it shows
    fact.valid_to, fact.superseded_by = T0 + DAY, 3  # superseded: renders as a fact line on its own
    n, key = item_tokens(st, fact)
    assert key is None and n == words(st.item(fact).render())


def test_gate() -> None:
    cfg = MemoryConfig(beta=5.0, max_entropy=None)
    rel = {"working": 0.5, "episodic": 0.2}
    gates, beta = gate(rel, ["working", "episodic", "semantic"], cfg)
    assert list(gates) == ["working", "episodic"] and beta == 5.0  # layers without relevance get no gate
    e = np.exp(5.0 * np.array([0.5, 0.2]))
    assert [gates["working"], gates["episodic"]] == pytest.approx((e / e.sum()).tolist(), rel=1e-5)
    # the entropy bound raises β until H(γ) ≤ ε
    flat = {"working": 0.30, "episodic": 0.29, "semantic": 0.28}
    gates, beta = gate(flat, list(flat), MemoryConfig(beta=1.0, max_entropy=0.5))
    h = -sum(g * math.log(g) for g in gates.values() if g > 0)
    assert beta > 1.0 and h <= 0.5 + 1e-6 and sum(gates.values()) == pytest.approx(1.0)
    assert max(gates, key=gates.__getitem__) == "working"


def _scored(scores: list[float]) -> list[tuple[float, Record]]:
    return [
        (s, Record(id=i + 1, user_id="u", layer="episodic", kind="turn", text=str(s), seq=i + 1))
        for i, s in enumerate(scores)
    ]


def test_lost_in_the_middle() -> None:
    order = [s for s, _ in lost_in_the_middle(_scored([3.0, 5.0, 1.0, 4.0, 2.0]))]
    assert order == [5.0, 3.0, 1.0, 2.0, 4.0]  # best first, second best last, weakest in the middle
    assert lost_in_the_middle([]) == []
    ties = lost_in_the_middle(_scored([1.0, 1.0, 1.0]))
    assert [r.seq for _, r in ties] == [1, 3, 2]  # equal scores: the older first
