"""The archive searched through pgvector on PostgreSQL, for a :class:`lamina.Memory` (typed by
:class:`~lamina.memory.state.host.MemoryHost`). The memory's vector index asks
:func:`archive_remote` first for an archive's top-k (:attr:`LayerIndex.remote
<lamina.native.layer_index.LayerIndex>`, set to it, bound to the memory, when the store keeps
pgvector columns)."""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt

from ..errors import LaminaError
from ..native.layer_index import NAMESPACE_BITS, layer_code
from .state.host import MemoryHost
from .state.records import NsCode

__all__ = ["archive_remote"]

_log = logging.getLogger("lamina")


def archive_remote(
    host: MemoryHost, q: npt.NDArray[np.float32], ns: int, k: int, n: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]] | None:
    """A user's archive on PostgreSQL with pgvector (:attr:`LayerIndex.remote`; caller holds
    the lock): past ``pgvector_threshold`` rows through the user's pgvector HNSW index, else
    — and while that index is being built (its build is started here), or when its answer
    does not cover ``k`` rows of this handle's state — the arena's exact scan, never a
    per-handle hnswlib graph (``bench/bench_pgvector.py``: the exact scan is the faster up
    to ~30k rows, and a graph would be built again in every replica after every load).
    None (other namespaces): the index's own search."""
    threshold = host.config.pgvector_threshold
    if threshold is None or layer_code(ns) != NsCode.ARCHIVE:
        return None
    uid = host._st.by_idx.get(ns >> NAMESPACE_BITS)
    if uid is None:
        return None
    if n > threshold:
        hit = _pgvector_search(host, uid, q, k)
        if hit is not None:
            return hit
    sc, ids = host._st.vectors.exact_search(q, ns, k)
    return np.asarray(sc, dtype=np.float32), np.asarray(ids, dtype=np.int64)


def _pgvector_search(
    host: MemoryHost, uid: str, q: npt.NDArray[np.float32], k: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]] | None:
    """The user's archive top-``k`` through its pgvector index, or None (not built yet: its
    build starts; a failed query; fewer than ``k`` rows this handle knows)."""
    from .store.postgres import PostgresStore

    store = host._store
    assert isinstance(store, PostgresStore)
    c = host.config
    try:
        if not store.archive_index_ready(uid):
            store.build_archive_index(uid, host._dim, c.ann_m, c.ann_ef_construction)
            return None
        cos, ids = store.archive_search(uid, q, k + 16, c.ann_ef_search + 16)
    except LaminaError:
        raise
    except Exception as e:  # (psycopg's errors: the arena answers instead)
        _log.warning("lamina: the archive's pgvector search failed (%s); searched in the arena", e)
        return None
    recs = host._st.recs
    # rows committed after this call caught up are not in the state yet: left out
    keep = [
        x
        for x, i in enumerate(ids.tolist())
        if (r := recs.get(i)) is not None and r.user_id == uid and r.layer == "archive" and r.status == "active"
    ][:k]
    if len(keep) < k:
        return None
    return cos[keep], ids[keep]
