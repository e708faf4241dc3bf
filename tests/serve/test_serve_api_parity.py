"""One suite, four implementations of the Memory API: ``Memory``, ``Client`` (over a real
``lamina serve``), ``AsyncMemory`` and ``AsyncClient`` (through a blocking adapter)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from servekit import KEY_A, Blocking, ServerProc

import lamina
from lamina import AsyncClient, AsyncMemory, Client, Context, DeleteReport, Memory, MemoryItem, SessionReport

T0 = 1_683_550_000.0
KINDS = ["memory", "client", "async_memory", "async_client"]


@pytest.fixture(params=KINDS)
def api(request: pytest.FixtureRequest, server: ServerProc) -> Iterator[Any]:
    kind = request.param
    if kind == "memory":
        with Memory(None, embedder="hashing") as m:
            yield m
    elif kind == "client":
        with Client(server.url, KEY_A) as c:
            yield c
    else:
        loop = asyncio.new_event_loop()
        try:
            if kind == "async_memory":
                obj: Any = AsyncMemory(None, embedder="hashing")
            else:
                obj = AsyncClient(server.url, KEY_A)
            yield Blocking(obj, loop)
            loop.run_until_complete(obj.aclose())
        finally:
            loop.close()


@pytest.fixture
def user() -> str:
    return f"user-{uuid.uuid4().hex[:12]}"


def _chat(api: Any, user: str, session: str, lines: list[tuple[str, str]], prefix: str) -> list[int]:
    msgs = [
        {"speaker": sp, "text": tx, "id": f"{prefix}:{i}", "timestamp": T0 + 60 * i} for i, (sp, tx) in enumerate(lines)
    ]
    ids = api.add(msgs, user_id=user, session_id=session)
    assert isinstance(ids, list) and all(type(i) is int for i in ids) and len(ids) == len(lines)
    return list(ids)


LINES = [
    ("Alice", "My sister is called Ana."),
    ("Bob", "Nice name."),
    ("Alice", "I adopted a grey cat named Pixel last spring."),
    ("Bob", "Cats are great company."),
]


def test_add_get_search_context(api: Any, user: str) -> None:
    ids = _chat(api, user, "s1", LINES, "D")
    it = api.get(ids[2])
    assert isinstance(it, MemoryItem)
    assert (it.id, it.text, it.speaker, it.kind, it.user_id, it.sources) == (
        ids[2],
        LINES[2][1],
        "Alice",
        "turn",
        user,
        ("D:2",),
    )
    assert api.get(ids[2], user_id=user) == it
    hits = api.search("grey cat Pixel", user_id=user, k=2)
    assert [type(h) for h in hits] == [MemoryItem, MemoryItem] and hits[0].id == ids[2] and hits[0].score > 0
    ctx = api.context("What is the name of the cat?", user_id=user, budget=64, now=T0 + 3600)
    assert isinstance(ctx, Context) and not ctx.abstain
    assert "D:2" in ctx.sources and "Pixel" in ctx.render()
    assert ctx.budget == 64 and ctx.query == "What is the name of the cat?"
    with pytest.raises(lamina.NotFoundError, match="unknown user_id"):
        api.context("anything", user_id=f"{user}-nobody", budget=16)


def test_context_through_the_firewall(api: Any, user: str) -> None:
    msgs = [
        {"speaker": "Alice", "text": "My doctor changed my asthma medication.", "id": "F:0", "domain": "health"},
        {
            "speaker": "Alice",
            "text": "My manager moved the asthma charity project deadline.",
            "id": "F:1",
            "domain": "work",
        },
        {
            "speaker": "Alice",
            "text": "Ask me again about the charity project plan.",
            "id": "F:2",
            "commitment": "clarify",
        },
    ]
    api.add(msgs, user_id=user, session_id="s", timestamp=T0)
    fw = lamina.Firewall(tau=-1.0)
    ctx = api.context(
        "When is the asthma charity project deadline?", user_id=user, budget=128, domain="work", firewall=fw
    )
    assert isinstance(ctx.firewall, lamina.FirewallReport)
    assert ctx.firewall.query_domain == "work" and ctx.firewall.tau == -1.0 and ctx.firewall.domain_gate
    assert "F:1" in ctx.sources and "F:0" not in ctx.sources and "F:2" not in ctx.sources
    reasons = {b.reason for b in ctx.firewall.blocked}
    assert reasons == {"domain", "clarify"} and ctx.firewall.needs_clarification
    assert all(isinstance(b, lamina.Blocked) for b in ctx.firewall.blocked)
    assert api.context("asthma", user_id=user, budget=128).firewall is None
    # a stated constraint of another domain crosses into a plan request, unless the setting is off
    limit = "After the asthma attack I cannot climb stairs to the charity project room."
    api.add([{"speaker": "Alice", "text": limit, "id": "F:3", "domain": "health"}], user_id=user, session_id="s")
    q = "Can you schedule the asthma charity project meeting?"
    on = api.context(q, user_id=user, budget=128, domain="work", firewall=fw)
    strict = lamina.Firewall(tau=-1.0, constraints_cross=False)
    off = api.context(q, user_id=user, budget=128, domain="work", firewall=strict)
    assert "F:3" in on.sources and "F:0" not in on.sources and "F:3" not in off.sources


def test_update_history_end_session_facts_delete(api: Any, user: str) -> None:
    ids = _chat(api, user, "s", LINES[:2], "D")
    it = api.update(ids[1], "Nice name indeed.", timestamp=T0 + 5)
    assert isinstance(it, MemoryItem) and it.text == "Nice name indeed."
    assert [x.text for x in api.history(ids[1])] == ["Nice name.", "Nice name indeed."]
    rep = api.end_session(user_id=user, session_id="s")
    assert isinstance(rep, SessionReport) and rep.facts >= 1
    facts = api.facts(user_id=user)
    assert [f.object for f in facts if f.predicate == "sister_name"] == ["Ana"]
    assert all(f.user_id == user for f in facts)
    gone = api.delete(ids[0])
    assert isinstance(gone, DeleteReport) and ids[0] in gone.ids and gone.deleted == len(gone.ids) > 1
    with pytest.raises(lamina.NotFoundError):
        api.get(ids[0])
    assert not any(f.object == "Ana" for f in api.facts(user_id=user, current=False))
    assert user in api.users()
    all_gone = api.delete_user(user_id=user)
    assert isinstance(all_gone, DeleteReport) and ids[1] in all_gone.ids
    assert user not in api.users()
    with pytest.raises(lamina.NotFoundError):
        api.get(ids[1])


def test_notes_and_links(api: Any, user: str) -> None:
    lines = [
        ("Alice", "I adopted a grey cat named Pixel last spring."),
        ("Bob", "Nice name."),
        ("Alice", "Pixel, my grey cat, was adopted last spring."),
    ]
    a, b, c = _chat(api, user, "s", lines, "N")
    (link,) = api.links(a)
    assert isinstance(link, lamina.Link) and (link.item_id, link.other_id, link.newer, link.kind) == (
        a,
        c,
        True,
        "related",
    )
    assert set(link.shared) == {"Pixel", "adopted", "spring", "grey", "last", "cat"} and 0.5 <= link.weight <= 1
    assert [(x.other_id, x.newer) for x in api.links(c)] == [(a, False)] and api.links(b) == []
    n = api.note(a)
    assert isinstance(n, lamina.Note) and n.item_id == a and n.keywords[0] == "Pixel" and n.tags[0] == "Pixel"
    assert n.context.startswith("Alice on 2023-05-08, about Pixel") and "later also: " in n.context
    assert [(h.tags, h.cause) for h in n.history] == [(("Pixel",), c)]
    with pytest.raises(lamina.NotFoundError):
        api.note(a, user_id=f"{user}-other")
    api.end_session(user_id=user, session_id="s")
    episodes = api.search("grey cat", user_id=user, layers=["episodic"])
    assert episodes and all(it.kind != "turn" and api.note(it.id) is None and api.links(it.id) == [] for it in episodes)


def test_errors_are_lamina_errors(api: Any, user: str) -> None:
    ids = _chat(api, user, "s", LINES[:1], "E")
    with pytest.raises(lamina.InvalidInput, match="empty"):
        api.add([{"speaker": "A", "text": "   "}], user_id=user, session_id="s")
    with pytest.raises(lamina.InvalidInput, match="budget"):
        api.context("q", user_id=user, budget=0)
    with pytest.raises(lamina.InvalidInput, match="k must be"):
        api.search("q", user_id=user, k=-1)
    with pytest.raises(lamina.InvalidInput, match="unknown layer"):
        api.search("q", user_id=user, layers=["nope"])
    with pytest.raises(lamina.InvalidInput, match="ISO-8601"):
        api.context("q", user_id=user, now="yesterday-ish")
    with pytest.raises(lamina.InvalidInput, match="user_id"):
        api.context("q", user_id="  ")
    with pytest.raises(lamina.NotFoundError):
        api.get(ids[0] + 10_000_000)
    with pytest.raises(lamina.NotFoundError):
        api.get(ids[0], user_id=f"{user}-other")
    with pytest.raises(lamina.NotFoundError, match="session"):
        api.end_session(user_id=user, session_id="never")
    with pytest.raises(lamina.NotFoundError):
        api.delete_user(user_id=f"{user}-nobody")
    with pytest.raises(TypeError):
        api.get("12")
    assert api.get(ids[0]).text == LINES[0][1]  # nothing was written by the refused calls
    assert [i.sources for i in api.search("sister", user_id=user, k=5, layers=["archive"])] == [("E:0",)]


def test_export_import_round_trip(api: Any, user: str) -> None:
    """export_user / import_user: the copy's contexts are the original's; an existing user is
    refused without replace; an unknown user is NotFoundError."""
    from lamina.memory.dump.format import UserDump
    from lamina.memory.reports import ImportReport

    emb = lamina.embedders.get_embedder("hashing").name
    _chat(api, user, "s1", LINES, "X")
    api.end_session(user_id=user, session_id="s1", now=T0 + 600)
    ud = api.export_user(user_id=user)
    assert isinstance(ud, UserDump) and ud.user.user_id == user and len(ud.items) > len(LINES)
    assert {it.user_id for it in ud.items} == {user} and {s.session_id for s in ud.sessions} == {"s1"}
    assert all(it.embedding is None for it in ud.items if it.kind == "turn")
    assert all(it.embedding is not None for it in api.export_user(user_id=user, vectors=True).items)
    copy = f"{user}-copy"
    rep = api.import_user(ud, embedder=emb, user_id=copy)
    assert isinstance(rep, ImportReport)
    assert (rep.user_id, rep.from_user_id, rep.items, rep.replaced) == (copy, user, len(ud.items), False)
    assert sorted(rep.ids) == sorted(it.id for it in ud.items)
    with pytest.raises(lamina.InvalidInput, match="exist"):
        api.import_user(ud, embedder=emb, user_id=copy)
    assert api.import_user(ud, embedder=emb, user_id=copy, replace=True).replaced
    for q in ("What is the name of the cat?", "sister"):
        a, b = (api.context(q, user_id=u, budget=96, now=T0 + 3600) for u in (user, copy))
        assert b.render() == a.render() and not a.abstain
        assert [(i.layer, i.kind, i.sources, i.text, i.score) for i in b.items] == [
            (i.layer, i.kind, i.sources, i.text, i.score) for i in a.items
        ]
    with pytest.raises(lamina.NotFoundError):
        api.export_user(user_id=f"{user}-nobody")


def test_service_results_equal_in_process_results(server: ServerProc, user: str) -> None:
    """The same conversation through a Client and in process: identical contexts (ids aside)."""
    convo = [(f"s{j}", [(sp, f"{tx} (day {j})") for sp, tx in LINES]) for j in range(3)]
    queries = ["What is the sister called?", "Tell me about the cat", "company"]

    def run(api: Any) -> list[Any]:
        out = []
        for j, (sess, lines) in enumerate(convo):
            msgs = [
                {"speaker": sp, "text": tx, "id": f"{sess}:{i}", "timestamp": T0 + j * 86400 + 60 * i}
                for i, (sp, tx) in enumerate(lines)
            ]
            api.add(msgs, user_id=user, session_id=sess)
            out.append(api.end_session(user_id=user, session_id=sess))
        for q in queries:
            ctx = api.context(q, user_id=user, budget=96, now=T0 + 5 * 86400)
            out.append(
                (
                    ctx.render(),
                    ctx.gates,
                    ctx.beta,
                    ctx.abstain,
                    [(i.layer, i.kind, i.sources, i.score) for i in ctx.items],
                )
            )
            out.append([(i.text, i.sources, i.score) for i in api.search(q, user_id=user, k=5)])
        out.append(sorted((f.subject, f.predicate, f.object) for f in api.facts(user_id=user, current=False)))
        return out

    with Memory(None, embedder="hashing") as m, Client(server.url, KEY_A) as c:
        assert run(c) == run(m)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_clients_have_the_memory_signatures(cls: type) -> None:
    """The clients offer Memory's data methods with its parameters (no query_embedding: a vector
    is computed where the embedder runs, on the server), keyword-only ids included."""
    import inspect

    for name in (
        "add",
        "end_session",
        "context",
        "search",
        "get",
        "update",
        "delete",
        "history",
        "facts",
        "delete_user",
        "users",
        "export_user",
        "import_user",
        "list_memories",
        "delete_memories",
    ):
        ours = inspect.signature(getattr(cls, name)).parameters
        theirs = {
            k: v for k, v in inspect.signature(getattr(Memory, name)).parameters.items() if k != "query_embedding"
        }
        assert list(ours) == list(theirs), name
        for k in ours:
            assert (ours[k].kind, ours[k].default) == (theirs[k].kind, theirs[k].default), (name, k)
        assert inspect.iscoroutinefunction(getattr(cls, name)) == (cls is AsyncClient)
