"""lamina.memory.read.ranking.rank_many: the candidates of many queries ranked at once are those of
lamina.memory.read.candidates.rank one query at a time (lists, order, scores, relevances, speaker-scope
demotions, the turns found through their episodes), with the replay clock, the domain gate, the
archive, deleted turns, superseded facts and unknown names; and the fill order of all the queries
sorted at once (Ranked.pools) chooses what the fill of each query alone chooses."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SHARED_DATA
from lamina import Memory
from lamina.memory.config import ACTIVE_LAYERS
from lamina.memory.read.candidates import Candidates, Lookup, fused_turns_many, rank, search
from lamina.memory.read.fill import fill, gate_rows, take, working_tokens
from lamina.memory.read.ranking import Ranked, rank_many
from lamina.memory.state.records import text_key
from memkit import DAY, FILLER, T0, chat

QUERIES = [
    "where does Alice live now",
    "what is the dog called",
    "when did Bob start the new job",
    "what did Alice say about the doctor",
    "Bob and the cat",
    "who moved to Berlin and when",
    "football",
    "zzz unrelated words qqq",
]
STORY = [
    ("Alice", "I moved to Paris last spring."),
    ("Bob", "How is Paris treating you?"),
    ("Alice", "My dog is called Max and he loves the park."),
    ("Alice", "My doctor says my knee is healing."),
    ("Bob", "I started a new job at the bank on Monday."),
    ("Bob", "My cat is called Tom."),
]


def _view(cd: Candidates | None) -> Any:
    if cd is None:
        return None
    return (
        [(L, [(s.hex(), r.id) for s, r in lst]) for L, lst in cd.per_layer.items()],
        [(L, x.hex()) for L, x in cd.relevance.items()],
        [(i, x.hex()) for i, x in cd.demoted.items()],
        sorted(cd.via),
    )


def _compare(m: Memory, qs: list[str], us: list[str], now: float | None, domains: list[Any], archive: bool) -> int:
    """rank_many of the queries against rank of each alone; returns how many have candidates."""
    st = m._st
    users = [m._user(u) for u in us]
    assert all(u is not None for u in users)
    layers = list(ACTIVE_LAYERS) + (["archive"] if archive else [])
    depth = 256
    Q = m._embed(qs)
    jobs = [(u, layers, q) for u, q in zip(users, qs)]
    found = search(st, jobs, Q, depth, views=True)  # type: ignore[arg-type]
    lookup = Lookup(st, found)
    turns = fused_turns_many(st, lookup, Q, found, qs, now, domains)
    ranked = rank_many(st, users, qs, layers, found, depth, now, domains, lookup, turns)  # type: ignore[arg-type]
    many = [ranked.candidates(i) for i in range(len(ranked))]
    assert [ranked.empty(i) for i in range(len(ranked))] == [x is None for x in many]
    assert [ranked.relevance[i] for i, x in enumerate(many) if x is not None] == [x.relevance for x in many if x]
    alone = [
        rank(st, u, Q[i : i + 1].copy(), q, layers, found[i], depth, now, d, u.staleness(st.recs))  # type: ignore[arg-type]
        for i, (u, q, d) in enumerate(zip(users, qs, domains))
    ]
    assert [_view(x) for x in many] == [_view(x) for x in alone]
    _compare_pools(m, ranked, many, layers)
    return sum(x is not None for x in many)


def _compare_pools(m: Memory, ranked: Ranked, many: list[Candidates | None], layers: list[str]) -> None:
    """Ranked.pools walked by fill.take chooses what fill.fill chooses from each query's
    candidates alone (the same records, scores and tokens; the turns found through their
    episodes flagged as in the candidates' via), at budgets that cut the pool early and late."""
    st = m._st
    live = [i for i, cd in enumerate(many) if cd is not None]
    rows = gate_rows([many[i].relevance for i in live], layers, st.config)  # type: ignore[union-attr]
    gates = dict(zip(live, rows))
    pools = ranked.pools(st, gates)
    for i in range(len(many)):
        a, b = pools.starts[i], pools.ends[i]
        cd = many[i]
        if cd is None:
            assert a == b
            continue
        g, beta = gates[i]
        for budget in (16, 256, 1024):
            want, want_used = fill(st, cd.per_layer, g, beta, budget, cd.demoted)
            at, used = take(
                st,
                pools.recs[a:b],
                budget,
                n_working=pools.working_ends[i] - a,
                working=working_tokens(g, budget, st.config),
                sizes=pools.sizes[a:b],
                keys=pools.keys[a:b],
                least=pools.least[a:b],
            )
            got = [(pools.scores[a + j], pools.recs[a + j]) for j in at]
            assert [(s.hex(), r.id) for s, r in got] == [(s.hex(), r.id) for s, r in want]
            assert used == want_used
            assert pools.least[a:b] == [min(z[0] for z in pools.sizes[j:b]) for j in range(a, b)]
            assert pools.keys[a:b] == [text_key(r) if r.kind == "turn" else None for r in pools.recs[a:b]]
            assert [pools.via[a + j] for j in at] == [r.id in cd.via for _, r in got]


def test_rank_many_is_rank_one_query_at_a_time() -> None:
    m = Memory(None, embedder="hashing")
    try:
        for s in range(4):
            for u in ("alice", "bob"):
                chat(m, u, f"s{s}", STORY[s % 3 :] + FILLER[s : s + 3], T0 + s * DAY, f"{u}{s}")
                m.end_session(user_id=u, session_id=f"s{s}")
        live = chat(m, "alice", "live", [("Alice", "Now I live in Lyon, not Paris.")], T0 + 9 * DAY, "live")
        m.add(
            [{"speaker": "Alice", "text": "My doctor is on holiday.", "domain": "health"}],
            user_id="alice",
            session_id="live",
        )
        m.delete(m.search("dog called Max", user_id="alice", k=1, layers=["archive"])[0].id, user_id="alice")
        assert live
        qs = QUERIES * 2
        us = ["alice"] * len(QUERIES) + ["bob"] * len(QUERIES)
        shown = 0
        for now in (None, T0 + 2 * DAY + 3600, T0 + 30 * DAY):
            for domains in ([None] * len(qs), ["health", None] * len(QUERIES)):
                for archive in (False, True):
                    shown += _compare(m, qs, us, now, domains, archive)
        assert shown > 50
    finally:
        m.close()


@pytest.mark.data
def test_rank_many_on_locomo() -> None:
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(SHARED_DATA / "locomo", limit=2)
    m = Memory(None, embedder="hashing")
    try:
        for c in convs:
            for s in c.sessions:
                if s.turns:
                    sid = f"session_{s.number}"
                    msgs = [
                        {"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp}
                        for t in s.turns
                    ]
                    m.add(msgs, user_id=c.sample_id, session_id=sid)
                    m.end_session(user_id=c.sample_id, session_id=sid, now=s.turns[-1].timestamp)
        qs = [q.question for c in convs for q in c.questions]
        us = [c.sample_id for c in convs for _ in c.questions]
        now = max(t.timestamp for c in convs for t in c.turns) + DAY
        assert _compare(m, qs, us, now, [None] * len(qs), False) > 200
    finally:
        m.close()
