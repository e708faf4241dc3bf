"""The read path's candidates (lamina.memory.read.candidates): lexical + dense fusion of episodic turns,
episodes found by their best turn, the speaker scope, the replay clock and the domain gate, the
stale penalty, the archive, summaries vs leaves, and the switch to ANN past ``ann_threshold``."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import lamina
from lamina import Memory, MemoryConfig, NotFoundError
from lamina.embedders import get_embedder
from lamina.memory.read.candidates import Found, Lookup, candidates, scope, visible
from lamina.memory.state.memstate import MemoryState, UserState
from lamina.memory.state.records import NsCode, Record, turn_tokens
from lamina.memory.state.turnvec import turn_vectors
from lamina.memory.store.sqlite import SQLiteStore
from lamina.text.timeref import mentions_time
from memkit import (
    CHAT_WORDS,
    DAY,
    FILLER,
    KITTEN_CHAT,
    T0,
    NoiseEmbedder,
    active_leaves,
    chat,
    day_session,
    everything,
    random_turns,
)
from reference import recall, topic_sentences


def _fill(
    m: Memory, n_sessions: int, per: int, rng: random.Random, needle: tuple[int, int, str, str] | None = None
) -> None:
    for s in range(n_sessions):
        t = T0 + s * DAY
        msgs = []
        for i, (sp, tx) in enumerate(random_turns(rng, per)):
            if needle is not None and (s, i) == needle[:2]:
                sp, tx = needle[2], needle[3]
            msgs.append({"speaker": sp, "text": tx, "id": f"D{s}:{i}", "timestamp": t + 60 * i})
        m.add(msgs, user_id="u", session_id=f"s{s}")
        m.end_session(user_id="u", session_id=f"s{s}")


def test_lexical_channel_finds_a_turn_by_its_words() -> None:
    cfg = dict(layers=("working", "episodic"), min_similarity=-1.0, speaker_scope=0.0)
    hits = {}
    for lexical in (True, False):
        m = Memory(embedder=NoiseEmbedder(), config=MemoryConfig(lexical=lexical, **cfg))  # type: ignore[arg-type]
        _fill(m, 12, 10, random.Random(3), needle=(4, 3, "Ann", "We adopted a greyhound called Zephyrine"))
        ctx = m.context("greyhound Zephyrine", user_id="u", budget=40, now=T0 + 30 * DAY)
        hits[lexical] = [it.sources for it in ctx.items]
        m.close()
    assert ("D4:3",) in hits[True]
    # cosine alone (noise) has no reason to surface it among 120 turns in a 40-token context
    assert ("D4:3",) not in hits[False]


def test_time_channel_ranks_the_turn_that_says_when_for_a_when_question() -> None:
    """A question for a time fuses a third ranking: the candidate turns that say when. Among
    turns equally far from the query (noise vectors, no shared word with it), the one that
    says "last year" comes first only with the channel, and only for a "when" question."""
    cfg = dict(layers=("working", "episodic"), min_similarity=-1.0, speaker_scope=0.0, lexical=False)
    ranks = {}
    for on in (True, False):
        m = Memory(embedder=NoiseEmbedder(), config=MemoryConfig(time_channel=on, **cfg))  # type: ignore[arg-type]
        _fill(m, 12, 10, random.Random(5), needle=(6, 5, "Ann", "We painted the old barn red last year"))
        for q in ("When did they paint it?", "Who painted it?"):
            ctx = m.explain_context(q, user_id="u", budget=400, now=T0 + 30 * DAY)
            order = [c.item.sources for c in ctx.candidates["episodic"] if c.item.kind == "turn"]
            ranks[on, q] = order.index(("D6:5",)) if ("D6:5",) in order else len(order)
        m.close()
    assert ranks[True, "When did they paint it?"] < 3
    assert ranks[True, "When did they paint it?"] < ranks[False, "When did they paint it?"]
    assert ranks[True, "Who painted it?"] == ranks[False, "Who painted it?"]  # not a question for a time


def test_session_prior_ranks_a_turn_with_its_sessions_best() -> None:
    """The two-stage read: turns rank by their sessions too — a turn of the session that holds
    the query's best match passes a slightly better lone match of another session."""
    order = {}
    for mu in (1.0, 0.0):
        m = Memory(embedder="hashing", config=MemoryConfig(session_prior=mu, layers=("working", "episodic")))
        for s, lines in enumerate(
            [
                [("Ann", "We bought a bicycle for the school run."), ("Ben", "The weather was grey.")],
                [("Ann", "I planted tulips in the garden with my niece Ida."), ("Ben", "Ida waters the tulips.")],
                [("Ann", "The train was late again."), ("Ben", "Ida waters the tulips in the garden.")],
            ]
        ):
            day_session(m, s, lines + list(FILLER[:4]))
        ex = m.explain_context("tulips garden niece Ida", user_id="u", budget=400, now=T0 + 9 * DAY)
        srcs = [c.item.sources for c in ex.candidates["episodic"] if c.item.kind == "turn"]
        order[mu] = (srcs.index(("D1:1",)), srcs.index(("D2:1",)))
        assert srcs[0] == ("D1:0",)  # the best match first either way
        m.close()
    # alone, the turn with more of the query's words ranks first; with the prior, the turn of
    # the session that holds the best match does
    assert order[0.0][0] > order[0.0][1] and order[1.0][0] < order[1.0][1]
    with pytest.raises(lamina.InvalidInput, match="session_prior"):
        MemoryConfig(session_prior=-1.0)


def test_matching_turn_alone_and_leaf_heated() -> None:
    m = Memory(
        embedder="hashing", config=MemoryConfig(working_capacity=4, semantic_capacity=1, layers=("working", "episodic"))
    )
    chat(m, "u", "s1", KITTEN_CHAT, T0 + DAY, "D1")
    m.end_session(user_id="u", session_id="s1")
    ctx = m.context("grey kitten Pepper", user_id="u", budget=12, now=T0 + 9 * DAY)
    assert not ctx.abstain
    top = max(ctx.items, key=lambda it: it.score)
    assert top.kind == "turn" and top.layer == "episodic" and top.sources == ("D1:2",)
    assert "Pepper" in ctx.render() and "football" not in ctx.render()
    # the leaf that holds the turn was heated too (and only it)
    (leaf,) = [it for it in active_leaves(m) if "D1:2" in it.sources]
    assert m.get(leaf.id).access_count == 1 and m.get(leaf.id).last_access == T0 + 9 * DAY
    assert [m.get(it.id).access_count for it in active_leaves(m) if it.id != leaf.id] == [0] * (
        len(active_leaves(m)) - 1
    )
    # a leaf's score is its best turn's cosine (not the mean of its turns)
    q = m.embedder.embed(["grey kitten Pepper"])[0]
    turn = turn_vectors(m.embedder.embed, [(KITTEN_CHAT[2][1], KITTEN_CHAT[2][0])])[0]  # (as the write path embeds it)
    assert abs(top.score - float(turn @ q)) < 1e-5
    m.close()


def test_speaker_scope_prefers_the_named_person() -> None:
    lines = [
        ("Ann", "I went hiking in the Alps with my cousin last summer."),
        ("Ben", "I went hiking in the Alps with my cousin last summer."),
        ("Ann", "The bakery downtown sells great bread."),
        ("Ben", "My office moved to the fifth floor."),
    ]
    tops = {}
    for sc, vectors in ((0.5, "text"), (0.0, "text"), (0.0, "sentences")):
        m = Memory(
            embedder="hashing",
            config=MemoryConfig(
                speaker_scope=sc, layers=("working", "episodic"), min_similarity=-1.0, turn_vectors=vectors
            ),
        )
        chat(m, "u", "s1", lines, T0, "D1")
        m.end_session(user_id="u", session_id="s1")
        ctx = m.context("Where did Ben go hiking in the Alps", user_id="u", budget=200, now=T0 + DAY)
        tops[sc, vectors] = max((it for it in ctx.items if it.kind == "turn"), key=lambda it: (it.score, -it.id))
        m.close()
    # the turns' vectors of their text alone: the scope decides
    assert tops[0.5, "text"].speaker == "Ben"
    # same text from both: without the scope the tie goes by insertion order (Ann's first)
    assert tops[0.0, "text"].speaker == "Ann"
    # a turn embedded with its speaker (the default) meets the question naming him, scope or not
    assert tops[0.0, "sentences"].speaker == "Ben"


def test_scope_needs_exactly_one_known_name() -> None:
    st = MemoryState(MemoryConfig(), 4)
    u = UserState("u", 1)
    people = [("turn", "Ann"), ("turn", "Ben"), ("turn", "Mary  Jane"), ("fact", "Carol")]
    for i, (kind, who) in enumerate(people, 1):
        kw = (
            {"speaker": who, "source_id": f"s{i}"}
            if kind == "turn"
            else {"subject": who, "predicate": "likes", "object": "tea"}
        )
        st.index(
            u,
            Record(
                id=i, user_id="u", layer="archive" if kind == "turn" else "history", kind=kind, text="x", seq=i, **kw
            ),
        )  # type: ignore[arg-type]
    assert scope(u, "what does ann like?") == "ann"
    assert scope(u, "What do Ann and Ben like?") is None
    assert scope(u, "What does Annabel like?") is None  # whole words only
    assert scope(u, "what did MARY JANE say") == "mary jane"  # names of several words, any case
    assert scope(u, "does Carol like tea") == "carol"  # subjects of facts are people too
    assert scope(u, "nobody named") is None


def test_an_unknown_user_is_not_found_and_the_floor_abstains() -> None:
    m = Memory(embedder="hashing")
    chat(m, "u", "s1", FILLER, T0, "D1")
    ctx = m.context("quantum chromodynamics lattice gauge", user_id="u")
    assert ctx.abstain and ctx.items == [] and ctx.render() == "" and ctx.tokens == 0
    with pytest.raises(NotFoundError, match="unknown user_id 'nobody'"):
        m.context("anything", user_id="nobody")
    with pytest.raises(NotFoundError, match="unknown user_id 'nobody'"):
        m.search("anything", user_id="nobody")
    m.close()


def test_now_hides_the_future() -> None:
    m = Memory(embedder="hashing")
    chat(m, "u", "s1", [("Alice", "I adopted a parrot named Kiwi.")], T0 + 10 * DAY, "D1")
    assert not any("Kiwi" in it.text for it in m.context("parrot Kiwi", user_id="u", now=T0).items)
    assert any("Kiwi" in it.text for it in m.context("parrot Kiwi", user_id="u", now=T0 + 11 * DAY).items)
    assert m.search("parrot Kiwi", user_id="u", now=T0) == []
    assert len(m.search("parrot Kiwi", user_id="u", now=T0 + 11 * DAY)) == 1
    m.close()


def test_domain_gate() -> None:
    m = Memory(embedder="hashing")
    m.add(
        [
            {"speaker": "A", "text": "the quarterly report is due friday", "domain": "work", "id": "w"},
            {"speaker": "A", "text": "the quarterly report of the garden club", "domain": "home", "id": "h"},
            {"speaker": "A", "text": "the quarterly report untagged", "id": "n"},
        ],
        user_id="u",
        session_id="s",
        timestamp=T0,
    )
    got = {it.sources[0] for it in m.context("quarterly report", user_id="u", domain="work", now=T0 + 1).items}
    assert got == {"w", "n"}  # another domain's items are blocked, untagged ones pass
    assert {it.sources[0] for it in m.context("quarterly report", user_id="u", now=T0 + 1).items} == {"w", "h", "n"}
    m.close()


def test_visible() -> None:
    r = Record(id=1, user_id="u", layer="archive", kind="turn", text="x", seq=1, timestamp=100.0, domain="work")
    assert visible(r, None, None) and visible(r, 100.0, "work") and visible(r, None, "work")
    assert not visible(r, 99.0, None) and not visible(r, None, "home")
    untimed = Record(id=2, user_id="u", layer="archive", kind="turn", text="x", seq=2)
    assert visible(untimed, 0.0, "home")


def test_lookup_positions() -> None:
    """Lookup.pos (a table of the ids' positions) is np.searchsorted into the sorted ids."""
    m = Memory(None, embedder="hashing")
    try:
        chat(m, "u", "s0", KITTEN_CHAT * 3, T0, "a")
        st = m._st
        ids = np.array(sorted(st.recs), dtype=np.int64)
        rng = np.random.default_rng(1)
        found = [Found(layers={"episodic": (np.zeros(5, np.float32), rng.choice(ids, 5))}) for _ in range(4)]
        look = Lookup(st, found)
        assert look.ids.tolist() == sorted(set(np.concatenate([f.layers["episodic"][1] for f in found]).tolist()))
        x = rng.choice(look.ids, 50)
        assert look.pos(x).tolist() == np.searchsorted(look.ids, x).tolist()
        assert [r.id for r in look.recs[look.pos(x)]] == x.tolist()
    finally:
        m.close()


def test_lookup_columns_of_turns() -> None:
    """What the episodic fusion reads of the found records, at the turns (its lists hold turns
    only): each turn's rendered words, whether its text says when, equal session codes for
    equal sessions; and visible() per record at every (clock, domain), the open one included."""
    m = Memory(None, embedder="hashing")
    try:
        for s in range(3):
            day_session(m, s, [*KITTEN_CHAT, ("Alice", "We met on 12 May 2023 at noon.")])
        st = m._st
        ids = np.array(sorted(st.recs), dtype=np.int64)
        look = Lookup(st, [Found(layers={"episodic": (np.zeros(len(ids), np.float32), ids)})])
        recs = look.recs.tolist()
        turns = [j for j, r in enumerate(recs) if r.kind == "turn"]
        assert turns and len(turns) < len(recs)  # (derived items among them)
        words, when, sess = look.words(), look.when(), look.sessions()
        assert words[turns].tolist() == [turn_tokens(recs[j])[0] for j in turns]
        assert when[turns].tolist() == [mentions_time(recs[j].text, recs[j].timestamp) for j in turns]
        assert any(when[turns]) and not all(when[turns])
        same = [[recs[a].session_id == recs[b].session_id for b in turns] for a in turns]
        assert [[sess[a] == sess[b] for b in turns] for a in turns] == same
        for now, domain in [(None, None), (T0 + DAY, None), (None, "work"), (T0, "home")]:
            assert look.visible(now, domain).tolist() == [visible(r, now, domain) for r in recs]
    finally:
        m.close()


def test_stale_penalty_scales_a_stale_turn() -> None:
    """Raw text naming only a superseded value scores ×(1 − p) in a context; search is plain cosine."""
    for p in (0.5, 0.0):
        m = Memory(embedder="hashing", config=MemoryConfig(stale_penalty=p, min_similarity=-1.0))
        chat(m, "u", "s1", [("Alice", "I live in London."), ("Bob", "ok")], T0, "D1")
        m.end_session(user_id="u", session_id="s1")
        chat(m, "u", "s2", [("Alice", "I moved to Paris."), ("Bob", "fine")], T0 + DAY, "D2")
        m.end_session(user_id="u", session_id="s2")
        q = "I live in London."
        (plain,) = [it for it in m.search(q, user_id="u", k=50, layers=["archive"]) if it.sources == ("D1:0",)]
        ctx = m.context(q, user_id="u", budget=400, now=T0 + 2 * DAY)
        (shown,) = [it for it in ctx.items if it.kind == "turn" and it.sources == ("D1:0",)]
        assert shown.score == pytest.approx(plain.score * (1 - p), rel=1e-5)
        m.close()


def test_a_question_for_a_time_reads_stale_turns_at_full_score() -> None:
    """A superseded fact's turns are history: a question asking when something happened (date
    intent) sees them unpenalised, in a single context and in a batch alike."""
    m = Memory(embedder="hashing", config=MemoryConfig(stale_penalty=0.5, min_similarity=-1.0))
    chat(m, "u", "s1", [("Alice", "I live in London."), ("Bob", "ok")], T0, "D1")
    m.end_session(user_id="u", session_id="s1")
    chat(m, "u", "s2", [("Alice", "I moved to Paris."), ("Bob", "fine")], T0 + DAY, "D2")
    m.end_session(user_id="u", session_id="s2")
    now = T0 + 2 * DAY
    for q, factor in (("When did Alice live in London?", 1.0), ("Did Alice live in London?", 0.5)):
        (plain,) = [it for it in m.search(q, user_id="u", k=50, layers=["archive"]) if it.sources == ("D1:0",)]
        for ctx in (
            m.context(q, user_id="u", budget=400, now=now),
            m.context_batch([q], user_ids="u", budget=400, now=now)[0],
        ):
            (shown,) = [it for it in ctx.items if it.kind == "turn" and it.sources == ("D1:0",)]
            assert shown.score == pytest.approx(plain.score * factor, rel=1e-5), q
    m.close()


def test_archive_is_read_only_on_request() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4, layers=("working",)))
    chat(m, "u", "s", [("Alice", "My parrot is called Kiwi.")] + FILLER[:3], T0, "D")
    m.end_session(user_id="u", session_id="s")
    assert m.context("parrot Kiwi", user_id="u").abstain  # working memory is empty, no other layer
    ctx = m.context("parrot Kiwi", user_id="u", include_archive=True, budget=30)
    assert [it.sources for it in ctx.items][:1] == [("D:0",)] and ctx.items[0].layer == "archive"
    assert "archive" in ctx.gates
    m.close()


def test_context_reads_summaries_not_leaves_and_search_still_finds_leaves(tmp_path: Path) -> None:
    """Episodic leaves live in their own namespace: a context searches the layer's summaries
    (leaves are reached through their turns), search(layers=["episodic"]) returns both."""
    path = tmp_path / "m.db"
    # (turns only down to the floor: with fill_past_floor every turn fits in 4,096 tokens, and a
    # summary whose turns are all shown is a duplicate)
    cfg = MemoryConfig(working_capacity=4, max_segment_turns=2, fill_past_floor=False)
    m = Memory(path, embedder="hashing", config=cfg)
    rng = random.Random(9)
    texts = [" ".join(rng.choice(CHAT_WORDS) for _ in range(8)) for _ in range(60)]
    for s in range(3):
        m.add(
            [
                {"speaker": "Ann", "text": t, "timestamp": 1.6e9 + 60 * i}
                for i, t in enumerate(texts[s * 20 : (s + 1) * 20])
            ],
            user_id="u",
            session_id=f"s{s}",
        )
        m.end_session(user_id="u", session_id=f"s{s}")
    leaves = active_leaves(m)
    summaries = [it for it in everything(m, "u", "episodic") if it.kind == "summary"]
    assert leaves and summaries
    hits = m.search(leaves[0].text, user_id="u", k=5, layers=["episodic"])
    assert hits[0].id == leaves[0].id and hits[0].kind == "segment"
    assert {h.kind for h in m.search(summaries[0].text, user_id="u", k=50, layers=["episodic"])} >= {
        "segment",
        "summary",
    }
    ctx = m.context(texts[3], user_id="u", budget=4096)
    assert not [it for it in ctx.items if it.kind == "segment"]
    assert any(it.kind == "summary" for it in ctx.items)  # a large budget leaves room for aggregates
    m.close()
    # where the vectors live: the state rebuilt from the file
    store = SQLiteStore(str(path))
    st = MemoryState.load(store, cfg, get_embedder("hashing").dim)
    store.close()
    u = st.users["u"]
    assert st.vectors.count(u.ns(NsCode.LEAF)) == len(leaves)
    assert st.vectors.count(u.ns(NsCode.EPISODIC)) == len(summaries)
    assert st.vectors.count(u.ns(NsCode.TURN_VIEW)) == sum(len(it.turns) for it in leaves)


def _fill_ann(m: Memory, n: int, seed: int) -> None:
    texts = topic_sentences(n, seed)
    for s in range(0, n, 50):
        for i in range(s, min(n, s + 50)):
            m.add(
                [{"speaker": "Ann" if i % 2 else "Ben", "text": texts[i], "id": f"x{i}", "timestamp": 1.6e9 + 60 * i}],
                user_id="u",
                session_id=f"s{s}",
            )
        m.end_session(user_id="u", session_id=f"s{s}")
        m.add(
            [{"speaker": "Ann", "text": "other user talks about pasta and piano", "timestamp": 1.6e9}],
            user_id="v",
            session_id=f"s{s}",
        )


def test_memory_switch_to_ann_is_transparent(tmp_path: Path) -> None:
    base = dict(working_capacity=8, episodic_capacity=40)
    ann_cfg = MemoryConfig(ann_threshold=250, **base)  # type: ignore[arg-type]
    exact = Memory(embedder="hashing", config=MemoryConfig(**base))  # type: ignore[arg-type]
    ann = Memory(tmp_path / "ann.db", embedder="hashing", config=ann_cfg)
    _fill_ann(exact, 300, 6)
    _fill_ann(ann, 300, 6)
    assert ann.stats(user_id="u").ann_layers == ["u/archive"] and exact.stats(user_id="u").ann_layers == []
    assert ann.stats(user_id="v").ann_layers == []
    queries = topic_sentences(25, 7)
    rec = []
    for qtext in queries:
        a = ann.search(qtext, user_id="u", k=10, layers=["archive"])
        e = exact.search(qtext, user_id="u", k=10, layers=["archive"])
        assert len(a) == 10 and all(it.layer == "archive" and it.kind == "turn" and it.user_id == "u" for it in a)
        rec.append(recall([it.sources[0] for it in a], [it.sources[0] for it in e]))
        ca = ann.context(qtext, user_id="u", budget=200, include_archive=True)
        assert not ca.abstain and all(it.user_id == "u" for it in ca.items)
    assert np.mean(rec) >= 0.9, np.mean(rec)
    # deleting an archived turn removes it from the graph
    hit = ann.search(queries[0], user_id="u", k=1, layers=["archive"])[0]
    ann.delete(hit.id)
    assert hit.id not in [it.id for it in ann.search(queries[0], user_id="u", k=20, layers=["archive"])]
    before = [[it.id for it in ann.search(q, user_id="u", k=10, layers=["archive"])] for q in queries[:10]]
    ann.close()
    exact.close()
    # reopening rebuilds the graph from the stored embeddings, lazily: on the first search that needs it
    store = SQLiteStore(str(tmp_path / "ann.db"))
    st = MemoryState.load(store, ann_cfg, get_embedder("hashing").dim)
    store.close()
    u = st.users["u"]
    assert st.vectors.ann_builds == 0 and st.vectors.uses_ann(u.ns(NsCode.ARCHIVE))
    emb = get_embedder("hashing")
    for q in emb.embed(queries[:5]):
        candidates(st, u, q, ["archive"], 10, None, None)
    assert st.vectors.ann_builds == 1  # built once, then kept
    with Memory(tmp_path / "ann.db", embedder="hashing", config=ann_cfg) as re_:
        assert re_.stats(user_id="u").ann_layers == ["u/archive"]
        after = [[it.id for it in re_.search(q, user_id="u", k=10, layers=["archive"])] for q in queries[:10]]
        assert np.mean([recall(x, y) for x, y in zip(after, before)]) >= 0.9
        assert hit.id not in {i for x in after for i in x}
