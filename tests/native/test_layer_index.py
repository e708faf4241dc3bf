"""lamina.native.layer_index.LayerIndex, the memory's vector index: exact below ann_threshold, hnswlib past it,
same answers. (Memory switching to ANN: tests/memory/read/test_candidates.py.)"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from lamina.embedders import get_embedder
from lamina.native.layer_index import LayerIndex
from reference import recall, topic_sentences


@pytest.fixture(scope="module")
def emb():  # type: ignore[no-untyped-def]
    return get_embedder("hashing")


def test_layer_index_ann_agrees_with_exact_just_above_threshold(emb) -> None:  # type: ignore[no-untyped-def]
    threshold = 400
    idx = LayerIndex(emb.dim, ann_threshold=threshold)
    big, small = (7 << 3) | 3, (7 << 3) | 1  # one user's archive and episodic namespaces
    X = emb.embed(topic_sentences(threshold + 50, 1))
    idx.add(big, list(range(1, len(X) + 1)), X)
    Y = emb.embed(topic_sentences(60, 2))
    idx.add(small, list(range(10_001, 10_061)), Y)
    assert idx.uses_ann(big) and not idx.uses_ann(small)
    Q = emb.embed(topic_sentences(40, 3))
    recalls = []
    for q in Q:
        (s_big, i_big), (s_small, i_small) = idx.search(q, [big, small], 10)
        e_s, e_i = idx.exact_search(q, big, 10)
        recalls.append(recall(i_big, e_i))
        # scores are the same cosines the exact path reports, best first
        exact_cos = {i: float(X[i - 1] @ q) for i in i_big}
        np.testing.assert_allclose(s_big, [exact_cos[i] for i in i_big], atol=1e-4)
        assert s_big == sorted(s_big, reverse=True)
        assert (s_small, i_small) == idx.exact_search(q, small, 10)  # small layer: exact
    assert idx.ann_builds == 1
    assert np.mean(recalls) >= 0.9, np.mean(recalls)


def test_layer_index_removals_updates_and_fallback(emb) -> None:  # type: ignore[no-untyped-def]
    idx = LayerIndex(emb.dim, ann_threshold=300)
    ns = (3 << 3) | 3
    X = emb.embed(topic_sentences(400, 4))
    ids = list(range(1, 401))
    idx.add(ns, ids, X)
    q = X[0]
    assert idx.search(q, [ns], 5)[0][1][0] == 1 and idx.graph_namespaces() == [ns]
    gone = ids[:60]
    idx.remove(gone)  # mark_deleted in the graph
    for q in emb.embed(topic_sentences(20, 5)):
        got = idx.search(q, [ns], 10)[0][1]
        assert not set(got) & set(gone)
        assert recall(got, idx.exact_search(q, ns, 10)[1]) >= 0.7
    # re-adding a removed id with another vector updates its point
    idx.add(ns, [5], X[399:400])
    assert idx.search(X[399], [ns], 2)[0][1][:2] in ([5, 400], [400, 5])
    # inserts since the last search are visible at the next one
    Z = emb.embed(["zebra giraffe savanna safari lion"])
    idx.add(ns, [9999], Z)
    assert idx.search(Z[0], [ns], 1)[0][1] == [9999]
    # shrinking under half the threshold drops the graph: exact again
    idx.remove([i for i in ids[60:] if i != 5][:250])
    assert idx.count(ns) < 150
    q = emb.embed(["pasta dinner"])[0]
    assert idx.search(q, [ns], 10)[0] == idx.exact_search(q, ns, 10)
    assert idx.graph_namespaces() == []


def test_layer_index_keyed_gets_and_array_search(emb) -> None:  # type: ignore[no-untyped-def]
    """get_keyed (one array lookup per id) and search_arrays agree with get / search, through
    removals, slot reuse and re-adds; a missing id is a KeyError, never another row."""
    idx = LayerIndex(emb.dim, ann_threshold=10_000)
    tag = 5 << 40  # Memory's ids: database tag << 40 | sequence number
    arch, view = (2 << 3) | 3, (2 << 3) | 5
    X = emb.embed(topic_sentences(300, 7))
    ids = [tag | i for i in range(1, 301)]
    idx.add(arch, ids, X)
    idx.add(view, [i | (1 << 62) for i in ids[:200]], X[:200])  # turn views: keys with a tag bit
    pick = np.array(ids[::7][::-1], dtype=np.int64)
    np.testing.assert_array_equal(idx.get_keyed(3, pick), idx.get(pick.tolist()))
    np.testing.assert_array_equal(idx.get_keyed(3, pick), X[(pick & ((1 << 40) - 1)) - 1])
    np.testing.assert_allclose(
        idx.get_keyed(5, pick[pick <= (tag | 200)] | (1 << 62)),
        X[(pick[pick <= (tag | 200)] & ((1 << 40) - 1)) - 1],
        atol=2e-3,
    )  # float16 rows
    assert idx.get_keyed(3, np.empty(0, dtype=np.int64)).shape == (0, emb.dim)
    arena, slots = idx.keyed_slots(3, pick)  # (found once, read in parts: the same rows)
    np.testing.assert_array_equal(idx.rows(arena, slots[:5]), idx.get_keyed(3, pick[:5]))
    np.testing.assert_array_equal(idx.rows(arena, slots[5:]), idx.get_keyed(3, pick[5:]))
    idx.remove(ids[:50])
    with pytest.raises(KeyError):
        idx.get_keyed(3, np.array([ids[10]], dtype=np.int64))
    with pytest.raises(KeyError):
        idx.get_keyed(3, np.array([tag | 10_000], dtype=np.int64))
    idx.add(arch, [tag | 1000, ids[3]], X[:2])  # reuses freed slots; a re-added id gets its new row
    np.testing.assert_array_equal(idx.get_keyed(3, np.array([ids[3], tag | 1000], dtype=np.int64)), X[[1, 0]])
    for q in emb.embed(topic_sentences(10, 8)):
        for ns in (arch, view):
            s_a, i_a = idx.search_arrays(q, ns, 20)
            ((s_l, i_l),) = idx.search(q, [ns], 20)
            assert s_a.dtype == np.float32 and i_a.dtype == np.int64
            assert s_a.tolist() == s_l and i_a.tolist() == i_l
    assert [len(x) for x in idx.search_arrays(X[0], (9 << 3) | 3, 5)] == [0, 0]


def test_layer_index_forget_scrubs_the_deleted_vectors_from_the_graph(emb) -> None:  # type: ignore[no-untyped-def]
    """forget (a deletion) leaves no data of the deleted ids in any graph or arena row, and the
    live items are served exactly as by an index that never held the deleted ones."""
    ns = (4 << 3) | 3
    X = emb.embed(topic_sentences(500, 9))
    ids = list(range(1, 501))
    idx, fresh = LayerIndex(emb.dim, ann_threshold=300), LayerIndex(emb.dim, ann_threshold=300)
    idx.add(ns, ids, X)
    idx.search(X[0], [ns], 5)  # builds the graph with every row
    assert idx.graph_labels(ns) == ids
    gone = ids[::9]
    graph = idx._graphs[ns].index
    stored = {i: np.asarray(graph.get_items([i]), dtype=np.float32)[0].tobytes() for i in gone}
    idx.remove(gone[:3])  # plain removals (evictions) only mark the points deleted
    assert set(gone[:3]) <= set(idx.graph_labels(ns))
    assert all(stored[i] in pickle.dumps(graph) for i in gone[:3])  # ... and keep their data
    idx.forget(gone)  # a deletion: of live points and of points an eviction only marked deleted
    blob = pickle.dumps(idx._graphs[ns].index)  # every byte the graph holds
    assert not any(v in blob for v in stored.values())
    assert idx.graph_labels(ns) == ids  # overwritten in place and marked deleted: no rebuild
    live = [i for i in ids if i not in gone]
    fresh.add(ns, live, X[np.array(live) - 1])
    for q in emb.embed(topic_sentences(20, 10)):
        assert idx.search(q, [ns], 10) == fresh.search(q, [ns], 10)
    assert fresh.graph_labels(ns) == live and idx.ann_builds == 1
    rows = idx.arena_rows()[1]  # the archive's arena
    assert rows.shape[0] == 500 and int((np.abs(rows).sum(axis=1) == 0).sum()) == len(gone)


@pytest.mark.parametrize("codec", ["binary", "int8"])
def test_layer_index_with_a_codec(emb, codec) -> None:  # type: ignore[no-untyped-def]
    """A codec index: with every row a candidate it answers as the plain index; at the default
    oversampling it finds most of the same rows with exact scores; exact_search stays exact."""
    ns = (3 << 3) | 1
    X = emb.embed(topic_sentences(600, 4))
    Q = emb.embed(topic_sentences(30, 5))
    plain = LayerIndex(emb.dim, ann_threshold=10_000)
    full = LayerIndex(emb.dim, ann_threshold=10_000, codec=codec, oversample=600)
    coded = LayerIndex(emb.dim, ann_threshold=10_000, codec=codec)
    for idx in (plain, full, coded):
        idx.add(ns, list(range(1, len(X) + 1)), X)
    recalls = []
    for q in Q:
        ref = plain.search(q, [ns], 10)[0]
        assert full.search(q, [ns], 10)[0][1] == ref[1]
        s, ids = coded.search(q, [ns], 10)[0]
        np.testing.assert_allclose(s, [float(X[i - 1] @ q) for i in ids], atol=1e-4)
        recalls.append(recall(ids, ref[1]))
        assert coded.exact_search(q, ns, 10) == plain.exact_search(q, ns, 10)
    # the hashing embedder's vectors are sparse (many exact zeros, which carry no sign), so the
    # sign bits say less about them than about dense embeddings (MiniLM: see tests/native)
    assert np.mean(recalls) >= (0.8 if codec == "binary" else 0.95), np.mean(recalls)
