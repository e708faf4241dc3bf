"""A model check of the public API (hypothesis stateful testing): random adds, end_sessions,
updates, deletes, user deletions, reopens and reads through two handles on one SQLite file,
checked after every step, through both handles, against a plain model: the users, their live
turns (id, text, session) and which sessions are ended.

Every text carries a unique token (``Qz<n>x``), so any text the API shows can be traced to the
turn it came from: a user's searches, contexts, facts and histories show only tokens of that
user's live turns (isolation, deletion), a deleted turn's token is shown nowhere, and a deleted
id is ``NotFoundError``. The configuration is small, so consolidation, leaf expansion,
supersession and eviction all happen within a few steps."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lamina import InvalidInput, Memory, MemoryConfig, NotFoundError
from lamina.memory.types import LAYERS
from memkit import FACT_TEMPLATES, T0, token_numbers

USERS = ["ann", "bob", "cyd"]
SESSIONS = ["s0", "s1", "s2"]
CFG = MemoryConfig(working_capacity=4, episodic_capacity=6, semantic_capacity=6)
#: Bug (see test_faults.py::test_end_session_after_deleting_a_turn_of_a_subtree): deleting a turn
#: deletes the MemTree summaries above it but not their other children, whose parent_id then
#: dangles, and an end_session that evicts such a child raises KeyError (every time). Until it is
#: fixed the machine accepts that KeyError (the failed write must still leave nothing behind);
#: set to False with the fix.
TOLERATE_ORPHANED_SUBTREE = False
TOKEN = re.compile(r"qz(\d+)x")
#: Texts the rule extractor turns into facts (functional ones supersede), and small talk.
TEMPLATES = [*FACT_TEMPLATES, "The {t} museum was closed today."]


def tokens(text: str | None) -> set[int]:
    return token_numbers(text, TOKEN)


def item_tokens(it: object) -> set[int]:
    """Every token an item shows (its text, summary, object and the raw turns it renders)."""
    out = tokens(getattr(it, "text", "")) | tokens(getattr(it, "summary", "")) | tokens(getattr(it, "object", ""))
    for _t, sp, tx in getattr(it, "turns", ()):
        out |= tokens(sp) | tokens(tx)
    return out


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lamina-model-"))
        self.path = self.dir / "m.db"
        self.h: dict[str, Memory] = {}
        self.turns: dict[str, dict[int, tuple[str, str]]] = {}  # user -> id -> (text, session)
        self.owned: dict[str, set[int]] = {}  # user -> tokens its live turns show (old texts too)
        self.tok_of: dict[int, set[int]] = {}  # turn id -> its tokens (every text it had)
        self.sessions: dict[tuple[str, str], str] = {}  # (user, session) -> "open" / "ended"
        self.dead_ids: list[int] = []
        self.dead_tokens: set[int] = set()
        self.n = 0
        self.t = T0

    @initialize()
    def open_handles(self) -> None:
        self.h = {
            "a": Memory(self.path, embedder="hashing", config=CFG),
            "b": Memory(self.path, embedder="hashing", config=CFG),
        }

    def teardown(self) -> None:
        for m in self.h.values():
            m.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def _text(self, kind: int) -> tuple[str, int]:
        self.n += 1
        return TEMPLATES[kind % len(TEMPLATES)].format(t=f"Qz{self.n}x"), self.n

    def _live(self) -> list[tuple[str, int]]:
        return sorted((u, i) for u, ts in self.turns.items() for i in ts)

    def _forget_turn(self, user: str, iid: int) -> None:
        del self.turns[user][iid]
        toks = self.tok_of.pop(iid)
        self.owned[user] -= toks
        self.dead_tokens |= toks
        self.dead_ids.append(iid)

    # ------------------------------------------------------------------ rules
    @rule(
        h=st.sampled_from("ab"),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        kinds=st.lists(st.integers(0, len(TEMPLATES) - 1), min_size=1, max_size=3),
    )
    def add(self, h: str, user: str, session: str, kinds: list[int]) -> None:
        texts = [self._text(k) for k in kinds]
        self.t += 60
        msgs = [{"speaker": user.title(), "text": tx} for tx, _ in texts]
        ids = self.h[h].add(msgs, user_id=user, session_id=session, timestamp=self.t)
        assert len(ids) == len(msgs) and len(set(ids)) == len(ids)
        live = {i for _u, i in self._live()}
        assert not (set(ids) & (live | set(self.dead_ids))), "an id was handed out twice"
        ts = self.turns.setdefault(user, {})
        for iid, (tx, tok) in zip(ids, texts):
            ts[iid] = (tx, session)
            self.tok_of[iid] = {tok}
            self.owned.setdefault(user, set()).add(tok)
        self.sessions[(user, session)] = "open"

    @rule(
        h=st.sampled_from("ab"),
        h2=st.sampled_from("ab"),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        kinds=st.lists(st.integers(0, len(TEMPLATES) - 1), min_size=2, max_size=6),
    )
    def chat(self, h: str, h2: str, user: str, session: str, kinds: list[int]) -> None:
        """A whole session: turns through one handle, consolidated through either."""
        self.add(h, user, session, kinds)
        self.end_session(h2, user, session)

    @rule(h=st.sampled_from("ab"), user=st.sampled_from(USERS), session=st.sampled_from(SESSIONS))
    def end_session(self, h: str, user: str, session: str) -> None:
        self.t += 60
        if (user, session) not in self.sessions:
            with pytest.raises(NotFoundError):
                self.h[h].end_session(user_id=user, session_id=session)
            return
        try:
            self.h[h].end_session(user_id=user, session_id=session)
        except KeyError as e:
            # the known bug (test_faults.py::test_end_session_after_deleting_a_turn_of_a_subtree):
            # a raw KeyError from the eviction, the write rolled back; the invariants check that
            if type(e) is not KeyError or not TOLERATE_ORPHANED_SUBTREE:
                raise
            return
        self.sessions[(user, session)] = "ended"

    @precondition(lambda self: bool(self._live()))
    @rule(h=st.sampled_from("ab"), pick=st.integers(0, 10**6), kind=st.integers(0, len(TEMPLATES) - 1))
    def update(self, h: str, pick: int, kind: int) -> None:
        live = self._live()
        user, iid = live[pick % len(live)]
        text, tok = self._text(kind)
        self.t += 60
        it = self.h[h].update(iid, text, user_id=user, timestamp=self.t)
        assert it.id == iid and it.text == text
        self.turns[user][iid] = (text, self.turns[user][iid][1])
        self.tok_of[iid].add(tok)
        self.owned[user].add(tok)

    @precondition(lambda self: bool(self._live()))
    @rule(h=st.sampled_from("ab"), pick=st.integers(0, 10**6), scoped=st.booleans())
    def delete(self, h: str, pick: int, scoped: bool) -> None:
        live = self._live()
        user, iid = live[pick % len(live)]
        rep = self.h[h].delete(iid, user_id=user if scoped else None)
        assert iid in rep.ids and rep.deleted == len(rep.ids)
        others = {i for _u, i in live if i != iid}
        assert not (set(rep.ids) & others), f"deleting turn {iid} deleted other turns {set(rep.ids) & others}"
        self._forget_turn(user, iid)

    @rule(h=st.sampled_from("ab"), user=st.sampled_from(USERS))
    def delete_user(self, h: str, user: str) -> None:
        if user not in self.turns:
            with pytest.raises(NotFoundError):
                self.h[h].delete_user(user_id=user)
            return
        rep = self.h[h].delete_user(user_id=user)
        assert set(self.turns[user]) <= set(rep.ids)
        for iid in list(self.turns[user]):
            self._forget_turn(user, iid)
        del self.turns[user]
        del self.owned[user]
        for key in [k for k in self.sessions if k[0] == user]:
            del self.sessions[key]

    @rule(h=st.sampled_from("ab"), user=st.sampled_from(USERS), pick=st.integers(0, 10**6))
    def context(self, h: str, user: str, pick: int) -> None:
        """A read that bumps visits (written with the handle's next write, or on close)."""
        live = sorted(self.turns.get(user, {}).items())
        if user not in self.turns:  # (nothing added, or deleted: not found, on either handle)
            with pytest.raises(NotFoundError):
                self.h[h].context("where do I live", user_id=user, budget=256)
            return
        query = live[pick % len(live)][1][0] if live else "where do I live"
        ctx = self.h[h].context(query, user_id=user, budget=256)
        shown = tokens(ctx.render())
        for it in ctx.items:
            shown |= item_tokens(it)
        assert shown <= self.owned.get(user, set()), (user, shown - self.owned.get(user, set()))

    @rule(which=st.sampled_from(["a", "b", "both"]))
    def reopen(self, which: str) -> None:
        for name in ("a", "b") if which == "both" else (which,):
            self.h[name].close()
            self.h[name] = Memory(self.path, embedder="hashing", config=CFG)

    @rule(h=st.sampled_from("ab"), bad=st.sampled_from(["empty", "surrogate", "time"]))
    def refused_write(self, h: str, bad: str) -> None:
        """A refused write changes nothing (the invariants check it)."""
        msg = {"speaker": "Ann", "text": "" if bad == "empty" else ("a\ud800b" if bad == "surrogate" else "x")}
        ts = 1e13 if bad == "time" else self.t
        with pytest.raises((InvalidInput, TypeError)):
            self.h[h].add([msg], user_id="ann", session_id="s0", timestamp=ts)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def matches_the_model(self) -> None:
        if not self.h:
            return
        for name, m in self.h.items():
            assert m.users() == sorted(self.turns), name
            for user in USERS:
                self._check_user(m, name, user)
            for iid in self.dead_ids[-6:]:
                with pytest.raises(NotFoundError):
                    m.get(iid)
            for user, iid in self._live()[:: max(1, len(self._live()) // 6)]:
                it = m.get(iid, user_id=user)
                assert (it.text, it.session_id, it.kind) == (*self.turns[user][iid], "turn")
                other = next(u for u in self.turns if u != user) if len(self.turns) > 1 else None
                if other is not None:
                    with pytest.raises(NotFoundError):
                        m.get(iid, user_id=other)

    def _check_user(self, m: Memory, name: str, user: str) -> None:
        where = f"handle {name}, user {user}"
        if user not in self.turns:
            for read in (m.search, m.context):
                with pytest.raises(NotFoundError):
                    read("where do I live", user_id=user)
            with pytest.raises(NotFoundError):
                m.stats(user_id=user)
            return
        want = self.turns[user]
        k = 4 * (len(self.tok_of) + 10) + 50
        arch = m.search("anything at all", user_id=user, k=k, layers=["archive"])
        assert sorted((it.id, it.text, it.session_id) for it in arch) == sorted(
            (i, tx, s) for i, (tx, s) in want.items()
        ), where
        assert m.stats(user_id=user).archive_turns == len(want), where
        own = self.owned[user]
        shown: set[int] = set()
        for L in LAYERS:
            for it in m.search("anything at all", user_id=user, k=k, layers=[L]):
                assert it.user_id == user, where
                shown |= item_tokens(it)
        for it in m.facts(user_id=user, current=False):
            shown |= item_tokens(it)
        dead = sorted(self.dead_tokens)[-2:]
        query = " ".join(f"Qz{d}x" for d in dead) or "where do I live"
        ctx = m.context(query, user_id=user, budget=512)
        shown |= tokens(ctx.render())
        for it in ctx.items:
            shown |= item_tokens(it)
            for h in m.history(it.id):
                shown |= item_tokens(h)
        assert shown <= own, (where, "shows tokens of deleted or other users' turns", sorted(shown - own))
        sess = m.stats(user_id=user)
        mine = {s: v for (u, s), v in self.sessions.items() if u == user}
        assert sess.sessions == len(mine), where
        assert sess.open_sessions == sum(1 for v in mine.values() if v == "open"), where


# examples from the profile (tests/conftest.py: 30, 60 on CI), 50 steps each: ~10 / 20 s on 2 cores
MemoryMachine.TestCase.settings = settings(
    settings.default,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestMemoryModel = pytest.mark.slow(MemoryMachine.TestCase)
