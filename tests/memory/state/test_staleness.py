"""lamina.memory.state.staleness.Staleness (what only supports superseded facts) and the read path's
``UserState.staleness`` that builds it from a user's facts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from lamina import Memory, MemoryConfig
from lamina.embedders import get_embedder
from lamina.memory.state.memstate import MemoryState
from lamina.memory.state.records import norm_key
from lamina.memory.state.staleness import Staleness
from lamina.memory.store.sqlite import SQLiteStore
from memkit import DAY, T0, chat

VALUES = {"paris": {"berlin"}, "new york": {"oslo"}, "straße": {"weg"}}
STALE = frozenset({"s1"})


def reference_weight(text: str, sources: Sequence[str]) -> float:
    """The documented rule, written plainly (no prefilter, no cache): 1 when the text names a
    superseded value (a whole word, any case) and not one of its current values, else the share
    of stale sources (1 or 0 for one source)."""
    low = norm_key(text)
    for v in sorted(VALUES, key=len, reverse=True):
        for m in re.finditer(r"\b" + re.escape(v) + r"\b", low, re.I):
            if not any(cur in low for cur in VALUES[m.group(0).lower()]):
                return 1.0
    if not sources:
        return 0.0
    return sum(1 for s in sources if s in STALE) / len(sources)


TEXTS = [
    "I live in PARIS now",
    "Parisian food is great",
    "paris and berlin",
    "New   York!",
    "new yorker",
    "Straße",
    "STRASSE",
    "we moved to Oslo from new york",
    "nothing here",
    "paris.",
    "(PARIS)",
    "",
]


def test_weight_follows_the_rule_on_tricky_texts() -> None:
    """The casefolded-substring prefilter only skips texts the value pattern cannot match."""
    st = Staleness(STALE, VALUES)
    i = 0
    for t in TEXTS:
        for src in ((), ("s1",), ("s2",), ("s1", "s2")):
            i += 1
            assert st.weight(i, t, src) == reference_weight(t, src), (t, src)
    assert st.weight(1000, "I live in PARIS now", ()) == 1.0 and st.weight(1001, "paris and berlin", ()) == 0.0
    assert st.weight(1002, "x", ("s1", "s2", "s3", "s1")) == 0.5


def test_weight_is_cached_per_item_while_its_text_and_sources_stay() -> None:
    st = Staleness(STALE, VALUES)
    text, src = "I live in Paris", ("s2",)
    assert st.weight(1, text, src) == 1.0
    assert st.cache == {1: (text, src, 1.0)}
    # a re-summarised node: new text and sources objects for the same id -> weighed again
    assert st.weight(1, "nothing stale", ("s1", "s2")) == 0.5
    assert st.weight(1, "nothing stale", ("s1", "s2")) == 0.5
    assert st.weight(2, "nothing stale", (), low="nothing stale") == 0.0


def test_truth_and_sameness() -> None:
    assert not Staleness(frozenset(), {}) and Staleness(STALE, {}) and Staleness(frozenset(), VALUES)
    a, b = Staleness(STALE, VALUES, frozenset({3})), Staleness(STALE, VALUES, frozenset({3}))
    assert a.same_as(b) and not a.same_as(Staleness(STALE, VALUES))


def test_built_from_a_users_facts(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    cfg = MemoryConfig()
    with Memory(p, embedder="hashing", config=cfg) as m:
        chat(m, "u", "s1", [("Alice", "I live in London."), ("Bob", "ok")], T0, "D1")
        m.end_session(user_id="u", session_id="s1")
        chat(m, "u", "s2", [("Alice", "I moved to Paris."), ("Bob", "fine")], T0 + DAY, "D2")
        m.end_session(user_id="u", session_id="s2")
        (cur,) = [f for f in m.facts(user_id="u") if f.predicate == "lives_in"]
    store = SQLiteStore(str(p))
    st = MemoryState.load(store, cfg, get_embedder("hashing").dim)
    store.close()
    u = st.users["u"]
    s = u.staleness(st.recs)
    assert s.sources == frozenset({"D1:0"}) and s.values == {"london": {"paris"}}
    assert s.resolved == frozenset({cur.id})  # the current fact that superseded another
    assert u.staleness(st.recs) is s  # cached per user
    u.stale = None  # (what a fact change does) the rebuilt one equals it: the old cache is kept
    assert u.staleness(st.recs) is s
