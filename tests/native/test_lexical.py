"""lamina.LexicalIndex / lamina.tokenize against a plain-Python BM25 reference."""

from __future__ import annotations

import math
import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lamina
from lamina.native.lexical import STOP_WORDS, term_hash, tokenize

K1, B = 1.2, 0.75
TOL = 1e-5


# ---- reference ---------------------------------------------------------------------------------


class RefBM25:
    """Plain-Python Okapi BM25 with per-namespace statistics (the documented formula)."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1, self.b = k1, b
        self.docs: dict[int, tuple[int, list[str]]] = {}  # key -> (namespace, tokens)

    def add(self, keys, docs, namespaces) -> None:
        for key, d, ns in zip(keys, docs, namespaces):
            self.docs[int(key)] = (int(ns), list(d))

    def remove(self, keys) -> None:
        for key in keys:
            del self.docs[int(key)]

    def scores(self, query: list[str], ns: int) -> dict[int, float]:
        docs = {k: d for k, (n, d) in self.docs.items() if n == ns}
        n = len(docs)
        if not n:
            return {}
        avg = sum(len(d) for d in docs.values()) / n
        df = Counter(w for d in docs.values() for w in set(d))
        out: dict[int, float] = {}
        for key, d in docs.items():
            tf = Counter(d)
            s = 0.0
            for w in set(query):
                if tf[w]:
                    idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                    s += idf * tf[w] * (self.k1 + 1) / (tf[w] + self.k1 * (1 - self.b + self.b * len(d) / avg))
            if s > 0:
                out[key] = s
        return out


def check_topk(ref: dict[int, float], scores: np.ndarray, keys: np.ndarray, k: int) -> None:
    """native (scores, keys) of one query is a correct top-k of the reference scores."""
    expect = sorted(ref.items(), key=lambda kv: (-kv[1], kv[0]))
    hits = int(np.count_nonzero(keys >= 0))
    assert hits == min(k, len(expect))
    assert np.all(keys[hits:] == -1) and np.all(np.isneginf(scores[hits:]))
    got_scores = scores[:hits].astype(np.float64)
    # the sorted score sequences agree, and every returned key carries its own score
    np.testing.assert_allclose(got_scores, [s for _, s in expect[:hits]], rtol=TOL, atol=TOL)
    for s, key in zip(got_scores, keys[:hits]):
        assert abs(ref[int(key)] - s) <= TOL * max(1.0, s)
    assert np.all(np.diff(got_scores) <= 0)
    assert len(set(keys[:hits].tolist())) == hits
    # equal scores: smaller key first
    for i in range(hits - 1):
        if scores[i] == scores[i + 1]:
            assert keys[i] < keys[i + 1]
    # every document clearly above the cut is returned
    if hits:
        cut = got_scores[-1]
        returned = set(keys[:hits].tolist())
        for key, s in expect:
            if s > cut + TOL * max(1.0, cut):
                assert key in returned


# ---- tokenize ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("She's been painting sunsets at the lake!", ["paint", "sunset", "lake"]),
        ("I'll adopt two DOGS in 2023.", ["adopt", "two", "dog", "2023"]),
        ("Caroline's support-group meeting", ["carolin", "support", "group", "meet"]),
        ("don't, can't, won't", ["won"]),
        ("snake_case_words", ["snake", "case", "word"]),
        ("Café in München, 東京タワー", ["café", "münchen", "東京タワー"]),
        ("", []),
        ("the and of ... !!!", []),
    ],
)
def test_tokenize_examples(text, tokens):
    assert tokenize(text) == tokens


def test_tokenize_rejects_non_str():
    with pytest.raises(TypeError, match="str"):
        tokenize(b"bytes")  # type: ignore[arg-type]


def test_stop_words_are_lowercase_and_dropped():
    assert all(w == w.lower() for w in STOP_WORDS)
    assert tokenize(" ".join(sorted(STOP_WORDS))) == []


def test_eval_stemmer_still_importable():
    from lamina.eval.scoring import porter_stem as from_metrics
    from lamina.eval.stem import porter_stem as from_eval
    from lamina.text._stem import porter_stem

    assert from_eval is porter_stem and from_metrics is porter_stem


def _fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for byte in s.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.mark.parametrize("term", ["", "a", "paint", "café", "東京", "x" * 100])
def test_term_hash_is_fnv1a64_of_utf8(term):
    assert term_hash(term) == _fnv1a64(term)


# ---- against the reference ---------------------------------------------------------------------

VOCAB = [f"w{i}" for i in range(12)] + ["é", "日本"]
docs_st = st.lists(st.sampled_from(VOCAB), min_size=0, max_size=8)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n_ops=st.integers(1, 8),
    k=st.integers(1, 6),
)
def test_matches_reference_under_add_remove(data, n_ops, k):
    ix = lamina.LexicalIndex()
    ref = RefBM25()
    next_key = 0
    for _ in range(n_ops):
        live = sorted(ref.docs)
        if live and data.draw(st.booleans(), label="remove?"):
            gone = data.draw(
                st.lists(st.sampled_from(live), min_size=1, max_size=len(live), unique=True), label="remove"
            )
            assert ix.remove(gone) == len(gone)
            ref.remove(gone)
        else:
            docs = data.draw(st.lists(docs_st, min_size=1, max_size=6), label="docs")
            nss = data.draw(st.lists(st.integers(0, 2), min_size=len(docs), max_size=len(docs)), label="ns")
            keys = list(range(next_key, next_key + len(docs)))
            next_key += len(docs) + data.draw(st.integers(0, 3), label="gap")
            perm = data.draw(st.permutations(range(len(docs))), label="order")
            keys = [keys[i] for i in perm]
            ix.add(keys, docs, nss)
            ref.add(keys, docs, nss)
        assert len(ix) == len(ref.docs)
        queries = data.draw(
            st.lists(st.lists(st.sampled_from(VOCAB + ["nope"]), max_size=4), min_size=1, max_size=3), label="queries"
        )
        for ns in range(3):
            assert ix.count(ns) == sum(1 for n, _ in ref.docs.values() if n == ns)
            sc, ky = ix.search_many(queries, ns, k)
            assert sc.shape == ky.shape == (len(queries), k)
            assert sc.dtype == np.float32 and ky.dtype == np.int64
            for qi, q in enumerate(queries):
                check_topk(ref.scores(q, ns), sc[qi], ky[qi], k)
                s1, k1 = ix.search(q, ns, k)
                hits = int(np.count_nonzero(ky[qi] >= 0))
                np.testing.assert_array_equal(k1, ky[qi, :hits])
                np.testing.assert_array_equal(s1, sc[qi, :hits])
    alive = np.array(sorted(ref.docs) + [next_key + 100], dtype=np.int64)
    np.testing.assert_array_equal(ix.contains(alive), [True] * len(ref.docs) + [False])


@settings(max_examples=25, deadline=None)
@given(
    docs=st.lists(docs_st, min_size=1, max_size=30),
    queries=st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=4), min_size=1, max_size=4),
)
def test_matches_eval_bm25_baseline(docs, queries):
    from lamina.eval.systems import _BM25Index

    base = _BM25Index(docs)
    ix = lamina.LexicalIndex()
    ix.add(list(range(len(docs))), docs)
    for q in queries:
        full = base.scores(q)
        ref = {i: float(s) for i, s in enumerate(full) if s > 0}
        sc, ky = ix.search_many([q], 0, len(docs))
        check_topk(ref, sc[0], ky[0], len(docs))


def test_skewed_corpus_with_pruning_matches_reference():
    """Zipf-like term frequencies and queries mixing rare and common terms: the search skips the
    common terms' postings for documents that cannot reach the top k; results stay exact."""
    from lamina.eval.systems import _BM25Index

    rng = np.random.default_rng(5)
    vocab = [f"v{i}" for i in range(300)]
    p = 1.0 / (np.arange(1, 301) + 2.0)
    p /= p.sum()
    docs = [list(rng.choice(vocab, size=int(rng.integers(1, 15)), p=p)) for _ in range(3000)]
    ix = lamina.LexicalIndex()
    ix.add(range(3000), docs)
    gone = list(range(0, 3000, 7))  # tombstones inside the posting lists
    ix.remove(gone)
    kept = [i for i in range(3000) if i % 7]
    base = _BM25Index([docs[i] for i in kept])
    queries = [
        [vocab[int(rng.integers(100, 300))], vocab[int(rng.integers(0, 5))], vocab[int(rng.integers(0, 30))]]
        for _ in range(40)
    ]
    queries += [[vocab[0], vocab[1], vocab[2]], [vocab[299], vocab[298]]]
    for k in (1, 3, 10):
        sc, ky = ix.search_many(queries, 0, k)
        for qi, q in enumerate(queries):
            ref = {kept[j]: float(s) for j, s in enumerate(base.scores(q)) if s > 0}
            check_topk(ref, sc[qi], ky[qi], k)


def test_per_query_namespaces_in_one_batch():
    ix = lamina.LexicalIndex()
    ref = RefBM25()
    rng = np.random.default_rng(0)
    keys, docs, nss = [], [], []
    for i in range(200):
        keys.append(i)
        docs.append(list(rng.choice(VOCAB, size=rng.integers(1, 9))))
        nss.append(int(rng.integers(0, 5)))
    ix.add(keys, docs, np.array(nss, dtype=np.uint64))
    ref.add(keys, docs, nss)
    queries = [list(rng.choice(VOCAB, size=3)) for _ in range(20)]
    qns = [i % 6 for i in range(20)]  # namespace 5 is empty
    sc, ky = ix.search_many(queries, qns, 7)
    for i, (q, ns) in enumerate(zip(queries, qns)):
        check_topk(ref.scores(q, ns), sc[i], ky[i], 7)
    assert np.all(ky[5] == -1)


# ---- semantics ---------------------------------------------------------------------------------


def test_statistics_are_isolated_per_namespace():
    ix = lamina.LexicalIndex()
    ix.add([1, 2, 3], ["apples and pears", "pears only", "a walk by the river"], namespace=7)
    before = ix.search("pears", 7, 5)
    # another user's documents, full of the same term, change nothing in namespace 7
    ix.add(list(range(100, 150)), ["pears pears pears"] * 50, namespace=8)
    after = ix.search("pears", 7, 5)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    assert set(ix.search("pears", 8, 100)[1].tolist()) == set(range(100, 150))
    assert ix.stats(7)["docs"] == 3 and ix.stats(8)["docs"] == 50


def test_ties_break_by_smaller_key():
    ix = lamina.LexicalIndex()
    keys = [40, 3, 17, 99, 8]
    ix.add(keys, ["red kite"] * 5)
    ix.add([50], ["blue whale"])
    sc, ky = ix.search("kite", 0, 3)
    assert ky.tolist() == [3, 8, 17]
    assert sc[0] == sc[1] == sc[2] > 0
    sc, ky = ix.search_many(["kite"], 0, 10)
    assert ky[0].tolist() == [3, 8, 17, 40, 99, -1, -1, -1, -1, -1]


def test_empty_index_empty_namespace_and_unknown_terms():
    ix = lamina.LexicalIndex()
    sc, ky = ix.search("anything", 0, 5)
    assert sc.shape == ky.shape == (0,)
    ix.add([1], ["hello world"], namespace=1)
    assert ix.search("hello", 2, 5)[1].size == 0  # other namespace
    assert ix.search("goodbye moon", 1, 5)[1].size == 0  # no known term
    assert ix.search("", 1, 5)[1].size == 0  # no term at all
    assert ix.search("the of and", 1, 5)[1].size == 0  # stop words only
    sc, ky = ix.search_many(["goodbye", "hello"], 1, 3)
    assert ky.tolist() == [[-1, -1, -1], [1, -1, -1]]
    assert np.all(np.isneginf(sc[0])) and sc[1, 0] > 0
    sc, ky = ix.search_many([], 1, 3)
    assert sc.shape == ky.shape == (0, 3)
    ix.add([], [])  # empty batches are no-ops
    assert ix.remove([]) == 0 and len(ix) == 1


def test_documents_without_terms_count_in_statistics():
    ix = lamina.LexicalIndex()
    ref = RefBM25()
    docs = [["x", "y"], [], ["y"], []]
    ix.add([0, 1, 2, 3], docs)
    ref.add([0, 1, 2, 3], docs, [0] * 4)
    assert ix.stats(0)["docs"] == 4 and ix.stats(0)["avg_len"] == pytest.approx(0.75)
    sc, ky = ix.search_many([["y"]], 0, 4)
    check_topk(ref.scores(["y"], 0), sc[0], ky[0], 4)


def test_repeated_query_terms_count_once_and_tokens_match_text():
    ix = lamina.LexicalIndex()
    ix.add([1, 2], ["painting sunsets by the lake", "a lake house"])
    a = ix.search("lake lake lake sunsets", 0, 2)
    b = ix.search(["lake", "sunset"], 0, 2)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)


def test_unicode_documents():
    ix = lamina.LexicalIndex()
    ix.add([1, 2, 3], ["Wir wandern in München", "東京タワー に 行った", "Café au lait à Paris"])
    assert ix.search("münchen", 0, 3)[1].tolist() == [1]
    assert ix.search("東京タワー", 0, 3)[1].tolist() == [2]
    assert ix.search("CAFÉ", 0, 3)[1].tolist() == [3]


def test_remove_readd_and_compaction():
    ix = lamina.LexicalIndex()
    ref = RefBM25()
    rng = np.random.default_rng(1)
    docs = [list(rng.choice(VOCAB, size=rng.integers(1, 7))) for _ in range(300)]
    ix.add(range(300), docs, namespace=3)
    ref.add(range(300), docs, [3] * 300)
    full = ix.stats(3)["postings"]
    gone = list(range(0, 300, 3))
    ix.remove(gone)
    ref.remove(gone)
    st_ = ix.stats(3)
    assert st_["docs"] == 200 and st_["dead_docs"] == 100 and st_["postings"] == full  # tombstones
    sc, ky = ix.search_many([["w1", "w2"]], 3, 50)
    check_topk(ref.scores(["w1", "w2"], 3), sc[0], ky[0], 50)
    # removing past half compacts: no dead documents, postings of live documents only
    more = list(range(1, 300, 3))
    ix.remove(more)
    ref.remove(more)
    st_ = ix.stats(3)
    live_postings = sum(len(set(d)) for _, d in ref.docs.values())
    assert st_["docs"] == 100 and st_["dead_docs"] == 0 and st_["postings"] == live_postings
    assert st_["terms"] == len({w for _, d in ref.docs.values() for w in d})
    sc, ky = ix.search_many([["w1", "w2"], ["é"]], 3, 30)
    check_topk(ref.scores(["w1", "w2"], 3), sc[0], ky[0], 30)
    check_topk(ref.scores(["é"], 3), sc[1], ky[1], 30)
    # a removed key can be added again, with a new text
    ix.add([0], [["w1", "w1"]], namespace=3)
    ref.add([0], [["w1", "w1"]], [3])
    sc, ky = ix.search_many([["w1"]], 3, 300)
    check_topk(ref.scores(["w1"], 3), sc[0], ky[0], 300)
    # removing everything drops the namespace
    ix.remove(sorted(ref.docs))
    assert len(ix) == 0 and ix.count(3) == 0
    assert ix.stats(3) == {"docs": 0, "avg_len": 0.0, "terms": 0, "postings": 0, "dead_docs": 0}
    assert ix.search("w1", 3, 5)[1].size == 0


def test_explicit_compact_keeps_results():
    ix = lamina.LexicalIndex()
    ix.add(range(10), [f"alpha beta{i % 3}" for i in range(10)])
    ix.remove([0, 1, 2])
    before = ix.search_many(["alpha beta1"], 0, 10)
    ix.compact()
    assert ix.stats(0)["dead_docs"] == 0
    after = ix.search_many(["alpha beta1"], 0, 10)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])


def test_threads_do_not_change_results():
    ix = lamina.LexicalIndex()
    rng = np.random.default_rng(2)
    vocab = [f"t{i}" for i in range(40)]
    n = 6000
    ix.add(
        range(n), [list(rng.choice(vocab, size=8)) for _ in range(n)], namespace=rng.integers(0, 2, n).astype(np.uint64)
    )
    queries = [list(rng.choice(vocab, size=5)) for _ in range(64)]
    a = ix.search_many(queries, [i % 2 for i in range(64)], 10, threads=1)
    b = ix.search_many(queries, [i % 2 for i in range(64)], 10, threads=2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_concurrent_readers_and_writer():
    ix = lamina.LexicalIndex()
    ix.add(range(500), [f"common word{i % 7}" for i in range(500)])
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                sc, ky = ix.search_many(["common word3"], 0, 5)
                assert ky[0, 0] >= 0 and sc[0, 0] > 0
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(500, 700):
        ix.add([i], [f"common word{i % 7}"])
        ix.remove([i - 500])
    for t in threads:
        t.join()
    assert not errors
    assert len(ix) == 500


# ---- errors ------------------------------------------------------------------------------------


def test_add_errors_leave_index_unchanged():
    ix = lamina.LexicalIndex()
    ix.add([1, 2], ["one", "two"])
    with pytest.raises(ValueError, match="already in the index"):
        ix.add([3, 2], ["three", "again"])
    with pytest.raises(ValueError, match="more than once"):
        ix.add([4, 4], ["a", "b"])
    with pytest.raises(ValueError, match=">= 0"):
        ix.add([-5], ["neg"])
    with pytest.raises(ValueError, match="docs has 1 entries but keys has 2"):
        ix.add([5, 6], ["only one"])
    with pytest.raises(ValueError, match="one per document"):
        ix.add([5, 6], ["x", "y"], namespace=[0, 1, 2])
    with pytest.raises(TypeError, match="sequence of texts"):
        ix.add([5], "a text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"docs\[0\]\[1\] must be a str"):
        ix.add([5], [["ok", 3]])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"docs\[0\] must be a str"):
        ix.add([5], [42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="integers"):
        ix.add([1.5], ["x"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="namespace"):
        ix.add([5], ["x"], namespace=-1)
    with pytest.raises(TypeError, match="bool"):
        ix.add([5], ["x"], namespace=True)
    assert len(ix) == 2 and ix.contains([3, 4, 5]).tolist() == [False, False, False]
    assert ix.search("three", 0, 5)[1].size == 0


def test_remove_errors_are_all_or_nothing():
    ix = lamina.LexicalIndex()
    ix.add([1, 2, 3], ["a1", "b2", "c3"])
    with pytest.raises(IndexError, match="not in the index"):
        ix.remove([1, 99])
    assert len(ix) == 3
    with pytest.raises(ValueError, match="more than once"):
        ix.remove([1, 1])
    assert len(ix) == 3
    assert ix.remove([1, 99], missing_ok=True) == 1
    assert ix.contains([1, 2, 3]).tolist() == [False, True, True]
    with pytest.raises(IndexError):
        ix.remove(1)


def test_search_argument_errors():
    ix = lamina.LexicalIndex()
    ix.add([1], ["hello"])
    for bad_k in (0, -3):
        with pytest.raises(ValueError, match="k must be >= 1"):
            ix.search("hello", 0, bad_k)
        with pytest.raises(ValueError, match="k must be >= 1"):
            ix.search_many(["hello"], 0, bad_k)
    with pytest.raises(TypeError, match="k must be an int"):
        ix.search("hello", 0, 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="k must be an int"):
        ix.search("hello", 0, True)
    with pytest.raises(TypeError, match="query must be a str"):
        ix.search(5, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence of texts"):
        ix.search_many("hello", 0, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one per query"):
        ix.search_many(["a", "b"], [0], 1)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        ix.search("hello", 2**64, 1)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        ix.search_many(["a"], np.array([-1]), 1)


def test_native_boundary_is_strict():
    core = lamina._core.LexicalIndex()
    h, o = lamina._core.lexical_hash_terms([["a", "b"]])
    with pytest.raises(TypeError, match="int64"):
        core.add(np.array([1], dtype=np.int32), 0, h, o)
    with pytest.raises(ValueError, match="offsets must end"):
        core.add(np.array([1]), 0, h, np.array([0, 5]))
    with pytest.raises(ValueError, match="non-decreasing"):
        core.add(np.array([1, 2]), 0, h, np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="start at 0"):
        core.add(np.array([1]), 0, h, np.array([1, 2]))
    with pytest.raises(ValueError, match="len\\(keys\\) \\+ 1"):
        core.add(np.array([1, 2]), 0, h, o)
    with pytest.raises(ValueError, match="k1"):
        lamina.LexicalIndex(k1=float("nan"))
    with pytest.raises(ValueError, match="b must be"):
        lamina.LexicalIndex(b=1.5)
    assert len(core) == 0


def test_k1_b_parameters_follow_the_formula():
    ix = lamina.LexicalIndex(k1=2.0, b=0.3)
    ref = RefBM25(2.0, 0.3)
    docs = [["a", "b", "a"], ["b"], ["c", "a", "d", "e"]]
    ix.add([0, 1, 2], docs)
    ref.add([0, 1, 2], docs, [0, 0, 0])
    sc, ky = ix.search_many([["a", "b"]], 0, 3)
    check_topk(ref.scores(["a", "b"], 0), sc[0], ky[0], 3)
    assert (ix.k1, ix.b) == (2.0, 0.3)


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(["apple", "river", "train", "music", "stone"]), min_size=1, max_size=6),
        min_size=1,
        max_size=40,
    ),
    picks=st.lists(st.booleans(), min_size=40, max_size=40),
    k=st.integers(1, 15),
)
def test_an_allow_list_admits_exactly_its_documents(docs: list[list[str]], picks: list[bool], k: int) -> None:
    """search_many(allow=keys) returns min(k, matching allowed documents), each allowed, with the
    scores the unfiltered search gives them (BM25 statistics stay the namespace's)."""
    ix = lamina.LexicalIndex()
    keys = list(range(10, 10 + len(docs)))
    ix.add(keys, docs, 3)
    allow = np.array([key for key, p in zip(keys, picks) if p], dtype=np.int64)
    scores, got = ix.search_many([["apple", "stone"]], 3, k, allow=allow)
    full_s, full_k = ix.search_many([["apple", "stone"]], 3, len(docs))
    everyone = {int(key): float(s) for key, s in zip(full_k[0], full_s[0]) if key >= 0}
    admitted = {key: s for key, s in everyone.items() if key in set(allow.tolist())}
    hits = [(int(key), float(s)) for key, s in zip(got[0], scores[0]) if key >= 0]
    assert len(hits) == min(k, len(admitted))
    assert all(key in admitted and s == pytest.approx(admitted[key]) for key, s in hits)
    assert sorted((s for _, s in hits), reverse=True) == sorted(admitted.values(), reverse=True)[: len(hits)]


def test_an_unsorted_allow_list_is_refused() -> None:
    ix = lamina.LexicalIndex()
    ix.add([1, 2], ["apple", "apple pie"], 0)
    with pytest.raises(ValueError, match="sorted ascending"):
        ix.search_many(["apple"], 0, 2, allow=np.array([2, 1], dtype=np.int64))
