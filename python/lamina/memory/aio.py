"""``lamina.AsyncMemory``: :class:`lamina.Memory` for asyncio, in process.

Every call runs the memory's work on a bounded thread pool (the native core releases the GIL in
its searches and embedding), so the event loop never blocks on it; awaiting a call gives the
same typed result ``Memory`` returns.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..embedders import Embedder
from . import (
    ClosedError,
    Memory,
    MemoryConfig,
)
from .opening import AsyncClosing

__all__ = ["AsyncMemory"]

T = TypeVar("T")
P = ParamSpec("P")


def _off_loop(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, T]]:
    """The coroutine twin of a :class:`lamina.Memory` method: the call runs on the pool."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(getattr(self._mem, name), *args, **kwargs)

    call.__doc__ = f"See :meth:`lamina.Memory.{name}`."
    return call


class AsyncMemory(AsyncClosing):
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

    # the Memory API, each call run on the pool (same parameters, results and errors)
    add = _off_loop(Memory.add)
    end_session = _off_loop(Memory.end_session)
    context = _off_loop(Memory.context)
    context_batch = _off_loop(Memory.context_batch)
    explain_context = _off_loop(Memory.explain_context)
    search = _off_loop(Memory.search)
    search_batch = _off_loop(Memory.search_batch)
    get = _off_loop(Memory.get)
    update = _off_loop(Memory.update)
    delete = _off_loop(Memory.delete)
    history = _off_loop(Memory.history)
    note = _off_loop(Memory.note)
    links = _off_loop(Memory.links)
    facts = _off_loop(Memory.facts)
    delete_user = _off_loop(Memory.delete_user)
    export_user = _off_loop(Memory.export_user)
    import_user = _off_loop(Memory.import_user)
    rename_users = _off_loop(Memory.rename_users)
    list_items = _off_loop(Memory.list_items)
    list_memories = _off_loop(Memory.list_memories)
    delete_memories = _off_loop(Memory.delete_memories)
    reset = _off_loop(Memory.reset)
    activity = _off_loop(Memory.activity)
    stats = _off_loop(Memory.stats)
    users = _off_loop(Memory.users)
    item_counts = _off_loop(Memory.item_counts)
    flush = _off_loop(Memory.flush)
    service_record = _off_loop(Memory.service_record)
    update_service_record = _off_loop(Memory.update_service_record)
    append_service_log = _off_loop(Memory.append_service_log)
    service_log = _off_loop(Memory.service_log)

    async def aclose(self) -> None:
        """Wait for the running calls, close the memory and the pool (idempotent)."""
        self._closed = True
        await asyncio.to_thread(self._pool.shutdown, True)
        await asyncio.to_thread(self._mem.close)

    def __repr__(self) -> str:
        return f"Async{self._mem!r}"
