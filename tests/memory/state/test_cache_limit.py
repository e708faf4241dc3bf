"""Memory(max_loaded_users=N), on both backends: users are loaded on first use, the least
recently used beyond N are evicted after each call (records, arena rows, turn views, lexical
entries), and an evicted user is loaded again transparently — with the same state, the same
contexts and searches, its access statistics kept."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_catch_up import CONFIG, LINES, QUERIES, snapshot

from lamina import InvalidInput, Memory
from lamina.embedders import get_embedder
from lamina.memory.state.records import NsCode, namespace
from memkit import DAY, T0, NoiseEmbedder

USERS = [f"user{i}" for i in range(5)]


class TieFree:
    """The hashing embedder plus a little noise drawn from each text: distinct texts never score
    exactly alike. (Exact ties order by arena row, and an evicted user's rows may come back in
    other rows: the same items then, possibly in another order among the tied.)"""

    name = "hashing-noise"
    dim = 384

    def __init__(self) -> None:
        self.base = get_embedder("hashing")
        self.noise = NoiseEmbedder()

    def embed(self, texts: list[str]) -> np.ndarray:
        x = self.base.embed(texts) + 0.05 * np.tile(self.noise.embed(texts), (1, 6))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def fill(m: Memory, rng: random.Random) -> None:
    """Three sessions per user (ended: episodes, facts and notes as well as archived turns)."""
    for s in range(3):
        for uid in USERS:
            msgs = [
                {"speaker": sp, "text": f"{tx} ({s}.{i})", "id": f"{uid}:{s}:{i}", "timestamp": T0 + s * DAY + 60 * i}
                for i, (sp, tx) in enumerate(rng.choices(LINES, k=9))
            ]
            m.add(msgs, user_id=uid, session_id=f"s{s}")
            if s < 2:
                m.end_session(user_id=uid, session_id=f"s{s}")


def views(m: Memory, uid: str) -> list[object]:
    """What a caller sees of a user: contexts (items, scores, gates, text) and archive searches."""
    out: list[object] = []
    for q in QUERIES:
        c = m.context(q, user_id=uid, budget=150, now=T0 + 30 * DAY, include_archive=True)
        out.append((c.render(), [(it.id, round(it.score, 6)) for it in c.items], c.gates, c.abstain))
        out.append(
            [(it.id, round(it.score, 6)) for it in m.search(q, user_id=uid, k=8, layers=["archive"], now=T0 + 30 * DAY)]
        )
    return out


def test_bad_limits_are_refused() -> None:
    with pytest.raises(InvalidInput, match="max_loaded_users must be >= 1"):
        Memory(None, embedder="hashing", max_loaded_users=0)
    with pytest.raises(TypeError, match="max_loaded_users must be an int"):
        Memory(None, embedder="hashing", max_loaded_users="2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_loaded_users must be an int"):
        Memory(None, embedder="hashing", max_loaded_users=True)


def test_the_limit_holds_and_an_evicted_user_returns_the_same_contexts(db: str) -> None:
    with Memory(db, embedder=TieFree(), config=CONFIG, listen=False) as full:
        fill(full, random.Random(5))
    # two handles side by side, the same calls in the same order: the one without a limit loads
    # every user at open and keeps them; its visits stay in its memory (it writes nothing until
    # it closes), while the limited one writes its visits as it evicts and reads them back
    full = Memory(db, embedder=TieFree(), config=CONFIG, listen=False)
    states = {uid: snapshot(full._st, full._st.users[uid]) for uid in USERS}
    with Memory(db, embedder=TieFree(), config=CONFIG, max_loaded_users=2, listen=False) as m:
        assert not m._st.users and sorted(m.users()) == USERS  # (loaded on first use)
        for _ in range(3):
            for uid in USERS:
                assert views(m, uid) == views(full, uid)
                assert len(m._st.users) <= 2
                assert uid in m._st.users  # (the user just served stays)
            assert sorted(m.users()) == USERS
        full.close()
        m.flush()
        # every user was evicted and loaded again at least once: the state a reload builds
        # equals the one the unlimited handle held (access counts apart: they moved since)
        for uid in USERS:
            m._user(uid)
            got = snapshot(m._st, m._st.users[uid])
            for key in states[uid]:
                if key != "recs":
                    assert got[key] == states[uid][key], (uid, key)
            m._trim()
            assert len(m._st.users) <= 2
        # the least recently used go first, and nothing of an evicted user stays in memory
        for uid in ("user1", "user3", "user0"):
            m.context("piano", user_id=uid)
        assert sorted(m._st.users) == ["user0", "user3"]
        idx = {row[0]: row[1] for row in m._store.users()}
        for uid in USERS:
            rows = [m._st.vectors.count(namespace(idx[uid], code)) for code in NsCode]
            if uid in m._st.users:
                assert rows[NsCode.ARCHIVE] == len(m._st.users[uid].active["archive"]) > 0
            else:
                assert rows == [0] * len(rows), uid
        assert {r.user_id for r in m._st.recs.values()} == {"user0", "user3"}


def test_eviction_keeps_access_statistics_and_writes_reach_evicted_users(db: str) -> None:
    with Memory(db, embedder=TieFree(), config=CONFIG, max_loaded_users=1, listen=False) as m:
        fill(m, random.Random(6))
        assert len(m._st.users) == 1
        hit = m.context("Where does Alice live?", user_id="user0", budget=150)
        ids = [it.id for it in hit.items]
        counts = {i: m.get(i, user_id="user0").access_count for i in ids}
        assert all(c >= 1 for c in counts.values())
        m.context("piano", user_id="user1")  # user0 evicted: its visits written first
        assert "user0" not in m._st.users
        assert {i: m.get(i, user_id="user0").access_count for i in ids} == counts
        # a write to an evicted user, a delete by id of an evicted user's item
        m.context("piano", user_id="user1")
        new = m.add([{"speaker": "Ann", "text": "I adopted a parrot.", "timestamp": T0 + 9 * DAY}], **_at("user0"))
        assert list(m._st.users) == ["user0"]
        m.context("piano", user_id="user1")
        report = m.delete(new[0], user_id="user0")
        assert report.ids == (new[0],) and list(m._st.users) == ["user0"]
        m.context("piano", user_id="user2")
        with pytest.raises(KeyError):
            m.get(new[0], user_id="user0")
        # the stored truth, seen by a handle without a limit
    with Memory(db, embedder=TieFree(), config=CONFIG, listen=False) as fresh:
        assert {i: fresh.get(i, user_id="user0").access_count for i in ids} == counts
        assert sorted(fresh.users()) == USERS


def _at(uid: str) -> dict[str, str]:
    return {"user_id": uid, "session_id": "s9"}
