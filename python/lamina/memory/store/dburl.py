"""Database arguments of :class:`lamina.Memory` and ``lamina serve --db``: which name a
PostgreSQL database (``postgresql://...``; else a SQLite file), and how a URL is shown (without
its password). No database driver is imported here."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["is_postgres_url", "redact_url"]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: object) -> bool:
    """Whether a database argument names a PostgreSQL database (``postgresql://...``)."""
    return isinstance(target, str) and target.lower().startswith(_SCHEMES)


def redact_url(url: str) -> str:
    """The URL without its password (for messages and ``Memory.path``); other text unchanged."""
    if not is_postgres_url(url):
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" if parts.username else f":***@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
