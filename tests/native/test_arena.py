"""VectorArena: slots, growth, filters, views, thread safety, bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from reference import ref_topk

ROW_MASK = 0xFFFFFFFF


def test_add_get_len_and_slot_identity():
    a = lamina.VectorArena(5, capacity=2)
    v = np.arange(15, dtype=np.float32).reshape(3, 5)
    s = a.add(v, namespace=9, layer=2)
    assert s.dtype == np.int64 and s.tolist() == [0, 1, 2]  # fresh rows: slot == row
    assert len(a) == 3 and a.dim == 5 and a.capacity >= 3
    np.testing.assert_array_equal(a.get(s[::-1]), v[::-1])
    assert a.namespaces_of(s).tolist() == [9, 9, 9]
    assert a.layers_of(s).tolist() == [2, 2, 2]


def test_removed_slot_is_stale_even_after_reuse():
    a = lamina.VectorArena(3)
    s = a.add(np.ones((3, 3), np.float32))
    a.remove([s[1]])
    with pytest.raises(IndexError, match="stale"):
        a.get([s[1]])
    (t,) = a.add(np.full((1, 3), 7, np.float32))
    assert (t & ROW_MASK) == (s[1] & ROW_MASK)  # row reused ...
    assert t != s[1]  # ... under a new slot
    with pytest.raises(IndexError, match="stale"):
        a.get([s[1]])
    np.testing.assert_array_equal(a.get([t]), [[7, 7, 7]])
    assert a.contains([s[0], s[1], t]).tolist() == [True, False, True]


def test_growth_keeps_slots_and_data():
    a = lamina.VectorArena(8, capacity=16)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1000, 8)).astype(np.float32)
    slots = np.concatenate([a.add(data[i : i + 100]) for i in range(0, 1000, 100)])
    assert a.capacity >= 1000
    np.testing.assert_array_equal(a.get(slots), data)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_large_arenas_grow_with_their_rows_intact(dtype):
    """Past 2 MiB the rows live in a mapping that grows by moving its pages when no view holds
    it, and by a copy while one does: either way every row, slot and removal stays."""
    d = 384
    a = lamina.VectorArena(d, capacity=4096, dtype=dtype)
    rng = np.random.default_rng(1)
    data = rng.standard_normal((20_000, d)).astype(dtype)
    slots = list(a.add(data[:3000]))
    a.remove(slots[:10])
    held = a.vectors  # a view across the next growth: the copy path
    first = np.array(held[10:3000])
    slots += list(a.add(data[3000:9000]))  # reuses the 10 removed rows, then grows
    np.testing.assert_array_equal(held[10:3000], first)
    del held
    slots += list(a.add(data[9000:]))  # grows twice more, no view: the pages move
    np.testing.assert_array_equal(a.get(slots[10:]).astype(np.float32), data[10:].astype(np.float32))
    assert a.capacity >= 20_000 - 10 and len(a) == 20_000 - 10 and a.high_water == 20_000 - 10
    rows = np.ascontiguousarray(a.vectors, dtype=np.float32)
    top = lamina.topk(data[5000:5001].astype(np.float32), rows, 1, "ip")[1]
    assert int(top[0, 0]) == 5000 - 10  # rows are where searches expect them


def test_view_is_zero_copy_readonly_and_survives_growth():
    a = lamina.VectorArena(4, capacity=16)
    s = a.add(np.ones((2, 4), np.float32))
    v = a.vectors
    assert v.shape == (2, 4) and not v.flags.writeable
    assert v.ctypes.data % 64 == 0 and v.strides[0] % 64 == 0
    with pytest.raises(ValueError):
        v[0, 0] = 3
    a.remove([s[0]])
    assert np.all(v[0] == 0)  # same memory: the removal is visible
    a.add(np.ones((100, 4), np.float32))  # grows: old view keeps the old block alive
    assert v.shape == (2, 4) and np.isfinite(v).all()
    # 2 rows, one removed and reused by the 100 new ones -> 101 rows used, all live
    assert a.high_water == 101 and a.vectors.shape == (101, 4)
    assert a.live_mask().all() and len(a) == 101


def test_layers_and_namespaces_per_row():
    a = lamina.VectorArena(2)
    s = a.add(
        np.eye(2, dtype=np.float32).repeat(2, 0),
        namespace=np.array([1, 2, 1, 2], np.uint64),
        layer=np.array([0, 1, 2, 3], np.uint8),
    )
    assert a.namespaces_of(s).tolist() == [1, 2, 1, 2]
    a.set_layer(s[:2], 9)
    assert a.layers_of(s).tolist() == [9, 9, 2, 3]
    assert a.namespace_size(1) == 2 and a.namespace_size(77) == 0


def test_float16_storage():
    a = lamina.VectorArena(16, dtype="float16")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 16)).astype(np.float16)
    s = a.add(x)
    np.testing.assert_array_equal(a.get(s), x)
    q = rng.standard_normal((3, 16)).astype(np.float32)
    sc, sl = a.search(q, 5)
    rs, ri = ref_topk(q, x.astype(np.float32), 5, "ip")
    np.testing.assert_allclose(sc, rs, rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="float16"):
        a.add(x.astype(np.float32))


def test_search_filters_and_padding():
    a = lamina.VectorArena(2)
    a.add(
        np.array([[1, 0], [0, 1], [1, 1]], np.float32),
        namespace=np.array([5, 5, 6], np.uint64),
        layer=np.array([0, 1, 1], np.uint8),
    )
    q = np.array([[1, 1]], np.float32)
    s, i = a.search(q, 3, namespace=5)
    assert sorted(i[0, :2].tolist()) == [0, 1] and i[0, 2] == -1 and s[0, 2] == -np.inf
    s, i = a.search(q, 2, layers=[1])
    assert i[0].tolist() == [2, 1]
    s, i = a.search(q, 2, namespace=404)
    assert i[0].tolist() == [-1, -1]
    s, i = a.search(q, 1, "l2", namespace=6)
    assert i[0, 0] == 2 and s[0, 0] == 0.0
    # one namespace per query (one agent per query)
    q2 = np.array([[1, 0], [1, 0]], np.float32)
    s, i = a.search(q2, 1, namespace=np.array([6, 5], np.uint64))
    assert i[:, 0].tolist() == [2, 0]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 40), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 10**6), st.integers(1, 15), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    ops=ops,
    d=st.integers(1, 24),
    k=st.integers(1, 30),
    metric=st.sampled_from(["ip", "l2"]),
    ns_filter=st.one_of(st.none(), st.integers(0, 3)),
    layer_filter=st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=3)),
    seed=st.integers(0, 2**31),
)
def test_interleaved_ops_match_reference(ops, d, k, metric, ns_filter, layer_filter, seed):
    rng = np.random.default_rng(seed)
    a = lamina.VectorArena(d, capacity=4)
    live: dict[int, tuple[np.ndarray, int, int]] = {}
    for op, x, y, z in ops:
        if op == "add":
            v = rng.integers(-2, 3, size=(x, d)).astype(np.float32)
            ns = rng.integers(0, y + 1, size=x).astype(np.uint64)
            ly = rng.integers(0, z + 1, size=x).astype(np.uint8)
            for s, row, n_, l_ in zip(a.add(v, namespace=ns, layer=ly), v, ns, ly):
                assert int(s) not in live
                live[int(s)] = (row, int(n_), int(l_))
        elif live:
            keys = sorted(live)
            pick = [keys[(x + j * 7919) % len(keys)] for j in range(min(y, len(keys)))]
            pick = list(dict.fromkeys(pick))
            a.remove(pick)
            for p in pick:
                del live[p]
    assert len(a) == len(live)
    if not live:
        with pytest.raises(ValueError, match="empty"):
            a.search(np.ones((1, d), np.float32), k)
        return
    slots = np.array(sorted(live), dtype=np.int64)
    X = np.stack([live[s][0] for s in slots])
    nsv = np.array([live[s][1] for s in slots])
    lyv = np.array([live[s][2] for s in slots])
    mask = np.ones(len(slots), bool)
    if ns_filter is not None:
        mask &= nsv == ns_filter
    if layer_filter is not None:
        mask &= np.isin(lyv, layer_filter)
    Q = rng.integers(-2, 3, size=(3, d)).astype(np.float32)
    s, got = a.search(Q, k, metric, namespace=ns_filter, layers=layer_filter)
    rs, ri = ref_topk(Q, X, k, metric, candidates=mask, tie_ids=slots & ROW_MASK)
    want = np.where(ri >= 0, slots[np.maximum(ri, 0)], -1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(s, rs.astype(np.float32))
    np.testing.assert_array_equal(a.get(slots), X)


def test_concurrent_readers_and_writer():
    a = lamina.VectorArena(32, capacity=16)
    rng = np.random.default_rng(0)
    a.add(rng.standard_normal((500, 32)).astype(np.float32), namespace=1)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        q = rng.standard_normal((4, 32)).astype(np.float32)
        try:
            while not stop.is_set():
                s, i = a.search(q, 10, namespace=1)
                assert (i >= 0).all()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(60):
        s = a.add(rng.standard_normal((50, 32)).astype(np.float32), namespace=1)
        a.remove(s[:25])
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(a) == 500 + 60 * 25


# ---- bad input ---------------------------------------------------------------------------------


@pytest.fixture
def arena():
    a = lamina.VectorArena(4)
    a.add(np.ones((3, 4), np.float32))
    return a


def test_bad_add(arena):
    with pytest.raises(TypeError, match="float32"):
        arena.add(np.ones((2, 4)))
    with pytest.raises(TypeError, match="numpy"):
        arena.add([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(ValueError, match="columns"):
        arena.add(np.ones((2, 5), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        arena.add(np.asfortranarray(np.ones((2, 4), np.float32)))
    with pytest.raises(ValueError, match="NaN or Inf"):
        arena.add(np.array([[1, 2, np.nan, 4]], np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        arena.add(np.array([[1, 2, np.inf, 4]], np.float32))
    with pytest.raises(ValueError, match="namespace"):
        arena.add(np.ones((2, 4), np.float32), namespace=-1)
    with pytest.raises(TypeError, match="uint64"):
        arena.add(np.ones((2, 4), np.float32), namespace=np.array([1, 2], np.int32))
    with pytest.raises(ValueError, match="one per row"):
        arena.add(np.ones((2, 4), np.float32), namespace=np.array([1, 2, 3], np.uint64))
    with pytest.raises(ValueError, match="layer"):
        arena.add(np.ones((2, 4), np.float32), layer=300)
    assert len(arena) == 3  # nothing half-added


def test_bad_slots(arena):
    with pytest.raises(IndexError, match="out of range"):
        arena.get([99])
    with pytest.raises(IndexError, match="negative"):
        arena.get([-1])
    with pytest.raises(TypeError, match="integers"):
        arena.get([0.5])
    with pytest.raises(ValueError, match="more than once"):
        arena.remove([0, 0])
    with pytest.raises(IndexError):
        arena.remove([0, 99])
    assert len(arena) == 3  # all-or-nothing
    arena.remove([1])
    with pytest.raises(IndexError, match="stale"):
        arena.remove([1])


def test_bad_search(arena):
    q = np.ones((1, 4), np.float32)
    with pytest.raises(ValueError, match="k must be >= 1"):
        arena.search(q, 0)
    with pytest.raises(ValueError, match="unknown metric"):
        arena.search(q, 1, "hamming")
    with pytest.raises(ValueError, match="columns"):
        arena.search(np.ones((1, 3), np.float32), 1)
    with pytest.raises(TypeError, match="float32"):
        arena.search(q.astype(np.float16), 1)
    with pytest.raises(ValueError, match="NaN or Inf"):
        arena.search(np.full((1, 4), np.nan, np.float32), 1)
    with pytest.raises(ValueError, match="layer"):
        arena.search(q, 1, layers=[256])
    with pytest.raises(ValueError, match="one per query"):
        arena.search(q, 1, namespace=np.array([1, 2], np.uint64))
    empty = lamina.VectorArena(4)
    with pytest.raises(ValueError, match="empty"):
        empty.search(q, 1)


def test_bad_construction():
    with pytest.raises(ValueError, match="dim"):
        lamina.VectorArena(0)
    with pytest.raises(TypeError):
        lamina.VectorArena(3.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype"):
        lamina.VectorArena(4, dtype="int8")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_removed_rows_are_zeroed_and_the_rest_is_served_unchanged(dtype):
    """remove() overwrites a row's vector with zeros (nothing of a deleted vector stays in the
    block), and the searches of the remaining rows equal those of an arena that never held it."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((200, 24)).astype(dtype)
    a, b = lamina.VectorArena(24, dtype), lamina.VectorArena(24, dtype)
    s = a.add(x, namespace=np.arange(200, dtype=np.uint64) % 3)
    gone = np.sort(rng.choice(200, size=40, replace=False))
    keep = np.setdiff1d(np.arange(200), gone)
    a.remove(s[gone])
    rows = np.asarray(a.vectors)
    assert not rows[gone].any() and np.array_equal(rows[keep], x[keep])
    assert not a.live_mask()[gone].any()
    sb = b.add(x[keep], namespace=keep.astype(np.uint64) % 3)
    to_a = dict(zip(sb.tolist(), s[keep].tolist()))
    q = rng.standard_normal((5, 24)).astype(np.float32)
    for metric in ("ip", "cosine", "l2"):
        for ns in (None, 1):
            sa, ia = a.search(q, 10, metric, ns)
            sc, ib = b.search(q, 10, metric, ns)
            np.testing.assert_array_equal(sa, sc)
            assert ia.tolist() == [[to_a[int(j)] for j in row] for row in ib]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(1, 20),
    seed=st.integers(0, 1000),
    removed=st.integers(0, 10),
    codec=st.sampled_from([None, "int8"]),
)
def test_an_allow_mask_admits_exactly_its_rows(n: int, k: int, seed: int, removed: int, codec: str | None) -> None:
    """search(allow=mask) equals the exact top-k of the admitted live rows of the namespace
    (min(k, admitted) results: the mask is a candidate filter, never a post-filter)."""
    rng = np.random.default_rng(seed)
    a = lamina.VectorArena(8, capacity=4, codec=codec)  # type: ignore[arg-type]
    X = rng.standard_normal((n, 8)).astype(np.float32)
    ns = rng.integers(0, 2, n).astype(np.uint64)
    slots = a.add(X, namespace=ns)
    gone = slots[: min(removed, n - 1)]
    if len(gone):
        a.remove(gone)
    mask = rng.integers(0, 2, max(0, a.high_water + int(rng.integers(-2, 3)))).astype(np.uint8)
    q = rng.standard_normal((1, 8)).astype(np.float32)
    scores, got = a.search(q, k, "cosine", namespace=1, oversample=0, allow=mask)
    rows = [
        int(s & ROW_MASK)
        for s in slots
        if s not in set(gone.tolist())
        and ns[int(s & ROW_MASK)] == 1
        and int(s & ROW_MASK) < len(mask)
        and mask[int(s & ROW_MASK)]
    ]
    kept = got[0][got[0] >= 0]
    assert len(kept) == min(k, len(rows))
    assert {int(s & ROW_MASK) for s in kept} <= set(rows)
    if rows:
        ref_s, ref_i = ref_topk(q, X[rows], min(k, len(rows)), "cosine")
        np.testing.assert_allclose(scores[0][: len(kept)], ref_s[0], rtol=1e-5, atol=1e-6)


def test_a_bad_allow_mask_is_refused_naming_the_fix() -> None:
    a = lamina.VectorArena(4)
    a.add(np.eye(4, dtype=np.float32))
    q = np.ones((1, 4), dtype=np.float32)
    with pytest.raises(TypeError, match="allow must have dtype uint8"):
        a.search(q, 2, allow=np.ones(4, dtype=bool))
    with pytest.raises(ValueError, match="C-contiguous"):
        a.search(q, 2, allow=np.ones(8, dtype=np.uint8)[::2])
