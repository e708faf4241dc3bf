"""lamina.integrations.langgraph_store: LangGraph's BaseStore over lamina.Memory.

LangGraph ships no conformance suite for stores, so the documented behaviour is checked against
its own reference, ``InMemoryStore``: the same operations on both give the same items (values,
keys, namespaces), namespaces and pages; then a compiled graph reads and writes through the
store, and the docs' example runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from integkit import memory_fixture, need

need("langgraph.store.base")

from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore  # noqa: E402

import lamina  # noqa: E402
from lamina.integrations.langgraph_store import LaminaStore  # noqa: E402

memory = memory_fixture()


@pytest.fixture
def store(memory: lamina.Memory) -> LaminaStore:
    return LaminaStore(memory)


DATA = [
    (("docs", "alice"), "a1", {"text": "Alice moved to Lisbon in March", "type": "note", "score": 3, "tags": ["move"]}),
    (("docs", "alice"), "a2", {"text": "Alice works as a nurse", "type": "job", "score": 5, "nested": {"x": 1}}),
    (("docs", "bob"), "b1", {"text": "Bob plays the cello", "type": "note", "score": 4}),
    (("docs", "bob", "drafts"), "d1", {"text": "draft about cellos", "type": "draft", "score": 1}),
    (("prefs", "alice"), "p1", {"text": "Alice prefers tea over coffee", "type": "pref", "score": 2}),
]


def _fill(*stores: Any) -> None:
    for s in stores:
        for ns, key, value in DATA:
            s.put(ns, key, value)


def _plain(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(it.namespace, it.key, it.value) for it in items]


def test_get_put_delete_as_the_reference(store: LaminaStore) -> None:
    ref = InMemoryStore()
    _fill(store, ref)
    for ns, key, _ in DATA:
        got, want = store.get(ns, key), ref.get(ns, key)
        assert (got.namespace, got.key, got.value) == (want.namespace, want.key, want.value)
        assert got.created_at.tzinfo is not None and got.updated_at >= got.created_at
    assert store.get(("docs", "alice"), "nope") is None and store.get(("nobody",), "a1") is None
    for s in (store, ref):  # replace, then delete
        s.put(("docs", "alice"), "a1", {"text": "Alice moved to Porto", "score": 9})
        s.delete(("docs", "bob"), "b1")
    assert store.get(("docs", "alice"), "a1").value == {"text": "Alice moved to Porto", "score": 9}
    assert store.get(("docs", "bob"), "b1") is None
    # one turn per key: the replaced value is gone from the memory too
    texts = [e.text for e in store.memory.list_items(user_id="docs.alice", limit=None).items]
    assert sum("Lisbon" in t for t in texts) == 0 and sum("Porto" in t for t in texts) == 1
    # deleting a missing key is a no-op, as in the reference
    store.delete(("docs", "bob"), "b1")
    ref.delete(("docs", "bob"), "b1")


@pytest.mark.parametrize(
    "prefix, flt",
    [
        ((), None),
        (("docs",), None),
        (("docs", "bob"), None),
        (("docs",), {"type": "note"}),
        ((), {"score": {"$gte": 3}}),
        ((), {"score": {"$gt": 1, "$lt": 5}}),
        ((), {"type": {"$ne": "note"}}),
        ((), {"nested": {"x": 1}}),
        ((), {"tags": ["move"]}),
        (("nothing",), None),
    ],
)
def test_search_filters_as_the_reference(store: LaminaStore, prefix: tuple[str, ...], flt: Any) -> None:
    ref = InMemoryStore()
    _fill(store, ref)
    got = store.search(prefix, filter=flt, limit=100)
    want = ref.search(prefix, filter=flt, limit=100)
    assert sorted(_plain(got)) == sorted(_plain(want))
    assert all(it.score is None for it in got)


def test_a_comparison_on_a_missing_field_matches_nothing(store: LaminaStore) -> None:
    """(InMemoryStore raises TypeError here; LangGraph's PostgreSQL store, whose JSONB this
    mirrors, matches nothing.)"""
    _fill(store)
    assert store.search((), filter={"missing": {"$gt": 0}}) == []
    assert store.search((), filter={"text": {"$gt": 0}}) == []  # not a number


def test_search_pages_and_query_ranking(store: LaminaStore) -> None:
    _fill(store)
    everything = _plain(store.search((), limit=100))
    assert len(everything) == len(DATA)
    pages = [_plain(store.search((), limit=2, offset=o)) for o in (0, 2, 4)]
    assert [x for p in pages for x in p] == everything  # pages tile the listing
    hits = store.search(("docs",), query="who plays the cello", limit=3)
    assert hits[0].key == "b1" and hits[0].score is not None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # the filter is applied before the page is cut: k matching items come back
    flt = store.search((), query="cello", filter={"type": "note"}, limit=2)
    assert {h.key for h in flt} == {"a1", "b1"}
    assert store.search((), query="cello", limit=2, offset=4)[0].key in {k for _, k, _ in DATA}
    assert store.search((), query="cello", limit=10, offset=99) == []


def test_list_namespaces_as_the_reference(store: LaminaStore) -> None:
    ref = InMemoryStore()
    _fill(store, ref)
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("docs",)},
        {"suffix": ("alice",)},
        {"prefix": ("docs", "*")},
        {"max_depth": 1},
        {"max_depth": 2, "prefix": ("docs",)},
        {"limit": 2, "offset": 1},
    ]
    for kw in cases:
        assert store.list_namespaces(**kw) == ref.list_namespaces(**kw), kw
    # a namespace whose last item is deleted is no longer listed, as in LangGraph's PostgreSQL
    # store (InMemoryStore keeps listing it); its user stays in the memory
    store.delete(("prefs", "alice"), "p1")
    assert store.list_namespaces() == [ns for ns in ref.list_namespaces() if ns != ("prefs", "alice")]
    assert "prefs.alice" in store.memory.users()


def test_batch_reads_then_puts(store: LaminaStore) -> None:
    ns = ("docs", "carol")
    res = store.batch(
        [
            PutOp(ns, "k", {"v": 1}),
            GetOp(ns, "k"),  # the reads of a batch run before its puts (as the reference's)
            PutOp(ns, "k", {"v": 2}),
            SearchOp(("docs",)),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("docs",)),)),
        ]
    )
    assert res[0] is None and res[1] is None and res[2] is None and res[3] == [] and res[4] == []
    assert store.get(ns, "k").value == {"v": 2}

    async def run() -> list[Any]:
        await store.aput(ns, "j", {"v": 3})
        return [await store.aget(ns, "j"), await store.asearch(ns, query="v"), await store.alist_namespaces()]

    got, found, spaces = asyncio.run(run())
    assert got.value == {"v": 3} and {it.key for it in found} == {"j", "k"} and spaces == [ns]


def test_store_items_are_the_users_memories(store: LaminaStore) -> None:
    """What a graph stores reaches the user's context, and a user prefix keeps store users apart."""
    store.put(("alice",), "job", {"text": "Alice works as a nurse at the city hospital"})
    ctx = store.memory.context("Where does Alice work?", user_id="alice")
    assert "nurse" in ctx.render()
    other = LaminaStore(store.memory, user_prefix="lg:", session_id="kv")
    other.put(("alice",), "job", {"text": "something else"})
    assert other.get(("alice",), "job").value == {"text": "something else"}
    assert store.get(("alice",), "job").value["text"].startswith("Alice works")
    assert other.list_namespaces() == [("alice",)] and "lg:alice" in store.memory.users()


def test_bad_input_raises(store: LaminaStore, memory: lamina.Memory) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])  # ops given straight to batch are checked too
    with pytest.raises(ValueError, match="empty tuple"):
        store.batch([PutOp((), "k", {"v": 1})])
    with pytest.raises(TypeError, match="JSON"):
        store.put(("a",), "k", {"v": object()})
    with pytest.raises(ValueError, match="index"):
        store.put(("a",), "k", {"v": 1}, index=["v"])
    with pytest.raises(ValueError, match="operator"):
        store.search(("a",), filter={"v": {"$in": [1]}})
    with pytest.raises(ValueError, match="limit"):
        store.search(("a",), limit=-1)
    with pytest.raises(TypeError, match="lamina.Memory"):
        LaminaStore("not a memory")  # type: ignore[arg-type]
    assert memory.users() == []  # nothing was written


def test_a_graph_uses_the_store(memory: lamina.Memory) -> None:
    """A compiled LangGraph graph gets the store injected into its nodes and writes through it."""
    need("langgraph.graph")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.store.base import BaseStore

    class State(TypedDict):
        user: str
        said: str
        recalled: list[str]

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", state["user"])
        store.put(ns, f"m{len(store.search(ns, limit=100))}", {"text": state["said"]})
        hits = store.search(ns, query=state["said"], limit=2)
        return {"recalled": [h.value["text"] for h in hits]}

    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    app = graph.compile(store=LaminaStore(memory))
    app.invoke({"user": "alice", "said": "I adopted a cat named Miso", "recalled": []})
    out = app.invoke({"user": "alice", "said": "I started learning the violin", "recalled": []})
    assert out["recalled"][0] == "I started learning the violin" and len(out["recalled"]) == 2
    assert memory.users() == ["memories.alice"]
