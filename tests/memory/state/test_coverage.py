"""The covered turns' neighbour lists (``lamina.memory.state.coverage``) answer exactly what a brute-force
numpy search answers, whatever their history: columns arriving in batches, leaving, vectors
replaced, lists too short for the question; and the capacity projection that reads them, kept
across end_sessions, sees the novelty ν of the rule (nearest covered turn of another leaf) after
evictions, deletes, updates and reopening."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

import lamina.memory.write.retention as retention
from lamina import Memory, MemoryConfig
from lamina.memory.state.coverage import TurnNeighbours, _dot_rows
from lamina.memory.write.retention import CoverageProjection, pooled_items
from lamina.native.search import topk
from memkit import CHAT_WORDS, DAY, T0, item_rows, pooled, unit


class _Stamps:
    """The part of a LayerIndex that TurnNeighbours.sync reads: vectors and their stamps."""

    def __init__(self) -> None:
        self.vec: dict[int, np.ndarray] = {}
        self.stamp: dict[int, int] = {}
        self.next = 0

    def put(self, i: int, v: np.ndarray) -> None:
        self.vec[i] = v.astype(np.float32)
        self.next += 1
        self.stamp[i] = self.next

    def get(self, ids: list[int]) -> np.ndarray:
        return np.stack([self.vec[i] for i in ids]).astype(np.float32)

    def stamps(self, ids: list[int]) -> np.ndarray:
        return np.array([self.stamp.get(i, -1) for i in ids], dtype=np.int64)


def _brute(X: np.ndarray, q: int, on: list[int], group: dict[int, int]) -> float:
    cand = [t for t in on if group[t] != group[q]]
    if not cand:
        return -np.inf
    return float(max(X[t].astype(np.float64) @ X[q].astype(np.float64) for t in cand))


@pytest.mark.parametrize("d", [384, 24, 17])
def test_block_similarities_have_the_bits_of_the_top_k(d: int) -> None:
    """The kept lists' blocks and a fresh build's top-k compute each similarity alike: the very
    bits, for any number of rows and columns (the two paths must never rank a pair apart)."""
    rng = np.random.default_rng(d)
    for m in (1, 3, 8, 16, 17, 40):
        for n in (1, 41, 42, 43, 85, 86, 700):
            X = rng.standard_normal((n + m, d)).astype(np.float32)
            B = _dot_rows(X[n:], X[:n])
            S, I = topk(np.ascontiguousarray(X[n:]), np.ascontiguousarray(X[:n]), n, "ip")
            assert np.array_equal(np.take_along_axis(B, I, axis=1), S), (m, n)


@pytest.mark.parametrize("k", [1, 2, 3, 8])
@pytest.mark.parametrize("seed", range(6))
def test_lists_answer_like_brute_force(k: int, seed: int) -> None:
    """Random histories: turns arrive (observe / sync), leave, get new vectors; questions with
    random groups and random subsets of the covered turns (as the projection's rounds ask)."""
    rng = np.random.default_rng(seed)
    dim = 8
    base = rng.standard_normal((4, dim))  # a few directions, so that near-duplicates abound
    src = _Stamps()
    nb = TurnNeighbours(dim, k)
    covered: list[int] = []
    nxt = 0
    for _ in range(40):
        op = rng.integers(0, 4)
        if op == 0 or not covered:  # new turns covered (the add path)
            new = list(range(nxt, nxt + int(rng.integers(1, 9))))
            nxt += len(new)
            for t in new:
                src.put(t, unit(base[rng.integers(0, 4)] + 0.3 * rng.standard_normal(dim)))
            nb.observe(src, new)  # type: ignore[arg-type]
            covered += new
        elif op == 1:  # some leave
            covered = [t for t in covered if rng.random() > 0.3]
        elif op == 2:  # a vector changes (an update) and turns come back
            t = covered[int(rng.integers(0, len(covered)))]
            src.put(t, unit(rng.standard_normal(dim)))
        order = [int(t) for t in rng.permutation(covered)]
        cols = nb.sync(src, order)  # type: ignore[arg-type]
        assert nb.n == len(order) and sorted(nb.ids[: nb.n].tolist()) == sorted(order)
        assert all(nb.col[t] == c for t, c in zip(order, cols.tolist()))
        if not order:
            continue
        group_of = {t: int(rng.integers(0, 5)) if rng.random() < 0.5 else 100 + t for t in order}
        group = np.full(nb.n, -1, dtype=np.int64)
        group[cols] = [group_of[t] for t in order]
        # several rounds over shrinking subsets
        on_ids = list(order)
        for _ in range(3):
            on = np.zeros(nb.n, dtype=bool)
            on[[cols[order.index(t)] for t in on_ids]] = True
            ask = np.array([cols[order.index(t)] for t in on_ids], dtype=np.int64)
            best, where = nb.nearest(ask, on, group)
            for t, b, w in zip(on_ids, best.tolist(), where.tolist()):
                want = _brute(src.vec, t, on_ids, group_of)
                if np.isinf(want):
                    assert b == -np.inf and w == -1
                else:
                    assert b == pytest.approx(want, abs=1e-5)
                    hit = int(nb.ids[w])
                    assert hit in on_ids and group_of[hit] != group_of[t]
                    assert float(src.vec[hit].astype(np.float64) @ src.vec[t]) == pytest.approx(want, abs=1e-5)
            on_ids = [t for t in on_ids if rng.random() > 0.4]
            if not on_ids:
                break
        # what the last round left covered is all that stays (the projection's evictions)
        covered = on_ids
        keep = np.zeros(nb.n, dtype=bool)
        keep[[cols[order.index(t)] for t in on_ids]] = True
        nb.kill(np.flatnonzero(~keep).astype(np.int64))


@pytest.mark.parametrize("first", [0, 1])
def test_a_large_batch_of_columns_answers_like_brute_force(first: int) -> None:
    """More columns than one similarity block at once: into empty lists (a reopened user's first
    projection: one native top-k) and into lists holding one column (block by block, merged)."""
    rng = np.random.default_rng(7)
    dim, k = 16, 3
    n = TurnNeighbours._CHUNK * 2 + 300
    base = rng.standard_normal((6, dim))
    X = np.stack([unit(base[rng.integers(0, 6)] + 0.4 * rng.standard_normal(dim)) for _ in range(n)])
    X = X.astype(np.float32)
    src = _Stamps()
    for t in range(n):
        src.put(t, X[t])
    nb = TurnNeighbours(dim, k)
    if first:
        nb.observe(src, [0])  # type: ignore[arg-type]
    order = list(range(n))
    cols = nb.sync(src, order)  # type: ignore[arg-type]
    group_of = rng.integers(0, 40, size=n)
    group = np.full(nb.n, -1, dtype=np.int64)
    group[cols] = group_of
    on = np.zeros(nb.n, dtype=bool)
    on[cols] = True
    best, where = nb.nearest(cols, on, group)
    S = X.astype(np.float64) @ X.astype(np.float64).T
    S[group_of[:, None] == group_of[None, :]] = -np.inf
    want = S.max(axis=1)
    np.testing.assert_allclose(best, want, atol=1e-5)
    hits = nb.ids[where]
    assert (group_of[hits] != group_of).all()
    np.testing.assert_allclose(S[np.arange(n), hits], want, atol=1e-5)


def test_many_arrivals_and_departures_keep_the_answers() -> None:
    """Columns stay dense (the departed ones' places are taken by the last), and the answers
    after many batches equal a brute-force search."""
    rng = np.random.default_rng(7)
    dim, k = 6, 3
    src = _Stamps()
    nb = TurnNeighbours(dim, k)
    alive: list[int] = []
    for t in range(3000):
        src.put(t, unit(rng.standard_normal(dim)))
    for lo in range(0, 3000, 100):
        new = list(range(lo, lo + 100))
        nb.observe(src, new)  # type: ignore[arg-type]
        alive = [t for t in alive if rng.random() > 0.5] + new
        nb.sync(src, alive)  # type: ignore[arg-type]
        assert nb.n == len(alive)
    cols = nb.sync(src, alive)  # type: ignore[arg-type]
    group = np.arange(nb.n, dtype=np.int64)
    on = np.ones(nb.n, dtype=bool)
    best, _ = nb.nearest(cols, on, group)
    X = np.stack([src.vec[t] for t in alive]).astype(np.float64)
    sims = X @ X.T
    np.fill_diagonal(sims, -np.inf)
    np.testing.assert_allclose(best, sims.max(axis=1), atol=1e-5)


# ---------------------------------------------------------------------------- through Memory


def _brute_nu(path: Path, user: str) -> dict[int, float]:
    """ν of every covered turn from the stored rows alone (plain numpy, float64)."""
    rows = item_rows(path, user)
    by_src = {r["source_id"]: i for i, r in rows.items() if r["kind"] == "turn" and r["source_id"] is not None}
    group: dict[int, int] = {}
    covered: set[int] = set()
    for i, r in rows.items():
        if r["status"] != "active" or pooled(r) is None:
            continue
        if r["kind"] == "segment":
            for t in r["members"]:
                if t in rows:
                    covered.add(t)
                    group[t] = i
        elif r["kind"] == "fact" and r["sources"] and r["sources"][-1] in by_src:
            covered.add(by_src[r["sources"][-1]])
    ids = sorted(covered)
    if not ids:
        return {}
    X = np.stack([np.frombuffer(rows[t]["embedding"], dtype=np.float32) for t in ids]).astype(np.float64)
    g = np.array([group.get(t, -1 - t) for t in ids])
    sims = X @ X.T
    sims[g[:, None] == g[None, :]] = -np.inf
    best = sims.max(axis=1)
    nu = np.where(np.isfinite(best), 1.0 - np.clip(best, 0.0, 1.0), 1.0)
    return dict(zip(ids, nu.tolist()))


def _incremental_nu(m: Memory, user: str) -> tuple[dict[int, float], Any]:
    """ν as the projection sees it now (every pooled item active), from the user's kept lists."""
    st = m._st  # (the projection is internal: read through the state of this handle)
    u = st.users[user]
    items, n_ep = pooled_items(st, u)
    proj = CoverageProjection(st, u, items, n_ep, T0)
    return proj.turn_novelty(), u.coverage


def _lines(rng: np.random.Generator, n: int, s: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        if rng.random() < 0.3:  # a line said before, word for word
            text = f"I love {CHAT_WORDS[int(rng.integers(0, 4))]} a lot."
        elif rng.random() < 0.2:
            text = f"I live in {['Paris', 'Oslo', 'Lima'][int(rng.integers(0, 3))]} now."
        else:
            text = " ".join(CHAT_WORDS[int(j)] for j in rng.integers(0, len(CHAT_WORDS), 6)) + f" {s}.{i}"
        out.append(
            {"speaker": "Ann" if i % 2 else "Ben", "text": text, "id": f"D{s}:{i}", "timestamp": T0 + s * DAY + 60 * i}
        )
    return out


@pytest.mark.parametrize("extra", [16, 1])
@pytest.mark.parametrize("seed", range(3))
def test_kept_lists_give_the_rule_novelty_across_sessions(
    seed: int, extra: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions with evictions, updates of turn texts, deletes and a reopen: after every
    end_session the novelty the projection reads from the kept lists equals a brute-force ν
    computed from the stored rows, and the capacities hold. ``extra`` = 1: lists barely longer
    than a leaf, so that they run dry and are listed anew often."""
    monkeypatch.setattr(retention, "_EXTRA", extra)
    rng = np.random.default_rng(seed)
    cfg = MemoryConfig(working_capacity=6, max_segment_turns=3, episodic_capacity=14, semantic_capacity=10)
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing", config=cfg)
    kept = None
    evicted = 0
    try:
        for s in range(14):
            ids = m.add(_lines(rng, int(rng.integers(4, 14)), s), user_id="u", session_id=f"s{s}")
            if s % 4 == 2:  # an archived turn of an earlier session says something else now
                turns = m.search("x", user_id="u", k=10_000, layers=["archive"])
                t = turns[int(rng.integers(0, len(turns)))]
                m.update(t.id, f"a new text {s} about {CHAT_WORDS[int(rng.integers(0, len(CHAT_WORDS)))]}", user_id="u")
            if s % 5 == 3:
                m.delete(ids[int(rng.integers(0, len(ids)))], user_id="u")
            if s == 8:
                m.close()
                m = Memory(path, embedder="hashing", config=cfg)
            evicted += m.end_session(user_id="u", session_id=f"s{s}").evicted
            got, nb = _incremental_nu(m, "u")
            if s not in (3, 8, 13) and kept is not None:
                assert nb is kept  # the same lists, kept up to date (no delete or reopen since)
            kept = nb
            want = _brute_nu(path, "u")
            assert got.keys() == want.keys()
            for t in want:
                assert got[t] == pytest.approx(want[t], abs=1e-5), t
            recs = item_rows(path, "u")
            n_e, n_s = (
                sum(1 for r in recs.values() if r["status"] == "active" and pooled(r) == x)
                for x in ("episodic", "semantic")
            )
            # (each pool within its capacity and what the other leaves unused: lend_capacity)
            assert n_e + n_s <= cfg.episodic_capacity + cfg.semantic_capacity
            assert n_e <= cfg.episodic_capacity + max(0, cfg.semantic_capacity - n_s)
            assert n_s <= cfg.semantic_capacity + max(0, cfg.episodic_capacity - n_e)
    finally:
        m.close()
    assert evicted > 0


def _plain_incidence(st: Any, u: Any, items: list[Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(item, turn) pairs of the rule read from the records now (no cache): the turns an item
    renders (a leaf its stored member turns, a fact its latest source turn) and the turns an
    aggregate's sources name, in item order."""
    raw: list[tuple[int, int]] = []
    agg: list[tuple[int, int]] = []
    for i, r in enumerate(items):
        if r.kind in ("segment", "fact"):
            ts = list(r.members) if r.kind == "segment" else ([u.by_src.get(r.sources[-1])] if r.sources else [])
            raw += [(i, t) for t in ts if t is not None and t in st.recs and t in st.vectors]
        else:
            agg += [(i, t) for t in (u.by_src.get(s) for s in r.sources) if t is not None]
    return raw, agg


class _Checked(CoverageProjection):
    """A projection that checks itself: its incidence (from the user's kept cache) against the
    rule read from the records, and its victims against a projection built from scratch (no
    kept incidence, no kept neighbour lists)."""

    runs = 0

    def __init__(self, st: Any, u: Any, items: list[Any], n_episodic: int, now: float, **kw: Any) -> None:
        super().__init__(st, u, items, n_episodic, now, **kw)
        self.args = (st, u, items, n_episodic, now)
        raw, agg = _plain_incidence(st, u, items)
        assert list(zip(self.raw_i.tolist(), self.col_ids[self.raw_t].tolist())) == raw
        assert list(zip(self.agg_i.tolist(), self.col_ids[self.agg_t].tolist())) == agg
        assert self.n_col == len(set(t for _, t in raw + agg))
        # each rendered turn's group: the active leaf holding it (u.seg_of), else the turn alone
        ids = self.col_ids[: self.n_raw].tolist()
        assert self.group.tolist() == [u.seg_of.get(t, -1 - t) for t in ids]

    def run(self) -> np.ndarray:
        st, u, items, n_ep, now = self.args
        kept = u.coverage, u.incidence
        u.coverage = u.incidence = None
        try:
            fresh = CoverageProjection(st, u, items, n_ep, now)
            want = fresh.run()
        finally:
            u.coverage, u.incidence = kept
        got = super().run()
        # Exactly: every similarity either side compares comes from one kernel with one
        # summation order (the bits of lamina.search.inner_products), so no rounding can swap
        # two victims, whatever the CPU, the SIMD path or the BLAS.
        assert got.tolist() == want.tolist(), (got, want)
        _Checked.runs += 1
        return got


def _replay_checked(seed: int, path: Path, cfg: MemoryConfig, sessions: int = 18) -> int:
    """Sessions with evictions, restated facts, updates and deletes (here and through a second
    handle, which this one catches up with), a source id said again and a reopen, every capacity
    projection a :class:`_Checked` one. Returns the number of items evicted."""
    rng = np.random.default_rng(100 + seed)
    m = Memory(path, embedder="hashing", config=cfg)
    evicted = 0
    try:
        for s in range(sessions):
            msgs = _lines(rng, int(rng.integers(4, 14)), s)
            if s % 6 == 4:  # a source id said again: its facts now render the new turn
                msgs.append({"speaker": "Ann", "text": f"I live in Rome now {s}.", "id": f"D{s - 2}:0"})
            ids = m.add(msgs, user_id="u", session_id=f"s{s}")
            if s % 4 == 2:  # an archived turn says something else now
                turns = m.search("x", user_id="u", k=10_000, layers=["archive"])
                t = turns[int(rng.integers(0, len(turns)))]
                m.update(t.id, f"a new text {s} about {CHAT_WORDS[int(rng.integers(0, len(CHAT_WORDS)))]}", user_id="u")
            if s % 5 == 3:  # a turn and what derives from it go
                m.delete(ids[int(rng.integers(0, len(ids)))], user_id="u")
            if s % 7 == 5:  # another handle changes the user: this one catches up (MemoryState.apply)
                other = Memory(path, embedder="hashing", config=cfg)
                try:
                    turns = other.search("x", user_id="u", k=10_000, layers=["archive"])
                    other.update(turns[0].id, f"changed elsewhere {s}", user_id="u")
                    other.delete(turns[-1].id, user_id="u")
                finally:
                    other.close()
            if s == 9:
                m.close()
                m = Memory(path, embedder="hashing", config=cfg)
            evicted += m.end_session(user_id="u", session_id=f"s{s}").evicted
            st = m._st
            u = st.users["u"]  # the tree's height, kept through the evictions, is the measured one
            assert u.max_depth == max((st.recs[i].depth for kids in u.children.values() for i in kids), default=0)
    finally:
        m.close()
    return evicted


@pytest.mark.parametrize("seed", range(4))
def test_kept_incidence_projects_like_a_fresh_one(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every projection's incidence, read from the kept cache, equals the rule's, and its
    victims are exactly those of a projection built from scratch (seed 2 once swapped two
    victims when the kept lists' similarities came from numpy's BLAS: on an Intel AVX-512 core,
    OPENBLAS_CORETYPE=SkylakeX, three of four victims differed)."""
    monkeypatch.setattr(retention, "CoverageProjection", _Checked)
    _Checked.runs = 0
    cfg = MemoryConfig(working_capacity=6, max_segment_turns=3, episodic_capacity=14, semantic_capacity=10)
    evicted = _replay_checked(seed, tmp_path / "m.db", cfg)
    assert evicted > 0 and _Checked.runs > 0


@settings(max_examples=10, deadline=None)
@given(
    seed=hst.integers(0, 2**31 - 1),
    segment=hst.integers(2, 5),
    episodic=hst.integers(4, 20),
    semantic=hst.integers(2, 12),
    lend=hst.booleans(),
)
def test_a_kept_projection_and_a_fresh_one_pick_the_same_victims(
    seed: int, segment: int, episodic: int, semantic: int, lend: bool
) -> None:
    """Property: for random stores (histories and capacities), the projection that reads the
    kept neighbour lists and incidence evicts exactly what one built from scratch evicts."""
    cfg = MemoryConfig(
        working_capacity=6,
        max_segment_turns=segment,
        episodic_capacity=episodic,
        semantic_capacity=semantic,
        lend_capacity=lend,
    )
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(retention, "CoverageProjection", _Checked)
        _Checked.runs = 0
        _replay_checked(seed, Path(d) / "m.db", cfg, sessions=10)
        assert _Checked.runs > 0
