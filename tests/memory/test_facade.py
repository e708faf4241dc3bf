"""lamina.Memory: write path, read path, supersession, layers, bad input."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import lamina
from lamina import Memory, MemoryConfig

T0 = 1_683_550_000.0  # 2023-05-08
DAY = 86_400.0


def _chat(mem: Memory, user: str, session: str, lines: list[tuple[str, str]], t: float, prefix: str) -> list[int]:
    msgs = [{"speaker": sp, "text": tx, "id": f"{prefix}:{i}", "timestamp": t + 60 * i} for i, (sp, tx) in enumerate(lines)]
    return mem.add(msgs, user, session)


FILLER = [("Alice", "The weather was lovely this morning."), ("Bob", "I watched a football match yesterday."),
          ("Alice", "Did you try the new bakery downtown?"), ("Bob", "Yes, their croissants are great."),
          ("Alice", "I have been reading a mystery novel."), ("Bob", "Sounds fun, who is the author?")]


@pytest.fixture
def mem() -> Memory:
    m = Memory(config=MemoryConfig(working_capacity=6))
    yield m
    m.close()


def test_add_returns_ids_and_archive_keeps_everything(mem: Memory) -> None:
    ids = _chat(mem, "u", "s1", [("Alice", "I moved to Paris last week.")] + FILLER * 3, T0, "D1")
    assert len(ids) == 19 and len(set(ids)) == 19
    st = mem.stats("u")
    assert st["layers"]["working"] <= 6 and st["archive_turns"] == 19
    assert st["layers"]["working"] + st["layers"]["archive"] == 19
    hits = mem.search("moved to Paris", "u", k=3, layers=["archive"])
    assert hits[0].sources == ("D1:0",) and hits[0].layer == "archive" and hits[0].kind == "turn"
    it = mem.get(ids[0])
    assert it.text == "I moved to Paris last week." and it.speaker == "Alice" and it.timestamp == T0


def test_supersession_history_and_current_beats_stale(mem: Memory) -> None:
    _chat(mem, "u", "s1", [("Alice", "I live in London with my cat.")] + FILLER, T0, "D1")
    mem.end_session("u", "s1")
    _chat(mem, "u", "s2", [("Alice", "Big news: I moved to Paris for work!")] + FILLER, T0 + 30 * DAY, "D2")
    mem.end_session("u", "s2")
    cur = [f for f in mem.facts("u") if f.predicate == "lives_in"]
    assert [f.object for f in cur] == ["Paris"]
    hist = mem.history(cur[0].id)
    assert [f.object for f in hist] == ["London", "Paris"]
    assert hist[0].valid_to == T0 + 30 * DAY and hist[0].superseded_by == cur[0].id and not hist[0].current
    assert hist[0].layer == "history"
    ctx = mem.context("Where does Alice live now?", "u", budget=300)
    assert not ctx.abstain
    facts = [it for it in ctx.items if it.kind == "fact" and it.predicate == "lives_in"]
    assert [f.object for f in facts] == ["Paris"]  # the superseded fact is never served as current
    # items that support exactly one of the two values: the current one ranks first
    only = sorted((it for it in ctx.items if ("London" in it.render()) != ("Paris" in it.render())),
                  key=lambda it: -it.score)
    assert "Paris" in only[0].render()
    stale = [it.score for it in only if "London" in it.render()]
    assert all(facts[0].score > s for s in stale)
    # stats: drift of the profile's damped update is recorded
    st = mem.stats("u")
    assert st["facts_superseded"] == 1 and st["profile_drift"]["updates"] >= 1 and st["profile_drift"]["total"] > 0


def test_out_of_order_fact_goes_to_history(mem: Memory) -> None:
    _chat(mem, "u", "s2", [("Alice", "I live in Paris now.")] + FILLER, T0 + 10 * DAY, "D2")
    mem.end_session("u", "s2")
    _chat(mem, "u", "s1", [("Alice", "I live in London.")] + FILLER, T0, "D1")  # replayed late, older
    mem.end_session("u", "s1")
    assert [f.object for f in mem.facts("u") if f.predicate == "lives_in"] == ["Paris"]


def test_context_budget_gates_render_and_bumps(mem: Memory) -> None:
    _chat(mem, "u", "s1", [("Alice", "My dog is called Max and he loves the beach.")] + FILLER * 2, T0, "D1")
    mem.end_session("u", "s1")
    for budget in (5, 40, 400):
        ctx = mem.context("What is the name of Alice's dog?", "u", budget=budget, now=T0 + DAY)
        assert ctx.tokens <= budget
        assert ctx.tokens == len(ctx.render().split())
    ctx = mem.context("What is the name of Alice's dog?", "u", budget=400, now=T0 + DAY)
    assert set(ctx.gates) <= {"working", "episodic", "semantic"}
    assert math.isclose(sum(ctx.gates.values()), 1.0, rel_tol=1e-5)
    assert "Max" in ctx.render() and "2023-05-08" in ctx.render()
    assert any("D1:0" in it.sources for it in ctx.items)
    # lost-in-the-middle order: best first, second best last
    scores = [it.score for it in ctx.items]
    if len(scores) >= 2:
        assert scores[0] == max(scores) and scores[-1] == sorted(scores)[-2]
    # returned items were bumped
    for it in ctx.items:
        assert mem.get(it.id).access_count >= 1 and mem.get(it.id).last_access == T0 + DAY
    # no duplicate raw sources among raw items
    raw = [s for it in ctx.items if it.kind in ("turn", "segment") for s in it.sources]
    assert len(raw) == len(set(raw))


def test_abstain_and_unknown_user(mem: Memory) -> None:
    _chat(mem, "u", "s1", FILLER, T0, "D1")
    ctx = mem.context("quantum chromodynamics lattice gauge", "u")
    assert ctx.abstain and ctx.items == [] and ctx.render() == ""
    assert mem.context("anything", "nobody").abstain
    assert mem.search("anything", "nobody") == []


def test_now_hides_the_future(mem: Memory) -> None:
    _chat(mem, "u", "s1", [("Alice", "I adopted a parrot named Kiwi.")], T0 + 10 * DAY, "D1")
    assert not any("Kiwi" in it.text for it in mem.context("parrot Kiwi", "u", now=T0).items)
    assert any("Kiwi" in it.text for it in mem.context("parrot Kiwi", "u", now=T0 + 11 * DAY).items)


def test_capacity_eviction_never_touches_archive() -> None:
    m = Memory(config=MemoryConfig(working_capacity=4, episodic_capacity=3, max_segment_turns=2))
    n = 0
    for s in range(4):
        n += len(_chat(m, "u", f"s{s}", FILLER, T0 + s * DAY, f"D{s}"))
        m.end_session("u", f"s{s}")
    st = m.stats("u")
    assert st["evicted"] > 0 and st["archive_turns"] == n
    ep = [r for r in m._urecs(m._users["u"]) if r.layer == "episodic" and r.status == "active"
          and (r.kind == "segment" or r.parent_id == -1)]
    assert len(ep) <= 3
    assert len(m.search("bakery croissants", "u", k=50, layers=["archive"])) == n
    m.close()


def test_memtree_structure_invariants() -> None:
    m = Memory(config=MemoryConfig(working_capacity=4, max_segment_turns=2, tree_theta0=0.05))
    for s in range(3):
        _chat(m, "u", f"s{s}", FILLER + [("Alice", f"I went hiking at trail {s}.")], T0 + s * DAY, f"D{s}")
        m.end_session("u", f"s{s}")
    u = m._users["u"]
    for parent, kids in u.children.items():
        for k in kids:
            r = m._recs[k]
            assert r.parent_id == parent and r.status == "active"
            if parent != 0:
                p = m._recs[parent]
                assert p.kind == "summary" and r.depth == p.depth + 1
                assert set(r.sources) <= set(p.sources)
    assert any(k != 0 for k in u.children)  # some internal node exists with θ0 this low
    m.close()


def test_update_delete_history() -> None:
    m = Memory()
    ids = _chat(m, "u", "s", [("Alice", "My sister is called Ana."), ("Bob", "Nice name.")], T0, "D")
    m.update(ids[1], "Nice name indeed.", timestamp=T0 + 5)
    h = m.history(ids[1])
    assert [x.text for x in h] == ["Nice name.", "Nice name indeed."]
    m.end_session("u", "s")
    assert any(f.object == "Ana" for f in m.facts("u"))
    m.delete(ids[0])  # derived fact and segment go too
    assert not any(f.object == "Ana" for f in m.facts("u"))
    assert not any("Ana" in it.render() for it in m.search("sister Ana", "u", k=20, layers=list(lamina.items.LAYERS)))
    with pytest.raises(IndexError):
        m.get(ids[0])
    assert m.delete_user("u") > 0
    assert m.users() == []
    m.close()


def test_bad_input() -> None:
    m = Memory()
    ok = [{"speaker": "A", "text": "hello"}]
    with pytest.raises(ValueError):
        m.add([{"speaker": "A", "text": "  "}], "u", "s")
    with pytest.raises(ValueError):
        m.add([], "u", "s")
    with pytest.raises(TypeError):
        m.add("hello", "u", "s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        m.add([{"speaker": "A", "text": 3}], "u", "s")
    with pytest.raises(TypeError):
        m.add(ok, 5, "s")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        m.add(ok, "", "s")
    with pytest.raises(ValueError):
        m.add(ok, "u", "s", timestamp=float("nan"))
    with pytest.raises(ValueError):
        m.add([{"speaker": "A", "text": "x", "timestamp": float("inf")}], "u", "s")
    with pytest.raises(ValueError):
        m.add([{"speaker": "A", "text": "x", "commitment": "forever"}], "u", "s")
    # a failed batch leaves nothing behind
    with pytest.raises(TypeError):
        m.add([{"speaker": "A", "text": "fine"}, {"speaker": "A", "text": None}], "u", "s")
    assert m.users() == []
    ids = m.add(ok, "u", "s", timestamp=T0)
    with pytest.raises(ValueError):
        m.context("q", "u", budget=0)
    with pytest.raises(TypeError):
        m.context("q", "u", budget=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        m.context("", "u")
    with pytest.raises(ValueError):
        m.context("q", "u", now=float("nan"))
    with pytest.raises(ValueError):
        m.search("q", "u", k=0)
    with pytest.raises(ValueError):
        m.search("q", "u", layers=["attic"])
    with pytest.raises(IndexError):
        m.get(ids[0] + 10_000)
    with pytest.raises(IndexError):
        m.get(ids[0], user_id="nobody")
    with pytest.raises(IndexError):
        m.get(12345)  # not an id of this database
    other = Memory()
    oid = other.add(ok, "u", "s")[0]
    with pytest.raises(IndexError, match="database"):
        m.get(oid)
    with pytest.raises(TypeError):
        m.get("1")  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        m.end_session("nobody", "s")
    with pytest.raises(IndexError):
        m.end_session("u", "no-such-session")
    with pytest.raises(TypeError):
        Memory(config={"working_capacity": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MemoryConfig(alpha=1.5)
    with pytest.raises(ValueError):
        MemoryConfig(working_capacity=0)
    m.close()
    other.close()
    with pytest.raises(ValueError, match="closed"):
        m.add(ok, "u", "s")


def test_query_embedding_and_role_content_messages() -> None:
    m = Memory()
    m.add([{"role": "user", "content": "I work as a nurse at the city hospital."}], "u", "s", timestamp=T0)
    q = m.embedder.embed(["what is the user's job"])[0]
    a = m.search("what is the user's job", "u")
    b = m.search("ignored text", "u", query_embedding=q)
    assert [x.id for x in a] == [x.id for x in b]
    with pytest.raises(ValueError):
        m.search("q", "u", query_embedding=np.zeros(3, np.float32))
    m.close()


def test_threads_share_one_memory() -> None:
    m = Memory(config=MemoryConfig(working_capacity=4))
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(8):
                m.add([{"speaker": "A", "text": f"user {k} note {i} about topic {k}"}], f"u{k}", "s", timestamp=T0 + i)
                m.context(f"topic {k}", f"u{k}")
            m.end_session(f"u{k}", "s")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for k in range(4):
        assert m.stats(f"u{k}")["archive_turns"] == 8
        for it in m.search("note about topic", f"u{k}", k=50, layers=["archive"]):
            assert it.user_id == f"u{k}"
    m.close()
