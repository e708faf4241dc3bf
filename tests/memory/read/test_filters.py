"""Metadata filters on the read path: a filtered search returns ``min(k, matching)`` items, every
one matching (hypothesis: the filter is pushed into the native dense and lexical searches, so no
post-filter starves ``k``); contexts draw on matching items only; bad filters and unknown keys
raise, naming what was wrong."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina import InvalidInput, Memory
from lamina.memory.metadata import parse_filters
from memkit import DAY, T0

CATS = ["work", "home", "health"]
WORDS = ["apple", "river", "train", "garden", "music", "coffee"]


def _fill(mem: Memory, n: int, seed: int = 0) -> list[dict[str, object]]:
    """``n`` turns of user ``u`` with metadata drawn from ``seed``; returns each turn's metadata."""
    metas: list[dict[str, object]] = []
    msgs = []
    for i in range(n):
        j = (i * 7 + seed * 3) % 97
        md: dict[str, object] = {"category": CATS[j % 3], "priority": j % 5, "tags": [WORDS[j % 6], WORDS[(j + 1) % 6]]}
        metas.append(md)
        msgs.append({"speaker": "Ann", "text": f"{WORDS[j % 6]} {WORDS[(j * 5) % 6]} turn {i}", "metadata": md})
    mem.add(msgs, user_id="u", session_id="s", timestamp=T0)
    return metas


FILTERS = [
    {"category": "work"},
    {"category": {"in": ["home", "health"]}},
    {"priority": {"gte": 2, "lte": 3}},
    {"tags": "apple"},
    {"or": [{"category": "work"}, {"priority": {"gt": 3}}]},
    {"and": [{"category": {"ne": "home"}}, {"tags": {"in": ["river", "music"]}}]},
    {"created_at": {"gte": T0 - DAY, "lt": T0 + DAY}},
]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 50),
    k=st.integers(1, 25),
    which=st.integers(0, len(FILTERS) - 1),
    query=st.sampled_from(WORDS),
)
def test_a_filtered_search_returns_min_k_matching_items(n: int, seed: int, k: int, which: int, query: str) -> None:
    f = FILTERS[which]
    with Memory(None, embedder="hashing") as mem:
        _fill(mem, n, seed)
        flt = parse_filters(f)
        assert flt is not None
        every = mem.list_items(user_id="u", limit=1000).items
        matching = [e for e in every if e.kind == "turn" and flt.matches(e)]
        got = mem.search(query, user_id="u", k=k, layers=["archive"], filters=f)
        assert len(got) == min(k, len(matching))
        assert all(flt.matches(_Rec(it.metadata, it)) for it in got)
        # the k best of the matching items: what an unfiltered search ranks first among them
        ranked = mem.search(query, user_id="u", k=1000, layers=["archive"])
        best = [it.id for it in ranked if flt.matches(_Rec(it.metadata, it))][:k]
        assert sorted(it.score for it in got) == sorted(it.score for it in ranked if it.id in best)


class _Rec:
    """An item seen as a record (the fields a filter reads)."""

    def __init__(self, md: dict[str, object], it: object) -> None:
        self.metadata = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in md.items())
        self.created_at = getattr(it, "timestamp", None)
        self.session_id = getattr(it, "session_id", None)
        self.speaker = getattr(it, "speaker", None)
        self.kind = getattr(it, "kind", None)


def test_context_and_batches_draw_on_matching_items_only() -> None:
    with Memory(None, embedder="hashing") as mem:
        _fill(mem, 80)
        mem.end_session(user_id="u", session_id="s")
        f = {"category": "health", "priority": {"lte": 2}}
        flt = parse_filters(f)
        assert flt is not None
        ctx = mem.context("apple river", user_id="u", filters=f, budget=4000)
        assert ctx.items and all(flt.matches(_Rec(it.metadata, it)) for it in ctx.items)
        qs = ["apple", "music", "river garden", "coffee", "train music"]  # (RANK_MANY: ranked in numpy steps)
        batch = mem.context_batch(qs, user_ids="u", filters=f)
        assert all(all(flt.matches(_Rec(it.metadata, it)) for it in c.items) for c in batch)
        one = [mem.context(q, user_id="u", filters=f) for q in qs]
        assert [[it.id for it in c.items] for c in batch] == [[it.id for it in c.items] for c in one]
        many = mem.search_batch(["apple", "coffee"], user_ids="u", k=5, layers=["archive"], filters=f)
        assert all(len(r) == 5 and all(it.metadata["category"] == "health" for it in r) for r in many)


def test_metadata_is_returned_stored_and_merged(tmp_path: object) -> None:
    path = f"{tmp_path}/m.db"
    with Memory(path, embedder="hashing") as mem:
        (i,) = mem.add(
            [{"speaker": "Ann", "text": "I moved to Oslo", "metadata": {"topic": "move", "n": 2}}],
            user_id="u",
            metadata={"agent_id": "a1", "topic": "life"},
        )
    with Memory(path, embedder="hashing") as mem:  # (reopened: read back from the store)
        it = mem.get(i, user_id="u")
        assert it.metadata == {"agent_id": "a1", "n": 2, "topic": "move"}
        assert it.session_id == "default"
        hit = mem.search("Oslo", user_id="u", layers=["archive"], filters={"agent_id": "a1"})
        assert [h.metadata for h in hit] == [it.metadata]


@pytest.mark.parametrize(
    ("filters", "err", "words"),
    [
        ({"catgory": "work"}, InvalidInput, "unknown key 'catgory'"),
        ({"category": {"near": "work"}}, InvalidInput, "unknown operator 'near'"),
        ({"priority": {"gte": "two"}}, InvalidInput, "must be a number"),
        ({"created_at": {"gte": "yesterday"}}, InvalidInput, "not an ISO-8601 time"),
        ({"category": {"in": []}}, InvalidInput, "non-empty list"),
        ({"or": []}, InvalidInput, "non-empty list of filters"),
        (["category"], TypeError, "must be a dict"),
        ({"speaker": {"gte": 1}}, InvalidInput, "is text"),
    ],
)
def test_bad_filters_raise_naming_the_problem(filters: object, err: type[Exception], words: str) -> None:
    with Memory(None, embedder="hashing") as mem:
        _fill(mem, 3)
        with pytest.raises(err, match=words):
            mem.search("apple", user_id="u", filters=filters)  # type: ignore[arg-type]
        with pytest.raises(err, match=words):
            mem.context("apple", user_id="u", filters=filters)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"text": "hi", "agent_id": "a"}, "unknown key 'agent_id'.*'metadata'"),
        ({"text": "hi", "metadata": {"x": [1]}}, r"\['x'\]\[0\] must be a str"),
        ({"text": "hi", "metadata": {"x": float("nan")}}, "must be finite"),
        ({"text": "hi", "metadata": {"session_id": "s"}}, "reserved"),
        ({"text": "hi", "metadata": {"x": {"y": 1}}}, "must be a str, int, float, bool or list of str"),
    ],
)
def test_bad_messages_and_metadata_raise_naming_the_key(message: dict[str, object], words: str) -> None:
    with Memory(None, embedder="hashing") as mem:
        with pytest.raises((InvalidInput, TypeError), match=words):
            mem.add([message], user_id="u")
        assert mem.users() == []


def test_list_memories_pages_with_an_opaque_cursor_and_filters() -> None:
    with Memory(None, embedder="hashing") as mem:
        metas = _fill(mem, 25)
        f = {"category": "work"}
        want = sum(1 for m in metas if m["category"] == "work")
        seen: list[int] = []
        cursor = None
        pages = 0
        while True:
            page = mem.list_memories(user_id="u", filters=f, cursor=cursor, limit=3)
            assert len(page.items) <= 3 and all(it.metadata["category"] == "work" for it in page.items)
            seen += [it.id for it in page.items]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        assert len(seen) == want and seen == sorted(set(seen)) and pages == -(-want // 3)
        everything = mem.list_memories(user_id="u", limit=1000)  # (turns, and the segments of the overflow)
        assert sum(it.kind == "turn" for it in everything.items) == 25 and everything.next_cursor is None
        with pytest.raises(InvalidInput, match="cursor"):
            mem.list_memories(user_id="u", cursor="not-a-cursor")
        with pytest.raises(KeyError, match="unknown user_id 'v'"):
            mem.list_memories(user_id="v")


def test_delete_memories_deletes_what_the_filter_admits_and_reset_deletes_users() -> None:
    with Memory(None, embedder="hashing") as mem:
        metas = _fill(mem, 20)
        mem.add([{"speaker": "Bo", "text": "another user"}], user_id="w")
        before = mem.list_memories(user_id="u", limit=1000).items
        doomed = {it.id for it in before if int(it.metadata.get("priority", 0)) >= 3}  # type: ignore[call-overload]
        assert len(doomed) == sum(1 for m in metas if int(m["priority"]) >= 3)  # type: ignore[call-overload]
        rep = mem.delete_memories(user_id="u", filters={"priority": {"gte": 3}})
        assert doomed <= set(rep.ids)  # (and what derives from them)
        left = mem.list_memories(user_id="u", limit=1000).items
        assert len(left) == len(before) - rep.deleted
        assert not {it.id for it in left} & set(rep.ids)
        assert all(int(it.metadata["priority"]) < 3 for it in left if it.kind == "turn")  # type: ignore[call-overload]
        with pytest.raises(InvalidInput, match="non-empty filter"):
            mem.delete_memories(user_id="u", filters={})
        gone = mem.reset(user_ids=["w", "nobody"])
        assert gone.deleted == 1 and mem.users() == ["u"]
        assert mem.reset().deleted == len(left) and mem.users() == []


def test_derived_items_carry_what_their_source_turns_agree_on() -> None:
    with Memory(None, embedder="hashing") as mem:
        for s, agent in enumerate(["a1", "a2"]):
            msgs = [
                {"speaker": "Ann", "text": f"I moved to Oslo in spring {s}", "metadata": {"agent_id": agent, "n": 0}},
                {
                    "speaker": "Ann",
                    "text": f"Oslo is cold but I like the fjords {s}",
                    "metadata": {"agent_id": agent, "n": 1},
                },
            ]
            mem.add(msgs, user_id="u", session_id=f"s{s}", timestamp=T0 + s * DAY)
            mem.end_session(user_id="u", session_id=f"s{s}")
        items = mem.list_memories(user_id="u", limit=1000).items
        agent_of = {it.sources[0]: it.metadata["agent_id"] for it in items if it.kind == "turn"}
        derived = [it for it in items if it.kind != "turn"]
        assert {it.kind for it in derived} >= {"segment", "summary", "fact"}
        for it in derived:  # one session's items carry its agent; a blend of both sessions none
            agents = {agent_of[s] for s in it.sources}
            assert it.metadata.get("agent_id") == (agents.pop() if len(agents) == 1 else None), it
        ctx = mem.context("where does Ann live?", user_id="u", filters={"agent_id": "a2"}, include_archive=True)
        assert ctx.items and all(it.metadata.get("agent_id") == "a2" for it in ctx.items)
        found = mem.search(
            "Ann Oslo fjords", user_id="u", k=20, layers=["episodic", "semantic"], filters={"agent_id": "a2"}
        )
        assert {it.kind for it in found} >= {"segment", "fact"}
        assert all(it.metadata.get("agent_id") == "a2" for it in found)


# -- the admitted ids after writes: brought up to date by what changed, equal to a fresh count ---
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 96), st.integers(1, 6), st.integers(0, 2)),
        st.tuples(st.just("end"), st.integers(0, 2)),
        st.tuples(st.just("delete"), st.integers(0, 10_000)),
        st.tuples(st.just("update"), st.integers(0, 10_000), st.integers(-3, 3)),
        st.tuples(st.just("delete_memories"), st.integers(0, len(FILTERS) - 2)),
        st.tuples(st.just("other_writer"), st.integers(0, 96)),
    ),
    min_size=1,
    max_size=12,
)


def _admitted(mem: Memory, f: dict[str, object]) -> list[int] | str:
    """The ids ``f`` admits, or the error of a filter naming a key no item carries (any more)."""
    try:
        return [it.id for it in mem.list_memories(user_id="u", filters=f, limit=1000).items]
    except InvalidInput as e:
        return str(e)


@settings(max_examples=25, deadline=None)
@given(ops=_OPS)
def test_filtered_ids_after_writes_equal_a_fresh_handles(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:  # type: ignore[type-arg]
    """A handle that keeps its filters' admitted ids across writes (adds, consolidation, deletes,
    updates, deletes by filter, another process's writes) admits exactly what a handle opened
    afresh on the same database admits: only the records touched since are matched again, and
    what derives from a touched turn (its metadata is what its source turns agree on) with them."""
    path = tmp_path_factory.mktemp("journal") / "m.db"
    mem, other = Memory(path, embedder="hashing"), Memory(path, embedder="hashing")
    _fill(mem, 8)
    t = T0
    try:
        for op in ops:
            t += 3600
            turns = [e.id for e in mem.list_items(user_id="u", kinds=["turn"], limit=None).items]
            if op[0] in ("add", "other_writer"):
                j = op[1]
                md = {"category": CATS[j % 3], "priority": j % 5, "tags": [WORDS[j % 6], WORDS[(j + 1) % 6]]}
                n = 1 if op[0] == "other_writer" else op[2]
                msgs = [
                    {"speaker": "Ann", "text": f"{WORDS[(j + i) % 6]} {WORDS[j % 6]} note {i}", "metadata": md}
                    for i in range(n)
                ]
                who = other if op[0] == "other_writer" else mem
                who.add(msgs, user_id="u", session_id="s" if op[0] == "other_writer" else f"s{op[3]}", timestamp=t)
            elif op[0] == "end":
                if any(e.session_id == f"s{op[1]}" for e in mem.list_items(user_id="u", limit=None).items):
                    mem.end_session(user_id="u", session_id=f"s{op[1]}", now=t)
            elif op[0] == "delete" and turns:
                mem.delete(turns[op[1] % len(turns)], user_id="u")
            elif op[0] == "update" and turns:
                mem.update(turns[op[1] % len(turns)], "a changed text", user_id="u", timestamp=t + op[2] * DAY)
            elif op[0] == "delete_memories":
                try:
                    mem.delete_memories(user_id="u", filters=FILTERS[op[1]])
                except InvalidInput:  # (every item carrying the key is gone)
                    pass
            if "u" not in mem.users():
                return
            with Memory(path, embedder="hashing") as fresh:
                for f in FILTERS:
                    assert _admitted(mem, f) == _admitted(fresh, f), (op, f)
    finally:
        mem.close()
        other.close()
