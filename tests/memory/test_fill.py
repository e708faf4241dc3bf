"""Episodic leaves are scored by their best-matching turn and show only that turn; the per-turn
vectors follow the leaves through eviction, text updates and reopening."""

from __future__ import annotations

import numpy as np

from lamina import Memory, MemoryConfig

T0 = 1_683_550_000.0
DAY = 86_400.0

LINES = [("Alice", "The weather was lovely this morning."), ("Bob", "I watched a football match yesterday."),
         ("Alice", "My sister adopted a grey kitten called Pepper."), ("Bob", "Did you try the new bakery downtown?"),
         ("Alice", "I have been reading a mystery novel."), ("Bob", "Sounds fun, who is the author?")]


def _session(m: Memory, s: int, lines: list[tuple[str, str]]) -> None:
    t = T0 + s * DAY
    m.add([{"speaker": sp, "text": tx, "id": f"D{s}:{i}", "timestamp": t + 60 * i} for i, (sp, tx) in enumerate(lines)],
          "u", f"s{s}")
    m.end_session("u", f"s{s}")


def _turn_view_keys(m: Memory) -> set[int]:
    u = m._users["u"]
    return set(u.seg_of)


def test_matching_turn_alone_and_leaf_heated() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, semantic_capacity=1, layers=("working", "episodic")))
    _session(m, 1, LINES)
    ctx = m.context("grey kitten Pepper", "u", budget=12, now=T0 + 9 * DAY)
    assert not ctx.abstain
    top = max(ctx.items, key=lambda it: it.score)
    assert top.kind == "turn" and top.layer == "episodic" and top.sources == ("D1:2",)
    assert "Pepper" in ctx.render() and "football" not in ctx.render()
    # the leaf that holds the turn was heated too
    leaf = m._users["u"].seg_of[top.id]
    assert m.get(leaf).access_count == 1 and m.get(leaf).kind == "segment"
    # a leaf's score is its best turn's cosine (not the mean of its turns)
    q = m.embedder.embed(["grey kitten Pepper"])[0]
    assert abs(top.score - float(m.embedder.embed([LINES[2][1]])[0] @ q)) < 1e-5
    m.close()


def test_turn_views_follow_eviction_update_and_reopen(tmp_path) -> None:
    path = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=8, layers=("working", "episodic"))
    m = Memory(path, embedder="hashing", config=cfg)
    for s in range(1, 5):
        _session(m, s, LINES)
    u = m._users["u"]
    leaves = [r for r in m._recs.values() if r.kind == "segment" and r.status == "active"]
    evicted = [r for r in m._recs.values() if r.kind == "segment" and r.status == "evicted"]
    assert evicted  # the capacity is below what four sessions make
    want = {t for r in leaves for t in r.members}
    assert _turn_view_keys(m) == want
    assert all(t not in want for r in evicted for t in r.members)
    # re-embedding a turn moves its view
    tid = sorted(want)[0]
    m.update(tid, "Completely different words about volcanoes and lava.", "u")
    ctx = m.context("volcanoes lava", "u", budget=20, now=T0 + 9 * DAY)
    assert any(it.id == tid for it in ctx.items)
    m.close()
    m2 = Memory(path, embedder="hashing", config=cfg)
    assert _turn_view_keys(m2) == want
    ctx2 = m2.context("volcanoes lava", "u", budget=20, now=T0 + 9 * DAY)
    assert [it.id for it in ctx2.items][:1] == [it.id for it in ctx.items][:1]
    m2.close()


def test_aggregates_only_after_specific_items() -> None:
    """Summaries fill only what the turns above the floor leave: with room for one item, it is
    the best turn, although long summaries can score higher."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working", "episodic")))
    for s in range(1, 4):
        _session(m, s, LINES)
    for query in ("who adopted the grey kitten", "weather football bakery novel author", "mystery novel"):
        ctx = m.context(query, "u", budget=14, now=T0 + 9 * DAY)
        best_turn = max(h.score for h in m.search(query, "u", k=50, layers=["archive"]))
        assert [it.kind for it in ctx.items] == ["turn"] and abs(ctx.items[0].score - best_turn) < 1e-5
        big = m.context(query, "u", budget=10_000, now=T0 + 9 * DAY)
        kinds = [it.kind for it in sorted(big.items, key=lambda it: -it.score)]
        assert "summary" in kinds  # with room left, aggregates do come in
    m.close()


def test_repeated_turn_text_shown_once() -> None:
    """A turn repeating the words of a turn already in the context is skipped (budget goes to new text)."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working", "episodic")))
    for s in range(1, 4):
        _session(m, s, [("Alice", "Work has been hectic lately.")] + LINES)
    ctx = m.context("how has work been", "u", budget=60, now=T0 + 9 * DAY)
    texts = [it.text for it in ctx.items if it.kind == "turn"]
    assert texts.count("Work has been hectic lately.") == 1
    assert len(texts) == len(set(texts)) and len(texts) >= 2
    m.close()
