"""Per-(user, layer) vector index of :class:`lamina.Memory`: native arenas, hnswlib past a size.

Storage: four :class:`lamina.VectorArena` s — one for the **archive** (every raw turn ever
added: unbounded, searched only on request), one for the searched **active** layers (working,
episodic, semantic: bounded by the capacities), one for the per-turn views of episodes, and one
for superseded facts (``history``). Keeping them apart keeps the few thousand active rows of a
user dense in memory instead of scattered among hundreds of thousands of archive rows, and lets
a search of one layer of a large user scan that layer's rows sequentially without reading the
others. Each (user, layer) is one arena namespace
(``user_idx << 3 | layer code``); the arena keeps one posting list per namespace, so a search
reads that namespace's rows and no others.

Search: a (user, layer) with at most ``ann_threshold`` vectors is searched exactly (native
top-k, cosine; namespaces of at least ``PARALLEL_ROWS`` rows with lamina's thread setting, the
others on the calling thread — results are the same either way). Past it, an hnswlib graph over
that (user, layer) answers instead (labels are item ids; space "cosine", so scores are the same
cosines the exact path returns). The graph is built lazily on the first search that needs it —
from the arena, so reopening a database rebuilds it from the stored embeddings — and then kept
up to date lazily too: rows added since the last search are inserted at the next search;
removals are ``mark_deleted`` (re-adding an item id, e.g. a re-embedded summary, updates its
point in place), except deletions (:meth:`LayerIndex.forget`): they drop the graph, which is
rebuilt from the live rows, since a marked point keeps its vector. When deleted points outnumber live ones the graph is rebuilt; when a layer
shrinks below half the threshold it goes back to exact search and the graph is dropped. Callers
see the same interface either way. A bulk build uses every thread, so the graph — hence an
approximate answer — may differ slightly between runs; below the threshold results are exact
and deterministic.

Thread safety: none of its own; :class:`lamina.Memory` calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.random import default_rng  # (imported with the module: numpy loads numpy.random lazily, ~10 ms)

from .._core import _gc_untrack
from ._info import get_num_threads
from .search import Codec, VectorArena, topk

__all__ = ["LayerIndex", "NAMESPACE_BITS", "layer_code"]

NAMESPACE_BITS = 3  # a namespace is user_idx << NAMESPACE_BITS | layer code


def layer_code(namespace: int) -> int:
    """The layer code of a namespace (its low ``NAMESPACE_BITS`` bits)."""
    return namespace & ((1 << NAMESPACE_BITS) - 1)


ARCHIVE_LAYER = 3  # items.LAYERS["archive"]
_ARENA_OF = {ARCHIVE_LAYER: 1, 5: 2, 4: 3}  # layer code -> arena (5: turn views, 4: history)
_BULK_ROWS = 4096  # pending inserts at least this many: multi-threaded graph construction
_ROW = 0xFFFFFFFF  # an arena slot's row (the high bits are its generation)
# Exact searches of namespaces with at least this many rows use lamina's thread setting
# (lamina.set_num_threads / LAMINA_NUM_THREADS; the arena splits the rows among the threads when
# there is enough work); smaller ones run on the calling thread (a spawned worker would cost more
# than it saves). 12k float16 rows of d = 384 (one user with 100k turns): 0.53 -> 0.30 ms on two
# idle cores. Throughput-oriented deployments with many concurrent callers may prefer
# lamina.set_num_threads(1).
PARALLEL_ROWS = 8192
_KEY_BITS = 40  # :meth:`LayerIndex.get_keyed`: ids whose low 40 bits are unique within an arena
_KEY_MASK = (1 << _KEY_BITS) - 1


Remote = Callable[
    [npt.NDArray[np.float32], int, int, int], "tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]] | None"
]


def _import_hnswlib() -> Any:
    try:
        import hnswlib
    except ImportError as e:  # pragma: no cover - hnswlib is a declared dependency
        raise ImportError(
            "lamina.Memory needs hnswlib for layers past MemoryConfig.ann_threshold: "
            "pip install hnswlib (or raise ann_threshold to keep exact search)"
        ) from e
    return hnswlib


def _fit(table: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.int64]:
    """``table`` grown (doubling, new entries -1) to hold at least ``size`` entries."""
    if size <= len(table):
        return table
    grown = np.full(max(size, 2 * len(table)), -1, dtype=np.int64)
    grown[: len(table)] = table
    return grown


def _scrub_vectors(ids: Sequence[int], dim: int) -> npt.NDArray[np.float32]:
    """Vectors that overwrite deleted points in a graph: a function of each id alone, never of
    stored data (spread out, so the overwritten points do not pile up in one place)."""
    out = np.empty((len(ids), dim), dtype=np.float32)
    for k, i in enumerate(ids):
        out[k] = default_rng(int(i) & ((1 << 63) - 1)).standard_normal(dim)
    return out


class _Graph:
    """hnswlib graph of one namespace plus the ids not yet inserted (lazy maintenance)."""

    __slots__ = ("index", "pending", "deleted", "live")

    def __init__(self, index: Any) -> None:
        self.index = index
        self.pending: set[int] = set()  # item ids in the arena but not yet in the graph
        self.deleted: set[int] = set()  # labels marked deleted in the graph (re-adding revives)
        self.live = 0  # points in the graph, not deleted


class LayerIndex:
    """Vectors of every active item, keyed by item id, grouped by namespace (user × layer).

    Parameters
    ----------
    dim : int
        Embedding dimension.
    ann_threshold : int
        A namespace with more vectors than this is searched through hnswlib.
    ann_m, ann_ef_construction, ann_ef_search : int
        hnswlib ``M``, ``ef_construction`` and the query-time ``ef`` (at least k is used).
    codec, oversample :
        The arenas' codes and the code scan's candidates per result (see :class:`VectorArena`);
        ``exact_search`` always scans the float rows.
    device : {"cpu", "cuda", "cuda:N"}
        Where the arenas live (a ``"cuda"`` arena is updated row by row on every add / remove;
        searches take and return host arrays).
    dtype : {"float32", "float16"}
        Storage of the searched arenas (the per-turn views are always float16).
    """

    def __init__(
        self,
        dim: int,
        ann_threshold: int,
        ann_m: int = 16,
        ann_ef_construction: int = 100,
        ann_ef_search: int = 96,
        codec: Codec | None = None,
        oversample: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        self.dim = int(dim)
        self.device = device
        self.codec = codec
        self.oversample = oversample
        self.ann_threshold = int(ann_threshold)
        self.ann_m = int(ann_m)
        self.ann_ef_construction = int(ann_ef_construction)
        self.ann_ef_search = int(ann_ef_search)
        # One arena per kind of namespace (see _which), so that a search of one user's layer reads
        # rows of that kind only: with a single large user, a namespace is most of its arena and
        # is scanned sequentially without touching the rows of other kinds.
        # The per-turn views (arena 2) are a pure search index — the turns' own float32 vectors
        # live in the archive, and Memory re-scores the candidates from them — so they are
        # stored as float16: half the bytes each search reads (float32 accumulation).
        self._arenas = tuple(
            VectorArena(self.dim, "float16" if a == 2 else dtype, capacity=1024, device=device, codec=codec)
            for a in range(4)
        )
        self._loc: dict[int, tuple[int, int, int]] = {}  # item id -> (arena, slot, namespace)
        # item id of each arena row (row = slot & _ROW; -1: free), so that search results map to
        # ids in one numpy gather
        self._id_of_row: list[npt.NDArray[np.int64]] = [np.full(1024, -1, dtype=np.int64) for _ in self._arenas]
        # slot of each id by its low _KEY_BITS bits, per arena (-1: none), for get_keyed
        self._slot_of_key: list[npt.NDArray[np.int64]] = [np.full(1024, -1, dtype=np.int64) for _ in self._arenas]
        self._graphs: dict[int, _Graph] = {}
        self.ann_builds = 0  # graphs built (stats, tests)
        #: An index outside the arenas for some namespaces (lamina.Memory on PostgreSQL: pgvector
        #: for a large archive): ``remote(q, namespace, k, size)`` with q of shape (dim,) returns
        #: (cosines, float32; item ids, int64), best first, or None for the arenas' own search.
        self.remote: Remote | None = None

    # ------------------------------------------------------------------ rows
    @staticmethod
    def _which(namespace: int) -> int:
        """Arena of a namespace by its layer code (low 3 bits): 0 the searched active layers
        (working, episodic, semantic), 1 the archive, 2 per-turn views of episodes, 3 history."""
        return _ARENA_OF.get(layer_code(namespace), 0)

    def __contains__(self, item_id: int) -> bool:
        return item_id in self._loc

    def __len__(self) -> int:
        return len(self._loc)

    def id_containers(self) -> list[object]:
        """The index's containers of ids (the location map, the graphs' pending and deleted
        sets): they hold only ints and tuples of ints (see :mod:`lamina.memory.state.gcquiet`)."""
        out: list[object] = [self._loc]
        for g in list(self._graphs.values()):
            out += [g.pending, g.deleted]
        return out

    def count(self, namespace: int) -> int:
        """Vectors stored under ``namespace``."""
        return self._arenas[self._which(namespace)].namespace_size(namespace)

    def add(self, namespace: int, ids: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
        """Store ``vectors`` (shape (n, dim), float32) for new item ids under ``namespace``."""
        if not len(ids):
            return
        a = self._which(namespace)
        X = np.ascontiguousarray(vectors.reshape(len(ids), self.dim), dtype=self._arenas[a].dtype)
        slot_arr = self._arenas[a].add(X, namespace=namespace, layer=layer_code(namespace))
        rows = slot_arr & _ROW
        id_arr = np.asarray(ids, dtype=np.int64)
        keys = id_arr & _KEY_MASK
        self._id_of_row[a] = _fit(self._id_of_row[a], int(rows.max()) + 1)
        self._id_of_row[a][rows] = id_arr
        self._slot_of_key[a] = _fit(self._slot_of_key[a], int(keys.max()) + 1)
        self._slot_of_key[a][keys] = slot_arr
        for i, s in zip(ids, slot_arr.tolist()):
            self._loc[i] = (a, s, namespace)
        _gc_untrack(self._loc)  # (new tuples track the map again: see lamina.memory.state.gcquiet)
        g = self._graphs.get(namespace)
        if g is not None:
            g.pending.update(ids)

    def remove(self, ids: Sequence[int]) -> None:
        """Drop the vectors of these item ids (all must be stored)."""
        per: tuple[list[int], ...] = tuple([] for _ in self._arenas)
        for i in ids:
            a, s, ns = self._loc.pop(i)
            per[a].append(s)
            self._id_of_row[a][s & _ROW] = -1
            k = i & _KEY_MASK
            if k < len(self._slot_of_key[a]) and self._slot_of_key[a][k] == s:
                self._slot_of_key[a][k] = -1
            g = self._graphs.get(ns)
            if g is not None:
                if i in g.pending:
                    g.pending.discard(i)
                else:
                    g.index.mark_deleted(i)
                    g.deleted.add(i)
                    g.live -= 1
        for a in range(len(self._arenas)):
            if per[a]:
                self._arenas[a].remove(per[a])

    def forget(self, ids: Sequence[int]) -> None:
        """:meth:`remove` for deletions: the arena rows are zeroed (as by every removal), and no
        hnswlib graph keeps the data of a deleted id. ``mark_deleted`` leaves a point's vector in
        its graph (hnswlib cannot erase a point), so each point a graph holds for these ids —
        live, or marked deleted by an earlier removal — is first overwritten in place with a
        vector drawn from its id alone (hnswlib's update of an existing label; the graph's links
        are repaired as for any update) and then marked deleted. The graph stays: no rebuild."""
        ids = [int(i) for i in ids]
        self.remove([i for i in ids if i in self._loc])
        for g in self._graphs.values():
            held = [i for i in ids if i in g.deleted]
            if held:
                g.index.add_items(_scrub_vectors(held, self.dim), np.asarray(held, dtype=np.uint64), num_threads=1)
                for i in held:
                    g.index.mark_deleted(i)

    def drop_graphs(self, namespaces: Sequence[int]) -> None:
        """Drop the hnswlib graphs of these namespaces (built again from the arena when next
        searched): every point they held, marked deleted or not, goes with them."""
        for ns in namespaces:
            self._graphs.pop(ns, None)

    def graph_labels(self, namespace: int) -> list[int]:
        """Item ids that the namespace's hnswlib graph holds data for, those marked deleted
        included (empty without a graph). For debugging and tests."""
        g = self._graphs.get(namespace)
        return [] if g is None else sorted(int(i) for i in g.index.get_ids_list())

    def arena_rows(self) -> tuple[npt.NDArray[np.floating], ...]:
        """Read-only views of the four arenas' rows (see :attr:`lamina.VectorArena.vectors`;
        removed rows read as zeros). For debugging and tests."""
        return tuple(a.vectors for a in self._arenas)

    def get(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Vectors of these item ids, shape (n, dim), float32."""
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        if not len(ids):
            return out
        loc = self._loc
        where = [loc[i] for i in ids]
        a0 = where[0][0]
        if all(w[0] == a0 for w in where):  # the common case: one arena
            out[:] = self._arenas[a0].get([w[1] for w in where])
            return out
        per: dict[int, tuple[list[int], list[int]]] = {}  # arena -> (positions, slots)
        for j, i in enumerate(ids):
            a, s, _ = loc[i]
            p = per.get(a)
            if p is None:
                p = per[a] = ([], [])
            p[0].append(j)
            p[1].append(s)
        for a, (pos, slots) in per.items():
            out[pos] = self._arenas[a].get(slots)  # float16 rows widen
        return out

    def stamps(self, ids: Sequence[int]) -> npt.NDArray[np.int64]:
        """A stamp of each id's stored vector, shape (len(ids),), int64 (-1: not stored).

        The stamp is the vector's arena handle (generation << 32 | row, see
        :class:`lamina.VectorArena`) with the arena in its top two bits: storing an id again
        (removed and added, e.g. re-embedded) gives it a new stamp, so a caller that keeps data
        derived from a vector can tell whether the vector is still the one it saw (for
        generations below 2**29)."""
        low = (1 << 61) - 1
        vals = [-1 if w is None else (w[0] << 61) | (w[1] & low) for w in map(self._loc.get, ids)]
        return np.array(vals, dtype=np.int64).reshape(len(vals))

    def get_keyed(self, code: int, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """:meth:`get` for ids all stored under namespaces of layer ``code``, by one array
        lookup (no per-id Python work). Requires the low 40 bits of an id to be unique among the
        ids stored in that layer's arena (true of :class:`lamina.Memory`'s ids: database tag <<
        40 | sequence number). Raises KeyError for an id not stored there."""
        return self.rows(*self.keyed_slots(code, ids))

    def keyed_slots(self, code: int, ids: npt.NDArray[np.int64]) -> tuple[int, npt.NDArray[np.int64]]:
        """Where :meth:`get_keyed` reads ``ids``: the arena of layer ``code`` and each id's row
        slot in it, shape (len(ids),), int64 (for :meth:`rows`; valid until the index changes).
        Raises KeyError for an id not stored there."""
        a = _ARENA_OF.get(layer_code(code), 0)
        keys = ids & _KEY_MASK
        table = self._slot_of_key[a]
        if len(keys) and int(keys.max()) >= len(table):
            raise KeyError("an id is not stored in this layer's arena")
        slots: npt.NDArray[np.int64] = table[keys]
        if len(slots) and int(slots.min()) < 0:
            raise KeyError(f"id {int(ids[int(np.argmin(slots))])} is not stored in this layer's arena")
        return a, slots

    def rows(self, arena: int, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The vectors at ``slots`` of arena ``arena`` (:meth:`keyed_slots`), shape
        (len(slots), dim), float32 (float16 rows widen)."""
        if not len(slots):
            return np.empty((0, self.dim), dtype=np.float32)
        out = self._arenas[arena].get(slots)
        return out if out.dtype == np.float32 else out.astype(np.float32)

    def _namespace_ids(self, namespace: int) -> list[int]:
        return [i for i, loc in self._loc.items() if loc[2] == namespace]

    # ------------------------------------------------------------------ search
    def uses_ann(self, namespace: int, size: int | None = None) -> bool:
        """Whether a search of ``namespace`` goes through hnswlib (hysteresis: a graph, once
        built, serves until the namespace drops under half the threshold). ``size``: its
        :meth:`count`, when the caller has it."""
        n = self.count(namespace) if size is None else size
        if namespace in self._graphs:
            return 2 * n >= self.ann_threshold
        return n > self.ann_threshold

    def search(
        self, q: npt.NDArray[np.float32], namespaces: Sequence[int], k: int
    ) -> list[tuple[list[float], list[int]]]:
        """Top-``k`` item ids by cosine for each namespace (best first; fewer when a namespace
        holds fewer). ``q``: shape (dim,) or (1, dim), float32, finite, non-zero."""
        found = self.search_batch(q.reshape(1, self.dim), [namespaces], k)[0]
        return [(s.tolist(), i.tolist()) for s, i in found]

    def search_arrays(
        self, q: npt.NDArray[np.float32], namespace: int, k: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """:meth:`search` of one namespace, as arrays: (cosines, float32; item ids, int64), best
        first, at most ``k`` each."""
        return self.search_batch(q.reshape(1, self.dim), [[namespace]], k)[0][0]

    def search_batch(
        self,
        Q: npt.NDArray[np.float32],
        requests: Sequence[Sequence[int]],
        k: int,
        *,
        scan: bool = False,
        allow: Sequence[npt.NDArray[np.int64] | None] | None = None,
    ) -> list[list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]]:
        """:meth:`search` of many queries at once: ``out[i][j]`` is the top-``k`` of namespace
        ``requests[i][j]`` for query row ``Q[i]``, as arrays (cosines, float32; item ids,
        int64), best first — the same bits as ``search(Q[i], requests[i], k)[j]``.

        Parameters
        ----------
        Q : ndarray, shape (n, dim), float32, finite, rows non-zero
        requests : n sequences of namespaces (distinct within a request)
        k : int
        scan : bool
            Scan every namespace exactly (no remote index, no hnswlib graph built or asked): for
            callers whose namespaces are small by construction, or that must not start a graph.
        allow : per request, the only candidate ids (int64 array; None: all), optional
            Searched by :meth:`search_allowed`: ``min(k, allowed ids there)`` per namespace.

        Notes
        -----
        The exact pairs of an arena go to one native call (one namespace per query row): a
        (query, row) score has the same bits whichever call, batch, thread count or walk of
        the rows computes it (see ``cpp/dot_kernels.inc``), and ties go to the smaller row, so
        a pair's top-``k`` is the one a call of its own would give. hnswlib namespaces are
        searched one query at a time.
        """
        Q = np.ascontiguousarray(Q, dtype=np.float32).reshape(-1, self.dim)
        empty = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))
        out = [[empty] * len(nss) for nss in requests]
        sizes: dict[int, int] = {}
        exact: dict[int, list[tuple[int, int, int]]] = {}  # arena -> [(query, position, namespace)]
        arena_of: dict[int, int] = {}  # namespace -> its arena, when searched exactly (no remote)
        for i, nss in enumerate(requests):
            ids_i = None if allow is None else allow[i]
            if ids_i is not None:
                for j, ns in enumerate(nss):
                    out[i][j] = self.search_allowed(Q[i], ns, k, ids_i)
                continue
            for j, ns in enumerate(nss):
                a = arena_of.get(ns)
                if a is not None:  # (a namespace asked again: the route found the first time)
                    exact[a].append((i, j, ns))
                    continue
                n = sizes.get(ns)
                if n is None:
                    n = sizes[ns] = self.count(ns)
                if n == 0:
                    continue
                if self.remote is not None and not scan:
                    hit = self.remote(Q[i], ns, min(k, n), n)
                    if hit is not None:
                        out[i][j] = hit
                        continue
                if not scan and self.uses_ann(ns, n):
                    sc, ids = self._ann_search(Q[i : i + 1], ns, min(k, n))
                    out[i][j] = (np.asarray(sc, dtype=np.float32), np.asarray(ids, dtype=np.int64))
                    continue
                if not scan:
                    self._graphs.pop(ns, None)  # shrunk under half the threshold: back to exact
                a = self._which(ns)
                exact.setdefault(a, []).append((i, j, ns))
                if self.remote is None or scan:
                    arena_of[ns] = a
        for a, pairs in exact.items():
            most = max(sizes[ns] for _, _, ns in pairs)
            nss_arr = np.array([ns for _, _, ns in pairs], dtype=np.uint64)
            res = self._native(a, Q[[i for i, _, _ in pairs]], min(k, most), nss_arr, most >= PARALLEL_ROWS)
            for (i, j, _), hit in zip(pairs, res):
                out[i][j] = hit
        return out

    def search_allowed(
        self, q: npt.NDArray[np.float32], namespace: int, k: int, ids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Exact top-``k`` by cosine of ``namespace`` among the item ``ids`` (others ignored):
        (cosines, float32; ids, int64), best first, ``min(k, allowed rows)``. A host arena scans
        with an allow-mask over its rows (:meth:`VectorArena.search`'s ``allow``), a CUDA arena's
        allowed rows are scored by :func:`topk` on the host (the CPU twin); no graph or remote
        index (they cannot restrict their walk). Ids as :meth:`get_keyed` requires."""
        empty = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))
        if not len(ids) or not self.count(namespace):
            return empty
        a = self._which(namespace)
        arena = self._arenas[a]
        table = self._slot_of_key[a]
        keys = ids & _KEY_MASK
        slots = table[keys[keys < len(table)]]
        slots = slots[slots >= 0]
        if not len(slots):
            return empty
        q1 = np.ascontiguousarray(q.reshape(1, self.dim), dtype=np.float32)
        id_of = self._id_of_row[a]
        if arena.device != "cpu":
            slots = slots[arena.namespaces_of(slots) == np.uint64(namespace)]
            if not len(slots):
                return empty
            sc, at = topk(q1, arena.get(slots).astype(np.float32), min(k, len(slots)), "cosine")
            keep = at[0] >= 0
            return sc[0][keep], id_of[slots[at[0][keep]] & _ROW]
        mask = np.zeros(arena.high_water, dtype=np.uint8)
        mask[slots & _ROW] = 1
        n = int(mask.sum())
        scores, found = arena.search(
            q1,
            min(k, n),
            metric="cosine",
            namespace=namespace,
            threads=0 if n >= PARALLEL_ROWS else 1,
            oversample=self.oversample,
            allow=mask,
        )
        keep = found[0] >= 0
        return scores[0][keep], id_of[found[0][keep] & _ROW]

    def _native(
        self, a: int, Q: npt.NDArray[np.float32], k: int, ns: int | npt.NDArray[np.uint64], threaded: bool
    ) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]:
        """One native exact search of arena ``a`` (cosine): per query row, (scores, item ids)."""
        scores, slots = self._arenas[a].search(
            np.ascontiguousarray(Q),
            k,
            metric="cosine",
            namespace=ns,
            threads=0 if threaded else 1,
            oversample=self.oversample,
        )
        id_of = self._id_of_row[a]
        keep = slots >= 0
        counts = keep.sum(axis=1)
        if keep.all() or np.array_equal(keep, np.arange(slots.shape[1]) < counts[:, None]):
            # (the usual case: each row's hits first, then pads) the ids of all rows in one gather
            ids = id_of[np.where(keep, slots & _ROW, 0)]
            return [(scores[row, :c], ids[row, :c]) for row, c in enumerate(counts.tolist())]
        res = []
        for row in range(len(Q)):
            sl = slots[row]
            kept = sl >= 0
            res.append((scores[row][kept], id_of[sl[kept] & _ROW]))
        return res

    def _graph(self, namespace: int) -> _Graph:
        g = self._graphs.get(namespace)
        if g is not None and len(g.deleted) > max(g.live, 1024):
            g = None  # mostly tombstones: rebuild
        if g is None:
            hnswlib = _import_hnswlib()
            ids = self._namespace_ids(namespace)
            index = hnswlib.Index(space="cosine", dim=self.dim)
            index.init_index(
                max_elements=max(2 * len(ids), 1024),
                ef_construction=self.ann_ef_construction,
                M=self.ann_m,
                random_seed=0,
            )
            g = _Graph(index)
            g.pending.update(ids)
            self._graphs[namespace] = g
            self.ann_builds += 1
        if g.pending:
            ids = sorted(g.pending)
            fresh = sum(1 for i in ids if i not in g.deleted)  # revived labels reuse their point
            need = g.index.get_current_count() + fresh
            if need > g.index.get_max_elements():
                g.index.resize_index(max(2 * need, 1024))
            # A bulk build uses every thread (one-off, seconds at 10^5 rows); the few rows added
            # between two searches go in on the calling thread.
            threads = get_num_threads() if len(ids) >= _BULK_ROWS else 1
            g.index.add_items(self.get(ids), np.asarray(ids, dtype=np.uint64), num_threads=threads)
            g.deleted.difference_update(ids)
            g.live += len(ids)
            g.pending.clear()
        return g

    def _ann_search(self, q: npt.NDArray[np.float32], namespace: int, k: int) -> tuple[list[float], list[int]]:
        g = self._graph(namespace)
        g.index.set_ef(max(self.ann_ef_search, k))
        try:
            labels, dist = g.index.knn_query(q, k=k, num_threads=1)
        except RuntimeError:  # fewer reachable points than k (many tombstones): exact instead
            return self._exact_one(q, namespace, k)
        return (1.0 - dist[0]).astype(np.float32).tolist(), [int(x) for x in labels[0]]

    def _exact_one(
        self, q: npt.NDArray[np.float32], namespace: int, k: int, oversample: int | None = None
    ) -> tuple[list[float], list[int]]:
        """The arena's search of one namespace: the code scan with a codec (``oversample``, None:
        the index's setting), else (or with 0) the exact scan."""
        a = self._which(namespace)
        scores, slots = self._arenas[a].search(
            q,
            k,
            metric="cosine",
            namespace=namespace,
            threads=0 if self.count(namespace) >= PARALLEL_ROWS else 1,
            oversample=self.oversample if oversample is None else oversample,
        )
        keep = slots[0] >= 0
        return scores[0][keep].tolist(), self._id_of_row[a][slots[0][keep] & _ROW].tolist()

    def exact_search(self, q: npt.NDArray[np.float32], namespace: int, k: int) -> tuple[list[float], list[int]]:
        """Exact top-``k`` of one namespace, whatever its size (the reference for the ANN path)."""
        n = self.count(namespace)
        if n == 0:
            return [], []
        return self._exact_one(np.ascontiguousarray(q.reshape(1, self.dim), dtype=np.float32), namespace, min(k, n), 0)

    # ------------------------------------------------------------------ stats
    def info(self) -> dict[str, Any]:
        """Rows per arena and the namespaces currently served by hnswlib."""
        a = self._arenas
        return {
            "active_rows": len(a[0]) + len(a[2]) + len(a[3]),
            "archive_rows": len(a[1]),
            "turn_view_rows": len(a[2]),
            "history_rows": len(a[3]),
            "ann_threshold": self.ann_threshold,
            "ann_namespaces": len(self._graphs),
            "ann_builds": self.ann_builds,
        }

    def graph_namespaces(self) -> list[int]:
        """Namespaces that currently have an hnswlib graph."""
        return sorted(self._graphs)
