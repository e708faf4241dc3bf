"""Property: after any sequence of writes and reads (adds, session ends, updates, deletes,
contexts), export -> import into a fresh store gives the same stored rows (ids aside), the same
notes and links, and the same contexts and searches as the exported store, with and without the
vectors in the dump."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dumpkit import mapped_links, mapped_note, normalised
from lamina import Memory, MemoryConfig, NotFoundError
from lamina.memory.dump.jsonl import export_jsonl, import_jsonl

USERS = ["ann", "bo"]
CITIES = ["Oslo", "Lima", "Quito", "Hanoi"]
PETS = ["cat", "dog", "parrot"]
T0 = 1_700_000_000.0
# small capacities and a low promotion threshold: evictions, notes and tree moves happen early
CONFIG = MemoryConfig(working_capacity=4, episodic_capacity=8, semantic_capacity=6, promote_threshold=1.0)

op = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(USERS), st.integers(0, 2), st.sampled_from(CITIES), st.integers(1, 3)),
    st.tuples(st.just("end"), st.sampled_from(USERS), st.integers(0, 2)),
    st.tuples(st.just("ctx"), st.sampled_from(USERS), st.sampled_from(CITIES + PETS)),
    st.tuples(st.just("upd"), st.sampled_from(USERS), st.sampled_from(PETS)),
    st.tuples(st.just("del"), st.sampled_from(USERS), st.sampled_from(CITIES)),
)


def _apply(mem: Memory, ops: list[tuple[Any, ...]]) -> None:
    t = T0
    for o in ops:
        t += 60
        kind, user = o[0], o[1]
        if kind == "add":
            _, _, s, city, n = o
            msgs = [
                {"speaker": user.title(), "text": f"I moved to {city}. Line {i} at {int(t)}.", "timestamp": t + i}
                for i in range(n)
            ]
            mem.add(msgs, user_id=user, session_id=f"s{s}")
        elif kind == "end" and user in mem.users():
            try:
                mem.end_session(user_id=user, session_id=f"s{o[2]}", now=t)
            except NotFoundError:
                pass  # (a session this user never had)
        elif kind == "ctx" and user in mem.users():
            mem.context(f"Where does {user} live? {o[2]}", user_id=user, budget=40, now=t)
        elif kind == "upd" and user in mem.users():
            hits = mem.search("moved", user_id=user, k=1, layers=["archive"])
            if hits:
                mem.update(hits[0].id, f"I adopted a {o[2]}.", user_id=user, timestamp=t)
        elif kind == "del" and user in mem.users():
            hits = mem.search(o[2], user_id=user, k=1, layers=["archive"])
            if hits:
                mem.delete(hits[0].id, user_id=user)


@settings(max_examples=25, deadline=None)
@given(st.lists(op, min_size=1, max_size=25), st.booleans())
# a fact superseded by a fact deleted since (its superseded_by named a gone item: a bad dump)
@example(
    ops=[*[("add", "ann", 0, "Oslo", 1)] * 5, ("add", "bo", 0, "Oslo", 1), ("add", "bo", 0, "Lima", 1)]
    + [("end", "bo", 0), ("del", "bo", "Lima")],
    vectors=False,
)
def test_any_history_survives_a_round_trip(ops: list[tuple[Any, ...]], vectors: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "a.db"
        with Memory(src, embedder="hashing", config=CONFIG) as a:
            _apply(a, ops)
            buf = io.StringIO()
            export_jsonl(a, buf, vectors=vectors)
        with (
            Memory(src, embedder="hashing", config=CONFIG) as a,
            Memory(Path(d) / "b.db", embedder="hashing", config=CONFIG) as b,
        ):
            reports = import_jsonl(b, io.StringIO(buf.getvalue()))
            assert b.users() == a.users()
            # the notes and links as the reads see them, ids mapped
            ids = {old: new for r in reports for old, new in r.ids.items()}
            for old, new in ids.items():
                assert b.note(new) == mapped_note(a.note(old), ids)
                assert b.links(new) == mapped_links(a.links(old), ids)
            # every stored field of every row (ids by position), then what the reads see
            again_a, again_b = io.StringIO(), io.StringIO()
            export_jsonl(a, again_a, vectors=True)
            export_jsonl(b, again_b, vectors=True)
            assert normalised(again_b.getvalue()) == normalised(again_a.getvalue())
            for u in a.users():
                assert a.stats(user_id=u).layers == b.stats(user_id=u).layers
                for q in [*CITIES, *PETS, "Where does she live?"]:
                    x = a.context(q, user_id=u, budget=60, now=T0 + 10**6)
                    y = b.context(q, user_id=u, budget=60, now=T0 + 10**6)
                    assert x.render() == y.render() and x.abstain == y.abstain, (u, q)
                    assert [(i.text, i.layer) for i in a.search(q, user_id=u, k=6)] == [
                        (i.text, i.layer) for i in b.search(q, user_id=u, k=6)
                    ]
