"""The memory inspector over HTTP (no browser): sessions, CSRF, escaping, the CSP, tenants, and
the context debugger's numbers against ``Memory.context`` on the same memory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import httpx
import pytest
from servekit import KEY_A, KEY_B, serve_in_thread

from lamina.memory import ContextExplanation, DomainClassifier, Firewall, Memory
from lamina.serve.app import ServeConfig, create_app
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.ids import PublicIds
from lamina.serve.tenancy import stored_user_id
from lamina.serve.ui import CSP
from lamina.serve.ui.session import COOKIE
from lamina.serve.ui.views import ARCHIVE_PAGE, NO_EXPLAIN, TREE_NODES, WORKING_PAGE, debug_context

NOW = 1_700_000_000.0
MANY = 1200
DOMAINS = DomainClassifier()
XSS = '<script>alert("x")</script><img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Memory]]:
    tmp = tmp_path_factory.mktemp("ui")
    mem = Memory(str(tmp / "ui.db"), embedder="hashing")
    alice = stored_user_id("a", "alice")
    turns = [
        ("alice", "I moved to Lisbon last spring and I work as a nurse."),
        ("bot", "Lisbon is lovely. How is the hospital?"),
        ("alice", "Busy. My sister Ana visits every June."),
        ("alice", "I adopted a cat called Miso."),
        ("alice", "My manager moved the project deadline at the office again."),
        ("alice", "My doctor changed my blood pressure medication."),
        ("alice", XSS),
    ]
    for s in range(3):
        msgs: list[dict[str, Any]] = [
            {"speaker": sp, "text": f"{t} (session {s})", "timestamp": NOW + s * 86400 + i}
            for i, (sp, t) in enumerate(turns)
        ]
        for m in msgs:  # labelled domains, for the firewall's domain gate
            m["domain"] = DOMAINS.classify(m["text"])
        mem.add(msgs, user_id=alice, session_id=f"s{s}")
        mem.end_session(user_id=alice, session_id=f"s{s}", now=NOW + s * 86400 + 100)
    mem.add([{"speaker": "bob", "text": "I like chess."}], user_id=stored_user_id("b", "bob"), session_id="s0")
    unsure = {"speaker": "alice", "text": "Maybe my passport expires in March, not sure.", "commitment": "clarify"}
    mem.add([{**unsure, "timestamp": NOW + 4 * 86400}], user_id=alice, session_id="s3")
    many = [
        {"speaker": "u" if i % 2 else "a", "text": f"turn {i}: garden note {i % 11}", "timestamp": NOW + i * 60.0}
        for i in range(MANY)
    ]
    for at in range(0, MANY, 200):  # (the working FIFO spills into episodes: a MemTree of hundreds)
        mem.add(many[at : at + 200], user_id=stored_user_id("a", "many"), session_id=f"m{at}")
    keys = KeyRing({hash_key(KEY_A): "a", hash_key(KEY_B): "b"})
    app = create_app(ServeConfig(db=None, keys=keys, mcp=False), memory=mem)
    with serve_in_thread(app) as url:
        yield url, mem
    mem.close()


_CLIENTS: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def _form_csrf(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert m is not None, html
    return m.group(1)


def _login(url: str, key: str) -> httpx.Client:
    c = httpx.Client(base_url=url, follow_redirects=False)
    _CLIENTS.append(c)
    token = _form_csrf(c.get("/ui/login").text)  # (the login form's token, bound to its cookie)
    r = c.post("/ui/login", data={"api_key": key, "csrf": token})
    assert r.status_code == 303, r.text
    return c


def _csrf(c: httpx.Client) -> str:
    """The CSRF token of the client's session (from a page's form)."""
    return _form_csrf(c.get("/ui/logout").text)


def test_pages_need_a_session_and_login_sets_a_strict_httponly_cookie(served: tuple[str, Memory]) -> None:
    url, _ = served
    r = httpx.get(url + "/ui/users", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    with httpx.Client(base_url=url) as c:
        bad = c.post("/ui/login", data={"api_key": "not-a-key-of-anyone", "csrf": _form_csrf(c.get("/ui/login").text)})
        assert bad.status_code == 401 and "unknown API key" in bad.text
        r = c.post("/ui/login", data={"api_key": KEY_A, "csrf": _form_csrf(bad.text)}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert r.headers["location"] == "/ui/users"


def test_every_page_has_the_strict_csp_and_escapes_memory_text(served: tuple[str, Memory]) -> None:
    url, _ = served
    c = _login(url, KEY_A)
    for path in ("/ui/users", "/ui/users/alice", "/ui/users/alice/context?q=cat&budget=64", "/ui/login"):
        r = c.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.headers["content-security-policy"] == CSP
        assert "<script" not in r.text.lower() and 'onerror="' not in r.text
    page = c.get("/ui/users/alice").text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page  # shown as text, escaped
    assert "script-src 'none'" in CSP and "default-src 'none'" in CSP


def test_posts_without_the_csrf_token_are_refused(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_A)
    pub = PublicIds.of_memory(mem)
    iid = mem.search("cat Miso", user_id=stored_user_id("a", "alice"), k=1)[0].id
    item = pub.public(iid)  # (the id the pages show)
    assert c.post(f"/ui/items/{item}/delete", data={}).status_code == 403
    assert c.post(f"/ui/items/{item}/delete", data={"csrf": "0" * 64}).status_code == 403
    assert c.post("/ui/users/alice/forget", data={"confirm": "alice"}).status_code == 403
    assert mem.get(iid).id == iid  # still there
    # the token is the session's: another session's token does not do
    other = _csrf(_login(url, KEY_B))
    assert c.post(f"/ui/items/{item}/delete", data={"csrf": other}).status_code == 403


def test_another_tenants_item_is_404_and_its_users_are_not_listed(served: tuple[str, Memory]) -> None:
    url, mem = served
    b = _login(url, KEY_B)
    iid = mem.search("Lisbon", user_id=stored_user_id("a", "alice"), k=1)[0].id
    item = PublicIds.of_memory(mem).public(iid)
    assert b.get(f"/ui/items/{item}").status_code == 404  # as a missing item's (#45)
    token = _csrf(b)
    assert b.post(f"/ui/items/{item}/delete", data={"csrf": token}).status_code == 404
    assert mem.get(iid).id == iid
    users = b.get("/ui/users").text
    assert 'data-user="bob"' in users and "alice" not in users
    assert b.get("/ui/users/alice").status_code == 404  # b's namespace has no alice


def _floats(attr: str, html: str) -> list[tuple[str, float]]:
    return [(k, float(v)) for k, v in re.findall(attr + r'="([^"]*)" data-value="([^"]*)"', html)]


def _debugger(html: str) -> dict[str, Any]:
    """The numbers of a debugger page: gates, β, chosen rows, tokens, rendered text, candidates."""
    beta = float(re.search(r'data-beta="([^"]*)"', html).group(1))  # type: ignore[union-attr]
    rows = re.findall(r'<tr data-item="(\d+)" data-score="([^"]*)" data-layer="([^"]*)"', html)
    tokens = int(re.search(r'data-tokens="(\d+)"', html).group(1))  # type: ignore[union-attr]
    rendered = re.search(r'<pre class="ctx" id="rendered">(.*?)</pre>', html, re.S).group(1)  # type: ignore[union-attr]
    cands: dict[tuple[str, int], tuple[float, str]] = {}
    for layer, body in re.findall(r'<section class="layer" data-layer="([^"]*)">(.*?)</section>', html, re.S):
        for i, sc, why in re.findall(r'data-candidate="(\d+)" data-score="([^"]*)" data-why="([^"]*)"', body):
            cands[(layer, int(i))] = (float(sc), why)
    return {
        "gates": dict(_floats("data-gate", html)),
        "beta": beta,
        "rows": [(int(i), float(s), L) for i, s, L in rows],
        "tokens": tokens,
        "rendered": unescape(rendered),
        "candidates": cands,
    }


def _expected(ex: ContextExplanation, pub: PublicIds) -> dict[str, Any]:
    """What the debugger should show of ``ex`` (with the public ids the pages show)."""
    ctx = ex.context
    p = pub.public
    cands = {(L, p(c.item.id)): (c.item.score, c.reason) for L, cs in ex.candidates.items() for c in cs}
    for b in ctx.firewall.blocked if ctx.firewall is not None else ():
        cands[(b.layer, p(b.item_id))] = (b.similarity, f"firewall: {b.reason}")
    return {
        "gates": ctx.gates,
        "beta": ctx.beta,
        "rows": [(p(it.id), it.score, it.layer) for it in ctx.items],
        "tokens": ctx.tokens,
        "rendered": ctx.render(),
        "candidates": cands,
    }


def test_the_debuggers_numbers_and_reasons_equal_memory_context(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_A)
    alice = stored_user_id("a", "alice")
    now = NOW + 10 * 86400
    cases = [
        ("where does alice live", 64, None),
        ("what is the cat called", 16, None),
        ("sister visits", 256, None),
        (
            "at work my manager asked about the project deadline and my blood pressure medication",
            256,
            Firewall(tau=0.05),
        ),
        ("cat Miso", 64, Firewall(tau=0.3, domain_gate=False)),
        ("when does my passport expire", 64, Firewall(tau=0.05, domain_gate=False)),
    ]
    seen: set[str] = set()
    for q, budget, fw in cases:
        params: dict[str, Any] = {"q": q, "budget": budget, "now": now}
        if fw is not None:
            params.update(fw="1", tau=fw.tau, gate="1" if fw.domain_gate else "0")
        r = c.get("/ui/users/alice/context", params=params)
        assert r.status_code == 200, r.text
        page = _debugger(r.text)
        ex = mem.explain_context(q, user_id=alice, budget=budget, now=now, firewall=fw)
        ctx = mem.context(q, user_id=alice, budget=budget, now=now, firewall=fw)
        pub = PublicIds.of_memory(mem)
        want = _expected(ex, pub)
        assert {k: v for k, v in page.items() if k != "candidates"} == {
            k: v for k, v in want.items() if k != "candidates"
        }
        assert [(pub.public(it.id), it.score, it.layer) for it in ctx.items] == want["rows"]
        assert ctx.gates == want["gates"]
        # every shown candidate has the score and the reason explain_context reports, and
        # every chosen one is shown
        assert page["candidates"] and set(page["candidates"]) <= set(want["candidates"])
        for key, (score, why) in page["candidates"].items():
            assert want["candidates"][key] == (score, why), key
        chosen = {i for (_, i), (_, why) in page["candidates"].items() if why == "chosen"}
        assert chosen == {pub.public(it.id) for it in ctx.items}
        seen.update(why for _, why in page["candidates"].values())
        if fw is not None:
            assert ctx.firewall is not None
            m = re.search(r'id="firewall" data-blocked="(\d+)" data-query-domain="([^"]*)"', r.text)
            assert m is not None and int(m.group(1)) == len(ctx.firewall.blocked)
            assert m.group(2) == (ctx.firewall.query_domain or "")
    # the cases reach the reasons the debugger is for
    assert {"chosen", "budget", "firewall: domain", "firewall: similarity", "firewall: clarify"} <= seen, seen


def test_the_debugger_is_read_only(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_A)
    alice = stored_user_id("a", "alice")
    before = {e.id: e.access_count for e in mem.export_user(user_id=alice).items}
    assert c.get("/ui/users/alice/context", params={"q": "Lisbon nurse", "budget": 128}).status_code == 200
    assert {e.id: e.access_count for e in mem.export_user(user_id=alice).items} == before


class _NoExplain(Memory):
    """A memory (of another backend, say) that cannot explain its contexts."""

    def __getattribute__(self, name: str) -> Any:
        if name == "explain_context":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_memory_without_explain_context_gets_a_clear_note() -> None:
    mem = _NoExplain(None, embedder="hashing")
    mem.add([{"speaker": "u", "text": "I play the cello on Sundays."}], user_id="u", session_id="s")
    d = debug_context(mem, user_id="u", query="cello", budget=64)
    assert not d.explained and d.note == NO_EXPLAIN and d.layers == []
    assert [it.id for it in d.context.items] == [it.id for it in mem.context("cello", user_id="u", budget=64).items]
    app = create_app(ServeConfig(db=None, keys=KeyRing({}), mcp=False), memory=mem)
    with serve_in_thread(app) as url:
        with httpx.Client(base_url=url) as cl:
            login = {"api_key": "", "csrf": _form_csrf(cl.get("/ui/login").text)}
            assert cl.post("/ui/login", data=login).status_code in (200, 303)
            r = cl.get("/ui/users/u/context", params={"q": "cello", "budget": 64})
    assert r.status_code == 200 and "has no explain_context" in r.text
    mem.close()


def test_forget_needs_the_user_id_typed_and_export_is_the_users_dump(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_B)
    token = _csrf(c)
    dump = c.get("/ui/users/bob/export.jsonl")
    assert dump.status_code == 200 and dump.headers["content-type"].startswith("application/x-ndjson")
    assert '"user_id":"bob"' in dump.text.replace(" ", "") and "\x1f" not in dump.text
    r = c.post("/ui/users/bob/forget", data={"csrf": token, "confirm": "bo"})
    assert r.status_code == 400 and stored_user_id("b", "bob") in mem.users()
    r = c.post("/ui/users/bob/forget", data={"csrf": token, "confirm": "bob"})
    assert r.status_code == 303 and stored_user_id("b", "bob") not in mem.users()


def test_the_api_still_needs_its_bearer_key(served: tuple[str, Memory]) -> None:
    url, _ = served
    c = _login(url, KEY_A)  # a UI cookie is no API key
    assert c.get("/v1/users").status_code == 401


def test_the_static_stylesheet_is_served_and_nothing_else(served: tuple[str, Memory]) -> None:
    url, _ = served
    assert httpx.get(url + "/ui/static/ui.css").status_code == 200
    assert httpx.get(url + "/ui/static/..%2Fpages.py").status_code == 404


def test_long_lists_are_paged_and_the_memtree_opens_a_subtree_at_a_time(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_A)
    many = stored_user_id("a", "many")
    layers = mem.stats(user_id=many).layers
    assert layers["episodic"] > TREE_NODES and layers["working"] > WORKING_PAGE
    r = c.get("/ui/users/many")
    assert r.status_code == 200
    assert r.text.count("<details") == TREE_NODES  # a bounded page, however large the tree
    assert r.text.count('data-delete="') <= TREE_NODES + WORKING_PAGE + ARCHIVE_PAGE + 10
    # the archive: newest first, ARCHIVE_PAGE a page, the pages cover every turn once
    pager = re.search(r'id="pager-page_no" data-page="0" data-pages="(\d+)"', r.text)
    assert pager is not None and int(pager.group(1)) == -(-MANY // ARCHIVE_PAGE)
    seen: list[int] = []
    for no in range(int(pager.group(1))):
        page = c.get("/ui/users/many", params={"page_no": no}).text
        arch = page[page.index('id="archive"') :]
        seen += [int(i) for i in re.findall(r'<div class="item" data-item="(\d+)"', arch)]
    turns = mem.list_items(user_id=many, kinds=["turn"], limit=None, newest_first=True).items
    pub = PublicIds.of_memory(mem)
    assert seen == [pub.public(e.id) for e in turns]
    last = c.get("/ui/users/many", params={"page_no": 10_000}).text  # past the end: the last page
    assert f'data-page="{int(pager.group(1)) - 1}"' in last
    # open a subtree: that node and what is under it, with the path back to the top
    link = re.search(r'<a class="open-subtree" href="\?([^"]*)"', r.text)
    assert link is not None
    sub = c.get("/ui/users/many?" + unescape(link.group(1)))
    assert sub.status_code == 200 and 'id="tree-path"' in sub.text
    root = int(re.search(r"tree_root=(\d+)", unescape(link.group(1))).group(1))  # type: ignore[union-attr]
    first = re.search(r'<details data-item="(\d+)"', sub.text)
    assert first is not None and int(first.group(1)) == root
    # another user's item (or any id that is no episodic node of this user) is no root here
    alice_item = mem.list_items(user_id=stored_user_id("a", "alice"), layers=["episodic"], limit=1).items[0].id
    assert c.get("/ui/users/many", params={"tree_root": pub.public(alice_item)}).status_code == 404
    assert c.get("/ui/users/many", params={"page_no": -1}).status_code == 400


def test_a_turns_page_shows_its_note_and_links_to_the_linked_turns(served: tuple[str, Memory]) -> None:
    url, mem = served
    alice = stored_user_id("a", "alice")
    first, *later = sorted(
        (it for it in mem.search("Lisbon nurse", user_id=alice, k=40, layers=["archive"]) if "Lisbon last" in it.text),
        key=lambda it: it.timestamp or 0.0,
    )
    links = mem.links(first.id)
    assert later and {x.other_id for x in links} >= {it.id for it in later}
    c = _login(url, KEY_A)
    pub = PublicIds.of_memory(mem)
    page = c.get(f"/ui/items/{pub.public(first.id)}").text
    note = mem.note(first.id)
    assert note is not None and f"<td>{', '.join(note.tags)}</td>" in page and unescape(page).count(note.context) == 1
    shown = re.findall(r'<li><a href="/ui/items/(\d+)">', page.split('id="links"')[1])
    assert [int(i) for i in shown] == [pub.public(x.other_id) for x in links]
    xss = next(it for it in mem.search("alert", user_id=alice, k=40, layers=["archive"]) if "<script>" in it.text)
    assert "<script" not in c.get(f"/ui/items/{pub.public(xss.id)}").text.lower()


def test_an_items_page_shows_its_metadata_escaped(served: tuple[str, Memory]) -> None:
    url, mem = served
    carol = stored_user_id("a", "carol")
    (i,) = mem.add(
        [
            {
                "speaker": "carol",
                "text": "Pack the tent.",
                "metadata": {"trip": "<b>alps</b>", "tags": ["gear", "x"], "n": 2},
            }
        ],
        user_id=carol,
    )
    page = _login(url, KEY_A).get(f"/ui/items/{PublicIds.of_memory(mem).public(i)}").text
    row = page.split('id="metadata"')[1].split("</td>")[0]
    assert "<b>n</b>: 2" in row and "<b>tags</b>: gear, x" in row and "&lt;b&gt;alps&lt;/b&gt;" in row
