"""Export and import routes of ``lamina serve``: a user's memories as a JSONL dump
(the format of :mod:`lamina.memory.dump.format`, ``docs/reference/export-format.md``).

* ``GET /v1/users/{user_id}/export[?vectors=true]`` streams the dump of one of the caller's
  users (``application/x-ndjson``). The user is read in one snapshot on the work pool (for a
  database file through a second, read-only connection, without holding the memory's lock
  while its rows are read) and its lines are encoded chunk by chunk as they are sent; the
  lines name the caller's user id, never the stored one (no tenant prefix leaves the service),
  and carry public item ids (:mod:`~lamina.serve.ids`).
* ``POST /v1/users/{user_id}/import[?replace=true]`` takes a dump of ONE user as the body and
  imports it as the path's user of the caller's tenant (whatever user id the dump names: a dump
  can never reach another tenant). The whole dump is validated before anything is written (a
  bad line: 400 ``bad_dump``, the message names the line and the field); an existing user
  without ``replace=true`` is 409 ``user_exists``; the body may be up to ``max_import_bytes``
  (``lamina serve --max-import-bytes``, default 512 MiB), not ``max_body_bytes``. At most
  ``max_imports`` import bodies (``--max-imports``, default 2) are received or held at once;
  one more is 503 ``overloaded`` with ``Retry-After``, before its body is read.

An export imported into another user of the same tenant (or another server with the same
embedder) gives the same ``context()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from ..client.wire import import_report_to_json
from ..errors import InvalidInput, NotFoundError, Overloaded
from ..memory import Memory
from ..memory.dump.format import DumpError, UserDump
from ..memory.dump.jsonl import iter_dump, renamed
from ..memory.dump.reader import read_dump
from . import schemas as S
from .http_errors import UserExists
from .service import CallerDep, ServiceDep

__all__ = ["transfer_router", "IMPORT_PATH", "NDJSON"]

#: The media type of a dump (one JSON object per line).
NDJSON = "application/x-ndjson"
#: The path of the import route (its body limit is ``max_import_bytes``; the path is decoded).
IMPORT_PATH = re.compile(r"/v1/users/.+/import")
_CHUNK = 1 << 18
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # (what a file name in a header may keep)
_ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": S.ErrorOut} for s in (400, 401, 404, 409, 413, 422, 503)}


def _exists(mem: Memory, uid: str) -> bool:
    try:
        mem.stats(user_id=uid)
    except NotFoundError:
        return False
    return True


def _exists_error(user_id: str) -> UserExists:
    return UserExists(
        f"user {user_id!r} exists already; import with ?replace=true to delete it first, or as another user"
    )


def _chunks(lines: Iterator[str]) -> Iterator[bytes]:
    """The lines as UTF-8 chunks of about ``_CHUNK`` bytes (a sync iterator: Starlette runs each
    step on its thread pool, so the encoding never blocks the event loop)."""
    buf: list[str] = []
    size = 0
    for ln in lines:
        buf.append(ln)
        size += len(ln)
        if size >= _CHUNK:
            yield "".join(buf).encode("utf-8")
            buf, size = [], 0
    if buf:
        yield "".join(buf).encode("utf-8")


def transfer_router() -> APIRouter:
    """The export and import routes (see the module docstring)."""
    r = APIRouter(responses=_ERRORS)

    @r.get(
        "/v1/users/{user_id:path}/export",
        tags=["users"],
        summary="A user's memories as a JSONL dump",
        response_class=StreamingResponse,
        responses={200: {"content": {NDJSON: {}}, "description": "The dump, one JSON object per line."}},
    )
    async def export(
        user_id: str,
        svc: ServiceDep,
        caller: CallerDep,
        vectors: Annotated[
            bool, Query(description="Every item's vector (default: not those of turns and facts).")
        ] = False,
    ) -> Response:
        uid = caller.uid(user_id)
        mem = svc.memory
        # the user is read (one snapshot; for a database file without holding the memory's lock
        # while the rows are read) on the work pool: an unknown user is a 404 before the response
        # starts. Its lines are then encoded chunk by chunk as the response is sent, on
        # Starlette's thread pool, never all held at once.
        ids = svc.ids

        def read() -> UserDump:
            ud = ids.dump(renamed(mem.export_user(user_id=uid, vectors=vectors), user_id))
            svc.audit(caller, "export", user_id=user_id, detail=f"{len(ud.items)} items")
            return ud

        ud = await svc.call(caller, read)
        safe = _UNSAFE.sub("_", user_id)[:100]
        headers = {"Content-Disposition": f'attachment; filename="{safe}.jsonl"'}
        return StreamingResponse(_chunks(iter_dump(mem, [ud], vectors=vectors)), media_type=NDJSON, headers=headers)

    @r.post(
        "/v1/users/{user_id:path}/import",
        response_model=S.ImportReportOut,
        tags=["users"],
        summary="Import a JSONL dump of one user as this user",
        openapi_extra={"requestBody": {"required": True, "content": {NDJSON: {"schema": {"type": "string"}}}}},
    )
    async def import_(
        user_id: str,
        request: Request,
        svc: ServiceDep,
        caller: CallerDep,
        replace: Annotated[bool, Query(description="Delete an existing user of this id first.")] = False,
    ) -> Response:
        uid = caller.uid(user_id)
        mem = svc.memory

        def _import(body: bytes) -> bytes:
            dump = read_dump(body.splitlines(keepends=True))
            if len(dump.users) != 1:
                raise DumpError(
                    f"the dump holds {len(dump.users)} users; an import takes the dump of one user "
                    "(GET /v1/users/{user_id}/export writes one)"
                )
            if not replace and _exists(mem, uid):
                raise _exists_error(user_id)
            try:
                rep = mem.import_user(dump.users[0], embedder=dump.header.embedder, user_id=uid, replace=replace)
            except InvalidInput as e:  # created meanwhile (the check above ran outside the write)
                if not replace and not isinstance(e, DumpError) and _exists(mem, uid):
                    raise _exists_error(user_id) from e
                raise
            svc.audit(caller, "import", user_id=user_id, detail=f"{rep.items} items" + (", replace" if replace else ""))
            return _json_bytes(import_report_to_json(svc.ids.import_report(rep), user_id))

        # at most max_imports bodies are received or held at once (503 past that)
        try:
            svc.imports.take()
        except Overloaded:
            svc.metrics.rejected.labels("overloaded").inc()
            raise
        try:
            body = await request.body()
            return Response(await svc.call(caller, lambda: _import(body)), media_type="application/json")
        finally:
            svc.imports.give()

    return r


def _json_bytes(d: dict[str, Any]) -> bytes:
    return json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode()
