"""Nearest-neighbour lists of covered raw turns, kept across sessions for the capacity projection.

The coverage projection (:mod:`lamina.memory.write.retention`) needs, for every raw turn some pooled
item covers, ν_t = 1 − max(0, cos(t, t′)) for the nearest covered turn t′ of another leaf. A
from-scratch answer is a T×T top-k over the T covered turns (≈ 12k at the default capacities)
every time a session ends; :class:`TurnNeighbours` keeps the answer's ingredients instead, per
user (``UserState.coverage``, in memory only), and updates them with the change:

* each covered turn is a *column* (its vector copied, its arena stamp noted) with a *row*: up to
  ``k`` of its most similar columns (itself included) and a *floor*, an upper bound on the
  similarity of every column that was live while the row existed and is not listed in it;
* a turn that becomes covered gets a new column; its row is computed against the live columns
  and the new column is offered to every other row, all from one similarity block (new × live);
  a row takes a candidate that beats its weakest live entry (or fills a free slot), and whatever
  it drops or refuses raises its floor;
* a turn that stops being covered (or whose vector changed: its arena stamp differs) leaves: its
  column is removed (the last column moves into its place, so the columns in use stay dense and
  every product reads live vectors only), entries naming it become free slots, and a turn
  covered again later comes back as a new column;
* a question "nearest covered column of another group" is answered from a row when its best
  qualifying entry is at least its floor — every column not listed is then no nearer —, and
  otherwise by listing the row anew against the columns covered now (one row × live block), which
  also gives the exact answer directly.

So every answer is exact, whatever the history of the lists: every similarity here, listed
from a block or from the first build's top-k, comes from lamina's one dot-product kernel, whose
bits depend neither on the CPU's instruction set nor on the shapes (``lamina.native.search.inner_products``).
A list can only run dry for a turn whose listed neighbours all left or are its own leaf's; that
costs one row × T product for that turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core import _coverage_nearest, _coverage_remap
from ...native.layer_index import LayerIndex
from ...native.search import inner_products, topk

__all__ = ["TurnNeighbours", "TurnIncidence"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_NEG = np.float32(-np.inf)


def _dot_rows(A: F32, X: F32) -> F32:
    """``A @ X.T``, shape (len(A), len(X)), float32, by lamina's kernel (not the BLAS): each
    similarity has the bits of the native top-k's score for the pair on every CPU, so lists
    kept across sessions and lists built from scratch (one top-k) rank the same turns alike."""
    return inner_products(np.ascontiguousarray(A), np.ascontiguousarray(X))


class TurnIncidence:
    """The turns each pooled item of one user renders or summarises, kept across capacity
    projections (``UserState.incidence``, in memory only), so that a projection reads again only
    the items that appeared or changed since the last one.

    ``entries`` maps an item id to ``(record, sources, raw, agg)``: the record object and its
    ``sources`` tuple as read (an entry holds while both are the very objects the item has now: a
    record patched or replaced, or whose sources changed, is read again), the turn ids it renders
    verbatim (``raw``) and those its sources name (``agg``, for aggregates), each the bytes of an
    int64 array. What an entry reads beyond the record (which turns exist, which turn a source id
    names) changes only with ``UserState.turn_epoch``: entries are valid for ``epoch`` only.

    Parameters
    ----------
    epoch : int
        The user's ``turn_epoch`` the entries are read at.
    """

    __slots__ = ("epoch", "entries")

    def __init__(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.entries: dict[int, tuple[object, object, bytes, bytes]] = {}


class TurnNeighbours:
    """Top-``k`` cosine neighbours of the covered raw turns of one user (see the module docstring).

    Parameters
    ----------
    dim : int
        Vector dimension.
    k : int
        Entries per row (the row's own column included), >= 1.

    Notes
    -----
    Columns ``0..n-1`` are the live turns, indexed in ``ids``, ``stamp`` (the arena stamp of the
    vector listed), ``X`` (shape (cap, dim), float32), ``S`` (shape (cap, k), float32, -inf for a
    free slot), ``I`` (shape (cap, k), int64 columns, -1 for a free slot), ``floor`` and ``kth``
    (shape (cap,), float32); ``col`` maps a turn id to its column. ``kth[c]`` is the similarity a
    candidate must beat to enter row c (-inf while the row has a free slot). Removing columns
    renumbers others (:meth:`kill`): column numbers are valid until the next :meth:`kill` or
    :meth:`sync`.
    """

    _MIN_CAP = 256
    _CHUNK = 1024  # rows per similarity block (bounds a block to _CHUNK × n floats)

    def __init__(self, dim: int, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.dim = int(dim)
        self.k = int(k)
        self.n = 0
        self.col: dict[int, int] = {}  # turn id -> its column
        cap = self._MIN_CAP
        self.ids = np.full(cap, -1, dtype=np.int64)
        self.stamp = np.full(cap, -1, dtype=np.int64)
        self.X = np.zeros((cap, self.dim), dtype=np.float32)
        self.S = np.full((cap, self.k), _NEG, dtype=np.float32)
        self.I = np.full((cap, self.k), -1, dtype=np.int64)
        self.floor = np.full(cap, _NEG, dtype=np.float32)
        self.kth = np.full(cap, _NEG, dtype=np.float32)
        self.relisted = 0  # rows listed anew because their list ran dry (statistics, tests)
        self._sorted: tuple[I64, I64] | None = None  # (the listed ids sorted, their columns), for columns()
        self.epoch = -1  # the owner's count of replaced vectors when the stamps were last read (-1: never)

    # ------------------------------------------------------------------ columns
    def _grow(self, need: int) -> None:
        cap = len(self.ids)
        if need <= cap:
            return
        new = max(need, 2 * cap)

        def ext(a: npt.NDArray[Any], fill: float) -> npt.NDArray[Any]:
            # (zeros: calloc'd, its pages are touched only as rows are written — the vectors,
            # 12 MiB at 8k columns, took ~40 ms of page faults when filled at once)
            shape = (new,) + a.shape[1:]
            out = np.zeros(shape, dtype=a.dtype) if fill == 0 else np.full(shape, fill, dtype=a.dtype)
            out[: self.n] = a[: self.n]
            return out

        self.ids = ext(self.ids, -1)
        self.stamp = ext(self.stamp, -1)
        self.X = ext(self.X, 0.0)
        self.S = ext(self.S, -np.inf)
        self.I = ext(self.I, -1)
        self.floor = ext(self.floor, -np.inf)
        self.kth = ext(self.kth, -np.inf)

    def sync(self, vectors: LayerIndex, ids: Sequence[int] | I64, *, listed_current: bool = False) -> I64:
        """Make the columns exactly the turns ``ids`` (all stored in ``vectors``), with their
        current vectors: a turn whose stored vector changed since it was listed (its stamp
        differs) is listed anew. ``listed_current``: the caller knows that no listed turn's
        vector changed since it was listed (its stamp is not read). Returns the column of each
        id, shape (len(ids),)."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        cols = self.columns(arr)
        known = cols >= 0
        ok = known.copy()
        if not listed_current:
            stamps = vectors.stamps(arr.tolist())
            ok[known] = self.stamp[cols[known]] == stamps[known]
        keep = np.zeros(self.n, dtype=bool)
        keep[cols[ok]] = True
        self.kill(np.flatnonzero(~keep).astype(np.int64))
        fresh = list(dict.fromkeys(arr[~ok].tolist()))
        if fresh:
            self.add(fresh, vectors.get(fresh), vectors.stamps(fresh))
        return cols if self._sorted is not None else self.columns(arr)  # (the columns moved: asked again)

    def columns(self, ids: I64) -> I64:
        """The column of each turn id, shape (len(ids),), int64 (-1: not listed)."""
        n = self.n
        if not n or not len(ids):
            return np.full(len(ids), -1, dtype=np.int64)
        if self._sorted is None:  # (kept until the columns change: add and kill drop it)
            order = np.argsort(self.ids[:n], kind="stable")
            self._sorted = (self.ids[:n][order], order)
        srt, order = self._sorted
        pos = np.minimum(np.searchsorted(srt, ids), n - 1)
        return np.where(srt[pos] == ids, order[pos], -1).astype(np.int64)

    def observe(self, vectors: LayerIndex, ids: Sequence[int]) -> None:
        """Turns that just became covered (the add path): those not yet listed get columns now,
        so that the next projection finds them listed. Unlike :meth:`sync` nothing leaves."""
        new = [t for t in dict.fromkeys(ids) if t not in self.col]
        if new:
            self.add(new, vectors.get(new), vectors.stamps(new))

    def add(self, ids: Sequence[int], X: F32, stamps: I64) -> None:
        """New columns (turn ids not listed yet) with their vectors, shape (len(ids), dim), and
        stamps, shape (len(ids),)."""
        if not self.n:  # (a first build: one native top-k among all of them, no block is formed;
            # in chunks, each chunk's rows were merged into the earlier ones by sorting: 9.5 s
            # against about 1 s for the 12k turns of a reopened 100k-turn user)
            self._add_chunk(list(ids), X, stamps)
            return
        for lo in range(0, len(ids), self._CHUNK):
            self._add_chunk(list(ids[lo : lo + self._CHUNK]), X[lo : lo + self._CHUNK], stamps[lo : lo + self._CHUNK])

    def _add_chunk(self, ids: list[int], X: F32, stamps: I64) -> None:
        m = len(ids)
        n0 = self.n
        self._sorted = None
        self._grow(n0 + m)
        new = np.arange(n0, n0 + m, dtype=np.int64)
        self.ids[new] = ids
        self.stamp[new] = stamps
        self.X[new] = X
        for t, c in zip(ids, new.tolist()):
            self.col[t] = c
        self.n += m
        if not n0:  # nothing to merge into: one native top-k among the new columns
            Xn = np.ascontiguousarray(self.X[new])
            S, I = topk(Xn, Xn, min(self.k + 1, m), "ip")
            S = np.asarray(S, dtype=np.float32)
            I = np.asarray(I, dtype=np.int64)
            self._set_rows(new, S, np.where(I >= 0, new[np.maximum(I, 0)], -1))
            return
        # One block: similarities of the new columns to every column; the new rows are listed
        # from it and its transpose is offered to the older rows.
        B = _dot_rows(self.X[new], self.X[: self.n])  # (m, n)
        self._list_rows(new, B)
        self._merge(B[:, :n0], new)

    def _list_rows(self, rows: I64, B: F32) -> None:
        """Rows from their similarities to every column, shape (len(rows), n) (-inf: not a
        candidate): the top k listed, the next one the floor."""
        n = B.shape[1]
        kk = min(self.k + 1, n)
        part = np.argpartition(B, n - kk, axis=1)[:, n - kk :]
        vals = np.take_along_axis(B, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        self._set_rows(rows, np.take_along_axis(vals, order, axis=1), np.take_along_axis(part, order, axis=1))

    def _set_rows(self, rows: I64, S: F32, I: I64) -> None:
        """Rows from their best candidates sorted by similarity, shape (len(rows), <= k + 1):
        the first k listed (-inf ones as free slots), the (k+1)-th (if any) the floor."""
        k = self.k
        w = min(k, S.shape[1])
        top_s = S[:, :w]
        top_i = np.where(np.isfinite(top_s), I[:, :w], -1)
        self.S[rows] = _NEG
        self.I[rows] = -1
        self.S[rows, :w] = np.where(top_i >= 0, top_s, _NEG)
        self.I[rows, :w] = top_i
        self.floor[rows] = S[:, k] if S.shape[1] > k else _NEG
        self._refresh_kth(rows)

    def _refresh_kth(self, rows: I64) -> None:
        self.kth[rows] = np.where(self.I[rows] < 0, _NEG, self.S[rows]).min(axis=1)

    def _merge(self, B: F32, cand: I64) -> None:
        """Offer candidate columns ``cand`` to the rows of columns ``0..n0-1``; ``B[j, r]`` =
        sim(cand[j], r), shape (len(cand), n0)."""
        n0 = B.shape[1]
        takes = B > self.kth[:n0][None, :]
        hit = takes.any(axis=0)
        # Rows that take nothing: every candidate is at most their weakest entry; the floor keeps
        # the best of them.
        self.floor[:n0] = np.maximum(self.floor[:n0], np.where(hit, _NEG, B.max(axis=0)))
        r = np.flatnonzero(hit).astype(np.int64)
        if not len(r):
            return
        S_all = np.concatenate([self.S[r], B[:, r].T], axis=1)
        I_all = np.concatenate([self.I[r], np.broadcast_to(cand, (len(r), len(cand)))], axis=1)
        order = np.argsort(-S_all, axis=1, kind="stable")  # (free slots: -inf, last)
        S_all = np.take_along_axis(S_all, order, axis=1)
        I_all = np.take_along_axis(I_all, order, axis=1)
        k = self.k
        self.S[r] = S_all[:, :k]
        self.I[r] = np.where(np.isfinite(S_all[:, :k]), I_all[:, :k], -1)
        self.floor[r] = np.maximum(self.floor[r], S_all[:, k:].max(axis=1))
        self._refresh_kth(r)

    def kill(self, cols: I64) -> None:
        """These columns leave for good: entries naming them become free slots, and the last
        columns move into their places (renumbering them)."""
        if not len(cols):
            return
        self._sorted = None
        n = self.n
        gone = np.zeros(n, dtype=bool)
        gone[cols] = True
        for t in self.ids[:n][gone].tolist():
            del self.col[int(t)]
        m = n - int(gone.sum())
        holes = np.flatnonzero(gone[:m])
        movers = np.flatnonzero(~gone[m:]) + m  # as many as holes
        remap = np.arange(n, dtype=np.int64)  # each column's new number (-1: gone)
        remap[gone] = -1
        remap[movers] = holes
        for a in (self.ids, self.stamp, self.X, self.S, self.I, self.floor, self.kth):
            a[holes] = a[movers]
        for t, c in zip(self.ids[holes].tolist(), holes.tolist()):
            self.col[int(t)] = c
        self.n = m
        _coverage_remap(self.I, self.S, self.kth, m, remap)  # (entries naming gone columns: free slots)
        self.S[m:n] = _NEG
        self.I[m:n] = -1

    # ------------------------------------------------------------------ questions
    def nearest(self, rows: I64, on: Mask, group: I64) -> tuple[F32, I64]:
        """For each column of ``rows``: the similarity of and the nearest column c with
        ``on[c]`` and ``group[c] != group[row]`` (-inf and -1 when there is none).

        Parameters
        ----------
        rows : ndarray, shape (m,), int64
            Columns asked about.
        on : ndarray, shape (n,), bool
            The columns that count.
        group : ndarray, shape (n,), int64
            Group of each column (columns of one group are not each other's neighbours).

        Returns
        -------
        best : ndarray, shape (m,), float32
        where : ndarray, shape (m,), int64
        """
        if not len(rows):
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        n = self.n
        best, where = _coverage_nearest(
            self.I[:n], self.S[:n], np.ascontiguousarray(rows, dtype=np.int64), on[:n], group[:n]
        )
        dry = np.flatnonzero(best < self.floor[rows])  # (a column nearer than all qualifying entries may be unlisted)
        if len(dry):
            b, w = self._relist(rows[dry], on, group)
            best[dry], where[dry] = b, w
        return best, where

    def _relist(self, rows: I64, on: Mask, group: I64) -> tuple[F32, I64]:
        """List ``rows`` anew against the columns ``on`` (which must include every column that
        can count again: the caller kills the others before the lists are used again) and answer
        :meth:`nearest` for them from the full similarities."""
        self.relisted += len(rows)
        n = self.n
        best = np.full(len(rows), _NEG, dtype=np.float32)
        where = np.full(len(rows), -1, dtype=np.int64)
        for lo in range(0, len(rows), self._CHUNK):
            r = rows[lo : lo + self._CHUNK]
            B = _dot_rows(self.X[r], self.X[:n])
            B[:, ~on[:n]] = _NEG
            self._list_rows(r, B)
            B[group[:n][None, :] == group[r][:, None]] = _NEG
            j = np.argmax(B, axis=1)
            b = B[np.arange(len(r)), j]
            best[lo : lo + len(r)] = b
            where[lo : lo + len(r)] = np.where(np.isfinite(b), j, -1)
        return best, where
