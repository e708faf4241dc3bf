"""The episodic fusion of many queries at once (lamina.memory.read.fusion): each query's result is the
one of a straightforward per-query reference (the read path's code before batches), bit for bit,
alone or in any batch; its sorting helpers equal ``np.lexsort``."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from lamina.memory.config import MemoryConfig
from lamina.memory.read.fusion import Fused, Turns, fuse_many, segment_ranks, sort_within, twins
from lamina.memory.state.records import NsCode
from lamina.memory.store.protocol import ID_SHIFT
from lamina.native.layer_index import LayerIndex

DIM = 6
TAG = 5 << ID_SHIFT


def _reference(
    index: LayerIndex,
    c: MemoryConfig,
    ids: npt.NDArray[np.int64],
    when: npt.NDArray[np.bool_],
    sessions: npt.NDArray[np.int64],
    visible: npt.NDArray[np.bool_],
    q: npt.NDArray[np.float32],
    job: Turns,
) -> tuple[list[int], list[float], list[int]] | None:
    """One query as the read path fused it before batches: (turn ids in fused order, the
    cosines best first, every turn)."""
    vis = visible[job.gate]
    d_ids = job.dense[vis[np.searchsorted(ids, job.dense)]]
    l_ids = job.lexical[vis[np.searchsorted(ids, job.lexical)]]
    nd, nl = len(d_ids), len(l_ids)
    if not (nd or nl):
        return None
    every = np.concatenate([d_ids, l_ids[~np.isin(l_ids, d_ids)]]) if nd and nl else d_ids if nd else l_ids
    at = np.searchsorted(ids, every)
    cos = index.get_keyed(NsCode.ARCHIVE, every) @ q
    seq = every & ((1 << ID_SHIFT) - 1)
    dense_rank = np.lexsort((seq[:nd], -cos[:nd]))
    kk = float(c.rrf_k)
    if nd and nl:
        by_id = np.argsort(every)
        pos = np.concatenate([dense_rank, by_id[np.searchsorted(every, l_ids, sorter=by_id)]])
    else:
        pos = dense_rank if nd else np.arange(nl)
    contrib = np.concatenate([1.0 / (kk + 1 + np.arange(nd)), 1.0 / (kk + 1 + np.arange(nl))])
    if c.time_channel and job.when:
        by_cos = np.lexsort((seq, -cos))
        tl = by_cos[when[at[by_cos]]]
        if len(tl):
            pos = np.concatenate([pos, tl.astype(pos.dtype)])
            contrib = np.concatenate([contrib, 1.0 / (kk + 1 + np.arange(len(tl)))])
    fused = np.bincount(pos, weights=contrib, minlength=len(every))
    if c.session_prior > 0:
        sess = sessions[at]
        best = np.full(int(sess.max()) + 1, -1.0)
        np.maximum.at(best, sess, fused)
        np.add(fused, c.session_prior * best[sess], out=fused)
    order = np.lexsort((seq, -fused))
    return every[order].tolist(), np.sort(cos)[::-1].tolist(), every.tolist()


@st.composite
def _cases(draw: st.DrawFn) -> tuple[object, ...]:
    n = draw(st.integers(1, 30))
    # small integer vectors: many exact ties of cosines (and of fused scores), zeros of both signs
    rows = np.array(draw(st.lists(st.lists(st.integers(-1, 1), min_size=DIM, max_size=DIM), min_size=n, max_size=n)))
    seqs = sorted(draw(st.sets(st.integers(1, 10_000), min_size=n, max_size=n)))
    ids = np.array(seqs, dtype=np.int64) | TAG
    when = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    sessions = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64)
    visible = np.array(draw(st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=3)))
    b = draw(st.integers(1, 6))
    Q = np.array(draw(st.lists(st.lists(st.integers(-2, 2), min_size=DIM, max_size=DIM), min_size=b, max_size=b)))
    jobs = []
    for _ in range(b):
        picks = [draw(st.permutations(range(n)))[: draw(st.integers(0, n))] for _ in range(2)]
        jobs.append(
            Turns(
                draw(st.integers(0, b - 1)),
                draw(st.integers(0, len(visible) - 1)),
                ids[np.array(picks[0], dtype=np.int64)],
                ids[np.array(picks[1], dtype=np.int64)],
                draw(st.booleans()),
            )
        )
    config = MemoryConfig(
        rrf_k=draw(st.sampled_from([1, 2, 60])),
        session_prior=draw(st.sampled_from([0.0, 0.5, 1.0])),
        time_channel=draw(st.booleans()),
        fill_past_floor=False,  # (the reference keeps the turns down to the floor)
        long_turn_words=0,  # (no lengths in the reference)
    )
    floor = draw(st.sampled_from([-10.0, 0.0, 0.5, 1.0, 10.0]))
    top = draw(st.integers(1, 4))
    return rows.astype(np.float32), ids, when, sessions, visible, Q.astype(np.float32), jobs, config, floor, top


def _as_tuple(f: Fused | None) -> object:
    if f is None:
        return None
    return f.ids.tolist(), f.at.tolist(), [x.hex() for x in f.scores], f.every.tolist()


def fuse(*args: Any) -> list[Fused | None]:
    """One :class:`Fused` per job (None for a job without turns), from :func:`fuse_many`."""
    many = fuse_many(*args)
    return [many.one(b) for b in range(len(args[8]))]


@settings(max_examples=150, deadline=None)
@given(case=_cases())
def test_fuse_is_the_per_query_reference_in_any_batch(case: tuple[object, ...]) -> None:
    rows, ids, when, sessions, visible, Q, jobs, config, floor, top = case
    assert isinstance(rows, np.ndarray) and isinstance(ids, np.ndarray) and isinstance(Q, np.ndarray)
    assert isinstance(when, np.ndarray) and isinstance(sessions, np.ndarray) and isinstance(visible, np.ndarray)
    assert isinstance(jobs, list) and isinstance(config, MemoryConfig)
    assert isinstance(floor, float) and isinstance(top, int)
    index = LayerIndex(DIM, ann_threshold=10**6)
    index.add((1 << 3) | NsCode.ARCHIVE, ids.tolist(), rows)
    locate = partial(np.searchsorted, ids)
    got = fuse(index, config, ids, locate, when, sessions, visible, Q, jobs, floor, top)
    assert len(got) == len(jobs)
    for j, (job, f) in enumerate(zip(jobs, got)):
        alone = fuse(index, config, ids, locate, when, sessions, visible, Q, [job], floor, top)[0]
        assert _as_tuple(f) == _as_tuple(alone), j  # the same bits in a batch as alone
        ref = _reference(index, config, ids, when, sessions, visible, Q[job.row].copy(), job)
        if ref is None:
            assert f is None
            continue
        assert f is not None
        order, dist, every = ref
        k = max(sum(x >= floor for x in dist), min(top, len(dist)))
        assert f.ids.tolist() == order[:k]
        assert f.scores.tolist() == dist[:k]
        assert f.every.tolist() == every
        assert ids[f.at].tolist() == f.ids.tolist()


def test_fuse_of_no_queries() -> None:
    index = LayerIndex(DIM, ann_threshold=10**6)
    one = np.ones(1, dtype=np.int64)
    no_q = np.ones((0, DIM), np.float32)
    locate = partial(np.searchsorted, one)
    assert fuse(index, MemoryConfig(), one, locate, one > 0, one, np.ones((1, 1), bool), no_q, [], 0.0, 3) == []


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.integers(0, 5), max_size=60),
    data=st.data(),
)
def test_sort_within_is_lexsort(groups: list[int], data: st.DataObject) -> None:
    n = len(groups)
    g = np.array(sorted(groups), dtype=np.int64)
    values = data.draw(st.lists(st.sampled_from([-1.5, -0.0, 0.0, 0.25, 2.0]), min_size=n, max_size=n))
    ties = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    for dt in (np.float32, np.float64):
        neg = np.array(values, dtype=dt)
        assert sort_within(g, neg, ties, 6).tolist() == np.lexsort((ties, neg, g)).tolist()


def test_segment_ranks() -> None:
    keys = np.array([0, 0, 0, 2, 2, 3], dtype=np.int64)
    assert segment_ranks(keys, 5).tolist() == [0, 1, 2, 0, 1, 0]
    assert segment_ranks(np.empty(0, dtype=np.int64), 3).tolist() == []


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.integers(0, 50), unique=True, max_size=30),
    b=st.lists(st.integers(0, 50), unique=True, max_size=30),
)
def test_twins_by_table_and_by_sorting(a: list[int], b: list[int]) -> None:
    want_b = [j for j, x in enumerate(b) if x in a]
    want_a = [a.index(b[j]) for j in want_b]
    A, Bk = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
    for table in (True, False, None):
        in_b, in_a = twins(A, Bk, 51, table)
        assert (in_b.tolist(), in_a.tolist()) == (want_b, want_a)
