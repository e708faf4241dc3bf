"""The memory inspector over HTTP (no browser): sessions, CSRF, escaping, the CSP, tenants, and
the context debugger's numbers against ``Memory.context`` on the same memory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import httpx
import pytest
from servekit import KEY_A, KEY_B, serve_in_thread

from lamina.memory import Memory
from lamina.serve.app import ServeConfig, create_app
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.tenancy import stored_user_id
from lamina.serve.ui import CSP
from lamina.serve.ui.session import COOKIE, csrf_token

NOW = 1_700_000_000.0
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
        ("alice", XSS),
    ]
    for s in range(3):
        msgs = [
            {"speaker": sp, "text": f"{t} (session {s})", "timestamp": NOW + s * 86400 + i}
            for i, (sp, t) in enumerate(turns)
        ]
        mem.add(msgs, user_id=alice, session_id=f"s{s}")
        mem.end_session(user_id=alice, session_id=f"s{s}", now=NOW + s * 86400 + 100)
    mem.add([{"speaker": "bob", "text": "I like chess."}], user_id=stored_user_id("b", "bob"), session_id="s0")
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


def _login(url: str, key: str) -> httpx.Client:
    c = httpx.Client(base_url=url, follow_redirects=False)
    _CLIENTS.append(c)
    r = c.post("/ui/login", data={"api_key": key})
    assert r.status_code == 303, r.text
    return c


def test_pages_need_a_session_and_login_sets_a_strict_httponly_cookie(served: tuple[str, Memory]) -> None:
    url, _ = served
    r = httpx.get(url + "/ui/users", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    bad = httpx.post(url + "/ui/login", data={"api_key": "not-a-key-of-anyone"})
    assert bad.status_code == 401 and "unknown API key" in bad.text
    r = httpx.post(url + "/ui/login", data={"api_key": KEY_A}, follow_redirects=False)
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
    item = mem.search("cat Miso", user_id=stored_user_id("a", "alice"), k=1)[0].id
    assert c.post(f"/ui/items/{item}/delete", data={}).status_code == 403
    assert c.post(f"/ui/items/{item}/delete", data={"csrf": "0" * 64}).status_code == 403
    assert c.post("/ui/users/alice/forget", data={"confirm": "alice"}).status_code == 403
    assert mem.get(item).id == item  # still there
    # the token is the session's: another session's token does not do
    other = csrf_token(KEY_B)
    assert c.post(f"/ui/items/{item}/delete", data={"csrf": other}).status_code == 403


def test_another_tenants_item_is_403_and_its_users_are_not_listed(served: tuple[str, Memory]) -> None:
    url, mem = served
    b = _login(url, KEY_B)
    item = mem.search("Lisbon", user_id=stored_user_id("a", "alice"), k=1)[0].id
    assert b.get(f"/ui/items/{item}").status_code == 403
    token = csrf_token(KEY_B)
    assert b.post(f"/ui/items/{item}/delete", data={"csrf": token}).status_code == 403
    assert mem.get(item).id == item
    users = b.get("/ui/users").text
    assert 'data-user="bob"' in users and "alice" not in users
    assert b.get("/ui/users/alice").status_code == 404  # b's namespace has no alice


def _floats(attr: str, html: str) -> list[tuple[str, float]]:
    return [(k, float(v)) for k, v in re.findall(attr + r'="([^"]*)" data-value="([^"]*)"', html)]


def test_the_debuggers_numbers_equal_memory_context(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_A)
    alice = stored_user_id("a", "alice")
    for q, budget in (("where does alice live", 64), ("what is the cat called", 16), ("sister visits", 256)):
        r = c.get("/ui/users/alice/context", params={"q": q, "budget": budget, "now": NOW + 10 * 86400})
        assert r.status_code == 200, r.text
        html = r.text
        ctx = mem.context(q, user_id=alice, budget=budget, now=NOW + 10 * 86400)
        assert dict(_floats("data-gate", html)) == ctx.gates
        beta = float(re.search(r'data-beta="([^"]*)"', html).group(1))  # type: ignore[union-attr]
        assert beta == ctx.beta
        rows = re.findall(r'<tr data-item="(\d+)" data-score="([^"]*)" data-layer="([^"]*)"', html)
        assert [(int(i), float(s), L) for i, s, L in rows] == [(it.id, it.score, it.layer) for it in ctx.items]
        tokens = int(re.search(r'data-tokens="(\d+)"', html).group(1))  # type: ignore[union-attr]
        assert tokens == ctx.tokens
        rendered = re.search(r'<pre class="ctx" id="rendered">(.*?)</pre>', html, re.S).group(1)  # type: ignore[union-attr]
        assert unescape(rendered) == ctx.render()


def test_forget_needs_the_user_id_typed_and_export_is_the_users_dump(served: tuple[str, Memory]) -> None:
    url, mem = served
    c = _login(url, KEY_B)
    token = csrf_token(KEY_B)
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
