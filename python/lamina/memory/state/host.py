"""``MemoryHost``: the parts of :class:`lamina.Memory` its mixins use (the read path in
:mod:`~lamina.memory.read.reading`, the views in :mod:`~lamina.memory.read.inspection`, a user's
export and import in :mod:`~lamina.memory.dump.user_transfer`), so that each mixin is typed
without importing the façade."""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ...embedders import Embedder, TextCache
from ...llm.openai_chat import LLM
from ...text.domains import DomainClassifier
from ..config import MemoryConfig
from ..store.protocol import Store
from .memstate import MemoryState, UserState
from .records import Record
from .tx import Models, Tx

__all__ = ["MemoryHost"]


class MemoryHost(Protocol):
    """What the mixins of :class:`lamina.Memory` read of it."""

    config: MemoryConfig
    llm: LLM | None
    _lock: threading.RLock
    _st: MemoryState
    _store: Store
    _models: Models
    _embedder: Embedder
    _dim: int
    _path: str | None
    _closed: bool
    _embed: TextCache
    _query_domains: DomainClassifier

    def _check_open(self) -> None: ...
    def _check_user_call(self, user_id: str) -> None: ...
    def _write(self) -> contextlib.AbstractContextManager[Tx]: ...
    def _flush_pending(self) -> None: ...
    def _embed_turns(self, turns: list[tuple[str, str | None]]) -> npt.NDArray[np.float32]: ...
    def _op(self) -> contextlib.AbstractContextManager[None]: ...
    def _sync(self) -> None: ...
    def _record(self, item_id: int, user_id: str | None) -> Record: ...
    def _user(self, user_id: str) -> UserState | None: ...
    def _known_user(self, user_id: str) -> UserState: ...
    def _remove(self, tx: Tx, u: UserState, doomed: set[int]) -> None: ...
    def _drop_user(self, tx: Tx, user_id: str) -> None: ...
