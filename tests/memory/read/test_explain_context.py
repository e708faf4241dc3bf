"""Memory.explain_context: the same context as Memory.context, what it was chosen from and why,
and no side effect (it counts no visit)."""

from __future__ import annotations

import math

import pytest

from lamina import Memory, NotFoundError
from lamina.memory import Candidate, ContextExplanation
from memkit import DAY, FILLER, T0, chat

QUERIES = ["where does Ana live?", "what does Bob think of the croissants?", "hiking with the dog", "zzz qqq"]
REASONS = {"chosen", "budget", "duplicate", "taken"}


def _memory() -> Memory:
    mem = Memory(None, "hashing")
    for d in range(6):
        lines = [*FILLER, ("Alice", f"My sister Ana lives in {'Lisbon' if d < 3 else 'Porto'} now."), *FILLER[:3]]
        chat(
            mem, "u", f"s{d}", lines + [("Bob", "I went hiking with my dog Rex on the weekend.")], T0 + d * DAY, f"d{d}"
        )
        if d < 5:  # the last session stays open: its turns are in working memory
            mem.end_session(user_id="u", session_id=f"s{d}", now=T0 + d * DAY + 3600)
    return mem


def _same(a: object, b: object) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=0, abs_tol=1e-12))


@pytest.mark.parametrize("include_archive", [False, True])
@pytest.mark.parametrize("budget", [12, 60, 400])
def test_the_explained_context_is_the_context(budget: int, include_archive: bool) -> None:
    mem = _memory()
    for q in QUERIES:
        ex = mem.explain_context(q, user_id="u", budget=budget, include_archive=include_archive)
        ctx = mem.context(q, user_id="u", budget=budget, include_archive=include_archive)
        assert isinstance(ex, ContextExplanation)
        e = ex.context
        assert [(i.id, i.layer, i.score) for i in e.items] == [(i.id, i.layer, i.score) for i in ctx.items]
        assert e.gates == ctx.gates and e.beta == ctx.beta and e.abstain == ctx.abstain
        assert e.render() == ctx.render() and e.budget == ctx.budget == budget
        # every chosen candidate is in the context once, and nothing else is
        chosen = [c.item.id for cs in ex.candidates.values() for c in cs if c.chosen]
        assert sorted(chosen) == sorted(i.id for i in ctx.items)
        assert ex.used_tokens <= budget
        assert set(ex.relevance) == set(e.gates)
    mem.close()


def test_candidates_carry_scores_and_reasons() -> None:
    mem = _memory()
    ex = mem.explain_context("where does Ana live?", user_id="u", budget=30, include_archive=True)
    assert ex.candidates, "the query has candidates"
    reasons: set[str] = set()
    for layer, cs in ex.candidates.items():
        assert cs and all(isinstance(c, Candidate) and c.layer == layer for c in cs)
        scores = [c.item.score for c in cs]
        assert scores == sorted(scores, reverse=True)  # best first
        for c in cs:
            assert c.reason in REASONS and c.chosen == (c.reason == "chosen")
            reasons.add(c.reason)
    # a small budget leaves candidates out for lack of room; the open session's turns are in
    # the working layer and in the archive: one of the two copies is taken by the other
    assert "budget" in reasons and "taken" in reasons
    ids = [c.item.id for cs in ex.candidates.values() for c in cs if c.chosen]
    assert len(ids) == len(set(ids))
    mem.close()


def test_the_gate_entropy_and_its_bound() -> None:
    mem = _memory()
    ex = mem.explain_context("hiking with the dog", user_id="u", budget=100)
    g = list(ex.context.gates.values())
    assert math.isclose(sum(g), 1.0, abs_tol=1e-5)
    assert math.isclose(ex.entropy, -sum(x * math.log(x) for x in g if x > 0), rel_tol=1e-9)
    assert ex.max_entropy == mem.config.max_entropy is not None
    assert ex.entropy <= ex.max_entropy + 1e-4
    mem.close()


def test_explaining_counts_no_visit() -> None:
    mem = _memory()

    def visits() -> dict[int, tuple[int, float | None]]:
        return {it.id: (it.access_count, it.last_access) for it in mem.export_user(user_id="u").items}

    before = visits()
    first = mem.explain_context("where does Ana live?", user_id="u", budget=60)
    assert visits() == before
    again = mem.explain_context("where does Ana live?", user_id="u", budget=60)
    assert [(i.id, i.score) for i in again.context.items] == [(i.id, i.score) for i in first.context.items]
    mem.context("where does Ana live?", user_id="u", budget=60)
    assert visits() != before  # (a context does count its visits)
    mem.close()


def test_an_unknown_user_and_bad_arguments() -> None:
    mem = _memory()
    with pytest.raises(NotFoundError, match="unknown user_id 'nobody'"):
        mem.explain_context("anything", user_id="nobody", budget=50)
    with pytest.raises(ValueError, match="budget"):
        mem.explain_context("x", user_id="u", budget=0)
    with pytest.raises(TypeError, match="domain"):
        mem.explain_context("x", user_id="u", domain=3)  # type: ignore[arg-type]
    mem.close()


def test_the_explained_context_through_the_firewall_is_the_context() -> None:
    """With a firewall the explanation carries the same context, report included: what the
    firewall blocked is in ``context.firewall.blocked``, never among the chosen candidates."""
    from lamina import Firewall

    mem = _memory()
    fw = Firewall(tau=0.2)
    for q in QUERIES:
        ex = mem.explain_context(q, user_id="u", budget=60, firewall=fw)
        ctx = mem.context(q, user_id="u", budget=60, firewall=fw)
        assert [i.id for i in ex.context.items] == [i.id for i in ctx.items]
        assert ex.context.firewall == ctx.firewall and ctx.firewall is not None
        blocked = {b.item_id for b in ctx.firewall.blocked}
        chosen = {c.item.id for cs in ex.candidates.values() for c in cs if c.chosen}
        assert not blocked & chosen
    mem.close()
