"""The inspector's routes under ``/ui``: server-rendered pages (Jinja2, autoescaped) on the
service's memory, with the same tenants, keys and work pool (its limits: 503 when full) as the
API.

Every response carries a strict Content-Security-Policy (no script at all, styles and images
from this origin only, forms post here only, no framing). A page needs a session
(:mod:`~lamina.serve.ui.session`; without one: a redirect to ``/ui/login``); every POST needs
the session's CSRF token (403 otherwise). Item pages answer one 404 for another tenant's item
and a missing one, as the API does (:mod:`~lamina.serve.ids`); user ids are the caller's, in the
caller's namespace.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from ...errors import InvalidInput, LaminaError, NotFoundError
from ...memory import Firewall
from ...memory.dump.format import UserDump
from ...memory.dump.jsonl import iter_dump, renamed
from ...memory.types import format_time
from ..auth import hash_key, key_id
from ..http_errors import status_of
from ..ids import as_unseen, item_owner
from ..service import Caller, Service
from ..tenancy import owns
from . import svg
from .session import COOKIE, LOGIN_COOKIE, SessionStore, UiSession, csrf_ok, csrf_token, new_login_token
from .views import debug_context, user_rows, user_view

__all__ = ["ui_router", "load_eval", "CSP", "PREFIX"]

T = TypeVar("T")
#: Where the inspector is served.
PREFIX = "/ui"
#: The Content-Security-Policy of every inspector response.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'none'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_HERE = Path(__file__).resolve().parent
_STATIC = {"ui.css": "text/css; charset=utf-8"}
_MAX_FORM = 1 << 16


class _Login(Exception):
    """No valid session: send the browser to the login page."""


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=True,  # every {{ }} is HTML-escaped, whatever the template's name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = format_time
    env.filters["repr"] = lambda x: repr(float(x))
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.globals["svg"] = svg
    return env


def ui_router(svc: Service, *, eval_results: dict[str, Any] | None = None) -> APIRouter:
    """The inspector's routes (see the module docstring) on ``svc``; ``eval_results``: the JSON
    of a ``lamina eval`` results file, plotted on the users page."""
    env = _env()
    statics = {name: (_HERE / "static" / name).read_bytes() for name in _STATIC}
    r = APIRouter(include_in_schema=False)

    def page(name: str, http_status: int = 200, sess: UiSession | None = None, **ctx: Any) -> Response:
        html = env.get_template(name).render(session=sess, prefix=PREFIX, **ctx)
        return Response(html, http_status, media_type="text/html; charset=utf-8", headers=_HEADERS)

    sessions = SessionStore(lambda: svc.memory, svc.keys)

    def public_id(internal: int) -> int:
        """The public id a page shows of an item (:mod:`~lamina.serve.ids`)."""
        return svc.ids.public(internal)

    env.globals["pid"] = public_id  # (a global: the imported macros see it too)

    async def session(request: Request) -> UiSession:
        token = request.cookies.get(COOKIE)
        s = await svc.call(None, lambda: sessions.open(token)) if token else None
        if s is None:
            raise _Login()
        address = request.client.host if request.client else None
        return dataclasses.replace(s, caller=dataclasses.replace(s.caller, address=address))

    async def form(request: Request, sess: UiSession | None) -> dict[str, str]:
        """The urlencoded body (CSRF-checked when ``sess`` is given: 403 otherwise)."""
        body = await request.body()
        if len(body) > _MAX_FORM:
            raise InvalidInput(f"form body larger than {_MAX_FORM} bytes")
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        if sess is not None and not hmac.compare_digest(sess.csrf, fields.get("csrf") or ""):
            raise _Csrf()
        return fields

    async def call(sess: UiSession, fn: Callable[[], T]) -> T:
        return await svc.call(sess.caller, fn)

    def guarded(handler: Callable[..., Any]) -> Callable[..., Any]:
        """Errors as HTML pages with the API's status codes; no session: to the login page."""
        import functools

        @functools.wraps(handler)
        async def wrapped(request: Request, *args: Any, **kwargs: Any) -> Response:
            try:
                resp: Response = await handler(request, *args, **kwargs)
                return resp
            except _Login:
                return _redirect(f"{PREFIX}/login?next={quote(request.url.path, safe='')}")
            except _Csrf:
                return page("error.html", 403, None, status=403, code="csrf", message="missing or wrong CSRF token")
            except LaminaError as e:
                status, code, headers = status_of(e)
                resp = page("error.html", status, None, status=status, code=code, message=str(e))
                if headers:
                    resp.headers.update(headers)
                return resp

        return wrapped

    @r.get(PREFIX + "/static/{name}")
    async def static(name: str) -> Response:
        if name not in statics:
            return Response("not found", 404, headers=_HEADERS)
        return Response(statics[name], media_type=_STATIC[name], headers={**_HEADERS, "Cache-Control": "max-age=300"})

    @r.get(PREFIX)
    @r.get(PREFIX + "/")
    async def root() -> Response:
        return _redirect(f"{PREFIX}/users")

    def login_page(request: Request, http_status: int, error: str | None, nxt: str) -> Response:
        """The login form, its CSRF token bound to a fresh pre-login cookie."""
        pre = new_login_token()
        resp = page("login.html", http_status, keys=svc.keys.enabled, error=error, next=nxt, csrf=csrf_token(pre))
        resp.set_cookie(
            LOGIN_COOKIE, pre, httponly=True, samesite="strict", secure=_https(request), path=PREFIX + "/login"
        )
        return resp

    @r.get(PREFIX + "/login")
    async def login_form(request: Request) -> Response:
        return login_page(request, 200, None, _safe_next(request.query_params.get("next")))

    @r.post(PREFIX + "/login")
    @guarded
    async def login(request: Request) -> Response:
        fields = await form(request, None)
        nxt = _safe_next(fields.get("next"))
        if not csrf_ok(request.cookies.get(LOGIN_COOKIE), fields.get("csrf")) or not _same_origin(request):
            # (a post from another site: its browser sends no SameSite=Strict pre-login cookie)
            return page("error.html", 403, None, status=403, code="csrf", message="missing or wrong CSRF token")
        key = fields.get("api_key", "").strip()
        key_hash: str | None = None
        tenant: str | None = None
        if svc.keys.enabled:
            tenant = await svc.call(None, lambda: svc.keys.tenant_of(key) if key else None)
            if tenant is None:
                return login_page(request, 401, "unknown API key", nxt)
            key_hash = hash_key(key)
            await svc.note_address(Caller(tenant, key_id(key_hash), request.client.host if request.client else None))
        old = request.cookies.get(COOKIE)
        token = await svc.call(None, lambda: sessions.create(tenant, key_hash, replaces=old))
        resp = _redirect(nxt)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=_https(request), path=PREFIX)
        resp.delete_cookie(LOGIN_COOKIE, path=PREFIX + "/login", httponly=True, samesite="strict")
        return resp

    @r.get(PREFIX + "/logout")
    @guarded
    async def logout_form(request: Request) -> Response:
        return page("logout.html", sess=await session(request))

    @r.post(PREFIX + "/logout")
    @guarded
    async def logout(request: Request) -> Response:
        await form(request, await session(request))
        token = request.cookies.get(COOKIE)
        await svc.call(None, lambda: sessions.revoke(token))
        resp = _redirect(f"{PREFIX}/login")
        resp.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return resp

    @r.get(PREFIX + "/users")
    @guarded
    async def users(request: Request) -> Response:
        sess = await session(request)
        mem = svc.memory
        mine = [u for u in await call(sess, mem.users) if owns(sess.caller.tenant, u)]
        rows = await call(sess, lambda: user_rows(mem, mine))
        return page(
            "users.html",
            sess=sess,
            rows=[(sess.caller.public(row.user_id), row) for row in rows],
            eval_rows=_eval_rows(eval_results),
        )

    @r.get(PREFIX + "/users/{user_id}")
    @guarded
    async def user(
        request: Request,
        user_id: str,
        page_no: int = 0,
        q: str = "",
        working_page: int = 0,
        tree_page: int = 0,
        tree_root: int | None = None,
        facts_page: int = 0,
        notes_page: int = 0,
    ) -> Response:
        sess = await session(request)
        uid = sess.caller.uid(user_id)
        mem = svc.memory
        root = None if tree_root is None else svc.ids.internal(tree_root)
        asked = {"page_no": page_no, "working_page": working_page, "tree_page": tree_page}
        asked.update(facts_page=facts_page, notes_page=notes_page)
        for name, v in asked.items():
            if v < 0:
                raise InvalidInput(f"{name} must be >= 0, got {v}")
        view = await call(
            sess,
            lambda: user_view(
                mem,
                uid,
                page=page_no,
                query=q,
                working_page=working_page,
                tree_page=tree_page,
                tree_root=root,
                facts_page=facts_page,
                notes_page=notes_page,
            ),
        )
        heat = [(format_time(t)[:10], float(n), float(a)) for t, n, a in view.heat]
        at: dict[str, int | None] = {"page_no": view.archive_paged.page, "tree_page": view.tree_paged.page}
        at.update(
            working_page=view.working_paged.page,
            tree_root=None if view.tree_root is None else public_id(view.tree_root),
            facts_page=view.chains_paged.page,
            notes_page=view.notes_paged.page,
        )

        def link(name: str, to: int | None) -> str:
            """This page's URL query with ``name`` (a list's page, or ``tree_root``: an internal
            id, shown public) set to ``to``."""
            asked = {**at, name: to, "q": view.query}
            if name == "tree_root":
                asked["tree_page"] = 0
                asked["tree_root"] = None if to is None else public_id(to)
            return "?" + urlencode({k: v for k, v in asked.items() if v is not None})

        return page(
            "user.html",
            sess=sess,
            user_id=user_id,
            v=view,
            heat=heat,
            link=link,
            deleted=request.query_params.get("deleted"),
        )

    @r.get(PREFIX + "/users/{user_id}/context")
    @guarded
    async def context(
        request: Request,
        user_id: str,
        q: str = "",
        budget: int = 256,
        now: float | None = None,
        fw: str = "",
        tau: float = Firewall.tau,
        gate: str = "1",
    ) -> Response:
        sess = await session(request)
        uid = sess.caller.uid(user_id)
        mem = svc.memory
        on = fw == "1"
        wall = Firewall(tau=tau, domain_gate=gate != "0") if on else None
        dbg = None
        if q.strip():
            dbg = await call(
                sess, lambda: debug_context(mem, user_id=uid, query=q, budget=budget, now=now, firewall=wall)
            )
        return page(
            "context.html",
            sess=sess,
            user_id=user_id,
            q=q,
            budget=budget,
            now=now,
            fw=on,
            tau=tau,
            gate=gate != "0",
            d=dbg,
        )

    @r.get(PREFIX + "/items/{item_id}")
    @guarded
    async def item(request: Request, item_id: int) -> Response:
        sess = await session(request)
        mem, iid = svc.memory, svc.ids.internal(item_id)

        def work() -> tuple[Any, list[Any], Any, list[Any]]:
            uid = item_owner(mem, sess.caller.tenant, iid)
            it = mem.get(iid, user_id=uid)
            return (
                it,
                mem.history(iid, user_id=uid),
                mem.note(iid, user_id=uid),
                mem.links(iid, user_id=uid),
            )

        it, hist, note, links = await call(sess, work)
        return page(
            "item.html",
            sess=sess,
            it=it,
            user_id=sess.caller.public(it.user_id),
            history=hist,
            note=note,
            links=links,
        )

    @r.post(PREFIX + "/items/{item_id}/delete")
    @guarded
    async def delete_item(request: Request, item_id: int) -> Response:
        sess = await session(request)
        await form(request, sess)
        mem, iid = svc.memory, svc.ids.internal(item_id)

        def work() -> tuple[str, int]:
            owner = item_owner(mem, sess.caller.tenant, iid)
            n = as_unseen(lambda: mem.delete(iid, user_id=owner)).deleted
            svc.audit(sess.caller, "delete", user_id=sess.caller.public(owner), item_id=item_id)
            return owner, n

        owner, n = await call(sess, work)
        return _redirect(f"{PREFIX}/users/{quote(sess.caller.public(owner), safe='')}?deleted={n}")

    async def forget_page(sess: UiSession, user_id: str, http_status: int = 200, error: str | None = None) -> Response:
        """The form that deletes a user (404 for an unknown one), with ``error`` above it."""
        uid, mem = sess.caller.uid(user_id), svc.memory
        rows = await call(sess, lambda: user_rows(mem, [uid]))
        if not rows:
            raise NotFoundError(f"unknown user_id {user_id!r}")
        return page("forget.html", http_status, sess=sess, user_id=user_id, row=rows[0], error=error)

    @r.get(PREFIX + "/users/{user_id}/forget")
    @guarded
    async def forget_form(request: Request, user_id: str) -> Response:
        return await forget_page(await session(request), user_id)

    @r.post(PREFIX + "/users/{user_id}/forget")
    @guarded
    async def forget(request: Request, user_id: str) -> Response:
        sess = await session(request)
        fields = await form(request, sess)
        uid = sess.caller.uid(user_id)
        mem = svc.memory
        if fields.get("confirm") != user_id:
            return await forget_page(sess, user_id, 400, "type the user id to confirm")

        def work() -> None:
            rep = mem.delete_user(user_id=uid)
            svc.audit(sess.caller, "delete_user", user_id=user_id, detail=f"{rep.deleted} items")

        await call(sess, work)
        return _redirect(f"{PREFIX}/users")

    @r.get(PREFIX + "/users/{user_id}/export.jsonl")
    @guarded
    async def export(request: Request, user_id: str) -> Response:
        sess = await session(request)
        uid = sess.caller.uid(user_id)
        mem = svc.memory
        ids = svc.ids

        def read() -> UserDump:
            ud = ids.dump(renamed(mem.export_user(user_id=uid), user_id))
            svc.audit(sess.caller, "export", user_id=user_id, detail=f"{len(ud.items)} items")
            return ud

        ud = await call(sess, read)
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in user_id)[:100]
        headers = {**_HEADERS, "Content-Disposition": f'attachment; filename="{safe}.jsonl"'}
        return StreamingResponse(_encoded(iter_dump(mem, [ud])), media_type="application/x-ndjson", headers=headers)

    return r


class _Csrf(Exception):
    """A POST without the session's CSRF token."""


def _redirect(url: str) -> Response:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


def _safe_next(nxt: str | None) -> str:
    """Where to go after logging in: a path of the inspector only (no open redirect)."""
    if nxt and nxt.startswith(PREFIX + "/") and not nxt.startswith("//") and "\\" not in nxt and "login" not in nxt:
        return nxt
    return f"{PREFIX}/users"


def _encoded(lines: Iterator[str]) -> Iterator[bytes]:
    buf: list[str] = []
    size = 0
    for ln in lines:
        buf.append(ln)
        size += len(ln)
        if size >= 1 << 18:
            yield "".join(buf).encode("utf-8")
            buf, size = [], 0
    if buf:
        yield "".join(buf).encode("utf-8")


def _eval_rows(results: dict[str, Any] | None) -> list[tuple[str, float]]:
    """The numeric top-level and one-level-nested metrics of a results file, as (name, value)."""
    if not results:
        return []
    out: list[tuple[str, float]] = []

    def walk(prefix: str, d: Any, depth: int) -> None:
        if isinstance(d, bool):
            return
        if isinstance(d, (int, float)):
            if 0.0 <= float(d) <= 1.0:
                out.append((prefix, float(d)))
            return
        if isinstance(d, dict) and depth < 3:
            for k, v in d.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v, depth + 1)

    walk("", results, 0)
    return out[:40]


def load_eval(path: str) -> dict[str, Any]:
    """The JSON object of a ``lamina eval`` results file (InvalidInput if it is none)."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidInput(f"cannot read eval results {path}: {e}") from None
    if not isinstance(d, dict):
        raise InvalidInput(f"eval results {path}: expected a JSON object")
    return d


def _https(request: Request) -> bool:
    """Whether the request came over HTTPS (uvicorn takes a trusted proxy's X-Forwarded-Proto)."""
    return request.url.scheme == "https"


def _same_origin(request: Request) -> bool:
    """False when the browser names another origin (``Origin``). Absent or ``null`` (what a
    browser sends under the pages' ``Referrer-Policy: no-referrer``) pass: the SameSite=Strict
    pre-login cookie, which no other site's page makes a browser send, is the check then."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    return origin.split("://", 1)[-1] == request.headers.get("host", "")
