"""Consolidation (lamina.memory.write.consolidate): segments, MemTree insertion, summaries ψ, the
session summary and its EMA blend (eq. 5), the α decay, end_session reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lamina import Memory, MemoryConfig, SessionReport
from lamina.llm.extract import ExtractiveSummarizer, Turn
from lamina.memory.state.memstate import MemoryState
from lamina.memory.state.turnvec import turn_texts, turn_vectors
from lamina.memory.state.tx import Tx
from lamina.memory.store.sqlite import SQLiteStore
from lamina.memory.write.consolidate import segments
from memkit import DAY, FILLER, T0, active_leaves, chat, check_tree, day_session, item_rows, rows, unit


def _segments(embs: list[list[float]], **cfg: object) -> list[list[int]]:
    st = MemoryState(MemoryConfig(**cfg), len(embs[0]))  # type: ignore[arg-type]
    tx = Tx(SQLiteStore(None), st)
    return segments(tx, np.asarray([unit(e) for e in embs], dtype=np.float32))


E0, E1, E2 = [1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]


def test_segments_cut_by_similarity_to_the_running_centroid() -> None:
    assert _segments([E0, E0, E0, E1, E1, E2]) == [[0, 1, 2], [3, 4, 5]]  # a short tail joins the last segment
    assert _segments([E0, E0, E1, E1, E2, E2]) == [[0, 1], [2, 3], [4, 5]]
    # below min_segment_turns a turn joins whatever its similarity
    assert _segments([E0, E1, E1], min_segment_turns=2) == [[0, 1, 2]]
    assert _segments([E0, E1, E2], min_segment_turns=1) == [[0], [1], [2]]
    # max_segment_turns cuts similar runs; a tail that would overflow stays on its own
    assert _segments([E0] * 7, max_segment_turns=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert _segments([E0] * 7, max_segment_turns=3, min_segment_turns=1) == [[0, 1, 2], [3, 4, 5], [6]]
    # the threshold: cos(E0 + 0.5·E1, centroid E0) ≈ 0.89
    near = [1.0, 0.5, 0, 0]
    assert _segments([E0, E0, near], segment_threshold=0.85) == [[0, 1, 2]]
    assert _segments([E0, E0, near, near], segment_threshold=0.95) == [[0, 1], [2, 3]]


def test_leaves_hold_their_turns_and_summaries(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = Memory(
        p, embedder="hashing", config=MemoryConfig(working_capacity=16, min_segment_turns=2, max_segment_turns=3)
    )
    ids = chat(m, "u", "s1", FILLER, T0, "D1")
    rep = m.end_session(user_id="u", session_id="s1")
    recs = item_rows(p)
    leaves = sorted((r for r in recs.values() if r["kind"] == "segment"), key=lambda r: r["id"])
    assert [x for r in leaves for x in r["members"]] == ids  # every turn in exactly one leaf, in order
    assert all(2 <= len(r["members"]) <= 3 for r in leaves)
    summ = ExtractiveSummarizer(m.embedder.embed)
    for r in leaves:
        turns = [recs[i] for i in r["members"]]
        assert r["text"] == "\n".join(f"{t['speaker']}: {t['text']}" for t in turns)
        assert r["sources"] == tuple(t["source_id"] for t in turns)
        assert r["summary"] == summ.summarize(
            [Turn(t["source_id"], t["speaker"], t["text"], t["timestamp"]) for t in turns], 60
        )
        assert r["timestamp"] == turns[-1]["timestamp"] and r["created_at"] == turns[0]["timestamp"]
        assert r["interaction_len"] == len(turns) and r["session_id"] == "s1"
    # the session summary: ψ of all its turns, outside the tree (parent -1)
    (s,) = [r for r in recs.values() if r["kind"] == "summary" and r["parent_id"] == -1]
    assert s["sources"] == tuple(f"D1:{i}" for i in range(6)) and s["interaction_len"] == 6
    assert s["text"] == summ.summarize([Turn(f"D1:{i}", sp, tx) for i, (sp, tx) in enumerate(FILLER)], 60)
    # the report: net new active episodic items (leaves, tree nodes, the summary)
    n_episodic = sum(1 for r in recs.values() if r["layer"] == "episodic" and r["status"] == "active")
    assert rep == SessionReport(segments=n_episodic, facts=0, promoted=0, evicted=0, blend_drift=0.0)
    assert {it.id for it in active_leaves(m)} == {r["id"] for r in leaves}
    m.close()


def test_memtree_structure_invariants(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2, tree_theta0=0.05))
    for s in range(3):
        day_session(m, s, FILLER + [("Alice", f"I went hiking at trail {s}.")])
    tree = check_tree(p, "u")
    internal = [r for r in tree if r["kind"] == "summary"]
    assert internal  # some internal node exists with θ0 this low
    recs = item_rows(p, "u")
    by_src = {r["source_id"]: r for r in recs.values() if r["kind"] == "turn"}
    summ = ExtractiveSummarizer()
    for node in internal:  # an internal node: ψ of the turns its children quote, quoting some
        kids = [r for r in tree if r["parent_id"] == node["id"]]
        assert len(kids) >= 2
        turns = sorted({by_src[s]["id"]: by_src[s] for k in kids for s in k["sources"]}.values(), key=lambda t: t["id"])
        tv = np.stack([np.frombuffer(t["embedding"], dtype=np.float32) for t in turns])
        views = [Turn(t["source_id"], t["speaker"], t["text"], t["timestamp"], v) for t, v in zip(turns, tv)]
        text, quoted = summ.summarize_sourced(views, 60)
        assert node["text"] == node["summary"] == text
        # its provenance: the quoted turns (as short as its summary); its vector: their centroid
        assert node["sources"] == tuple(turns[i]["source_id"] for i in quoted)
        np.testing.assert_allclose(
            np.frombuffer(node["embedding"], dtype=np.float32), unit(tv[quoted].mean(axis=0)), atol=1e-6
        )
    m.close()


def test_ema_blend_of_the_session_summary(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", config=MemoryConfig(alpha=0.9, blend_threshold=0.5))
    chat(m, "u", "s1", FILLER, T0, "D1")
    r1 = m.end_session(user_id="u", session_id="s1")
    assert r1.blend_drift == 0.0  # nothing to blend into
    (first,) = rows(p, "SELECT id, text, embedding FROM items WHERE kind='summary' AND parent_id=-1")
    P = np.frombuffer(first["embedding"], dtype=np.float32).astype(np.float64)
    s2 = FILLER[:5] + [("Bob", "And who wrote it?")]
    chat(m, "u", "s2", s2, T0 + DAY, "D2")
    r2 = m.end_session(user_id="u", session_id="s2")
    both = rows(p, "SELECT id, text, embedding FROM items WHERE kind='summary' AND parent_id=-1 ORDER BY id")
    assert [b["id"] for b in both][0] == first["id"] and len(both) == 2
    # ŝ's vector: the centroid of the session's turn vectors (the summary is not embedded)
    s_new = turn_vectors(m.embedder.embed, [(tx, sp) for sp, tx in s2]).astype(np.float64).mean(axis=0)
    s_new /= np.linalg.norm(s_new)
    np.testing.assert_allclose(np.frombuffer(both[1]["embedding"], dtype=np.float32), s_new, atol=1e-6)
    assert float(P @ s_new) >= 0.5  # similar enough to blend
    want = 0.9 * P + 0.1 * s_new
    want /= np.linalg.norm(want)
    blended = np.frombuffer(both[0]["embedding"], dtype=np.float32)
    np.testing.assert_allclose(blended, want, atol=1e-6)  # stored: α·e + (1−α)·ŝ, renormalised
    assert r2.blend_drift == pytest.approx(float(np.sum((want - P) ** 2)), rel=1e-4)
    assert np.frombuffer(both[1]["embedding"], dtype=np.float32) == pytest.approx(s_new, abs=1e-6)
    m.close()


def test_alpha_decays_earlier_episodes(tmp_path: Path) -> None:
    m = Memory(tmp_path / "m.db", embedder="hashing", config=MemoryConfig(alpha=0.8))
    chat(m, "u", "s1", FILLER, T0, "D1")
    m.end_session(user_id="u", session_id="s1")
    first = active_leaves(m)
    assert first and all(it.strength == 1.0 for it in first)
    chat(m, "u", "s2", [("Alice", "A different topic: volcanoes and lava.")] * 2, T0 + DAY, "D2")
    m.end_session(user_id="u", session_id="s2")
    assert [m.get(it.id).strength for it in first] == pytest.approx([0.8] * len(first))
    chat(m, "u", "s3", [("Bob", "Chess openings are fun.")] * 2, T0 + 2 * DAY, "D3")
    m.end_session(user_id="u", session_id="s3")
    assert [m.get(it.id).strength for it in first] == pytest.approx([0.64] * len(first))
    m.close()


def test_lazy_decay_matches_the_eager_rule(tmp_path: Path) -> None:
    """The α decay is lazy (two counters per consolidation, no row written); every item's
    strength must still be what decaying every active episodic item of the user's other sessions
    at each consolidation gives: items evicted in a consolidation take that decay and no more,
    a re-opened session's items skip its later consolidations too, and reopening keeps it."""
    path = tmp_path / "m.db"
    cfg = MemoryConfig(alpha=0.7, episodic_capacity=5, working_capacity=4, lend_capacity=False)
    want: dict[int, float] = {}  # item id -> expected strength
    plan = ["s1", "s2", "s1", "s3", "s2", "s4", "s1", "s5"]  # s1 and s2 re-opened
    m = Memory(path, embedder="hashing", config=cfg)
    for step, sid in enumerate(plan):
        lines = [FILLER[(step + j) % len(FILLER)] for j in range(3)] + [("Alice", f"Topic number {step} today.")]
        chat(m, "u", sid, lines, T0 + step * DAY, f"D{step}")
        before = {it.id: it for it in m.search("x", user_id="u", k=500, layers=["episodic"])}
        m.end_session(user_id="u", session_id=sid)
        for iid, it in before.items():  # active at the decay (those of this session skip it)
            want[iid] = want.get(iid, it.strength) * (1.0 if it.session_id == sid else 0.7)
        for it in m.search("x", user_id="u", k=500, layers=["episodic"]):
            want.setdefault(it.id, 1.0)  # made by this consolidation
        got = {iid: m.get(iid).strength for iid in want}
        assert got == pytest.approx(want, rel=1e-9)
        if step == 4:
            m.close()
            m = Memory(path, embedder="hashing", config=cfg)
    assert min(want.values()) < 0.7**2  # (several decays happened)
    rows = item_rows(path)
    assert any(r["status"] == "evicted" for r in rows.values())  # (evictions happened)
    m.close()


def test_end_session_reports_and_repeats(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing")
    chat(
        m,
        "u",
        "s",
        [("Alice", "I moved to Paris last week."), ("Alice", "My dog is called Max.")] + FILLER[:2],
        T0,
        "D",
    )
    rep = m.end_session(user_id="u", session_id="s", now=T0 + 3600)
    assert rep.facts == 2 and rep.promoted == 0 and rep.evicted == 0
    assert rep.to_dict() == {
        "segments": rep.segments,
        "facts": 2,
        "promoted": 0,
        "evicted": 0,
        "blend_drift": 0.0,
        "purged": 0,
    }
    assert rows(p, "SELECT status, ended_at FROM sessions") == [{"status": "ended", "ended_at": T0 + 3600}]
    # ending an ended session again does nothing
    before = item_rows(p)
    assert m.end_session(user_id="u", session_id="s") == SessionReport()
    assert item_rows(p) == before
    # without ``now`` the session ends at its last turn's time
    chat(m, "u", "t", FILLER[2:4], T0 + DAY, "E")
    m.end_session(user_id="u", session_id="t")
    assert rows(p, "SELECT ended_at FROM sessions WHERE session_id='t'") == [{"ended_at": T0 + DAY + 60}]
    m.close()


def test_layers_ablation_writes_only_the_layers_in_use() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working",)))
    chat(m, "u", "s", [("Alice", "I moved to Paris last week.")] + FILLER, T0, "D")
    rep = m.end_session(user_id="u", session_id="s")
    st = m.stats(user_id="u")
    assert rep == SessionReport() and st.archive_turns == 7 and st.layers["archive"] == 7
    assert st.layers["episodic"] == st.layers["semantic"] == 0
    m2 = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working", "episodic")))
    chat(m2, "u", "s", [("Alice", "I moved to Paris last week.")] + FILLER, T0, "D")
    m2.end_session(user_id="u", session_id="s")
    assert m2.stats(user_id="u").layers["semantic"] == 0 and m2.facts(user_id="u") == []
    assert m2.stats(user_id="u").layers["episodic"] > 0
    m.close()
    m2.close()


def test_the_loop_embeds_the_turns_facts_and_profiles_only() -> None:
    """Summaries (segments, tree nodes, sessions) and notes embed nothing: each distinct text is
    embedded once, and the texts besides the turns' own (:func:`lamina.memory.state.turnvec.turn_texts`:
    the speaker-prefixed turn and its sentences) are facts and profiles."""
    from lamina.cli.demo import generate
    from lamina.embedders import get_embedder

    inner = get_embedder("hashing")
    seen: list[str] = []

    class Counting:
        dim, name = inner.dim, inner.name

        def embed(self, texts: list[str]) -> np.ndarray:
            seen.extend(texts)
            return inner.embed(texts)

    conv = generate(1, 8, 24, seed=5)[0]
    m = Memory(embedder=Counting(), config=MemoryConfig(episodic_capacity=30, semantic_capacity=30))
    of_turns: set[str] = set()
    for sid, msgs in conv.sessions:
        m.add(msgs, user_id=conv.user_id, session_id=sid)
        m.end_session(user_id=conv.user_id, session_id=sid)
        of_turns.update(t for x in msgs for t in turn_texts(str(x["text"])))
        of_turns.update(str(x["speaker"]) for x in msgs)
    turns = sum(len(msgs) for _, msgs in conv.sessions)
    assert m.stats().archive_turns == turns and m.stats(user_id=conv.user_id).layers["episodic"] > 0
    assert len(seen) == len(set(seen))  # each distinct text once
    others = [t for t in seen if t not in of_turns]
    speakers = {str(x["speaker"]) for _, msgs in conv.sessions for x in msgs}
    # facts' sentences, profiles ("Subject: ...") and objects compared by Resolve: never a
    # summary (which quotes "Speaker: sentence" more than once)
    assert all(sum(t.count(f"{sp}: ") for sp in speakers) <= 1 for t in others), others
    assert len(others) <= turns // 4, (len(others), turns)
    m.close()


def test_node_provenance_is_what_it_quotes(tmp_path: Path) -> None:
    """A tree node's sources are the turns its summary quotes: bounded by the summary's length
    however large its subtree grows; deleting a turn takes the nodes that quote it (and its
    leaf), while an ancestor that does not quote it stays, still summarising its other turns."""
    p = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4, max_segment_turns=2, tree_theta0=0.05, summary_words=12)
    m = Memory(p, embedder="hashing", config=cfg)
    for s in range(12):
        lines = [(("Alice", "Bob")[j % 2], f"{LINES_X[(s + j) % len(LINES_X)]} Note {s}-{j}.") for j in range(8)]
        day_session(m, s, lines)
    tree = check_tree(p, "u")
    nodes = [r for r in tree if r["kind"] == "summary"]
    leaves = [r for r in tree if r["kind"] == "segment"]
    assert len(leaves) > 20 and max(r["depth"] for r in tree) >= 3
    for r in nodes:  # each quoted turn gives at least one of the summary's 12 words
        assert 1 <= len(r["sources"]) <= 12, r["sources"]
    # a turn quoted by a node of depth >= 2, and an ancestor of its leaf that does not quote it
    parent = {r["id"]: r["parent_id"] for r in tree}
    seg_of = {s: r["id"] for r in leaves for s in r["sources"]}
    byid = {r["id"]: r for r in tree}
    case = None
    for r in nodes:
        for src in r["sources"]:
            a, chain = parent.get(seg_of.get(src, -1)), []
            while a in byid:
                chain.append(byid[a])
                a = parent[a]
            keep = [x for x in chain if src not in x["sources"]]
            if keep:
                case = (src, keep)
                break
        if case:
            break
    assert case is not None
    src, keep = case
    (turn,) = [r for r in item_rows(p, "u").values() if r["source_id"] == src]
    quoting = {r["id"] for r in tree if src in r["sources"]}
    rep = m.delete(turn["id"], user_id="u")
    assert quoting <= set(rep.ids) and not {x["id"] for x in keep} & set(rep.ids)
    after = item_rows(p, "u")
    assert all(after[x["id"]]["status"] == "active" for x in keep)
    assert not [r for r in after.values() if src in r["sources"]]
    check_tree(p, "u")
    m.close()


LINES_X = [
    "I moved to Paris last spring.",
    "My dog is called Max and he loves the park.",
    "The weather is nice today.",
    "I work as a nurse at the city hospital.",
    "We watched a movie about space travel.",
    "I moved to Berlin for a job.",
    "Let's get coffee soon at the corner place.",
    "I love hiking in the mountains.",
    "My sister plays the piano every evening.",
    "The museum was closed on Monday.",
]
