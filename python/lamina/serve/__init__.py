"""``lamina.serve``: lamina as an HTTP service (``lamina serve``; needs the ``serve`` extra).

* :mod:`~lamina.serve.app` — :func:`create_app`, the FastAPI app, and :class:`ServeConfig`;
* :mod:`~lamina.serve.service` — the per-process state and the tenant of a request;
* :mod:`~lamina.serve.dump_api` — a user's export and import (JSONL dumps);
* :mod:`~lamina.serve.mcp_server` — lamina as an MCP server (its tools; ``lamina mcp`` runs it over stdio);
* :mod:`~lamina.serve.mcp` — that MCP server at ``/mcp``, with the service's keys and tenants;
* :mod:`~lamina.serve.schemas` — request and response bodies (the OpenAPI);
* :mod:`~lamina.serve.auth` — API keys (hashed) and their tenants;
* :mod:`~lamina.serve.tenancy` — how tenants' user ids share one store;
* :mod:`~lamina.serve.limits` — body size, messages per add, the bounded work pool;
* :mod:`~lamina.serve.metrics` — Prometheus metrics;
* :mod:`~lamina.serve.http_errors` — errors as JSON with stable codes.

Importing this package imports none of them: the names below load their module (and FastAPI)
when first used, so that :mod:`~lamina.serve.mcp_server` (``lamina mcp`` over stdio) and
:mod:`~lamina.cli.serve_commands` load no web framework they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ServeConfig, create_app
    from .auth import KeyRing, hash_key
    from .limits import Limits
    from .service import Caller, CallerDep, Service, ServiceDep, get_caller, get_service

_LAZY = {
    "ServeConfig": "app",
    "create_app": "app",
    "KeyRing": "auth",
    "hash_key": "auth",
    "Limits": "limits",
    "Service": "service",
    "Caller": "service",
    "get_service": "service",
    "get_caller": "service",
    "ServiceDep": "service",
    "CallerDep": "service",
}


def __getattr__(name: str) -> Any:
    """The service's names (see ``_LAZY``), imported with their module when first used."""
    if name not in _LAZY:
        raise AttributeError(f"module 'lamina.serve' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


__all__ = [
    "ServeConfig",
    "create_app",
    "KeyRing",
    "hash_key",
    "Limits",
    "Service",
    "Caller",
    "get_service",
    "get_caller",
    "ServiceDep",
    "CallerDep",
]
