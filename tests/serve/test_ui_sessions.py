"""The inspector's sessions (issue 45) on real ``lamina serve`` processes: the cookie is a random
token, never the API key, and no key on ``/v1``; logout revokes it (a stolen copy stops working),
a login rotates it, replicas on one database share it; the login form refuses a post without its
CSRF token or from another origin; ``Secure`` when a trusted proxy says HTTPS. Expiry with a
clock of the test's."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from servekit import KEY_A, KEY_B, serve_process

from lamina import Memory
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.ui.session import COOKIE, LOGIN_COOKIE, SessionStore


def _form_csrf(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert m is not None, html
    return m.group(1)


def _login(c: httpx.Client, key: str, **headers: str) -> httpx.Response:
    token = _form_csrf(c.get("/ui/login").text)
    return c.post("/ui/login", data={"api_key": key, "csrf": token}, headers=headers)


def _with_cookie(url: str, token: str, path: str = "/ui/users") -> int:
    """The status of ``GET path`` by another browser holding the cookie ``token`` (a thief's)."""
    with httpx.Client(base_url=url, follow_redirects=False) as c:
        c.cookies.set(COOKIE, token, path="/ui")
        r = c.get(path)
        assert r.status_code != 303 or r.headers["location"].startswith("/ui/login")
        return r.status_code


def test_sessions_on_real_servers(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    args = ["--db", db, "--embedder", "hashing"]
    keys = f"a:{KEY_A},b:{KEY_B}"
    with (
        serve_process(tmp_path, args, env_keys=keys) as one,
        serve_process(tmp_path, args, env_keys=keys) as two,
        httpx.Client(base_url=one.url, follow_redirects=False) as c,
    ):
        r = _login(c, KEY_A)
        assert r.status_code == 303, r.text
        token = c.cookies.get(COOKIE)
        assert token and KEY_A not in r.headers["set-cookie"] and token != KEY_A
        assert "HttpOnly" in r.headers["set-cookie"] and "Secure" not in r.headers["set-cookie"]
        assert c.get("/ui/users").status_code == 200
        # the session token is no API key, and /v1 reads no cookie
        assert httpx.get(one.url + "/v1/users", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert httpx.get(one.url + "/v1/users", cookies={COOKIE: token}).status_code == 401
        # a stolen copy works on every replica ... until the owner logs out
        assert _with_cookie(one.url, token) == 200 and _with_cookie(two.url, token) == 200
        logout = c.post("/ui/logout", data={"csrf": _form_csrf(c.get("/ui/logout").text)})
        assert logout.status_code == 303
        assert _with_cookie(one.url, token) == 303 and _with_cookie(two.url, token) == 303
        # a login rotates the session: the one before it ends
        assert _login(c, KEY_B).status_code == 303
        first = c.cookies.get(COOKIE)
        assert first and _with_cookie(two.url, first) == 200
        assert _login(c, KEY_B).status_code == 303
        second = c.cookies.get(COOKIE)
        assert second and second != first
        assert _with_cookie(one.url, first) == 303 and _with_cookie(two.url, second) == 200
        # CSRF on the login form: no token, another cookie's token, another origin
        with httpx.Client(base_url=one.url, follow_redirects=False) as x:
            assert x.post("/ui/login", data={"api_key": KEY_A}).status_code == 403
            with httpx.Client(base_url=one.url) as other:
                foreign = _form_csrf(other.get("/ui/login").text)
            x.get("/ui/login")
            assert x.post("/ui/login", data={"api_key": KEY_A, "csrf": foreign}).status_code == 403
            assert _login(x, KEY_A, Origin="https://evil.example").status_code == 403
            assert COOKIE not in x.cookies
            assert _login(x, KEY_A, Origin=one.url).status_code == 303
        # Secure behind a trusted proxy (uvicorn trusts 127.0.0.1 by default) that says https
        with httpx.Client(base_url=one.url, follow_redirects=False) as p:
            r = _login(p, KEY_A, **{"X-Forwarded-Proto": "https"})
            assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]
    # an untrusted sender's X-Forwarded-Proto is ignored
    with (
        serve_process(tmp_path, [*args, "--forwarded-allow-ips", "10.9.8.7"], env_keys=keys) as three,
        httpx.Client(base_url=three.url, follow_redirects=False) as p,
    ):
        pre = p.get("/ui/login", headers={"X-Forwarded-Proto": "https"})
        assert "Secure" not in pre.headers["set-cookie"] and LOGIN_COOKIE in pre.headers["set-cookie"]
        r = p.post(
            "/ui/login",
            data={"api_key": KEY_A, "csrf": _form_csrf(pre.text)},
            headers={"X-Forwarded-Proto": "https"},
        )
        assert r.status_code == 303 and "Secure" not in r.headers["set-cookie"]


@pytest.fixture
def memory() -> Memory:
    return Memory(None, embedder="hashing")


def test_sessions_expire_when_idle_after_their_lifetime_and_with_their_key(memory: Memory) -> None:
    now = [1_000_000.0]
    keys = KeyRing({hash_key(KEY_A): "a", hash_key(KEY_B): "b"})
    store = SessionStore(lambda: memory, keys, idle=600, absolute=3600, clock=lambda: now[0])
    token = store.create("a", hash_key(KEY_A))
    s = store.open(token)
    assert s is not None and s.caller.tenant == "a"
    raw = memory.service_record("ui_sessions") or ""
    assert token not in raw and KEY_A not in raw  # only the token's hash is stored
    for _ in range(5):  # used every 9 minutes: alive (each use moves the idle deadline)
        now[0] += 540
        assert store.open(token) is not None
    now[0] += 601  # idle past 10 minutes
    assert store.open(token) is None
    t2 = store.create("a", hash_key(KEY_A))
    for _ in range(6):
        now[0] += 590
        assert store.open(t2) is not None
    now[0] += 590  # 3,540 + 590 s after its login: past the absolute lifetime
    assert store.open(t2) is None
    t3 = store.create("b", hash_key(KEY_B))
    assert SessionStore(lambda: memory, KeyRing({hash_key(KEY_A): "a"}), clock=lambda: now[0]).open(t3) is None
    assert store.open("not-a-session") is None and store.open("") is None
    store.revoke(t3)
    assert store.open(t3) is None
    memory.close()
