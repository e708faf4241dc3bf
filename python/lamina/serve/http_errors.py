"""Errors as HTTP responses: each a JSON body ``{"code", "message"}`` with a stable ``code``.

=====================  ======  ==============================================================
code                   status  raised for
=====================  ======  ==============================================================
``invalid_input``      400     a value lamina cannot accept (:class:`~lamina.InvalidInput`), or a
                               body that is not UTF-8 JSON
``bad_dump``           400     an import body that is no valid dump (the message names the line
                               and the field: :class:`~lamina.memory.dump.format.DumpError`)
``type_error``         400     a value of the wrong type
``validation_error``   422     a body or parameter that does not fit the schema (``detail``)
``unauthorized``       401     a missing or unknown API key (:class:`~lamina.AuthError`)
``forbidden``          403     :class:`~lamina.PermissionDenied` (no route raises it: another
                               tenant's item is ``not_found``, :mod:`~lamina.serve.ids`)
``not_found``          404     an unknown id or route (:class:`~lamina.NotFoundError`)
``user_exists``        409     an import into an existing user without ``replace=true``
``method_not_allowed`` 405     a route without that method
``too_large``          413     a body over ``max_body_bytes`` (an import's: ``max_import_bytes``)
``too_many_messages``  413     more than ``max_messages`` messages in one add
``not_ready``          503     starting or shutting down (:class:`~lamina.ClosedError`)
``overloaded``         503     the work queue is full (``Retry-After``)
``store_busy``         503     another process held the database (:class:`~lamina.StoreBusy`)
``internal``           500     a bug: the message says so, the log has the traceback
=====================  ======  ==============================================================
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..errors import AuthError, InvalidInput, LaminaError, NotFoundError, Overloaded, PermissionDenied, StoreBusy
from ..memory import ClosedError
from ..memory.dump.format import DumpError
from .limits import RequestTooLarge

__all__ = ["error_response", "install_error_handlers", "status_of", "UserExists"]

_log = logging.getLogger("lamina.serve")


class UserExists(InvalidInput):
    """An import into a user that exists, without ``replace`` (HTTP 409 ``user_exists``)."""


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """A JSON error response."""
    body = {"code": code, "message": message, **extra}
    return Response(json.dumps(body, default=str), status_code=status, media_type="application/json", headers=headers)


#: lamina's errors as HTTP answers: (class, status, code, extra headers), the first class the
#: error is an instance of answers (subclasses before their bases).
_ANSWERS: tuple[tuple[type[Exception], int, str, dict[str, str] | None], ...] = (
    (UserExists, 409, "user_exists", None),
    (DumpError, 400, "bad_dump", None),
    (AuthError, 401, "unauthorized", {"WWW-Authenticate": "Bearer"}),
    (PermissionDenied, 403, "forbidden", None),
    (NotFoundError, 404, "not_found", None),
    (StoreBusy, 503, "store_busy", {"Retry-After": "1"}),
    (ClosedError, 503, "not_ready", {"Retry-After": "1"}),
    (InvalidInput, 400, "invalid_input", None),
    (TypeError, 400, "type_error", None),
)


def status_of(exc: LaminaError) -> tuple[int, str, dict[str, str] | None]:
    """(HTTP status, code, extra headers) of one of lamina's errors."""
    if isinstance(exc, RequestTooLarge):  # (its code and Overloaded's Retry-After are the error's own)
        return 413, exc.code, None
    if isinstance(exc, Overloaded):
        return 503, "overloaded", {"Retry-After": str(int(exc.retry_after or 1))}
    for cls, status, code, headers in _ANSWERS:
        if isinstance(exc, cls):
            return status, code, None if headers is None else dict(headers)
    return 500, "internal", None


async def _lamina_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LaminaError)
    status, code, headers = status_of(exc)
    if status == 500:
        _log.error("lamina serve: unexpected %s on %s", type(exc).__name__, request.url.path, exc_info=exc)
    return error_response(status, code, str(exc), headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errs = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
    first = errs[0] if errs else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(x) for x in first["loc"]) or "request"
    return error_response(422, "validation_error", f"{where}: {first['msg']}", detail=errs)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {
        400: "invalid_input",  # (FastAPI's own 400: a body it could not read, e.g. not UTF-8)
        404: "not_found",
        405: "method_not_allowed",
        401: "unauthorized",
        403: "forbidden",
    }.get(exc.status_code, f"http_{exc.status_code}")
    message = str(exc.detail)
    if exc.status_code == 400 and message == "There was an error parsing the body":
        message = "the request body could not be read: it must be JSON in UTF-8"
    return error_response(exc.status_code, code, message, dict(exc.headers) if exc.headers else None)


async def _internal_error(request: Request, exc: Exception) -> Response:
    _log.error("lamina serve: unexpected %s on %s", type(exc).__name__, request.url.path, exc_info=exc)
    return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the server log")


def install_error_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a JSON ``{"code", "message"}`` response."""
    app.add_exception_handler(LaminaError, _lamina_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
