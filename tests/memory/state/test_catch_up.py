"""The change log (on both backends: ``db`` is a SQLite file, then a PostgreSQL database): a handle whose state of a user another writer moved applies the rows and
tombstones written since (``MemoryState.catch_up``), and ``delete`` patches the state the same
way (``MemoryState.apply``). Either way the state must equal one loaded afresh from the store:
every per-user index, the vectors of every namespace, the turn views and the lexical index, and
so every context."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina import Memory, MemoryConfig
from lamina.memory.state.memstate import MemoryState, UserState
from lamina.memory.state.records import ITEM_FIELDS, NO_TREE, NsCode, namespace
from memkit import DAY, FILLER, T0

LINES = FILLER + [
    ("Alice", "I moved to Paris last week."),
    ("Bob", "My dog is called Rex."),
    ("Alice", "I work as a nurse at the city hospital."),
    ("Bob", "I live in Berlin now."),
    ("Carol", "Alice and I went hiking in the Alps."),
    ("Alice", "My sister Dana is visiting in June."),
    ("Bob", "I started learning the piano."),
    ("Carol", "I adopted a cat named Misty."),
]
QUERIES = ["Where does Alice live?", "What is the dog called?", "Who went hiking?", "piano lessons", "cat"]
CONFIG = MemoryConfig(working_capacity=4, episodic_capacity=6, semantic_capacity=5)


# Access statistics that ``context`` bumps stay in the process until its next write and do not
# move a user's version (documented): the one part of a record other handles may not share.
FIELDS = tuple(f for f in ITEM_FIELDS if f not in ("access_count", "last_access"))


def snapshot(st: MemoryState, u: UserState) -> dict[str, Any]:
    """Everything a user's state holds, in a canonical form (caches left out)."""
    recs = {i: tuple(getattr(st.recs[i], f) for f in FIELDS) for i in sorted(u.ids)}
    active = sorted(i for L in u.active.values() for i in L)
    nss = {code: namespace(u.idx, code) for code in NsCode}
    arenas = {int(code): sorted(st.vectors._namespace_ids(ns)) for code, ns in nss.items()}
    views = sorted(k for k in st.vectors._namespace_ids(nss[NsCode.TURN_VIEW]))
    lex = st.lex.stats(nss[NsCode.TURN_VIEW]) if st.lex.count(nss[NsCode.TURN_VIEW]) else {}
    lex = {k: v for k, v in lex.items() if k not in ("dead_docs", "postings")}  # (garbage not yet compacted)
    # the episodic pool kept beside the active sets is what their records say
    episodic = [st.recs[i] for i in u.active["episodic"]]
    assert u.pool_leaves == {r.id for r in episodic if r.kind == "segment"}
    assert u.pool_sessions == {r.id for r in episodic if r.kind != "segment" and r.parent_id == NO_TREE}
    return {
        "recs": recs,
        "vectors": np.round(st.vecs(active), 6).tolist() if active else [],
        "view_vectors": np.round(st.vectors.get(views), 6).tolist() if views else [],
        "arenas": arenas,
        "lexical": lex,
        "by_src": dict(sorted(u.by_src.items())),
        "working": {k: v for k, v in sorted(u.working.items()) if v},
        "children": {k: v for k, v in sorted(u.children.items()) if v},
        "current": {k: v for k, v in sorted(u.current.items()) if v},
        "profiles": dict(sorted(u.profiles.items())),
        "max_depth": u.max_depth,
        "drift": (u.drift_total, u.drift_last, u.drift_updates),
        "facts": list(u.facts),
        "n_active": dict(u.n_active),
        "active": {k: sorted(v) for k, v in u.active.items()},
        "seg_of": dict(sorted(u.seg_of.items())),
        "people": [(k, name) for k, (name, _pat) in u.people.items()],
        "named": dict(sorted(u.named.items())),
        "derived": {k: sorted(v) for k, v in sorted(u.derived.items()) if v},
        "session_turns": dict(sorted(u.session_turns.items())),
        "sessions": sorted((k, tuple(v)) for k, v in st.sessions.items() if k[0] == u.user_id),
        "version": u.version,
    }


def contexts(m: Memory, user: str) -> list[str]:
    return [m.context(q, user_id=user, budget=120, now=T0 + 400 * DAY).render() for q in QUERIES]


def assert_same_as_fresh(m: Memory, path: Path | str, users: list[str]) -> None:
    """``m``'s state of each user equals the state a new handle loads from the file. (Under
    ``m``'s lock: on PostgreSQL its listener may catch up in the background meanwhile.)"""
    with m._lock, Memory(path, embedder="hashing", config=CONFIG, listen=False) as fresh:
        m._sync()
        for uid in users:
            m._user(uid)
        assert sorted(m.users()) == sorted(fresh.users())
        for uid in fresh.users():
            got = m._st.users[uid]
            want = fresh._st.users[uid]
            a, b = snapshot(m._st, got), snapshot(fresh._st, want)
            for key in b:
                assert a[key] == b[key], f"user {uid}: {key} differs from a fresh load"
            assert contexts(m, uid) == contexts(fresh, uid)
            fresh.flush()


def _turns(rng: random.Random, n: int, t: float, tag: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        sp, tx = LINES[rng.randrange(len(LINES))]
        out.append({"speaker": sp, "text": tx, "id": f"{tag}:{i}", "timestamp": t + 60 * i})
    return out


def _random_op(m: Memory, rng: random.Random, step: int, users: list[str]) -> None:
    uid = rng.choice(users)
    t = T0 + step * DAY
    op = rng.random()
    known = uid in m.users()
    if not known or op < 0.45:
        m.add(_turns(rng, rng.randint(1, 6), t, f"s{step}"), user_id=uid, session_id=f"s{step % 3}")
    elif op < 0.65:
        sessions = [s for (u, s), v in m._st.sessions.items() if u == uid and v[0] == "open"]
        if sessions:
            m.end_session(user_id=uid, session_id=rng.choice(sessions))
    elif op < 0.8:
        items = m.search("anything", user_id=uid, k=50, layers=["archive", "episodic", "semantic", "working"])
        if items:
            m.delete(rng.choice(items).id, user_id=uid)
    elif op < 0.9:
        items = m.search("anything", user_id=uid, k=50, layers=["archive", "episodic", "semantic"])
        if items:
            m.update(rng.choice(items).id, f"Edited line {step}: I moved to Oslo.", user_id=uid)
    elif op < 0.95:
        m.context(rng.choice(QUERIES), user_id=uid, budget=80, now=t)
    else:
        m.delete_user(user_id=uid)


@pytest.mark.parametrize("seed", range(8))
def test_a_second_handle_catches_up_to_exactly_what_a_fresh_load_sees(db: str, seed: int) -> None:
    rng = random.Random(seed)
    path = db
    users = ["ann", "bob"]
    with Memory(path, embedder="hashing", config=CONFIG) as a, Memory(path, embedder="hashing", config=CONFIG) as b:
        for step in range(60):
            _random_op(a, rng, step, users)
            if step % 4 == 3:
                assert_same_as_fresh(b, path, users)  # b: caught up through the change log
                assert_same_as_fresh(a, path, users)  # a: its own deletes patched in place


def test_catch_up_reads_only_the_change(db: str) -> None:
    """A handle behind by one write reads that write's rows, not the user's."""
    path = db
    rng = random.Random(1)
    with Memory(path, embedder="hashing", config=CONFIG) as a, Memory(path, embedder="hashing", config=CONFIG) as b:
        for step in range(30):
            a.add(_turns(rng, 4, T0 + step * DAY, f"s{step}"), user_id="u", session_id=f"s{step}")
            a.end_session(user_id="u", session_id=f"s{step}")
        b.context("x", user_id="u", budget=50)  # b loads u
        calls: list[tuple[int, int]] = []
        real = b._store.changes

        def spy(user_id: str, since: int) -> Any:
            rows, dead = real(user_id, since)
            calls.append((len(rows), len(dead)))
            return rows, dead

        b._store.changes = spy  # type: ignore[method-assign]
        (tid,) = a.add([{"speaker": "Ann", "text": "One more line."}], user_id="u", session_id="late")
        b.context("x", user_id="u", budget=50)
        assert calls == [(1, 0)]
        a.delete(tid, user_id="u")
        b.context("x", user_id="u", budget=50)
        assert calls[1] == (0, 1)
        assert tid not in b._st.recs
    with Memory(path, embedder="hashing", config=CONFIG) as m:
        assert_same_as_fresh(m, path, ["u"])


def test_a_user_deleted_and_created_again_elsewhere_is_loaded_afresh(db: str) -> None:
    path = db
    with Memory(path, embedder="hashing", config=CONFIG) as a, Memory(path, embedder="hashing", config=CONFIG) as b:
        a.add([{"speaker": "Ann", "text": "My secret code is 1234."}], user_id="u", session_id="s")
        assert b.search("code", user_id="u", k=1)
        a.delete_user(user_id="u")
        a.add([{"speaker": "Ann", "text": "Hello again."}], user_id="u", session_id="s")
        texts = [it.text for it in b.search("code", user_id="u", k=10, layers=["archive"])]
        assert texts == ["Hello again."]
        assert_same_as_fresh(b, path, ["u"])


def test_an_updated_text_is_judged_stale_by_its_new_text(db: str) -> None:
    """Staleness weights are cached per item id; an update must not keep the old text's weight
    (found by the catch-up check: a handle served an edited turn a fresh load demotes)."""
    path = db
    lines = [("Bob", "I live in Berlin now."), ("Bob", "The weather is nice."), ("Ann", "Great.")]
    with Memory(path, embedder="hashing", config=CONFIG) as m:
        for i, (sp, tx) in enumerate(lines * 2):
            m.add([{"speaker": sp, "text": tx, "timestamp": T0 + 60 * i}], user_id="u", session_id="s1")
        m.end_session(user_id="u", session_id="s1")
        m.add([{"speaker": "Bob", "text": "I live in Oslo now.", "timestamp": T0 + DAY}], user_id="u", session_id="s2")
        m.end_session(user_id="u", session_id="s2")
        for q in QUERIES:  # fill the staleness cache
            m.context(q, user_id="u", budget=120, now=T0 + 2 * DAY)
        weather = m.search("The weather is nice.", user_id="u", k=1, layers=["archive"])[0]
        m.update(weather.id, "I live in Berlin now.", user_id="u")
        got = contexts(m, "u")
    with Memory(path, embedder="hashing", config=CONFIG) as fresh:
        assert got == contexts(fresh, "u")
