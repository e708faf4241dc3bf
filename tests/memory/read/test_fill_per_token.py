"""The fill's value per token (``MemoryConfig.fill_item_tokens`` / ``fill_length_power``): a
candidate longer than ``fill_item_tokens`` enters the fill order with its gate-weighted score
scaled down by its length, so short items that answer the question are not crowded out by one
long answer; scores and rankings are unchanged; a batch fills as one query does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lamina import InvalidInput, Memory, MemoryConfig
from lamina.memory.read.fill import length_factor

LONG = "About my violin lessons and practice. " + " ".join(
    f"In my violin lessons and practice, step {i}: keep the bow straight and play the scales slowly." for i in range(24)
)
SHORT = [
    "I started violin lessons with Mrs Novak on Tuesdays.",
    "My violin teacher says my bowing on the scales improved.",
    "I practise violin scales for twenty minutes after dinner.",
    "I bought a new violin bow last weekend for my lessons.",
    "The violin recital for my lessons is in March.",
]
QUERY = "what did I say about my violin lessons and practice?"


def _memory(config: MemoryConfig) -> Memory:
    # (the long turn's dense term undamped, long_turn_words=0: it then ranks first, and the test
    # reads the fill order alone)
    m = Memory(None, embedder="hashing", config=replace(config, long_turn_words=0))
    m.add([{"role": "assistant", "content": LONG}], user_id="u", session_id="s0")
    m.end_session(user_id="u", session_id="s0")
    for i, text in enumerate(SHORT):
        m.add([{"role": "user", "content": text}], user_id="u", session_id=f"s{i + 1}")
        m.end_session(user_id="u", session_id=f"s{i + 1}")
    return m


def test_length_factor() -> None:
    cfg = MemoryConfig()
    assert (cfg.fill_item_tokens, cfg.fill_length_power) == (128, 0.5)
    assert length_factor(10, cfg) == 1.0
    assert length_factor(128, cfg) == 1.0
    assert length_factor(512, cfg) == pytest.approx(0.5)
    assert length_factor(512, replace(cfg, fill_length_power=1.0)) == pytest.approx(0.25)
    assert length_factor(512, replace(cfg, fill_item_tokens=0)) == 1.0
    assert length_factor(512, replace(cfg, fill_length_power=0.0)) == 1.0


def test_short_answers_fill_before_a_long_one() -> None:
    long_words = len(LONG.split())
    assert long_words > 3 * 128
    # room for the long turn and one short one, or for every short one
    budget = long_words + 20
    with _memory(MemoryConfig(fill_item_tokens=0)) as plain, _memory(MemoryConfig()) as per_token:
        a = plain.context(QUERY, user_id="u", budget=budget)
        b = per_token.context(QUERY, user_id="u", budget=budget)
        ra, rb = (
            plain.explain_context(QUERY, user_id="u", budget=budget),
            per_token.explain_context(QUERY, user_id="u", budget=budget),
        )
    texts_a = [it.text for it in a.items]
    texts_b = [it.text for it in b.items]
    # in score order the long turn (it says every word of the question) goes in first
    assert LONG in texts_a and sum(t in texts_a for t in SHORT) < len(SHORT)
    # per token, every short answer goes in and the long one no longer fits
    assert all(t in texts_b for t in SHORT) and LONG not in texts_b
    assert b.tokens <= budget
    # scores are not changed by the fill order: the same candidates with the same scores
    sa = {c.item.text: c.item.score for cands in ra.candidates.values() for c in cands}
    sb = {c.item.text: c.item.score for cands in rb.candidates.values() for c in cands}
    assert sa == sb
    why = {c.item.text: c.reason for cands in rb.candidates.values() for c in cands}
    assert why[LONG] == "budget"


def test_a_batch_fills_per_token_as_one_query() -> None:
    qs = [QUERY, "violin bow", "recital in March", "how to rest the wrist when practising"]
    with _memory(MemoryConfig()) as m:
        for budget in (60, 200, len(LONG.split()) + 40, 2000):
            one = [m.context(q, user_id="u", budget=budget).render() for q in qs]
            batch = [c.render() for c in m.context_batch(qs, user_ids="u", budget=budget)]
            assert batch == one


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("fill_item_tokens", -1, InvalidInput),
        ("fill_item_tokens", True, TypeError),
        ("fill_item_tokens", 12.5, TypeError),
        ("fill_length_power", -0.5, InvalidInput),
        ("fill_length_power", float("nan"), InvalidInput),
        ("fill_length_power", 10.0, InvalidInput),
    ],
)
def test_bad_settings_are_refused(field: str, value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        MemoryConfig(**{field: value})  # type: ignore[arg-type]
