"""Memory's vector index: exact below MemoryConfig.ann_threshold, hnswlib past it, same answers."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from lamina import Memory, MemoryConfig
from lamina.embedders import get_embedder
from lamina.layer_index import LayerIndex

TOPICS = {
    "travel": "flight hotel airport passport beach museum trip train luggage map".split(),
    "food": "pasta recipe dinner bakery coffee soup garlic oven spices lunch".split(),
    "work": "office meeting deadline manager project report salary team client email".split(),
    "pets": "dog cat leash vet puppy kitten walk treats collar bowl".split(),
    "music": "piano guitar concert song band choir drums album violin lyrics".split(),
    "sport": "marathon gym yoga football tennis swim coach match bike race".split(),
}


def _sentences(n: int, seed: int) -> list[str]:
    """Structured text: each sentence mixes words of one topic (clusters, not i.i.d. noise)."""
    rng = random.Random(seed)
    names = list(TOPICS)
    out = []
    for i in range(n):
        words = TOPICS[names[rng.randrange(len(names))]]
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(5, 10))) + f" note {i % 97}")
    return out


def _recall(got: list[int], want: list[int]) -> float:
    return len(set(got) & set(want)) / max(1, len(want))


@pytest.fixture(scope="module")
def emb():  # type: ignore[no-untyped-def]
    return get_embedder("hashing")


def test_layer_index_ann_agrees_with_exact_just_above_threshold(emb) -> None:  # type: ignore[no-untyped-def]
    threshold = 400
    idx = LayerIndex(emb.dim, ann_threshold=threshold)
    big, small = (7 << 3) | 3, (7 << 3) | 1  # one user's archive and episodic namespaces
    X = emb.embed(_sentences(threshold + 50, 1))
    idx.add(big, list(range(1, len(X) + 1)), X)
    Y = emb.embed(_sentences(60, 2))
    idx.add(small, list(range(10_001, 10_061)), Y)
    assert idx.uses_ann(big) and not idx.uses_ann(small)
    Q = emb.embed(_sentences(40, 3))
    recalls = []
    for q in Q:
        (s_big, i_big), (s_small, i_small) = idx.search(q, [big, small], 10)
        e_s, e_i = idx.exact_search(q, big, 10)
        recalls.append(_recall(i_big, e_i))
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
    X = emb.embed(_sentences(400, 4))
    ids = list(range(1, 401))
    idx.add(ns, ids, X)
    q = X[0]
    assert idx.search(q, [ns], 5)[0][1][0] == 1 and idx.graph_namespaces() == [ns]
    gone = ids[:60]
    idx.remove(gone)  # mark_deleted in the graph
    for q in emb.embed(_sentences(20, 5)):
        got = idx.search(q, [ns], 10)[0][1]
        assert not set(got) & set(gone)
        assert _recall(got, idx.exact_search(q, ns, 10)[1]) >= 0.7
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


def _fill(m: Memory, n: int, seed: int) -> None:
    texts = _sentences(n, seed)
    for s in range(0, n, 50):
        for i in range(s, min(n, s + 50)):
            m.add([{"speaker": "Ann" if i % 2 else "Ben", "text": texts[i], "id": f"x{i}",
                    "timestamp": 1.6e9 + 60 * i}], "u", f"s{s}")
        m.end_session("u", f"s{s}")
        m.add([{"speaker": "Ann", "text": "other user talks about pasta and piano", "timestamp": 1.6e9}], "v", f"s{s}")


def test_memory_switch_to_ann_is_transparent(tmp_path: Path, emb) -> None:  # type: ignore[no-untyped-def]
    cfg = dict(working_capacity=8, episodic_capacity=40)
    exact = Memory(embedder="hashing", config=MemoryConfig(**cfg))
    ann = Memory(tmp_path / "ann.db", embedder="hashing", config=MemoryConfig(ann_threshold=250, **cfg))
    _fill(exact, 300, 6)
    _fill(ann, 300, 6)
    assert ann.stats("u")["ann_layers"] == ["u/archive"] and exact.stats("u")["ann_layers"] == []
    assert ann.stats("v")["ann_layers"] == []
    queries = _sentences(25, 7)
    rec = []
    for qtext in queries:
        a = ann.search(qtext, "u", k=10, layers=["archive"])
        e = exact.search(qtext, "u", k=10, layers=["archive"])
        assert all(it.layer == "archive" and it.kind == "turn" and it.user_id == "u" for it in a)
        rec.append(_recall([it.sources[0] for it in a], [it.sources[0] for it in e]))
        ca = ann.context(qtext, "u", budget=200, include_archive=True)
        assert not ca.abstain and all(it.user_id == "u" for it in ca.items)
    assert np.mean(rec) >= 0.9, np.mean(rec)
    assert ann._vectors.ann_builds == 1
    # deleting an archived turn removes it from the graph
    hit = ann.search(queries[0], "u", k=1, layers=["archive"])[0]
    ann.delete(hit.id)
    assert hit.id not in [it.id for it in ann.search(queries[0], "u", k=20, layers=["archive"])]
    before = [[it.id for it in ann.search(q, "u", k=10, layers=["archive"])] for q in queries[:10]]
    ann.close()
    exact.close()
    # reopening rebuilds the graph from the stored embeddings
    with Memory(tmp_path / "ann.db", embedder="hashing", config=MemoryConfig(ann_threshold=250, **cfg)) as re_:
        assert re_._vectors.ann_builds == 0
        after = [[it.id for it in re_.search(q, "u", k=10, layers=["archive"])] for q in queries[:10]]
        assert re_._vectors.ann_builds == 1
        assert np.mean([_recall(x, y) for x, y in zip(after, before)]) >= 0.9
        assert hit.id not in {i for x in after for i in x}


def test_ann_config_validation() -> None:
    with pytest.raises(ValueError, match="ann_threshold"):
        MemoryConfig(ann_threshold=0)
    with pytest.raises(ValueError, match="ann_m"):
        MemoryConfig(ann_m=1)
    with pytest.raises(TypeError, match="ann_ef_search"):
        MemoryConfig(ann_ef_search=1.5)  # type: ignore[arg-type]


def test_layer_index_keyed_gets_and_array_search(emb) -> None:  # type: ignore[no-untyped-def]
    """get_keyed (one array lookup per id) and search_arrays agree with get / search, through
    removals, slot reuse and re-adds; a missing id is a KeyError, never another row."""
    idx = LayerIndex(emb.dim, ann_threshold=10_000)
    tag = 5 << 40  # Memory's ids: database tag << 40 | sequence number
    arch, view = (2 << 3) | 3, (2 << 3) | 5
    X = emb.embed(_sentences(300, 7))
    ids = [tag | i for i in range(1, 301)]
    idx.add(arch, ids, X)
    idx.add(view, [i | (1 << 62) for i in ids[:200]], X[:200])  # turn views: keys with a tag bit
    pick = np.array(ids[::7][::-1], dtype=np.int64)
    np.testing.assert_array_equal(idx.get_keyed(3, pick), idx.get(pick.tolist()))
    np.testing.assert_array_equal(idx.get_keyed(3, pick), X[(pick & ((1 << 40) - 1)) - 1])
    np.testing.assert_allclose(idx.get_keyed(5, pick[pick <= (tag | 200)] | (1 << 62)),
                               X[(pick[pick <= (tag | 200)] & ((1 << 40) - 1)) - 1], atol=2e-3)  # float16 rows
    assert idx.get_keyed(3, np.empty(0, dtype=np.int64)).shape == (0, emb.dim)
    idx.remove(ids[:50])
    with pytest.raises(KeyError):
        idx.get_keyed(3, np.array([ids[10]], dtype=np.int64))
    with pytest.raises(KeyError):
        idx.get_keyed(3, np.array([tag | 10_000], dtype=np.int64))
    idx.add(arch, [tag | 1000, ids[3]], X[:2])  # reuses freed slots; a re-added id gets its new row
    np.testing.assert_array_equal(idx.get_keyed(3, np.array([ids[3], tag | 1000], dtype=np.int64)), X[[1, 0]])
    for q in emb.embed(_sentences(10, 8)):
        for ns in (arch, view):
            s_a, i_a = idx.search_arrays(q, ns, 20)
            (s_l, i_l), = idx.search(q, [ns], 20)
            assert s_a.dtype == np.float32 and i_a.dtype == np.int64
            assert s_a.tolist() == s_l and i_a.tolist() == i_l
    assert [len(x) for x in idx.search_arrays(X[0], (9 << 3) | 3, 5)] == [0, 0]


def test_context_reads_summaries_not_leaves_and_search_still_finds_leaves() -> None:
    """Episodic leaves live in their own namespace: a context searches the layer's summaries
    (leaves are reached through their turns), search(layers=["episodic"]) returns both."""
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2))
    texts = _sentences(60, 9)
    for s in range(3):
        m.add([{"speaker": "Ann", "text": t, "timestamp": 1.6e9 + 60 * i} for i, t in enumerate(texts[s * 20:(s + 1) * 20])],
              "u", f"s{s}")
        m.end_session("u", f"s{s}")
    u = m._users["u"]
    leaves = [r for r in m._recs.values() if r.kind == "segment" and r.status == "active" and r.layer == "episodic"]
    summaries = [r for r in m._recs.values() if r.kind == "summary" and r.status == "active"]
    assert leaves and summaries
    assert m._vectors.count((u.idx << 3) | 6) == len(leaves)
    assert m._vectors.count(m._ns(u, "episodic")) == len(summaries)
    hits = m.search(leaves[0].text, "u", k=5, layers=["episodic"])
    assert hits[0].id == leaves[0].id and hits[0].kind == "segment"
    assert {h.kind for h in m.search(summaries[0].text, "u", k=50, layers=["episodic"])} >= {"segment", "summary"}
    ctx = m.context(texts[3], "u", budget=4096)
    assert not [it for it in ctx.items if it.kind == "segment"]
    assert any(it.kind == "summary" for it in ctx.items)  # a large budget leaves room for aggregates
    m.close()
