"""create_app's extension points: more routers, mounted sub-applications and their lifespans
(where export/import and the MCP server attach)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import APIRouter, FastAPI
from servekit import KEY_A, serve_in_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import lamina
from lamina import Memory
from lamina.serve import CallerDep, KeyRing, ServeConfig, ServiceDep, create_app, hash_key


def test_routers_mounts_and_lifespans() -> None:
    events: list[str] = []
    extra = APIRouter()

    @extra.get("/v1/users/{user_id}/count")
    async def count(user_id: str, svc: ServiceDep, caller: CallerDep) -> dict[str, int]:
        uid = caller.uid(user_id)
        items = await svc.call(caller, lambda: svc.memory.search("x", user_id=uid, k=1000, layers=["archive"]))
        return {"items": len(items)}

    async def whoami(request: Request) -> JSONResponse:
        try:
            caller = request.app.state.lamina.caller_from_header(request.headers.get("authorization"))
        except lamina.AuthError as e:
            return JSONResponse({"code": "unauthorized", "message": str(e)}, status_code=401)
        return JSONResponse({"tenant": caller.tenant})

    sub = FastAPI(routes=[Route("/whoami", whoami)])

    @asynccontextmanager
    async def tracked(app: FastAPI) -> AsyncIterator[None]:
        events.append("start")
        sub.state.lamina = app.state.lamina  # what a mounted app reaches the service by
        yield
        events.append("stop")

    keys = KeyRing({hash_key(KEY_A): "a"})
    with Memory(None, embedder="hashing") as mem:
        app = create_app(
            ServeConfig(db=None, keys=keys), memory=mem, routers=[extra], mounts={"/sub": sub}, lifespans=[tracked]
        )
        with serve_in_thread(app) as url:
            assert events == ["start"]
            h = {"Authorization": f"Bearer {KEY_A}"}
            r = httpx.post(
                url + "/v1/memories",
                json={"user_id": "u", "session_id": "s", "messages": [{"text": "one"}, {"text": "two"}]},
                headers=h,
            )
            assert r.status_code == 200
            assert httpx.get(url + "/v1/users/u/count", headers=h).json() == {"items": 2}
            assert httpx.get(url + "/v1/users/u/count").status_code == 401  # the router gets the auth
            assert httpx.get(url + "/sub/whoami", headers=h).json() == {"tenant": "a"}
            assert httpx.get(url + "/sub/whoami", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert events == ["start", "stop"]
        assert mem.stats().items == 2  # a memory given to the app stays open: the caller owns it
