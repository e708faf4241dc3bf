"""``lamina.AsyncMemory``: :class:`lamina.Memory` for asyncio, in process.

Every call runs the memory's work on a bounded thread pool (the native core releases the GIL in
its searches and embedding), so the event loop never blocks on it; awaiting a call gives the
same typed result ``Memory`` returns.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..embedders import Embedder
from . import (
    Activity,
    ClosedError,
    DeleteReport,
    Firewall,
    ItemPage,
    Memory,
    MemoryConfig,
    MemoryStats,
    SessionReport,
)
from .dump.format import UserDump
from .inputs import TimeLike
from .reports import ContextExplanation, ImportReport
from .types import Context, MemoryItem
from .write.notes import Link, Note

__all__ = ["AsyncMemory"]

T = TypeVar("T")


class AsyncMemory:
    """:class:`lamina.Memory` with coroutine methods (same arguments, same results, same errors).

    Parameters
    ----------
    path, embedder, config, **kwargs
        As for :class:`lamina.Memory` (opening runs in the constructor; use
        :meth:`open` to open without blocking the event loop).
    memory : Memory, optional
        Wrap this memory instead of opening one (it is closed by :meth:`aclose` too).
    max_workers : int
        Threads of the pool (default ``min(8, os.cpu_count())``).

    Thread safety
    -------------
    Thread-safe, like ``Memory``: concurrent calls (from one loop or several) are linearizable.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        embedder: str | Embedder | None = "auto",
        config: MemoryConfig | None = None,
        *,
        memory: Memory | None = None,
        max_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        if memory is not None and not isinstance(memory, Memory):
            raise TypeError(f"memory must be a lamina.Memory, got {type(memory).__name__}")
        if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)):
            raise TypeError(f"max_workers must be an int, got {type(max_workers).__name__}")
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._mem = memory if memory is not None else Memory(path, embedder, config, **kwargs)
        n = max_workers if max_workers is not None else min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="lamina-aio")
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        embedder: str | Embedder | None = "auto",
        config: MemoryConfig | None = None,
        *,
        max_workers: int | None = None,
        **kwargs: Any,
    ) -> AsyncMemory:
        """Open a memory on a thread (loading a large database does not block the loop)."""
        mem = await asyncio.to_thread(Memory, path, embedder, config, **kwargs)
        return cls(memory=mem, max_workers=max_workers)

    @property
    def memory(self) -> Memory:
        """The wrapped :class:`lamina.Memory` (for synchronous use)."""
        return self._mem

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise ClosedError("this AsyncMemory is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def add(
        self, messages: Sequence[Mapping[str, Any]], *, user_id: str, session_id: str, timestamp: TimeLike = None
    ) -> list[int]:
        """See :meth:`lamina.Memory.add`."""
        return await self._run(self._mem.add, messages, user_id=user_id, session_id=session_id, timestamp=timestamp)

    async def end_session(self, *, user_id: str, session_id: str, now: TimeLike = None) -> SessionReport:
        """See :meth:`lamina.Memory.end_session`."""
        return await self._run(self._mem.end_session, user_id=user_id, session_id=session_id, now=now)

    async def context(
        self,
        query: str,
        *,
        user_id: str,
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embedding: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
    ) -> Context:
        """See :meth:`lamina.Memory.context`."""
        return await self._run(
            self._mem.context,
            query,
            user_id=user_id,
            budget=budget,
            now=now,
            domain=domain,
            include_archive=include_archive,
            query_embedding=query_embedding,
            firewall=firewall,
        )

    async def context_batch(
        self,
        queries: Sequence[str],
        *,
        user_ids: str | Sequence[str],
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embeddings: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
    ) -> list[Context]:
        """See :meth:`lamina.Memory.context_batch`."""
        return await self._run(
            self._mem.context_batch,
            queries,
            user_ids=user_ids,
            budget=budget,
            now=now,
            domain=domain,
            include_archive=include_archive,
            query_embeddings=query_embeddings,
            firewall=firewall,
        )

    async def explain_context(
        self,
        query: str,
        *,
        user_id: str,
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embedding: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
    ) -> ContextExplanation:
        """See :meth:`lamina.Memory.explain_context`."""
        return await self._run(
            self._mem.explain_context,
            query,
            user_id=user_id,
            budget=budget,
            now=now,
            domain=domain,
            include_archive=include_archive,
            query_embedding=query_embedding,
            firewall=firewall,
        )

    async def search(
        self,
        query: str,
        *,
        user_id: str,
        k: int = 10,
        layers: Sequence[str] | None = None,
        now: TimeLike = None,
        query_embedding: npt.NDArray[np.float32] | None = None,
    ) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.search`."""
        return await self._run(
            self._mem.search, query, user_id=user_id, k=k, layers=layers, now=now, query_embedding=query_embedding
        )

    async def search_batch(
        self,
        queries: Sequence[str],
        *,
        user_ids: str | Sequence[str],
        k: int = 10,
        layers: Sequence[str] | None = None,
        now: TimeLike = None,
        query_embeddings: npt.NDArray[np.float32] | None = None,
    ) -> list[list[MemoryItem]]:
        """See :meth:`lamina.Memory.search_batch`."""
        return await self._run(
            self._mem.search_batch,
            queries,
            user_ids=user_ids,
            k=k,
            layers=layers,
            now=now,
            query_embeddings=query_embeddings,
        )

    async def get(self, item_id: int, *, user_id: str | None = None) -> MemoryItem:
        """See :meth:`lamina.Memory.get`."""
        return await self._run(self._mem.get, item_id, user_id=user_id)

    async def update(
        self, item_id: int, text: str, *, user_id: str | None = None, timestamp: TimeLike = None
    ) -> MemoryItem:
        """See :meth:`lamina.Memory.update`."""
        return await self._run(self._mem.update, item_id, text, user_id=user_id, timestamp=timestamp)

    async def delete(self, item_id: int, *, user_id: str | None = None) -> DeleteReport:
        """See :meth:`lamina.Memory.delete`."""
        return await self._run(self._mem.delete, item_id, user_id=user_id)

    async def history(self, item_id: int, *, user_id: str | None = None) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.history`."""
        return await self._run(self._mem.history, item_id, user_id=user_id)

    async def note(self, item_id: int, *, user_id: str | None = None) -> Note | None:
        """See :meth:`lamina.Memory.note`."""
        return await self._run(self._mem.note, item_id, user_id=user_id)

    async def links(self, item_id: int, *, user_id: str | None = None) -> list[Link]:
        """See :meth:`lamina.Memory.links`."""
        return await self._run(self._mem.links, item_id, user_id=user_id)

    async def facts(self, *, user_id: str, subject: str | None = None, current: bool = True) -> list[MemoryItem]:
        """See :meth:`lamina.Memory.facts`."""
        return await self._run(self._mem.facts, user_id=user_id, subject=subject, current=current)

    async def delete_user(self, *, user_id: str) -> DeleteReport:
        """See :meth:`lamina.Memory.delete_user`."""
        return await self._run(self._mem.delete_user, user_id=user_id)

    async def export_user(self, *, user_id: str, vectors: bool = False) -> UserDump:
        """See :meth:`lamina.Memory.export_user`."""
        return await self._run(self._mem.export_user, user_id=user_id, vectors=vectors)

    async def import_user(
        self, dump: UserDump, *, embedder: str, user_id: str | None = None, replace: bool = False
    ) -> ImportReport:
        """See :meth:`lamina.Memory.import_user`."""
        return await self._run(self._mem.import_user, dump, embedder=embedder, user_id=user_id, replace=replace)

    async def list_items(
        self,
        *,
        user_id: str,
        layers: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        statuses: Sequence[str] | None = None,
        contains: str = "",
        offset: int = 0,
        limit: int | None = 50,
        newest_first: bool = False,
    ) -> ItemPage:
        """See :meth:`lamina.Memory.list_items`."""
        return await self._run(
            self._mem.list_items,
            user_id=user_id,
            layers=layers,
            kinds=kinds,
            statuses=statuses,
            contains=contains,
            offset=offset,
            limit=limit,
            newest_first=newest_first,
        )

    async def activity(self, *, user_id: str, kinds: Sequence[str] = ("turn",), bins: int = 40) -> Activity:
        """See :meth:`lamina.Memory.activity`."""
        return await self._run(self._mem.activity, user_id=user_id, kinds=kinds, bins=bins)

    async def stats(self, *, user_id: str | None = None) -> MemoryStats:
        """See :meth:`lamina.Memory.stats`."""
        return await self._run(self._mem.stats, user_id=user_id)

    async def users(self) -> list[str]:
        """See :meth:`lamina.Memory.users`."""
        return await self._run(self._mem.users)

    async def item_counts(self) -> dict[str, int]:
        """See :meth:`lamina.Memory.item_counts`."""
        return await self._run(self._mem.item_counts)

    async def flush(self) -> None:
        """See :meth:`lamina.Memory.flush`."""
        await self._run(self._mem.flush)

    async def aclose(self) -> None:
        """Wait for the running calls, close the memory and the pool (idempotent)."""
        self._closed = True
        await asyncio.to_thread(self._pool.shutdown, True)
        await asyncio.to_thread(self._mem.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Async{self._mem!r}"
