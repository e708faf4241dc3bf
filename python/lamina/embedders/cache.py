"""``TextCache``: each distinct text embedded once per process (an LRU keyed by the text).

The memory loop embeds the same texts many times over (a turn's sentences for the segment
summary and again for the session summary, child summaries on every re-summarisation, the two
values of every fact comparison); the cache hands back the vector computed the first time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = ["TextCache"]

Vec = npt.NDArray[np.float32]


class TextCache:
    """Wraps ``embed(texts) -> (n, dim) float32`` so that each distinct text is embedded once.

    Parameters
    ----------
    embed : the embedding function (rows of unit length, float32)
    dim : its dimension
    max_texts : how many texts the cache keeps (least recently used first out); 0 disables it

    Calling it returns the vectors of ``texts``, shape (len(texts), dim), float32; only the
    texts it has not seen are passed to ``embed`` (once each, in one call, in their first order).
    A vector is the one ``embed`` returned for the text in the call that first embedded it.

    Thread safety: thread-safe (the cache is locked; ``embed`` runs outside the lock, so two
    threads may embed the same new text at once, the later result then replacing the earlier).
    """

    def __init__(self, embed: Callable[[list[str]], Vec], dim: int, max_texts: int = 65536) -> None:
        if max_texts < 0:
            raise ValueError(f"max_texts must be >= 0, got {max_texts}")
        self._embed = embed
        self.dim = int(dim)
        self.max_texts = int(max_texts)
        self._lru: OrderedDict[str, Vec] = OrderedDict()
        self._lock = threading.Lock()
        self.embedded = 0  # texts passed to ``embed``
        self.served = 0  # texts answered from the cache

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        """Forget every vector (after a delete: no deleted text stays here)."""
        with self._lock:
            self._lru.clear()

    def __call__(self, texts: list[str]) -> Vec:
        if self.max_texts == 0:
            self.embedded += len(texts)
            return self._embed(texts)
        with self._lock:
            got = {t: v for t in texts if (v := self._lru.get(t)) is not None}
            for t in got:
                self._lru.move_to_end(t)
        miss = [t for t in dict.fromkeys(texts) if t not in got]
        if miss:
            X = self._embed(miss)
            new = {t: np.array(X[i], dtype=np.float32) for i, t in enumerate(miss)}
            got.update(new)
            with self._lock:
                self._lru.update(new)
                while len(self._lru) > self.max_texts:
                    self._lru.popitem(last=False)
        self.embedded += len(miss)
        self.served += len(texts) - len(miss)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = got[t]
        return out
