"""The semantic layer (lamina.memory.write.semantic): facts, Resolve(τ_s) and supersession into
``history``, restatements, multi-valued predicates, entity profiles and their damped drift."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lamina import Memory, MemoryConfig
from memkit import DAY, FILLER, T0, chat, everything, rows


@pytest.fixture
def mem() -> Memory:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=6))
    yield m
    m.close()


def _lives(m: Memory) -> list[str | None]:
    return [f.object for f in m.facts(user_id="u") if f.predicate == "lives_in"]


def test_supersession_history_and_current_beats_stale(mem: Memory) -> None:
    chat(mem, "u", "s1", [("Alice", "I live in London with my cat.")] + FILLER, T0, "D1")
    # 7 turns > C_w = 6: the overflow consolidated the first 4 (and extracted the fact) during add
    assert mem.stats(user_id="u").facts_current == 1
    assert mem.end_session(user_id="u", session_id="s1").facts == 0
    chat(mem, "u", "s2", [("Alice", "Big news: I moved to Paris for work!")] + FILLER, T0 + 30 * DAY, "D2")
    assert mem.stats(user_id="u").facts_superseded == 1
    cur = [f for f in mem.facts(user_id="u") if f.predicate == "lives_in"]
    assert [f.object for f in cur] == ["Paris"] and cur[0].current and cur[0].sources == ("D2:0",)
    hist = mem.history(cur[0].id)
    assert [f.object for f in hist] == ["London", "Paris"]
    assert hist[0].valid_to == T0 + 30 * DAY and hist[0].superseded_by == cur[0].id and not hist[0].current
    assert hist[0].layer == "history" and hist[-1] == mem.get(cur[0].id)
    assert mem.history(hist[0].id) == hist  # the same chain from either end
    ctx = mem.context("Where does Alice live now?", user_id="u", budget=300)
    assert not ctx.abstain
    facts = [it for it in ctx.items if it.kind == "fact" and it.predicate == "lives_in"]
    assert [f.object for f in facts] == ["Paris"]  # the superseded fact is never served as current
    # items that support exactly one of the two values: the current one ranks first
    only = sorted(
        (it for it in ctx.items if ("London" in it.render()) != ("Paris" in it.render())), key=lambda it: -it.score
    )
    assert "Paris" in only[0].render()
    # (a London-only item need not reach the context: the session summary's vector is the
    # centroid of its turns, below the floor for this question; when one does, it ranks lower)
    stale = [it.score for it in only if "London" in it.render()]
    assert all(facts[0].score > s for s in stale)
    # a question naming both values brings the stale one in: it ranks below the current fact
    ctx = mem.context("Where does Alice live now: London or Paris?", user_id="u", budget=300)
    facts = [it for it in ctx.items if it.kind == "fact" and it.predicate == "lives_in"]
    stale = [it.score for it in ctx.items if "London" in it.render() and "Paris" not in it.render()]
    assert [f.object for f in facts] == ["Paris"] and stale and all(facts[0].score > s for s in stale)
    st = mem.stats(user_id="u")
    assert st.facts_superseded == 1 and st.facts_current == 1 and st.layers["history"] == 1
    assert [f.object for f in everything(mem, "u", "history")] == ["London"]


def test_profile_text_and_damped_drift(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", config=MemoryConfig(profile_lambda=1.0))
    chat(m, "u", "s1", [("Alice", "I live in London."), ("Bob", "ok")], T0, "D1")
    m.end_session(user_id="u", session_id="s1")
    (prof,) = [it for it in everything(m, "u", "semantic") if it.kind == "profile"]
    assert prof.text == "Alice: lives in London" and prof.subject == "Alice"
    d0 = m.stats(user_id="u").profile_drift
    assert (d0.total, d0.last, d0.updates, d0.lambda_) == (0.0, 0.0, 0, 1.0)  # created, not yet moved
    e_prev = m.embedder.embed([prof.text])[0].astype(np.float64)
    chat(m, "u", "s2", [("Alice", "I moved to Paris."), ("Alice", "My dog is called Max.")], T0 + DAY, "D2")
    m.end_session(user_id="u", session_id="s2")
    assert m.get(prof.id).text.endswith("dog is called Max; lives in Paris")
    target = m.embedder.embed([m.get(prof.id).text])[0].astype(np.float64)
    want = (target + 1.0 * e_prev) / 2.0  # e = (e* + λ·e_prev) / (1 + λ)
    (row,) = rows(p, "SELECT embedding FROM items WHERE id=?", prof.id)
    np.testing.assert_allclose(np.frombuffer(row["embedding"], dtype=np.float32), want, atol=1e-6)
    d1 = m.stats(user_id="u").profile_drift
    drift = float(np.sum((want - e_prev) ** 2))
    assert d1.updates == 1 and d1.total == pytest.approx(drift, rel=1e-4) and d1.last == pytest.approx(drift, rel=1e-4)
    assert d1.to_dict() == {"total": d1.total, "last": d1.last, "updates": 1, "lambda": 1.0}
    assert rows(p, "SELECT drift_updates FROM users") == [{"drift_updates": 1}]
    m.close()


def test_out_of_order_fact_goes_to_history(mem: Memory) -> None:
    chat(mem, "u", "s2", [("Alice", "I live in Paris now.")] + FILLER, T0 + 10 * DAY, "D2")
    mem.end_session(user_id="u", session_id="s2")
    chat(mem, "u", "s1", [("Alice", "I live in London.")] + FILLER, T0, "D1")  # replayed late, older
    mem.end_session(user_id="u", session_id="s1")
    assert mem.stats(user_id="u").facts_superseded == 1 and mem.stats(user_id="u").facts_current == 1
    assert _lives(mem) == ["Paris"]
    (cur,) = [f for f in mem.facts(user_id="u") if f.predicate == "lives_in"]
    old, new = mem.history(cur.id)
    assert (old.object, old.layer, old.valid_from, old.valid_to, old.superseded_by) == (
        "London",
        "history",
        T0,
        T0 + 10 * DAY,
        cur.id,
    )
    assert new == mem.get(cur.id) and new.valid_to is None


def test_a_statement_older_than_a_restatement_goes_to_history(mem: Memory) -> None:
    """London (day 0), Paris (day 5), London again (day 10); Paris is consolidated last: the
    current value is London, stated after Paris, and it holds from day 10 (found by hypothesis
    in test_properties: Paris used to supersede the restated London by its first date)."""
    chat(mem, "u", "s1", [("Alice", "I live in London.")] + FILLER, T0, "D1")
    mem.end_session(user_id="u", session_id="s1")
    chat(mem, "u", "s3", [("Alice", "I live in London, as you know.")] + FILLER, T0 + 10 * DAY, "D3")
    mem.end_session(user_id="u", session_id="s3")
    chat(mem, "u", "s2", [("Alice", "I live in Paris now.")] + FILLER, T0 + 5 * DAY, "D2")  # replayed late
    mem.end_session(user_id="u", session_id="s2")
    assert _lives(mem) == ["London"]
    (cur,) = [f for f in mem.facts(user_id="u") if f.predicate == "lives_in"]
    assert cur.sources == ("D1:0", "D3:0") and cur.strength == 2.0 and cur.valid_from == T0 + 10 * DAY
    paris, london = mem.history(cur.id)
    assert (paris.object, paris.layer, paris.valid_from, paris.valid_to, paris.superseded_by) == (
        "Paris",
        "history",
        T0 + 5 * DAY,
        T0 + 10 * DAY,
        cur.id,
    )
    assert london == mem.get(cur.id)


def test_a_restatement_strengthens_the_current_fact(mem: Memory) -> None:
    chat(mem, "u", "s1", [("Alice", "I live in Paris."), ("Bob", "ok")], T0, "D1")
    mem.end_session(user_id="u", session_id="s1")
    chat(mem, "u", "s2", [("Alice", "I live in paris, as you know."), ("Bob", "ok")], T0 + DAY, "D2")
    assert mem.end_session(user_id="u", session_id="s2").facts == 0  # same value: no new fact
    (f,) = [f for f in mem.facts(user_id="u", current=False) if f.predicate == "lives_in"]
    assert f.object == "Paris" and f.strength == 2.0 and f.sources == ("D1:0", "D2:0")
    assert mem.history(f.id) == [f]


def test_resolve_threshold_decides_what_is_the_same_value() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(resolve_threshold=-1.0))  # every value "the same"
    chat(m, "u", "s1", [("Alice", "I live in London."), ("Bob", "ok")], T0, "D1")
    m.end_session(user_id="u", session_id="s1")
    chat(m, "u", "s2", [("Alice", "I moved to Paris."), ("Bob", "ok")], T0 + DAY, "D2")
    assert m.end_session(user_id="u", session_id="s2").facts == 0
    assert _lives(m) == ["London"] and m.stats(user_id="u").facts_superseded == 0
    m.close()


def test_multi_valued_predicates_accumulate(mem: Memory) -> None:
    chat(mem, "u", "s1", [("Alice", "I love hiking."), ("Alice", "I love chess."), ("Bob", "I love chess.")], T0, "D1")
    assert mem.end_session(user_id="u", session_id="s1").facts == 3
    likes = [(f.subject, f.object) for f in mem.facts(user_id="u") if f.predicate == "likes"]
    assert likes == [("Alice", "hiking"), ("Alice", "chess"), ("Bob", "chess")]  # by subject, predicate, time
    assert [f.object for f in mem.facts(user_id="u", subject="alice ") if f.kind == "fact"] == ["hiking", "chess"]
    hiking = next(f for f in mem.facts(user_id="u") if f.object == "hiking")
    assert [f.object for f in mem.history(hiking.id)] == ["hiking"]  # not the other likes


def test_verify_commitment_carries_to_the_fact(mem: Memory) -> None:
    mem.add(
        [
            {"speaker": "Alice", "text": "I work as a pilot.", "commitment": "verify"},
            {"speaker": "Bob", "text": "Really?"},
        ],
        user_id="u",
        session_id="s",
        timestamp=T0,
    )
    mem.end_session(user_id="u", session_id="s")
    (f,) = [f for f in mem.facts(user_id="u") if f.predicate == "works_as"]
    assert f.commitment == "verify" and f.render().startswith("[fact, verify, since 2023-05-08] Alice works as pilot")
    assert f.turn_lines() is None  # a fact to verify shows as a fact, not as its turn


def test_profile_text_of_possessive_facts(mem: Memory) -> None:
    chat(mem, "u", "s", [("Alice", "My dog is called Max."), ("Alice", "My favorite color is green.")], T0, "D")
    mem.end_session(user_id="u", session_id="s")
    (prof,) = [it for it in everything(mem, "u", "semantic") if it.kind == "profile"]
    assert prof.text == "Alice: dog is called Max; favorite color is green"
