"""lamina.memory.state.memstate: MemoryState.load mirrors the database, Tx.commit writes exactly what a
write created or changed, a failed write leaves nothing, and the per-turn views of episodic
leaves follow the leaves through eviction, text updates and reopening."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina import Memory, MemoryConfig
from lamina.embedders import get_embedder
from lamina.memory.state.memstate import MemoryState
from lamina.memory.state.records import ITEM_FIELDS, ROOT, NsCode
from lamina.memory.state.tx import Tx
from lamina.memory.state.userstate import UserState
from lamina.memory.store.sqlite import SQLiteStore
from memkit import DAY, T0, dump, fill, item_rows, public_view

CFG = MemoryConfig(working_capacity=4, episodic_capacity=4, max_segment_turns=2)
DIM = get_embedder("hashing").dim


def _load(path: Path, cfg: MemoryConfig = CFG) -> MemoryState:
    store = SQLiteStore(str(path))
    try:
        return MemoryState.load(store, cfg, DIM)
    finally:
        store.close()


def test_load_mirrors_the_database_and_the_live_memory(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    with Memory(p, embedder="hashing", config=CFG) as m:
        fill(m)
        m.context("Where does Alice live now?", user_id="alice", now=T0 + 1e6)
        m.flush()  # the access bumps of those contexts, on disk
        st = _load(p)
        stored = item_rows(p)
        assert set(st.recs) == set(stored)
        for i, r in st.recs.items():
            assert st.item(r) == m.get(i)  # the rebuilt state shows what the live memory shows
            row = stored[i]
            assert {k: getattr(r, k) for k in ITEM_FIELDS} == {k: row[k] for k in ITEM_FIELDS}
            if r.status == "active":  # vectors of the active items, as stored
                np.testing.assert_array_equal(st.vec(r), np.frombuffer(row["embedding"], dtype=np.float32))
            else:
                assert i not in st.vectors
        assert sorted(st.users) == m.users()
        for uid, u in st.users.items():
            assert u.n_active == m.stats(user_id=uid).layers  # active items per layer
            assert u.drift_updates == m.stats(user_id=uid).profile_drift.updates
            for sid, q in u.working.items():  # working queues in arrival order
                assert q == sorted(q) and all(stored[i]["session_id"] == sid for i in q)
        assert st.users["alice"].working == {"s9": [max(i for i, r in stored.items() if r["session_id"] == "s9")]}
        assert st.sessions[("alice", "s9")][0] == "open" and st.sessions[("bob", "s2")][0] == "ended"
    # loading twice gives the same state
    again = _load(p)
    assert {i: again.item(r) for i, r in again.recs.items()} == {i: st.item(r) for i, r in st.recs.items()}


def test_tx_commit_writes_exactly_what_was_created_or_reported() -> None:
    store = SQLiteStore(None)
    st = MemoryState(MemoryConfig(), 4)
    e1 = np.array([1, 0, 0, 0], dtype=np.float32)
    e2 = np.array([0, 1, 0, 0], dtype=np.float32)
    with store.tx():
        tx = Tx(store, st)
        u = tx.user("u")
        assert store.users() == [("u", u.idx, 0.0, 0.0, 0, 0)]  # a new user is stored at once
        r = tx.new_record(u, e1, layer="working", kind="turn", text="first", session_id="s", timestamp=5.0)
        assert list(store.load_items()) == []  # new records are inserted at commit ...
        r.text = "changed before commit"  # ... as they are then (no report needed)
        tx.changed(r, emb=e2)
        tx.commit()
    (row,) = store.load_items()
    assert row == r.row(e2) and row["last_access"] == 5.0 and st.recs[r.id] is r and r.id in st.vectors
    with store.tx():
        tx = Tx(store, st)
        r.text = "reported"
        r.strength = 9.0  # changed in memory but not reported: not written
        tx.changed(r, "text")
        tx.changed(r, emb=e1)
        tx.commit()
    (row,) = store.load_items()
    assert row["text"] == "reported" and row["strength"] == 1.0
    assert np.frombuffer(row["embedding"], dtype=np.float32).tolist() == e1.tolist()
    with store.tx():
        tx = Tx(store, st)
        tx.commit()  # nothing collected: nothing written
    assert list(store.load_items()) == [row]
    store.close()


class Boom:
    """ψ that works once, then raises."""

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, turns: Any, max_words: int) -> str:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("summariser exploded")
        return "ok"


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4)
    m = Memory(p, embedder="hashing", config=cfg, summarizer=Boom())
    ids = m.add([{"speaker": "A", "text": f"line {i}"} for i in range(3)], user_id="u", session_id="s", timestamp=T0)
    queries = ["line", "more"]

    def view() -> dict[str, Any]:
        return public_view(m, ids, queries, ["u"])

    before, on_disk = view(), dump(p)
    with pytest.raises(RuntimeError):  # overflow: the dequeue calls ψ, which raises
        m.add([{"speaker": "A", "text": f"more {i}"} for i in range(6)], user_id="u", session_id="s", timestamp=T0 + 1)
    assert view() == before and dump(p) == on_disk
    with pytest.raises(RuntimeError):
        m.end_session(user_id="u", session_id="s")
    assert view() == before and dump(p) == on_disk
    # the ids the failed writes drew are drawn again: the next write continues the sequence
    (nxt,) = m.add([{"speaker": "A", "text": "fine"}], user_id="u", session_id="t", timestamp=T0 + 2)
    assert nxt == ids[-1] + 1
    ids.append(nxt)
    after = view()
    m.close()
    with Memory(p, embedder="hashing", config=cfg) as m2:
        m = m2
        assert view() == after


def _session(m: Memory, s: int) -> list[int]:
    lines = [
        ("Alice", "The weather was lovely this morning"),
        ("Bob", "I watched a football match"),
        ("Alice", "My sister adopted a grey kitten"),
        ("Bob", "Did you try the new bakery downtown"),
        ("Alice", "I have been reading a mystery novel"),
        ("Bob", "Sounds fun, who is the author"),
    ]
    t = T0 + s * DAY
    ids = m.add(
        [
            {"speaker": sp, "text": f"{tx} on day {s}.", "id": f"D{s}:{i}", "timestamp": t + 60 * i}
            for i, (sp, tx) in enumerate(lines)
        ],
        user_id="u",
        session_id=f"s{s}",
    )
    m.end_session(user_id="u", session_id=f"s{s}")
    return ids


def _found_through_episodes(m: Memory, turns: list[int]) -> set[int]:
    """The turns a context finds as episodic (through the per-turn views of active leaves),
    each queried by its own text."""
    out = set()
    for t in turns:
        ctx = m.context(m.get(t).text, user_id="u", budget=30, now=T0 + 9 * DAY)
        if any(it.id == t and it.layer == "episodic" for it in ctx.items):
            out.add(t)
    return out


def test_turn_views_follow_eviction_update_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=5, layers=("working", "episodic"), lend_capacity=False)
    m = Memory(path, embedder="hashing", config=cfg)
    turns = [i for s in range(1, 5) for i in _session(m, s)]
    recs = item_rows(path)
    leaves = [r for r in recs.values() if r["kind"] == "segment" and r["status"] == "active"]
    evicted = [r for r in recs.values() if r["kind"] == "segment" and r["status"] == "evicted"]
    assert evicted  # the capacity is below what four sessions make
    want = {t for r in leaves for t in r["members"]}
    assert want and not want & {t for r in evicted for t in r["members"]}
    assert _found_through_episodes(m, turns) == want
    # re-embedding a turn moves its view
    tid = sorted(want)[0]
    m.update(tid, "Completely different words about volcanoes and lava.", user_id="u")
    ctx = m.context("volcanoes lava", user_id="u", budget=20, now=T0 + 9 * DAY)
    assert ctx.items[0].id == tid and ctx.items[0].layer == "episodic"
    m.close()
    m2 = Memory(path, embedder="hashing", config=cfg)
    assert _found_through_episodes(m2, turns) == want
    ctx2 = m2.context("volcanoes lava", user_id="u", budget=20, now=T0 + 9 * DAY)
    assert ctx2.items[0].id == tid
    m2.close()
    st = _load(path, cfg)
    u = st.users["u"]
    assert set(u.seg_of) == want and st.vectors.count(u.ns(NsCode.TURN_VIEW)) == len(want)


def _atomic(v: object) -> bool:
    if isinstance(v, tuple):
        return all(_atomic(x) for x in v)
    return v is None or isinstance(v, (bool, int, float, str))


def test_records_hold_only_atomic_values_and_leave_the_cyclic_gc(tmp_path: Path) -> None:
    """A record is untracked from the cyclic GC, which is sound only while none of its fields can
    reference a container (every kind of item, live and after a reopen, updates and the read-path
    caches included)."""
    p = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=4, max_segment_turns=2, semantic_capacity=3)
    for reopen in (False, True):
        with Memory(p, embedder="hashing", config=cfg) as m:
            if not reopen:
                ids = fill(m)
                m.update(ids[0], "Alice moved to Rome.", user_id="alice")
            m.context("Where does Alice live now?", user_id="alice", now=T0 + 1e6)
            st = m._st
            kinds = {r.kind for r in st.recs.values()}
            assert {"turn", "segment", "summary", "fact", "profile"} <= kinds
            for r in st.recs.values():
                assert not gc.is_tracked(r)
                bad = {f: getattr(r, f) for f in r.__slots__ if not _atomic(getattr(r, f))}  # type: ignore[attr-defined]
                assert not bad, (r.kind, bad)


def test_tree_height_is_the_deepest_remaining_level(tmp_path: Path) -> None:
    """tree_height reads the child lists only and may stop at the first node of the old height
    (``max_depth`` is never below the height): it must still find a deepest node wherever it
    sits in the walk, and a lower height once the deepest level is gone."""
    p = tmp_path / "m.db"
    with Memory(p, embedder="hashing", config=CFG):
        pass
    st = _load(p)
    u = UserState("u", 0)
    rng = np.random.default_rng(5)
    for trial in range(200):
        # a random forest of child lists under ROOT
        n = int(rng.integers(0, 40))
        ids = [ROOT] + list(range(1000, 1000 + n))
        ch: dict[int, list[int]] = {}
        depth = {ROOT: 0}
        for i in range(1, n + 1):
            par = ids[int(rng.integers(0, i))]  # ROOT or an earlier node
            ch.setdefault(par, []).append(ids[i])
            depth[ids[i]] = depth[par] + 1
        u.children = ch
        true = max(depth.values())
        u.max_depth = true + int(rng.integers(0, 3))  # an upper bound, as the memory keeps it
        st.tree_height(u)
        assert u.max_depth == true, trial
