"""How a database is opened: its store (a SQLite file or a PostgreSQL URL, with a clear error for
a path that holds no database) and its embedder.

A database records the embedder it was built with (``meta.embedder``, e.g. ``hashing-384-3-4``
or ``minilm-l6-v2-384-256``) and always opens with it: ``"auto"`` (the default everywhere:
:class:`lamina.Memory`, :class:`lamina.AsyncMemory`, ``lamina serve``, ``lamina mcp``,
``lamina export`` / ``import``) means *the recorded one*, and for a new database the best
embedder installed (:func:`lamina.embedders.get_embedder`). An explicit embedder that differs
from the recorded one is an :class:`~lamina.InvalidInput` naming both.

What is opened is closed with ``close()`` (``aclose()`` for asyncio): :class:`Closing` and
:class:`AsyncClosing` make such an object a context manager (a memory, a client).
"""

from __future__ import annotations

import os
import sqlite3
from types import TracebackType
from typing import TypeVar

from ..embedders import Embedder, embedder_spec, get_embedder
from ..errors import InvalidInput
from .store.dburl import is_postgres_url, redact_url
from .store.protocol import Store
from .store.sqlite import SQLiteStore

_C = TypeVar("_C", bound="Closing")
_A = TypeVar("_A", bound="AsyncClosing")

__all__ = [
    "Closing",
    "AsyncClosing",
    "open_store",
    "is_auto",
    "recorded_embedder",
    "embedder_for",
    "check_embedder",
    "database_embedder",
]


def open_store(path: str | os.PathLike[str] | None, synchronous: str = "NORMAL", busy_timeout: float = 30.0) -> Store:
    """The store at ``path``: a ``postgresql://`` URL opens a
    :class:`~lamina.memory.store.postgres.PostgresStore` (extra ``lamina[postgres]``), anything else
    a SQLite file (None: in memory).

    Raises
    ------
    InvalidInput
        ``path`` cannot be opened as a SQLite database (its folder is missing, it is a folder, or
        the file is not a database); the message names the path.
    ImportError
        A PostgreSQL URL without psycopg installed.
    """
    if is_postgres_url(path):
        assert isinstance(path, str)
        try:
            from .store.postgres import PostgresStore
        except ImportError as e:
            raise ImportError(f"a postgresql:// database needs psycopg 3 ({e}): pip install 'lamina[postgres]'") from e
        return PostgresStore(path, busy_timeout=busy_timeout)
    target = None if path is None else os.fspath(path)
    try:
        return SQLiteStore(target, synchronous=synchronous, busy_timeout=busy_timeout)
    except sqlite3.Error as e:
        if isinstance(e, sqlite3.DatabaseError) and "not a database" in str(e):
            raise InvalidInput(f"cannot open {target}: not a lamina database ({e})") from e
        raise InvalidInput(f"cannot open {target}: {e}{_path_hint(target)}") from e


def _path_hint(path: str | None) -> str:
    if path is None:
        return ""
    if os.path.isdir(path):
        return " (it is a folder; name a file in it)"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f" (the folder {folder!r} does not exist)"
    return ""


def is_auto(spec: str | Embedder | None) -> bool:
    """Whether ``spec`` asks for the database's own embedder (``"auto"`` or None)."""
    return spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto")


def recorded_embedder(store: Store) -> str | None:
    """The stored name of the embedder the database was built with (None: a new database)."""
    return store.get_meta("embedder")


def embedder_for(recorded: str | None, spec: str | Embedder | None, *, where: str) -> Embedder:
    """The embedder to open a database with.

    Parameters
    ----------
    recorded : str or None
        The database's recorded embedder name (:func:`recorded_embedder`); None for a new one.
    spec : "auto", None, a name or an Embedder
        What the caller asked for; ``"auto"`` / None: the recorded one, else the best installed.
    where : str
        The database, as messages name it.

    Raises
    ------
    InvalidInput
        An explicit ``spec`` whose embedder differs from the recorded one, or a database built
        with a custom embedder opened with ``"auto"``.
    """
    if not is_auto(spec):
        emb = get_embedder(spec)
        check_embedder(recorded, emb.name, where=where)
        return emb
    if recorded is None:
        return get_embedder("auto")  # warns where it falls back to hashing
    name = embedder_spec(recorded)
    if name == recorded and not name.startswith("hashing-"):
        raise InvalidInput(
            f"database {where} was built with the custom embedder {recorded!r}: pass that embedder (an object "
            f"whose name is {recorded!r}) as embedder="
        )
    return get_embedder(name)


def check_embedder(recorded: str | None, name: str, *, where: str) -> None:
    """Raise :class:`~lamina.InvalidInput` naming both when ``name`` is not the recorded embedder."""
    if recorded is not None and recorded != name:
        raise InvalidInput(
            f"database {where} was built with embedder {recorded!r}, not {name!r}; open it with "
            f"embedder={embedder_spec(recorded)!r} or 'auto' (the database's own)"
        )


def database_embedder(path: str | os.PathLike[str] | None, spec: str | Embedder | None = "auto") -> Embedder:
    """The embedder :class:`lamina.Memory` would open ``path`` with (for callers that wrap it, e.g.
    the service's timed embedder). A missing file is a new database."""
    if path is None or (not is_postgres_url(path) and not os.path.exists(path)):
        return embedder_for(None, spec, where=str(path))
    store = open_store(path)
    try:
        recorded = recorded_embedder(store)
    finally:
        store.close()
    return embedder_for(recorded, spec, where=redact_url(os.fspath(path)))


class Closing:
    """An object closed by :meth:`close`; ``with`` closes it at the block's end."""

    def close(self) -> None:
        """Release what it holds (idempotent)."""
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClosing:
    """An object closed by :meth:`aclose`; ``async with`` closes it at the block's end."""

    async def aclose(self) -> None:
        """Release what it holds (idempotent)."""
        raise NotImplementedError

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
