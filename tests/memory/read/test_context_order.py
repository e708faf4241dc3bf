"""Context orders (``lamina.memory.types.arrange``, ``Context.reordered``): the same items in each
order, in the documented places, on a context built by a real Memory."""

from __future__ import annotations

import itertools

import pytest

from lamina import Memory
from lamina.client.wire import WireError, context_from_json, context_to_json
from lamina.embedders import Hashing
from lamina.memory.types import CONTEXT_ORDERS, arrange, context_order, unarrange

T0 = 1_683_550_000.0
DAY = 86_400.0
_TOPICS = [
    "my dog Biscuit loves the beach",
    "I started learning the cello",
    "my sister moved to Lisbon",
    "I ran the Berlin marathon",
    "I painted a sunset over the lake",
    "we booked a trip to Kyoto",
    "the dog chewed my cello bow",
    "Biscuit the dog swam in the lake",
]


@pytest.fixture(scope="module")
def context():  # type: ignore[no-untyped-def]
    mem = Memory(None, embedder=Hashing())
    for i, text in enumerate(_TOPICS):  # one session per day, two turns each
        sid = f"s{i}"
        t = T0 + i * DAY
        mem.add(
            [
                {"speaker": "Ann", "text": text, "timestamp": t},
                {"speaker": "Bob", "text": f"tell me more about that, day {i}", "timestamp": t + 60},
            ],
            user_id="u",
            session_id=sid,
        )
        mem.end_session(user_id="u", session_id=sid, now=t + 120)
    ctx = mem.context("What does the dog Biscuit like, and the cello?", user_id="u", budget=120, now=T0 + 9 * DAY)
    mem.close()
    assert len(ctx.items) >= 4, "the test needs a context of several items"
    return ctx


def test_arrange_places_items_as_documented() -> None:
    r = ["a", "b", "c", "d", "e"]  # best first
    assert arrange(r, order="lost-in-the-middle") == ["a", "c", "e", "d", "b"]  # best first, 2nd last
    assert arrange(r, order="score") == r
    assert arrange(r, order="reversed") == ["e", "d", "c", "b", "a"]  # best last
    assert arrange([], order="reversed") == [] and arrange(["x"], order="lost-in-the-middle") == ["x"]
    for n, o in itertools.product(range(9), CONTEXT_ORDERS):
        ranked = list(range(n))
        assert unarrange(arrange(ranked, order=o), order=o) == ranked, (n, o)


def test_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown context order 'middle'"):
        arrange([1, 2], order="middle")
    with pytest.raises(ValueError, match="lost-in-the-middle"):
        unarrange([1, 2], order="")
    with pytest.raises(ValueError):
        context_order("Score")
    assert context_order("reversed") == "reversed"


def test_orders_hold_the_same_items_in_their_places(context) -> None:  # type: ignore[no-untyped-def]
    assert context.order == "lost-in-the-middle"
    ranked = context.ranked
    scores = [it.score for it in ranked]
    assert scores == sorted(scores, reverse=True)  # Memory.context's items, ranked back
    assert context.items[0] is ranked[0] and context.items[-1] is ranked[1]
    ids = sorted(it.id for it in context.items)
    texts = {}
    for o in CONTEXT_ORDERS:
        c = context.reordered(order=o)
        assert c.order == o and sorted(it.id for it in c.items) == ids  # the same items
        assert (c.budget, c.query, c.gates, c.beta, c.abstain) == (
            context.budget,
            context.query,
            context.gates,
            context.beta,
            context.abstain,
        )
        assert [it.id for it in c.ranked] == [it.id for it in ranked]
        assert c.tokens == context.tokens  # one header per group of turns in every order
        texts[o] = c.render()
    assert [it.id for it in context.reordered(order="score").items] == [it.id for it in ranked]
    assert [it.id for it in context.reordered(order="reversed").items] == [it.id for it in reversed(ranked)]
    back = context.reordered(order="reversed").reordered(order="lost-in-the-middle")
    assert [it.id for it in back.items] == [it.id for it in context.items]
    assert texts["lost-in-the-middle"] == context.render()
    assert len(set(texts.values())) > 1  # the rendered text does change with the order
    with pytest.raises(ValueError, match="unknown context order"):
        context.reordered(order="random")  # type: ignore[arg-type]


def test_the_order_travels_over_the_wire(context) -> None:  # type: ignore[no-untyped-def]
    c = context.reordered(order="reversed")
    d = context_to_json(c)
    assert d["order"] == "reversed"
    back = context_from_json(d)
    assert back.order == "reversed" and [it.id for it in back.items] == [it.id for it in c.items]
    assert context_from_json({k: v for k, v in d.items() if k != "order"}).order == "lost-in-the-middle"
    with pytest.raises(WireError):
        context_from_json({**d, "order": "sideways"})
