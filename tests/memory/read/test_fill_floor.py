"""``MemoryConfig.fill_floor``: the fill passes over candidates whose gate-weighted score is
below that share of the query's best; one query and a batch fill alike, and a floor never adds
to a context."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lamina import InvalidInput, Memory, MemoryConfig
from lamina.cli.demo import generate


@pytest.fixture(scope="module")
def history() -> list[tuple[str, str, list[dict[str, object]]]]:
    return [(c.user_id, sid, msgs) for c in generate(2, 6, 16, 3) for sid, msgs in c.sessions]


def _memory(floor: float, history: list[tuple[str, str, list[dict[str, object]]]]) -> Memory:
    m = Memory(None, embedder="hashing", config=MemoryConfig(fill_floor=floor))
    for user, sid, msgs in history:
        m.add(msgs, user_id=user, session_id=sid)
        m.end_session(user_id=user, session_id=sid)
    return m


QUERIES = ["Where does the user live now?", "What pet do they have?", "How was the weekend?", "favourite food"]


def test_a_floor_keeps_only_items_near_the_best(history: list[tuple[str, str, list[dict[str, object]]]]) -> None:
    with _memory(0.0, history) as open_, _memory(0.6, history) as floored:
        fewer = 0
        for q in QUERIES:
            a = open_.context(q, user_id="user0", budget=400)
            b = floored.context(q, user_id="user0", budget=400)
            assert [c.render() for c in floored.context_batch([q], user_ids="user0", budget=400)] == [b.render()]
            assert b.tokens <= a.tokens
            fewer += b.tokens < a.tokens
            if b.items:
                g_max = max(b.gates.values())
                prior = {L: (g / g_max) ** (1.0 / b.beta) if b.beta > 0 and g > 0 else 1.0 for L, g in b.gates.items()}
                weighted = [it.score * prior.get(it.layer, 1.0) for it in b.items if it.layer != "working"]
                best = max(it.score * prior.get(it.layer, 1.0) for it in a.items)
                assert all(w >= 0.6 * best - 1e-12 for w in weighted)
        assert fewer > 0  # the floor did leave something out


def test_the_floor_is_a_share() -> None:
    with pytest.raises(InvalidInput, match="fill_floor"):
        MemoryConfig(fill_floor=1.5)
    assert replace(MemoryConfig(), fill_floor=0.3).fill_floor == 0.3
