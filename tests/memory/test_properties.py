"""Memory invariants under random operation sequences (hypothesis): no cross-user leak, no item
lost, superseded facts never served as current, and the newest statement of a functional
predicate is the current value once everything is consolidated."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina import Memory, MemoryConfig, NotFoundError
from memkit import rows

CITIES = ["Paris", "Berlin", "Rome", "Oslo"]
PETS = ["Max", "Rex", "Luna"]
USERS = [f"user{i}" for i in range(5)]

op = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(USERS),
        st.integers(0, 2),
        st.sampled_from(CITIES),
        st.sampled_from(PETS),
        st.integers(1, 4),
    ),
    st.tuples(st.just("end"), st.sampled_from(USERS), st.integers(0, 2)),
    st.tuples(st.just("ctx"), st.sampled_from(USERS), st.sampled_from(CITIES + PETS)),
    st.tuples(st.just("del"), st.sampled_from(USERS)),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(op, min_size=1, max_size=30))
def test_users_isolated_and_nothing_lost(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        _run(ops, Path(d) / "m.db")


def _run(ops: list[tuple], path: Path) -> None:  # type: ignore[type-arg]
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=3, semantic_capacity=4, max_segment_turns=2)
    m = Memory(path, embedder="hashing", config=cfg)
    t = 1.7e9
    added: dict[str, int] = {u: 0 for u in USERS}
    marker = {u: f"zq{u[-1]}x" for u in USERS}  # a token only this user's texts contain
    latest_city: dict[str, str] = {}
    sessions: dict[str, dict[str, float]] = {u: {} for u in USERS}  # session -> time of its last add
    for o in ops:
        t += 3600
        if o[0] == "add":
            _, u, s, city, pet, n = o
            msgs = [{"speaker": u, "text": f"{marker[u]} I live in {city} now."}]
            msgs += [{"speaker": u, "text": f"{marker[u]} my dog is called {pet} and chat {i}"} for i in range(n - 1)]
            m.add(msgs, user_id=u, session_id=f"s{s}", timestamp=t)
            added[u] += n
            latest_city[u] = city
            sessions[u][f"s{s}"] = t
        elif o[0] == "end":
            _, u, s = o
            if f"s{s}" in sessions[u]:
                m.end_session(user_id=u, session_id=f"s{s}")
        elif o[0] == "ctx":
            _, u, q = o
            if u not in m.users():
                with pytest.raises(NotFoundError):
                    m.context(q, user_id=u)
                continue
            ctx = m.context(f"where does {u} live {q}", user_id=u, budget=200)
            for it in ctx.items:
                assert it.user_id == u
                for v in USERS:
                    if v != u:
                        assert marker[v] not in it.render()
            for it in m.search(q, user_id=u, k=50, layers=["archive", "episodic", "semantic", "history"]):
                assert it.user_id == u
        elif o[0] == "del":
            _, u = o
            if u in m.users():
                n = m.stats(user_id=u).items
                assert m.delete_user(user_id=u).deleted == n
                added[u] = 0
                latest_city.pop(u, None)
                sessions[u] = {}
    assert sorted(m.users()) == sorted(u for u in USERS if added[u])
    for u in USERS:
        if added[u] == 0:
            assert u not in m.users()
            continue
        assert m.stats(user_id=u).archive_turns == added[u]  # every turn ever added is in the archive
        # consolidate everything, the sessions in the order they were last written to
        for s in sorted(sessions[u], key=sessions[u].__getitem__):
            m.end_session(user_id=u, session_id=s)
        cur = [f for f in m.facts(user_id=u) if f.predicate == "lives_in"]
        assert len(cur) <= 1  # one current value of a functional predicate
        evicted = rows(
            path,
            "SELECT COUNT(*) AS n FROM items WHERE user_id=? AND kind='fact' AND "
            "predicate='lives_in' AND status='evicted'",
            u,
        )[0]["n"]
        if evicted == 0:  # (the capacity projection may take a current fact out)
            assert [f.object for f in cur] == [latest_city[u]]  # the newest statement is the current value
        for f in m.facts(user_id=u, current=False):
            if f.valid_to is not None:
                assert f.layer == "history" and f.id not in {c.id for c in cur}
                if f.predicate == "lives_in" and cur:
                    assert f.valid_from <= cur[0].valid_from  # current beats stale by time
    m.close()
