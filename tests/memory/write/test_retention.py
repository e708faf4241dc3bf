"""Capacity projection Π_C (``MemoryConfig.eviction``): the most redundant items leave first,
aggregates before the raw text they summarise, visits protect, ties are deterministic and the
capacities hold exactly."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina import InvalidInput, Memory, MemoryConfig, SessionReport
from lamina.llm.extract import ExtractiveSummarizer, Fact, RuleFactExtractor, Turn
from lamina.memory.state.memstate import MemoryState
from lamina.memory.state.records import Record
from lamina.memory.state.tx import Models, Tx
from lamina.memory.store.sqlite import SQLiteStore
from lamina.memory.write.consolidate import dequeue
from lamina.memory.write.ingest import add_turns, parse_messages
from lamina.memory.write.retention import CoverageProjection, heat
from memkit import (
    DAY,
    FILLER,
    T0,
    active_leaves,
    chat,
    check_tree,
    day_session,
    everything,
    item_rows,
    leaf_texts,
    pooled,
    random_turns,
)

DIM = 16


def _unit(v: Sequence[float]) -> np.ndarray:
    x = np.asarray(v, dtype=np.float64)
    return x / np.linalg.norm(x)


def _e(i: int) -> np.ndarray:
    x = np.zeros(DIM)
    x[i] = 1.0
    return x


# Turn texts with hand-placed vectors: A and C are unique; B1 and B2 say nearly the same thing
# (cos = 1/sqrt(1.09) ≈ 0.958, novelty ≈ 0.042 each while both are active).
KNOWN = {
    "alpha": _unit(_e(0)),
    "bravo one": _unit(_e(1)),
    "bravo two": _unit(_e(1) + 0.3 * _e(2)),
    "charlie": _unit(_e(3)),
}


class Placed:
    """Hand-placed vectors for KNOWN texts (the memories embed a turn as its text alone:
    ``turn_vectors="text"``); anything else (summaries, fact sentences) hashes into dimensions
    8..15, away from the turns."""

    dim = DIM
    name = "placed-test-16"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            if t in KNOWN:
                out[i] = KNOWN[t]
            else:
                seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
                v = np.zeros(DIM)
                v[8:] = np.random.default_rng(seed).random(8) + 0.1
                out[i] = _unit(v)
        return out


class PerTurnFacts:
    """𝒜 that makes one multi-valued fact of every turn (its own predicate)."""

    def extract(self, turns: Sequence[Turn]) -> list[Fact]:
        return [
            Fact(
                subject=t.speaker or "x",
                predicate=f"said {t.text}",
                object=t.text,
                text=f"fact {t.text}",
                sources=(t.source_id,),
                timestamp=t.timestamp,
                functional=False,
            )
            for t in turns
        ]


def _session(m: Memory, s: int, texts: list[str]) -> SessionReport:
    t = T0 + s * DAY
    m.add(
        [{"speaker": "Ann", "text": x, "id": f"D{s}:{i}", "timestamp": t + 60 * i} for i, x in enumerate(texts)],
        user_id="u",
        session_id=f"s{s}",
    )
    return m.end_session(user_id="u", session_id=f"s{s}")


def _capped(path: Path, **capacities: int) -> Memory:
    """A file memory (hashing embedder) with these capacities and none lent between layers."""
    return Memory(path, embedder="hashing", config=MemoryConfig(lend_capacity=False, **capacities))


def _episodic_cfg(**kw: object) -> MemoryConfig:
    base = dict(
        turn_vectors="text",
        working_capacity=8,
        min_segment_turns=1,
        max_segment_turns=1,
        episodic_capacity=3,
        layers=("working", "episodic"),
        lend_capacity=False,  # (C_e alone: the unused semantic capacity is not lent)
    )
    base.update(kw)
    return MemoryConfig(**base)  # type: ignore[arg-type]


def _summaries(m: Memory) -> list[Any]:
    return [it for it in everything(m, "u", "episodic") if it.kind == "summary"]


def test_redundant_leaf_goes_before_unique_ones_and_summaries_first() -> None:
    m = Memory(embedder=Placed(), config=_episodic_cfg())
    _session(m, 1, ["alpha", "bravo one"])
    rep = _session(m, 2, ["bravo two", "charlie"])
    # 4 leaves + 2 session summaries over C_e = 3: both summaries (their turns are all still in
    # leaves) and one of the two near-duplicate leaves go; the unique old leaf stays.
    assert rep.evicted == 3
    assert _summaries(m) == []  # (the tree node over the two bravos was spliced out with its child)
    kept = leaf_texts(m)
    assert kept == {"alpha", "bravo two", "charlie"}  # equal value: the less recently used goes
    st = m.stats(user_id="u")
    assert st.archive_turns == 4 and st.evicted == 4  # eviction never touches the archive
    m.close()


def test_capacity_eviction_never_touches_archive(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = _capped(p, working_capacity=4, episodic_capacity=3, max_segment_turns=2)
    n = 0
    for s in range(4):
        n += len(day_session(m, s, FILLER))
    st = m.stats(user_id="u")
    assert st.evicted > 0 and st.archive_turns == n == 24
    recs = item_rows(p)
    assert sum(1 for r in recs.values() if r["status"] == "active" and pooled(r) == "episodic") == 3
    assert st.evicted == sum(1 for r in recs.values() if r["status"] == "evicted")
    assert len(m.search("bakery croissants", user_id="u", k=50, layers=["archive"])) == n
    m.close()


def test_heat_rule_evicts_by_age_for_contrast() -> None:
    m = Memory(embedder=Placed(), config=_episodic_cfg(eviction="heat"))
    _session(m, 1, ["alpha", "bravo one"])
    _session(m, 2, ["bravo two", "charlie"])
    assert "alpha" not in leaf_texts(m)  # the old rule drops the oldest unique leaf
    m.close()


def test_visits_protect_a_redundant_item() -> None:
    # (only the turn above the floor is shown and visited: not the turns past it)
    m = Memory(embedder=Placed(), config=_episodic_cfg(fill_past_floor=False))
    _session(m, 1, ["alpha", "bravo one"])
    (leaf,) = [it for it in active_leaves(m) if it.text.endswith("bravo one")]
    for _ in range(2):  # retrieved twice: the turn is shown through its episode, which is heated
        ctx = m.context("bravo one", user_id="u", budget=8, now=T0 + 1.5 * DAY)
        assert [it.sources for it in ctx.items] == [("D1:1",)]
    assert m.get(leaf.id).access_count == 2
    _session(m, 2, ["bravo two", "charlie"])
    assert leaf_texts(m) == {"alpha", "bravo one", "charlie"}
    m.close()


def test_exact_ties_are_deterministic() -> None:
    kept = []
    for _ in range(2):
        m = Memory(embedder=Placed(), config=_episodic_cfg(eviction_tiebreak=0.0))
        _session(m, 1, ["alpha", "bravo one"])
        _session(m, 2, ["bravo two", "charlie"])
        kept.append(leaf_texts(m))
        m.close()
    # no recency term: equal values tie exactly and the newer item goes
    assert kept[0] == kept[1] == {"alpha", "bravo one", "charlie"}


def _all_facts(m: Memory, seen: dict[int, str]) -> dict[int, str]:
    for f in m.facts(user_id="u", current=False):
        seen[f.id] = f.object or ""
    return seen


def _semantic_pool() -> Memory:
    """Turns straight to facts (one per turn) in a semantic layer of 3."""
    cfg = MemoryConfig(
        turn_vectors="text",
        working_capacity=8,
        semantic_capacity=3,
        layers=("working", "semantic"),
        lend_capacity=False,
    )
    return Memory(embedder=Placed(), config=cfg, fact_extractor=PerTurnFacts())


def test_semantic_pool_keeps_the_unique_facts() -> None:
    m = _semantic_pool()
    _session(m, 1, ["alpha", "bravo one"])
    made = _all_facts(m, {})
    rep = _session(m, 2, ["bravo two", "charlie"])
    made = _all_facts(m, made)
    current = {f.id: f.object for f in m.facts(user_id="u")}
    assert set(current.values()) == {"alpha", "bravo two", "charlie"}
    assert rep.evicted == 1 and m.stats(user_id="u").evicted == 1
    (gone,) = set(made) - set(current)
    assert made[gone] == "bravo one"
    assert m.get(gone).object == "bravo one"  # an evicted fact is still there by id
    m.close()


def test_a_fact_restated_counts_as_use() -> None:
    m = _semantic_pool()
    _session(m, 1, ["alpha", "bravo one", "bravo one"])  # the second "bravo one" reinforces the fact
    assert [f.strength for f in m.facts(user_id="u") if f.object == "bravo one"] == [2.0]
    _session(m, 2, ["bravo two", "charlie"])
    assert {f.object for f in m.facts(user_id="u")} == {"alpha", "bravo one", "charlie"}
    m.close()


def test_heat_formula() -> None:
    cfg = MemoryConfig(heat_a=2.0, heat_b=0.5, heat_c=3.0, heat_mu=100.0)
    st = MemoryState(cfg, 4)
    recs = [
        Record(
            id=1,
            user_id="u",
            layer="episodic",
            kind="segment",
            text="a",
            seq=1,
            access_count=3,
            interaction_len=4.0,
            last_access=900.0,
        ),
        Record(id=2, user_id="u", layer="episodic", kind="segment", text="b", seq=2),  # never accessed: now
    ]
    got = heat(st, recs, 1000.0)
    want = [2.0 * 3 + 0.5 * 4 + 3.0 * math.exp(-100.0 / 100.0), 3.0]
    assert got.dtype == np.float32 and got.tolist() == pytest.approx(want, rel=1e-5)


def test_hot_episodes_are_promoted_to_notes() -> None:
    # a two-turn leaf has heat 0.5·2 + exp(0) = 2 at the end of its session: above τ = 1.5
    m = Memory(embedder="hashing", config=MemoryConfig(promote_threshold=1.5, min_segment_turns=2, max_segment_turns=2))
    chat(m, "u", "s", FILLER, T0, "D")
    rep = m.end_session(user_id="u", session_id="s")
    leaves = active_leaves(m)
    notes = [it for it in everything(m, "u", "semantic") if it.kind == "note"]
    assert rep.promoted == len(leaves) == len(notes) == 3 and m.stats(user_id="u").kinds["note"] == 3
    assert sorted(n.sources for n in notes) == sorted(leaf.sources for leaf in leaves)
    assert sorted(n.text for n in notes) == sorted(leaf.summary for leaf in leaves)
    # promotion cools the leaf down (no visits, no interaction length left): not promoted again
    assert all(m.get(leaf.id).access_count == 0 for leaf in leaves)
    chat(m, "u", "t", [("Alice", "One more line.")], T0 + DAY, "E")
    assert m.end_session(user_id="u", session_id="t").promoted == 0
    m.close()


def test_one_child_tree_nodes_are_spliced_out(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = _capped(p, episodic_capacity=12, max_segment_turns=3, min_segment_turns=2)
    rng = random.Random(5)
    for s in range(25):
        day_session(m, s, random_turns(rng, 8))
    assert m.stats(user_id="u").evicted > 0
    tree = check_tree(p, "u")
    for node in (r for r in tree if r["kind"] == "summary"):
        kids = [r for r in tree if r["parent_id"] == node["id"]]
        assert len(kids) >= 2, f"internal node {node['id']} has {len(kids)} child"
    m.close()


LIVES = ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Doha", "Baku", "Riga"]
HOBBIES = ["chess", "tennis", "painting", "sailing", "baking", "climbing", "poetry", "jazz"]


@pytest.mark.parametrize("eviction", ["coverage", "heat"])
@pytest.mark.parametrize("lend", [False, True])
@pytest.mark.parametrize("c_e,c_s", [(2, 1), (3, 2), (5, 4), (1, 6)])
def test_capacities_hold_exactly(c_e: int, c_s: int, lend: bool, eviction: str, tmp_path: Path) -> None:
    cfg = MemoryConfig(
        working_capacity=4,
        max_segment_turns=2,
        episodic_capacity=c_e,
        semantic_capacity=c_s,
        lend_capacity=lend,
        eviction=eviction,  # type: ignore[arg-type]
    )
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing", config=cfg)
    rng = np.random.default_rng(c_e * 10 + c_s)
    gone: set[int] = set()
    for s in range(8):
        texts = []
        for _ in range(int(rng.integers(2, 7))):
            k = int(rng.integers(0, 3))
            texts.append(
                [
                    f"I live in {LIVES[int(rng.integers(0, 8))]} now.",
                    f"I love {HOBBIES[int(rng.integers(0, 8))]} a lot.",
                    f"We talked about the weather on day {int(rng.integers(0, 99))}.",
                ][k]
            )
        rep = _session(m, s, texts)
        recs = item_rows(path)
        newly = {i: r for i, r in recs.items() if r["status"] == "evicted" and i not in gone}
        n = {
            x: sum(1 for r in recs.values() if r["status"] == "active" and pooled(r) == x)
            for x in ("episodic", "semantic")
        }
        # each pool's own capacity, and with lending the part of the other's that it leaves unused
        cap = {"episodic": c_e, "semantic": c_s}
        if lend:
            cap = {"episodic": c_e + max(0, c_s - n["semantic"]), "semantic": c_s + max(0, c_e - n["episodic"])}
        assert n["episodic"] + n["semantic"] <= c_e + c_s
        n_pooled_evicted = 0
        for layer in ("episodic", "semantic"):
            after = n[layer]
            out = sum(1 for r in newly.values() if pooled(r) == layer)
            n_pooled_evicted += out
            assert after == min(cap[layer], after + out)  # never above C, and nothing evicted below it
        assert rep.evicted == n_pooled_evicted
        gone |= set(newly)
    assert gone  # the capacities did bind
    assert m.stats(user_id="u").evicted == len(gone)
    m.close()


def test_eviction_config_is_validated() -> None:
    with pytest.raises(InvalidInput, match="eviction"):
        MemoryConfig(eviction="lru")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="eviction_tiebreak"):
        MemoryConfig(eviction_tiebreak=-1.0)
    with pytest.raises(TypeError, match="eviction_tiebreak"):
        MemoryConfig(eviction_tiebreak="0")  # type: ignore[arg-type]


class Clustered:
    """``t<i>`` texts: the first ``n_dup`` are noisy copies of one direction, the rest random."""

    name = "clustered-test-64"
    dim = 64

    def __init__(self, n: int, n_dup: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        base = _unit(rng.standard_normal(self.dim))
        self.vec = {}
        for i in range(n):
            v = base + 0.15 * rng.standard_normal(self.dim) if i < n_dup else rng.standard_normal(self.dim)
            self.vec[f"t{i}"] = _unit(v).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            key = t.split(": ", 1)[-1]
            if key in self.vec:
                out[i] = self.vec[key]
            else:
                seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
                out[i] = _unit(np.random.default_rng(seed).standard_normal(self.dim))
        return out


def _reference_projection(
    vecs: np.ndarray, last: np.ndarray, now: float, cap: int, eps: float, mu: float, summary: bool = True
) -> set[int]:
    """Plain numpy Π_C for one session of one-turn leaves (rows 0..n-1), with its summary (row n;
    ``last`` has n + 1 entries) or without: exact nearest neighbours every round, ⌈excess/2⌉
    evicted per round."""
    n = len(vecs)
    m = n + 1 if summary else n
    active = np.ones(m, dtype=bool)
    rec = np.exp(-(now - last) / mu)
    while active.sum() > cap:
        excess = int(active.sum()) - cap
        on = np.flatnonzero(active[:n])
        sims = vecs[on] @ vecs[on].T
        np.fill_diagonal(sims, -np.inf)
        best = sims.max(axis=1) if len(on) > 1 else np.full(len(on), -np.inf)
        value = np.zeros(m)
        value[on] = np.where(np.isfinite(best), 1.0 - np.clip(best, 0.0, 1.0), 1.0)
        if summary:
            value[n] = 1.0 - len(on) / n  # the summary: share of its turns no leaf renders any more
        score = (value + eps * rec).astype(np.float32)
        cand = [i for i in range(m) if active[i]]
        cand.sort(key=lambda i: (score[i], -i))  # lower score first, then the larger index
        for i in cand[: (excess + 1) // 2]:
            active[i] = False
    return set(np.flatnonzero(~active).tolist())


N, N_DUP, CAP = 44, 30, 9


def _cfg() -> MemoryConfig:
    # (turn_vectors="text": each turn's vector is the clustered one the reference reads)
    return MemoryConfig(
        turn_vectors="text",
        working_capacity=64,
        min_segment_turns=1,
        max_segment_turns=1,
        episodic_capacity=CAP,
        layers=("working", "episodic"),
        lend_capacity=False,
    )


def _messages() -> list[dict[str, Any]]:
    # a day between turns, so that the recency term separates mutual nearest neighbours (whose
    # values tie exactly) by more than float32 rounding
    return [{"speaker": "Ann", "text": f"t{i}", "id": f"D1:{i}", "timestamp": T0 + DAY * i} for i in range(N)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_projection_matches_a_plain_numpy_reference(seed: int, tmp_path: Path) -> None:
    emb = Clustered(N, N_DUP, seed)
    cfg = _cfg()
    path = tmp_path / "m.db"
    m = Memory(path, embedder=emb, config=cfg)
    m.add(_messages(), user_id="u", session_id="s1")
    now = T0 + DAY * (N + 1)
    rep = m.end_session(user_id="u", session_id="s1", now=now)
    recs = item_rows(path)
    leaves = sorted((r for r in recs.values() if r["kind"] == "segment"), key=lambda r: r["id"])
    (summary,) = [r for r in recs.values() if r["kind"] == "summary" and r["parent_id"] == -1]
    assert [r["text"] for r in leaves] == [f"Ann: t{i}" for i in range(N)] and summary["id"] > leaves[-1]["id"]
    vecs = np.stack([emb.vec[f"t{i}"] for i in range(N)]).astype(np.float64)
    last = np.array([r["last_access"] for r in leaves] + [summary["last_access"]])
    want = _reference_projection(vecs, last, now, CAP, cfg.eviction_tiebreak, cfg.heat_mu)
    got = {i for i, r in enumerate(leaves) if r["status"] == "evicted"} | (
        {N} if summary["status"] == "evicted" else set()
    )
    assert got == want
    assert len(got) == N + 1 - CAP == rep.evicted
    assert sum(1 for r in leaves[:N_DUP] if r["status"] == "active") <= 1  # of the near-copies, one at most stays
    m.close()


def _leaf_state(emb: Clustered, cfg: MemoryConfig) -> tuple[MemoryState, Any, list[Record]]:
    """A memory state with one session of N one-turn leaves (ingest + dequeue under one Tx)."""
    store = SQLiteStore(None)
    st = MemoryState(cfg, emb.dim)
    models = Models(emb.embed, ExtractiveSummarizer(emb.embed), RuleFactExtractor())
    msgs = parse_messages(_messages())
    with store.tx():
        tx = Tx(store, st)
        add_turns(tx, models, msgs, emb.embed([x.text for x in msgs]), "u", "s1")
        u = st.users["u"]
        dequeue(tx, models, u, "s1", N)
        tx.commit()
    leaves = sorted((r for r in st.recs.values() if r.kind == "segment"), key=lambda r: r.id)
    return st, u, leaves


@pytest.mark.parametrize("seed,k_turn", [(2, 2), (3, 2), (4, 2), (4, N), (4, 18)])
def test_coverage_projection_relists_exhausted_neighbours(seed: int, k_turn: int) -> None:
    """CoverageProjection on its own: with each turn listing only its nearest neighbour
    (k_turn = 2: itself and one), rounds outlive the lists and the neighbours are listed anew;
    with k_turn = N every list holds every turn; with 18, a list runs dry only once fewer turns
    than 18 remain (the regression: such a list was not listed anew). The result equals the
    reference."""
    emb = Clustered(N, N_DUP, seed)
    cfg = _cfg()
    st, u, leaves = _leaf_state(emb, cfg)
    assert [r.text for r in leaves] == [f"Ann: t{i}" for i in range(N)]
    now = T0 + DAY * (N + 1)
    assert CoverageProjection(st, u, leaves, len(leaves), now).k_turn == cfg.max_segment_turns + 1 + 16
    proj = CoverageProjection(st, u, leaves, len(leaves), now, k_turn=k_turn)
    assert proj.k_turn == k_turn
    got = set(proj.run().tolist())
    vecs = np.stack([emb.vec[f"t{i}"] for i in range(N)]).astype(np.float64)
    last = np.array([r.last_access for r in leaves])
    assert got == _reference_projection(vecs, last, now, CAP, cfg.eviction_tiebreak, cfg.heat_mu, summary=False)
    assert len(got) == N - CAP
    if k_turn == 2:
        assert proj.nb.relisted > 0  # some turn outlived its listed neighbours: they were listed anew
    if k_turn == N:
        assert proj.nb.relisted == 0


def test_a_pool_borrows_the_capacity_the_other_leaves_unused(tmp_path: Path) -> None:
    """``lend_capacity``: while the semantic pool holds no facts the episodic pool keeps up to
    C_e + C_s items, and it gives the lent slots back as facts fill the semantic pool; without
    lending it never holds more than C_e."""
    sessions = [
        [f"We talked about the weather on day {i}." for i in range(6)],
        [f"We talked about the weather on day {i}." for i in range(6, 12)],
        [f"I love {h} a lot." for h in HOBBIES[:3]],
        [f"I love {h} a lot." for h in HOBBIES[3:6]],
    ]
    counts = {}
    for lend in (True, False):
        cfg = MemoryConfig(
            working_capacity=4, max_segment_turns=2, episodic_capacity=3, semantic_capacity=4, lend_capacity=lend
        )
        path = tmp_path / f"m{lend}.db"
        m = Memory(path, embedder="hashing", config=cfg)
        seen = []
        for s, texts in enumerate(sessions):
            _session(m, s, texts)
            recs = item_rows(path).values()
            seen.append(
                tuple(
                    sum(1 for r in recs if r["status"] == "active" and pooled(r) == x) for x in ("episodic", "semantic")
                )
            )
        counts[lend] = seen
        m.close()
    # (episodic, semantic) after each session: 4 leaves and session summaries, then 7 = C_e + C_s
    # while no fact exists; the facts take their capacity back (3 facts: C_e + 1; 4: C_e)
    assert counts[True] == [(4, 0), (7, 0), (4, 3), (3, 4)]
    assert counts[False] == [(3, 0), (3, 0), (3, 3), (3, 4)]


def test_lend_capacity_is_validated() -> None:
    with pytest.raises(TypeError, match="lend_capacity"):
        MemoryConfig(lend_capacity=1)  # type: ignore[arg-type]
