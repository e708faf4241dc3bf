"""Memory invariants under random operation sequences (hypothesis): no cross-user leak, no item
lost, superseded facts never served as current."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lamina import Memory, MemoryConfig

CITIES = ["Paris", "Berlin", "Rome", "Oslo"]
PETS = ["Max", "Rex", "Luna"]
USERS = [f"user{i}" for i in range(5)]

op = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(USERS), st.integers(0, 2), st.sampled_from(CITIES), st.sampled_from(PETS),
              st.integers(1, 4)),
    st.tuples(st.just("end"), st.sampled_from(USERS), st.integers(0, 2)),
    st.tuples(st.just("ctx"), st.sampled_from(USERS), st.sampled_from(CITIES + PETS)),
    st.tuples(st.just("del"), st.sampled_from(USERS)),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(op, min_size=1, max_size=30))
def test_users_isolated_and_nothing_lost(ops: list[tuple]) -> None:
    m = Memory(config=MemoryConfig(working_capacity=4, episodic_capacity=3, semantic_capacity=4, max_segment_turns=2))
    t = 1.7e9
    added: dict[str, int] = {u: 0 for u in USERS}
    marker = {u: f"zq{u[-1]}x" for u in USERS}  # a token only this user's texts contain
    latest_city: dict[str, str] = {}
    for o in ops:
        t += 3600
        if o[0] == "add":
            _, u, s, city, pet, n = o
            msgs = [{"speaker": u, "text": f"{marker[u]} I live in {city} now."}]
            msgs += [{"speaker": u, "text": f"{marker[u]} my dog is called {pet} and chat {i}"} for i in range(n - 1)]
            m.add(msgs, u, f"s{s}", timestamp=t)
            added[u] += n
            latest_city[u] = city
        elif o[0] == "end":
            _, u, s = o
            if u in m.users() and (u, f"s{s}") in m._sessions:
                m.end_session(u, f"s{s}")
        elif o[0] == "ctx":
            _, u, q = o
            ctx = m.context(f"where does {u} live {q}", u, budget=200)
            for it in ctx.items:
                assert it.user_id == u
                for v in USERS:
                    if v != u:
                        assert marker[v] not in it.render()
            for it in m.search(q, u, k=50, layers=["archive", "episodic", "semantic", "history"]):
                assert it.user_id == u
        elif o[0] == "del":
            _, u = o
            if u in m.users():
                m.delete_user(u)
                added[u] = 0
                latest_city.pop(u, None)
    for u in USERS:
        if added[u] == 0:
            assert u not in m.users()
            continue
        assert m.stats(u)["archive_turns"] == added[u]  # every turn ever added is in the archive
        cur = [f for f in m.facts(u) if f.predicate == "lives_in"]
        assert len(cur) <= 1  # one current value of a functional predicate
        for f in m.facts(u, current=False):
            if f.valid_to is not None:
                assert f.layer == "history" and f.id not in {c.id for c in cur}
    m.close()
