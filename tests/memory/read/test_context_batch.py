"""Memory.context_batch / search_batch: the same results as the per-call loop, bit for bit (items,
order, scores, gates, render, the visits counted), and LayerIndex.search_batch, which they
stand on: the same bits as one query at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA
from lamina import AsyncMemory, Firewall, InvalidInput, Memory, NotFoundError
from lamina.memory.config import MemoryConfig
from lamina.memory.read.fill import gate, gate_rows
from lamina.native.layer_index import PARALLEL_ROWS, LayerIndex
from memkit import DAY, FILLER, T0, chat, item_rows

NOW = T0 + 30 * DAY
QUERIES = [
    "where does Alice live now",
    "what is the dog called",
    "when did Bob start the new job",
    "which bakery has good croissants",
    "what is Alice reading",
    "what did they say about the doctor",
    "football",
    "who moved to Berlin and when",
    "zzz unrelated words qqq",
]
STORY = {
    "alice": [
        ("Alice", "I moved to Paris last spring."),
        ("Bob", "How is Paris treating you?"),
        ("Alice", "My dog is called Max and he loves the park."),
        ("Alice", "My doctor says my knee is healing."),
        ("Bob", "I started a new job at the bank on Monday."),
    ],
    "bob": [
        ("Bob", "I moved to Berlin for a job in May 2023."),
        ("Carol", "Berlin is lovely in summer."),
        ("Bob", "My cat is called Tom."),
        ("Bob", "I am reading a novel about a detective."),
    ],
}


def _build(path: Path) -> None:
    """Two users with consolidated sessions (episodes, facts, summaries), a live session, a
    deleted turn (with what derived from it) and a VERIFY turn."""
    m = Memory(path, embedder="hashing")
    for s in range(4):
        for u, lines in STORY.items():
            t = T0 + s * DAY
            chat(m, u, f"s{s}", lines[s % 2 :] + FILLER[s : s + 3], t, f"{u}{s}")
            m.end_session(user_id=u, session_id=f"s{s}")
    ids = chat(
        m,
        "alice",
        "live",
        [("Alice", "Now I live in Lyon, not Paris."), ("Bob", "Lyon is great.")],
        T0 + 9 * DAY,
        "live",
    )
    m.add(
        [{"speaker": "Alice", "text": "I think my manager moved the review to Friday.", "commitment": "verify"}],
        user_id="alice",
        session_id="live",
        timestamp=T0 + 9 * DAY + 600,
    )
    m.delete(ids[1], user_id="alice")
    victim = m.search("dog called Max", user_id="alice", k=1, layers=["archive"])[0]
    m.delete(victim.id, user_id="alice")
    m.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "base.db"
    _build(path)
    return path


def _twins(base: Path, where: Path) -> tuple[Memory, Memory, Path, Path]:
    """Two memories on copies of one database file (same ids): one for the loop, one for the batch."""
    pa, pb = where / "loop.db", where / "batch.db"
    for p in (pa, pb):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)
        shutil.copy(base, p)
    return Memory(pa, embedder="hashing"), Memory(pb, embedder="hashing"), pa, pb


@pytest.fixture
def twins(built: Path, tmp_path: Path) -> Iterator[tuple[Memory, Memory, Path, Path]]:
    a, b, pa, pb = _twins(built, tmp_path)
    yield a, b, pa, pb
    a.close()
    b.close()


def _visits(path: Path) -> dict[int, tuple[int, Any]]:
    return {i: (r["access_count"], r["last_access"]) for i, r in item_rows(path).items()}


def _check_equal(a: Memory, b: Memory, pa: Path, pb: Path, qs: list[str], us: list[str], **kw: Any) -> list[Any]:
    loop = [a.context(q, user_id=u, **kw) for q, u in zip(qs, us)]
    got = b.context_batch(qs, user_ids=us, **kw)
    assert got == loop
    assert [c.render() for c in got] == [c.render() for c in loop]
    a.flush()
    b.flush()
    assert _visits(pb) == _visits(pa)
    return got


# -- equality with the loop --------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    mix=st.lists(st.tuples(st.sampled_from(QUERIES), st.sampled_from(["alice", "bob"])), max_size=14),
    budget=st.sampled_from([1, 4, 30, 200, 1024]),
    include_archive=st.booleans(),
    domain=st.sampled_from([None, "auto"]),
    firewall=st.sampled_from([None, Firewall(), Firewall(tau=-1.0, domain_gate=False)]),
)
def test_batch_equals_loop(
    built: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mix: list[tuple[str, str]],
    budget: int,
    include_archive: bool,
    domain: str | None,
    firewall: Firewall | None,
) -> None:
    """Any mix of queries and users (repeats, empty batches): the contexts of the
    loop, and the same visits counted (the items of a later context show the earlier visits)."""
    a, b, pa, pb = _twins(built, tmp_path_factory.mktemp("mix"))
    try:
        qs, us = [q for q, _ in mix], [u for _, u in mix]
        _check_equal(
            a,
            b,
            pa,
            pb,
            qs,
            us,
            budget=budget,
            now=NOW,
            include_archive=include_archive,
            domain=domain,
            firewall=firewall,
        )
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "config",
    [
        MemoryConfig(layers=("working",)),
        MemoryConfig(layers=("working", "episodic")),
        MemoryConfig(layers=("working", "semantic")),
        MemoryConfig(speaker_scope=0.0, session_prior=0.0, time_channel=False, lexical=False),
        MemoryConfig(relevance_top=7, min_similarity=-1.0, stale_penalty=1.0, rrf_k=1),
    ],
)
def test_batch_equals_loop_under_other_settings(tmp_path: Path, config: MemoryConfig) -> None:
    """Layers left out, channels and priors off, a floor under every score: the batch (ranked
    across its queries) is still the loop."""
    pa, pb = tmp_path / "loop.db", tmp_path / "batch.db"
    m = Memory(pa, embedder="hashing", config=config)
    for s in range(4):
        for u, lines in STORY.items():
            chat(m, u, f"s{s}", lines[s % 2 :] + FILLER[s : s + 3], T0 + s * DAY, f"{u}{s}")
            m.end_session(user_id=u, session_id=f"s{s}")
    chat(m, "alice", "live", [("Alice", "Now I live in Lyon, not Paris.")], T0 + 9 * DAY, "live")
    m.close()
    shutil.copy(pa, pb)
    a, b = Memory(pa, embedder="hashing", config=config), Memory(pb, embedder="hashing", config=config)
    try:
        qs, us = QUERIES * 2, ["alice", "bob", "bob"] * 6
        for kw in ({"now": NOW}, {"now": NOW, "include_archive": True, "budget": 200}, {"domain": "auto", "now": NOW}):
            _check_equal(a, b, pa, pb, qs, us, **kw)
    finally:
        a.close()
        b.close()


def test_repeats_show_earlier_visits(twins: tuple[Memory, Memory, Path, Path]) -> None:
    """The same query three times: each context shows the visits of the ones before it."""
    a, b, pa, pb = twins
    got = _check_equal(a, b, pa, pb, [QUERIES[0]] * 3, ["alice"] * 3, now=NOW)
    counts = [[it.access_count for it in c.items] for c in got]
    assert counts[0] and [x + 1 for x in counts[0]] == counts[1] and [x + 2 for x in counts[0]] == counts[2]


def test_unknown_users_and_empty_batches(twins: tuple[Memory, Memory, Path, Path]) -> None:
    a, b, pa, pb = twins
    assert b.context_batch([], user_ids="alice") == []
    assert b.context_batch([], user_ids=[]) == []
    assert b.search_batch([], user_ids="alice") == []
    before = _visits(pb)
    for call in (
        lambda: b.context_batch(["where does Alice live now"] * 2, user_ids=["alice", "nobody"], now=NOW),
        lambda: b.context_batch(["x y z"], user_ids="nobody", firewall=Firewall()),
        lambda: b.search_batch(["where does Alice live now"], user_ids=["nobody"]),
        lambda: a.context("where does Alice live now", user_id="nobody", now=NOW),
    ):
        with pytest.raises(NotFoundError, match="unknown user_id 'nobody'"):
            call()
    b.flush()
    assert _visits(pb) == before  # the known user's query of the failed batch counted no visit


def test_wall_clock_visits(twins: tuple[Memory, Memory, Path, Path]) -> None:
    """Without ``now`` the visits are stamped with the wall clock: everything else is the loop's."""
    a, b, *_ = twins
    loop = [a.context(q, user_id="bob") for q in QUERIES[:4]]
    got = b.context_batch(QUERIES[:4], user_ids="bob")

    def strip(c: Any) -> Any:
        return dataclasses.replace(c, items=[dataclasses.replace(it, last_access=None) for it in c.items])

    assert [strip(c) for c in got] == [strip(c) for c in loop]


def test_given_embeddings(twins: tuple[Memory, Memory, Path, Path]) -> None:
    a, b, pa, pb = twins
    Q = a.embedder.embed(QUERIES)
    loop = [a.context(q, user_id="alice", now=NOW, query_embedding=Q[i]) for i, q in enumerate(QUERIES)]
    assert b.context_batch(QUERIES, user_ids="alice", now=NOW, query_embeddings=Q) == loop


def test_search_batch_equals_loop(twins: tuple[Memory, Memory, Path, Path]) -> None:
    a, b, *_ = twins
    us = ["alice", "bob", "bob"] * 3
    for layers in (None, ["archive"], ["episodic", "semantic", "history"], ["working", "archive"]):
        for k in (1, 7, 500):
            loop = [a.search(q, user_id=u, k=k, layers=layers, now=NOW) for q, u in zip(QUERIES, us)]
            assert b.search_batch(QUERIES, user_ids=us, k=k, layers=layers, now=NOW) == loop


def test_async_batch(twins: tuple[Memory, Memory, Path, Path]) -> None:
    a, b, *_ = twins
    loop = [a.context(q, user_id="bob", now=NOW, budget=80) for q in QUERIES]
    found = [a.search(q, user_id="bob", k=3) for q in QUERIES]

    async def run() -> tuple[Any, Any]:
        am = AsyncMemory(memory=b)
        try:
            return (
                await am.context_batch(QUERIES, user_ids="bob", now=NOW, budget=80),
                await am.search_batch(QUERIES, user_ids="bob", k=3),
            )
        finally:
            await am.aclose()

    ctxs, hits = asyncio.run(run())
    assert ctxs == loop and hits == found


# -- bad input ---------------------------------------------------------------------------------
def test_bad_input(twins: tuple[Memory, Memory, Path, Path]) -> None:
    _, b, _, pb = twins
    b.flush()
    before = _visits(pb)
    with pytest.raises(ValueError, match=r"user_ids has 2 entries but queries has 3"):
        b.context_batch(["a", "b", "c"], user_ids=["alice", "bob"])
    with pytest.raises(ValueError, match=r"user_ids has 1 entries but queries has 2"):
        b.search_batch(["a", "b"], user_ids=["alice"])
    with pytest.raises(TypeError, match=r"queries\[1\] must be a str"):
        b.context_batch(["a", 7], user_ids="alice")  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"queries\[1\] must be a str"):
        b.context_batch(["a", 7], user_ids="alice", domain="auto")  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"queries\[0\] must be a str"):
        b.search_batch([None], user_ids="alice")  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"queries\[0\] is empty"):
        b.context_batch(["  ", "b"], user_ids="alice")
    with pytest.raises(TypeError, match="queries must be a sequence"):
        b.context_batch("where", user_ids="alice")
    with pytest.raises(TypeError, match=r"user_ids\[1\] must be a str"):
        b.context_batch(["a", "b"], user_ids=["alice", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="user_ids must be a str or a sequence"):
        b.context_batch(["a"], user_ids=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget"):
        b.context_batch(["a"], user_ids="alice", budget=2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="budget"):
        b.context_batch(["a"], user_ids="alice", budget=0)
    with pytest.raises(InvalidInput, match="query_embeddings must have shape"):
        b.context_batch(["a", "b"], user_ids="alice", query_embeddings=np.ones((1, b.embedder.dim), np.float32))
    bad = np.ones((2, b.embedder.dim), np.float32)
    bad[1, 3] = np.nan
    with pytest.raises(InvalidInput, match=r"query_embeddings\[1\] must be finite"):
        b.context_batch(["a", "b"], user_ids="alice", query_embeddings=bad)
    with pytest.raises(TypeError, match="query_embeddings must be a float32"):
        b.context_batch(["a"], user_ids="alice", query_embeddings=np.ones((1, b.embedder.dim)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="firewall"):
        b.context_batch(["a"], user_ids="alice", firewall="strict")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="k must be"):
        b.search_batch(["a"], user_ids="alice", k=0)
    b.flush()
    assert _visits(pb) == before  # nothing was counted


# -- the stages it stands on ----------------------------------------------------------------------
def _reference_search(idx: LayerIndex, q: np.ndarray, nss: list[int], k: int) -> list[tuple[list[float], list[int]]]:
    """One query as LayerIndex.search ran it before batches: per arena one native call, the
    query repeated for its namespaces there (one namespace: that namespace alone)."""
    out: list[tuple[list[float], list[int]]] = [([], []) for _ in nss]
    per: dict[int, list[int]] = {}
    for j, ns in enumerate(nss):
        if idx.count(ns):
            per.setdefault(idx._which(ns), []).append(j)
    for a, pos in per.items():
        most = max(idx.count(nss[j]) for j in pos)
        Q = np.ascontiguousarray(np.repeat(q.reshape(1, -1), len(pos), axis=0))
        ns_arr = np.array([nss[j] for j in pos], dtype=np.uint64)
        threads = 0 if most >= PARALLEL_ROWS else 1
        scores, slots = idx._arenas[a].search(Q, min(k, most), metric="cosine", namespace=ns_arr, threads=threads)
        for row, j in enumerate(pos):
            keep = slots[row] >= 0
            out[j] = (scores[row][keep].tolist(), idx._id_of_row[a][slots[row][keep] & 0xFFFFFFFF].tolist())
    return out


def test_layer_index_search_batch_is_one_query_at_a_time() -> None:
    """Many queries per namespace (the native kernel tiles 4+ queries of one namespace), row
    lists out of row order (removals), a namespace that is most of its arena (scanned), one past
    PARALLEL_ROWS (multi-threaded), empty namespaces, several arenas: every (query, namespace)
    gets the bits of one query at a time, and the one-query path is the one before batches."""
    dim = 24
    rng = np.random.default_rng(7)
    idx = LayerIndex(dim, ann_threshold=10**6)
    next_id = iter(range(1, 10**7))
    sizes = {
        (1 << 3) | 0: 300,
        (1 << 3) | 1: 40,
        (1 << 3) | 2: 7,
        (2 << 3) | 0: 900,
        (2 << 3) | 5: 2000,
        (3 << 3) | 3: PARALLEL_ROWS + 50,
    }
    for ns, n in sizes.items():
        ids = [next(next_id) for _ in range(n)]
        idx.add(ns, ids, rng.standard_normal((n, dim)).astype(np.float32))
        idx.remove(ids[::5])  # rows freed (reused by later adds): row lists out of row order
    for ns, n in sizes.items():
        idx.add(ns, [next(next_id) for _ in range(n // 4)], rng.standard_normal((n // 4, dim)).astype(np.float32))
    nss = list(sizes)
    requests = [list(rng.choice(nss, size=rng.integers(1, len(nss) + 1), replace=False)) for _ in range(40)]
    requests += [[(2 << 3) | 5]] * 7 + [[(1 << 3) | 0, (9 << 3) | 1]] * 6 + [[(3 << 3) | 3]] * 2 + [[(9 << 3) | 2]]
    Q = rng.standard_normal((len(requests), dim)).astype(np.float32)
    for k in (1, 5, 64):
        got = idx.search_batch(Q, requests, k)
        for i, nss_i in enumerate(requests):
            want = _reference_search(idx, Q[i], nss_i, k)
            assert [(s.tolist(), x.tolist()) for s, x in got[i]] == want, (k, i)
            assert idx.search(Q[i], nss_i, k) == want


def test_gate_rows_is_gate_per_row() -> None:
    cfg = MemoryConfig()
    rng = np.random.default_rng(3)
    layers = ["working", "episodic", "semantic", "archive"]
    rels = []
    for _ in range(300):
        names = [L for L in layers if rng.random() < 0.7] or ["episodic"]
        rels.append({L: float(rng.uniform(-0.3, 0.9)) for L in names})
    rels[5] = {"episodic": 0.4, "semantic": 0.4}  # a tie
    assert gate_rows(rels, layers, cfg) == [gate(r, layers, cfg) for r in rels]


# -- LoCoMo ----------------------------------------------------------------------------------------
@pytest.mark.data
def test_locomo_batch_equals_loop(tmp_path: Path) -> None:
    """Two LoCoMo conversations (hashing embedder), every question: one batch per budget equals
    the loop (and search_batch equals search)."""
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(SHARED_DATA / "locomo", limit=2)
    base = tmp_path / "locomo.db"
    m = Memory(base, embedder="hashing")
    for c in convs:
        for s in c.sessions:
            if not s.turns:
                continue
            sid = f"session_{s.number}"
            msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns]
            m.add(msgs, user_id=c.sample_id, session_id=sid)
            m.end_session(user_id=c.sample_id, session_id=sid, now=s.turns[-1].timestamp)
    m.close()
    qs = [q.question for c in convs for q in c.questions]
    us = [c.sample_id for c in convs for _ in c.questions]
    assert len(qs) > 200 and len(set(us)) == 2
    now = max(t.timestamp for c in convs for t in c.turns) + DAY
    a, b, pa, pb = _twins(base, tmp_path)
    try:
        for budget in (1024, 64):
            _check_equal(a, b, pa, pb, qs, us, budget=budget, now=now)
        loop = [a.search(q, user_id=u, k=20, layers=["episodic", "archive"]) for q, u in zip(qs, us)]
        assert b.search_batch(qs, user_ids=us, k=20, layers=["episodic", "archive"]) == loop
    finally:
        a.close()
        b.close()
