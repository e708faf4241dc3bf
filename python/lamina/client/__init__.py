"""``lamina.client``: a ``lamina serve`` service with the API of :class:`lamina.Memory`.

* :mod:`~lamina.client.http_client` — :class:`Client` and :class:`AsyncClient` (need ``httpx``,
  in the ``serve`` extra; imported when first used);
* :mod:`~lamina.client.wire` — the JSON form of lamina's results, which the service sends and
  the clients read (no server dependency)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .http_client import AsyncClient, Client


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient`` import httpx when first used."""
    if name in ("Client", "AsyncClient"):
        from . import http_client

        return getattr(http_client, name)
    raise AttributeError(f"module 'lamina.client' has no attribute {name!r}")


__all__ = ["Client", "AsyncClient"]
