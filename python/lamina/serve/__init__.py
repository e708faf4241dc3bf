"""``lamina.serve``: lamina as an HTTP service (``lamina serve``; needs the ``serve`` extra).

* :mod:`~lamina.serve.app` — :func:`create_app`, the FastAPI app, and :class:`ServeConfig`;
* :mod:`~lamina.serve.service` — the per-process state and the tenant of a request;
* :mod:`~lamina.serve.transfer` — a user's export and import (JSONL dumps);
* :mod:`~lamina.serve.mcp` — the MCP server at ``/mcp``, with the service's keys and tenants;
* :mod:`~lamina.serve.schemas` — request and response bodies (the OpenAPI);
* :mod:`~lamina.serve.auth` — API keys (hashed) and their tenants;
* :mod:`~lamina.serve.tenancy` — how tenants' user ids share one store;
* :mod:`~lamina.serve.limits` — body size, messages per add, the bounded work pool;
* :mod:`~lamina.serve.metrics` — Prometheus metrics;
* :mod:`~lamina.serve.errors` — errors as JSON with stable codes;
* :mod:`~lamina.serve.cli` — ``lamina serve`` and ``lamina keys``.

Importing this package imports FastAPI; :mod:`~lamina.serve.cli` alone does not.
"""

from __future__ import annotations

from .app import ServeConfig, create_app
from .auth import KeyRing, hash_key
from .limits import Limits
from .service import Caller, CallerDep, Service, ServiceDep, get_caller, get_service

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
