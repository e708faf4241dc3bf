"""lamina.memory.state.gcquiet: a full collection's work does not grow with the memory."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Sequence

import pytest

from lamina import Memory
from lamina.llm.extract import ExtractiveSummarizer, Turn
from lamina.memory.state.gcquiet import collector_paused
from memkit import DAY, T0


def _turns(mem: Memory, start: int, n: int, per_session: int = 50) -> None:
    for i in range(start, start + n):
        s = f"s{i // per_session}"
        text = f"turn {i}: we talked about hiking, dinner plans and the number {i * 7919 % 10007}."
        mem.add(
            [{"speaker": "Ann" if i % 2 else "Ben", "text": text}], user_id="u", session_id=s, timestamp=T0 + i * 60
        )
        if (i + 1) % per_session == 0:
            mem.end_session(user_id="u", session_id=s)


def _collector_work() -> int:
    """References a full collection visits now (the tracked objects' referents), the embedding
    cache's bounded OrderedDict left out."""
    gc.collect()
    return sum(len(gc.get_referents(o)) for o in gc.get_objects() if type(o).__name__ != "OrderedDict")


def test_full_collection_work_does_not_grow_with_the_store() -> None:
    mem = Memory(embedder="hashing")
    _turns(mem, 0, 600)  # (every code path has run once: its lazy imports are done)
    mem.context("what about hiking?", user_id="u", budget=256, now=T0 + DAY)
    w0 = _collector_work()
    _turns(mem, 600, 1200)
    mem.context("what about dinner?", user_id="u", budget=256, now=T0 + DAY)
    w1 = _collector_work()
    # every record, id set and index entry of 1,200 more turns (about 20 references each when
    # the collector walked them) adds less than one reference per turn
    assert w1 - w0 < 1200, (w0, w1, w1 - w0)
    st = mem._st
    assert all(not gc.is_tracked(c) for c in st.gc_containers())
    mem.close()


def test_young_collections_do_not_walk_the_big_maps() -> None:
    """The maps of every record, vector location and turn's derived items are tracked again by
    CPython when a record or a new tuple is stored: they are untracked at once, so that young
    collections do not visit all their entries."""
    mem = Memory(embedder="hashing")
    _turns(mem, 0, 300)
    gc.collect()
    _turns(mem, 300, 60)
    gc.collect(0)
    st = mem._st
    u = st.users["u"]
    maps = {"recs": st.recs, "locations": st.vectors.id_containers()[0], "derived": u.derived}
    assert {k: gc.is_tracked(v) for k, v in maps.items()} == dict.fromkeys(maps, False)
    mem.close()


def test_writes_leave_few_tracked_survivors() -> None:
    """What a session's writes keep (memoised token counts and word bags, incidence entries) is
    untracked when kept: few new objects reach the oldest generation tracked, so full collections
    stay rare (each one visits every tracked object)."""
    mem = Memory(embedder="hashing")
    _turns(mem, 0, 300)
    mem.context("what about hiking?", user_id="u", budget=256, now=T0 + DAY)
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    gc.disable()
    try:
        _turns(mem, 300, 300)
        mem.context("what about dinner?", user_id="u", budget=256, now=T0 + DAY)
        gc.collect(1)  # (the survivors move to the oldest generation, not collected)
        new = [o for o in gc.get_objects(generation=2) if id(o) not in before]
    finally:
        gc.enable()
    # (about 200 here; were they kept tracked, about 1,100)
    assert len(new) < 450, sorted({type(o).__name__ for o in new})
    mem.close()


def test_untracked_state_serves_the_same_contexts() -> None:
    mem = Memory(embedder="hashing")
    _turns(mem, 0, 200)
    before = mem.context("dinner plans", user_id="u", budget=256, now=T0 + DAY).render()
    gc.collect()
    after = mem.context("dinner plans", user_id="u", budget=256, now=T0 + DAY).render()
    assert before == after
    _turns(mem, 200, 100)  # writes after the untracking
    gc.collect()
    assert mem.context("dinner plans", user_id="u", budget=256, now=T0 + DAY).items
    mem.close()


def test_a_dropped_memory_is_not_kept_alive() -> None:
    mem = Memory(embedder="hashing")
    _turns(mem, 0, 60)
    ref = weakref.ref(mem._st)
    mem.close()
    del mem
    gc.collect()
    assert ref() is None
    gc.collect()  # the callback runs with the state gone


class _Watching:
    """A ψ that records whether the collector was on while the memory consolidated."""

    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.inner = ExtractiveSummarizer()

    def summarize(self, turns: Sequence[Turn], max_words: int) -> str:
        self.seen.append(gc.isenabled())
        return self.inner.summarize(turns, max_words)


def test_end_session_runs_with_the_collector_paused() -> None:
    psi = _Watching()
    mem = Memory(embedder="hashing", summarizer=psi)
    assert gc.isenabled()
    _turns(mem, 0, 100, per_session=1000)  # (one open session)
    psi.seen.clear()
    mem.end_session(user_id="u", session_id="s0")
    assert psi.seen and not any(psi.seen)
    assert gc.isenabled()
    gc.disable()  # a process that turned it off keeps it off
    try:
        _turns(mem, 100, 50)
        assert not gc.isenabled()
    finally:
        gc.enable()
    mem.close()


def test_collector_paused_nests_and_is_shared_by_threads() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            pass
        assert not gc.isenabled()  # (the outer block is still open)
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # (the other thread's block is still open)
    leave.set()
    t.join(10)
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
