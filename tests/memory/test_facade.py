"""lamina.Memory, the façade: keyword-only identifiers, errors (NotFoundError, InvalidInput,
ClosedError), update / delete / history, inspection, threads."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest

import lamina
from lamina import Memory, MemoryConfig
from lamina.memory.types import LAYERS
from memkit import DAY, FILLER, T0, chat, item_rows


def test_identifiers_are_keyword_only() -> None:
    with Memory(embedder="hashing") as m:
        ok = [{"speaker": "A", "text": "hello"}]
        with pytest.raises(TypeError):
            m.add(ok, "u", "s")  # type: ignore[misc]
        (i,) = m.add(ok, user_id="u", session_id="s", timestamp=T0)
        with pytest.raises(TypeError):
            m.end_session("u", "s")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.context("hello", "u")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.search("hello", "u")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.get(i, "u")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.facts("u")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.stats("u")  # type: ignore[misc]
        with pytest.raises(TypeError):
            m.delete_user("u")  # type: ignore[misc]
        assert m.get(i, user_id="u").text == "hello"


def test_update_delete_history(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing")
    ids = chat(m, "u", "s", [("Alice", "My sister is called Ana."), ("Bob", "Nice name.")], T0, "D")
    it = m.update(ids[1], "Nice name indeed.", timestamp=T0 + 5)
    assert it.id == ids[1] and it.text == "Nice name indeed." and m.get(ids[1]).text == "Nice name indeed."
    h = m.history(ids[1])
    assert [x.text for x in h] == ["Nice name.", "Nice name indeed."]
    assert h[0].timestamp == T0 + 5  # an earlier text carries the time it was replaced
    m.end_session(user_id="u", session_id="s")
    assert [f.object for f in m.facts(user_id="u") if f.predicate == "sister_name"] == ["Ana"]
    # deleting the turn takes everything derived from it along: exactly the items listing it as a source
    derived = {i: r["kind"] for i, r in item_rows(path).items() if "D:0" in r["sources"]}
    assert ids[0] in derived
    assert sorted(derived.values()) == ["fact", "profile", "segment", "summary", "turn"]
    n_before = m.stats().items
    rep = m.delete(ids[0])
    assert rep == lamina.DeleteReport(deleted=len(derived), ids=tuple(sorted(derived)))
    assert rep.to_dict() == {"deleted": len(derived), "ids": sorted(derived)}
    assert m.stats().items == n_before - len(derived)
    assert [r["sources"] for r in item_rows(path).values()] == [("D:1",)]  # only the other turn is left
    assert not any(f.object == "Ana" for f in m.facts(user_id="u", current=False))
    hits = m.search("sister Ana", user_id="u", k=20, layers=list(LAYERS))
    assert not any("Ana" in it.render() for it in hits)
    for i in derived:
        with pytest.raises(lamina.NotFoundError):
            m.get(i)
    n_user = m.stats(user_id="u").items
    assert n_user > 0
    left = sorted(item_rows(path))
    assert m.delete_user(user_id="u") == lamina.DeleteReport(deleted=n_user, ids=tuple(left))
    assert m.users() == [] and item_rows(path) == {}
    with pytest.raises(lamina.NotFoundError):
        m.stats(user_id="u")
    m.close()


def test_errors_of_bad_input() -> None:
    m = Memory(embedder="hashing")
    ok = [{"speaker": "A", "text": "hello"}]
    for bad in (
        [{"speaker": "A", "text": "  "}],
        [],
        [{"speaker": "A", "text": "x", "timestamp": float("inf")}],
        [{"speaker": "A", "text": "x", "commitment": "forever"}],
        [{"speaker": "A", "text": "x", "timestamp": "next tuesday"}],
    ):
        with pytest.raises(lamina.InvalidInput):
            m.add(bad, user_id="u", session_id="s")
    for bad_type in ("hello", [{"speaker": "A", "text": 3}], [{"speaker": 7, "text": "x"}], [{"text": "x", "id": 1.5}]):
        with pytest.raises(TypeError):
            m.add(bad_type, user_id="u", session_id="s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        m.add(ok, user_id=5, session_id="s")  # type: ignore[arg-type]
    with pytest.raises(lamina.InvalidInput):
        m.add(ok, user_id="", session_id="s")
    with pytest.raises(lamina.InvalidInput):
        m.add(ok, user_id="u", session_id="s", timestamp=float("nan"))
    # a failed batch leaves nothing behind
    with pytest.raises(TypeError):
        m.add([{"speaker": "A", "text": "fine"}, {"speaker": "A", "text": None}], user_id="u", session_id="s")
    assert m.users() == [] and m.stats().items == 0
    m.add(ok, user_id="u", session_id="s", timestamp=T0)
    with pytest.raises(lamina.InvalidInput):
        m.context("q", user_id="u", budget=0)
    with pytest.raises(TypeError):
        m.context("q", user_id="u", budget=1.5)  # type: ignore[arg-type]
    with pytest.raises(lamina.InvalidInput):
        m.context("", user_id="u")
    with pytest.raises(lamina.InvalidInput):
        m.context("q", user_id="u", now=float("nan"))
    with pytest.raises(TypeError):
        m.context("q", user_id="u", domain=3)  # type: ignore[arg-type]
    with pytest.raises(lamina.InvalidInput):
        m.search("q", user_id="u", k=0)
    with pytest.raises(lamina.InvalidInput):
        m.search("q", user_id="u", layers=["attic"])
    with pytest.raises(TypeError):
        m.search("q", user_id="u", layers="archive")  # type: ignore[arg-type]
    # InvalidInput is a ValueError (what callers caught before), and a LaminaError
    with pytest.raises(ValueError) as exc:
        m.search("q", user_id="u", k=-1)
    assert isinstance(exc.value, lamina.LaminaError)
    with pytest.raises(TypeError):
        Memory(embedder="hashing", config={"working_capacity": 3})  # type: ignore[arg-type]
    m.close()


def test_not_found() -> None:
    m = Memory(embedder="hashing")
    other = Memory(embedder="hashing")
    ok = [{"speaker": "A", "text": "hello"}]
    ids = m.add(ok, user_id="u", session_id="s", timestamp=T0)
    m.add(ok, user_id="v", session_id="s", timestamp=T0)
    with pytest.raises(lamina.NotFoundError) as exc:
        m.get(ids[0] + 10_000)
    # NotFoundError is a KeyError (what callers catch for a missing key) and a LaminaError
    assert isinstance(exc.value, KeyError) and isinstance(exc.value, lamina.LaminaError)
    assert "does not exist" in str(exc.value)
    with pytest.raises(lamina.NotFoundError, match="unknown user_id"):
        m.get(ids[0], user_id="nobody")
    with pytest.raises(lamina.NotFoundError, match="does not belong to user"):
        m.get(ids[0], user_id="v")
    with pytest.raises(lamina.NotFoundError, match="database"):
        m.get(12345)  # not an id of this database
    oid = other.add(ok, user_id="u", session_id="s")[0]
    with pytest.raises(lamina.NotFoundError, match="database"):
        m.get(oid)
    with pytest.raises(lamina.NotFoundError):
        m.update(oid, "x")
    with pytest.raises(lamina.NotFoundError):
        m.history(oid)
    with pytest.raises(lamina.NotFoundError):
        m.delete(oid)
    with pytest.raises(TypeError):
        m.get("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        m.get(True)  # type: ignore[arg-type]
    with pytest.raises(lamina.NotFoundError):
        m.end_session(user_id="nobody", session_id="s")
    with pytest.raises(lamina.NotFoundError):
        m.end_session(user_id="u", session_id="no-such-session")
    with pytest.raises(lamina.NotFoundError):
        m.delete_user(user_id="nobody")
    with pytest.raises(lamina.NotFoundError):
        m.stats(user_id="nobody")
    # a misspelt user is not an empty memory: the reads of the loop refuse it, naming it
    for read in (m.context, m.explain_context, m.search):
        with pytest.raises(lamina.NotFoundError, match="unknown user_id 'nobody'.*case-sensitive"):
            read("anything", user_id="nobody")
    with pytest.raises(lamina.NotFoundError, match="unknown user_id 'nobody'"):
        m.context_batch(["anything", "else"], user_ids=["u", "nobody"])
    assert m.facts(user_id="nobody") == []
    m.close()
    other.close()


def test_closed() -> None:
    m = Memory(embedder="hashing")
    ok = [{"speaker": "A", "text": "hello"}]
    (i,) = m.add(ok, user_id="u", session_id="s", timestamp=T0)
    m.close()
    m.close()  # idempotent
    calls = [
        lambda: m.add(ok, user_id="u", session_id="s"),
        lambda: m.end_session(user_id="u", session_id="s"),
        lambda: m.context("hello", user_id="u"),
        lambda: m.search("hello", user_id="u"),
        lambda: m.get(i),
        lambda: m.update(i, "x"),
        lambda: m.delete(i),
        lambda: m.delete_user(user_id="u"),
        lambda: m.history(i),
        lambda: m.facts(user_id="u"),
        lambda: m.stats(),
        lambda: m.flush(),
    ]
    for call in calls:
        with pytest.raises(lamina.ClosedError, match="closed") as exc:
            call()
        assert isinstance(exc.value, ValueError) and isinstance(exc.value, lamina.LaminaError)


def test_query_embedding() -> None:
    m = Memory(embedder="hashing")
    m.add(
        [{"role": "user", "content": "I work as a nurse at the city hospital."}],
        user_id="u",
        session_id="s",
        timestamp=T0,
    )
    m.add([{"role": "user", "content": "The weather is grey today."}], user_id="u", session_id="s", timestamp=T0 + 1)
    q = m.embedder.embed(["what is the user's job"])[0]
    a = m.search("what is the user's job", user_id="u")
    b = m.search("ignored text", user_id="u", query_embedding=q)
    assert [(x.id, x.score) for x in a] == [(x.id, x.score) for x in b] and len(a) == 2
    c1 = m.context("what is the user's job", user_id="u", budget=50, now=T0 + DAY)
    c2 = m.context("other words", user_id="u", budget=50, now=T0 + DAY, query_embedding=q)
    assert [x.id for x in c1.items] == [x.id for x in c2.items]
    for bad in (
        np.zeros(3, np.float32),
        np.zeros(m.embedder.dim, np.float32),
        np.full(m.embedder.dim, np.nan, np.float32),
    ):
        with pytest.raises(lamina.InvalidInput):
            m.search("q", user_id="u", query_embedding=bad)
    with pytest.raises(TypeError):
        m.search("q", user_id="u", query_embedding=q.astype(np.float64))
    with pytest.raises(TypeError):
        m.search("q", user_id="u", query_embedding=q.tolist())  # type: ignore[arg-type]
    m.close()


def test_inspection_properties_and_repr(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    with Memory(p, embedder="hashing") as m:
        assert m.path == str(p) and m.embedder.name.startswith("hashing")
        chat(m, "u", "s", FILLER[:2], T0, "D")
        chat(m, "v", "s", FILLER[2:3], T0, "E")
        assert m.users() == ["u", "v"]
        assert repr(m) == f"Memory(path={str(p)!r}, embedder={m.embedder.name!r}, users=2)"
        st = m.stats()
        assert (st.users, st.sessions, st.open_sessions, st.items, st.archive_turns) == (2, 2, 2, 3, 3)
        assert st.path == str(p) and st.dim == m.embedder.dim and st.llm is None and st.llm_fallbacks == 0
        assert st.config == dataclasses.asdict(MemoryConfig().for_embedder(lexical=True))  # (hashing: lexical_weight 2)
        assert m.stats(user_id="v").items == 1 and m.stats(user_id="v").profile_drift.last == 0.0
        assert m.stats().profile_drift.last is None  # ``last`` only for one user
    assert Memory(embedder="hashing").path is None


def test_threads_share_one_memory() -> None:
    m = Memory(embedder="hashing", config=MemoryConfig(working_capacity=4))
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(8):
                m.add(
                    [{"speaker": "A", "text": f"user {k} note {i} about topic {k}"}],
                    user_id=f"u{k}",
                    session_id="s",
                    timestamp=T0 + i,
                )
                m.context(f"topic {k}", user_id=f"u{k}")
            m.end_session(user_id=f"u{k}", session_id="s")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for k in range(4):
        assert m.stats(user_id=f"u{k}").archive_turns == 8
        hits = m.search("note about topic", user_id=f"u{k}", k=50, layers=["archive"])
        assert len(hits) == 8 and {it.user_id for it in hits} == {f"u{k}"}
    m.close()


BAD_TEXT = "lone \ud800 surrogate"


def test_every_text_argument_must_be_encodable_as_utf8(tmp_path: Path) -> None:
    """A lone surrogate in any text a caller gives is InvalidInput naming the field, before
    anything is embedded or written (not a RuntimeError of the native core, not a
    UnicodeEncodeError of SQLite)."""
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing")
    (i,) = m.add([{"speaker": "A", "text": "hello there", "id": "x"}], user_id="u", session_id="s", timestamp=T0)
    before = item_rows(path)
    ok = {"speaker": "A", "text": "fine"}
    calls = [
        ("messages\\[0\\]\\['text'\\]", lambda: m.add([{**ok, "text": BAD_TEXT}], user_id="u", session_id="s")),
        ("messages\\[0\\]\\['speaker'\\]", lambda: m.add([{**ok, "speaker": BAD_TEXT}], user_id="u", session_id="s")),
        ("messages\\[0\\]\\['id'\\]", lambda: m.add([{**ok, "id": BAD_TEXT}], user_id="u", session_id="s")),
        ("messages\\[0\\]\\['domain'\\]", lambda: m.add([{**ok, "domain": BAD_TEXT}], user_id="u", session_id="s")),
        ("user_id", lambda: m.add([ok], user_id=BAD_TEXT, session_id="s")),
        ("session_id", lambda: m.add([ok], user_id="u", session_id=BAD_TEXT)),
        ("session_id", lambda: m.end_session(user_id="u", session_id=BAD_TEXT)),
        ("query", lambda: m.context(BAD_TEXT, user_id="u")),
        ("domain", lambda: m.context("hello", user_id="u", domain=BAD_TEXT)),
        ("user_id", lambda: m.context("hello", user_id=BAD_TEXT)),
        ("query", lambda: m.search(BAD_TEXT, user_id="u")),
        ("text", lambda: m.update(i, BAD_TEXT)),
        ("subject", lambda: m.facts(user_id="u", subject=BAD_TEXT)),
        ("user_id", lambda: m.get(i, user_id=BAD_TEXT)),
        ("user_id", lambda: m.delete_user(user_id=BAD_TEXT)),
        ("user_id", lambda: m.stats(user_id=BAD_TEXT)),
    ]
    for name, call in calls:
        with pytest.raises(lamina.InvalidInput, match=f"{name} is not valid Unicode text"):
            call()
    assert item_rows(path) == before and m.users() == ["u"]
    m.close()


def test_every_time_argument_must_be_showable(tmp_path: Path) -> None:
    """Event times outside the years 1-9999 UTC are InvalidInput naming the argument; times at
    the bounds are stored, rendered and consolidated."""
    m = Memory(tmp_path / "m.db", embedder="hashing")
    (i,) = m.add([{"speaker": "A", "text": "hello there"}], user_id="u", session_id="s", timestamp=T0)
    for far in (1e20, -1e14, "0001-01-01T00:00:00+01:00"):
        for name, call, kw in (
            ("timestamp", m.add, {"messages": [{"text": "x"}], "user_id": "u", "session_id": "s", "timestamp": far}),
            (
                r"messages\[0\]\['timestamp'\]",
                m.add,
                {"messages": [{"text": "x", "timestamp": far}], "user_id": "u", "session_id": "s"},
            ),
            ("now", m.context, {"query": "hello", "user_id": "u", "now": far}),
            ("now", m.search, {"query": "hello", "user_id": "u", "now": far}),
            ("now", m.end_session, {"user_id": "u", "session_id": "s", "now": far}),
            ("timestamp", m.update, {"item_id": i, "text": "new text", "timestamp": far}),
        ):
            with pytest.raises(lamina.InvalidInput, match=f"{name} .*outside the years 1-9999"):
                call(**kw)  # type: ignore[operator]
    assert m.stats().items == 1
    lo, hi = "0001-01-01T00:00:00", "9999-12-31T23:59:59"
    m.add([{"speaker": "B", "text": "the oldest thing", "timestamp": lo}], user_id="u", session_id="s")
    m.add([{"speaker": "B", "text": "the newest thing"}], user_id="u", session_id="s", timestamp=hi)
    ctx = m.context("oldest newest thing", user_id="u", now=hi)
    assert "[9999-12-31 23:59]" in ctx.render() and "1-01-01 00:00]" in ctx.render()
    m.end_session(user_id="u", session_id="s", now=hi)
    assert m.context("oldest newest thing", user_id="u", now=hi).render()
    m.close()


def test_a_stored_time_the_render_cannot_show_does_not_break_the_memory(tmp_path: Path) -> None:
    """A database written by an older version, which accepted any finite time, still works:
    such times render as '?'."""
    import sqlite3

    path = tmp_path / "m.db"
    with Memory(path, embedder="hashing") as m:
        chat(m, "u", "s", [("Alice", "My dog is called Rex."), ("Bob", "I live in Oslo now.")], T0, "D")
        m.end_session(user_id="u", session_id="s")
        chat(m, "u", "s2", [("Alice", "Rex likes long walks."), *FILLER[:3]], T0 + DAY, "E")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE items SET timestamp=1e20, last_access=1e20 WHERE source_id='D:0'")
        conn.execute("UPDATE items SET timestamp=-1e14, created_at=-1e14 WHERE source_id='E:0'")
        conn.execute("UPDATE items SET timestamp=1e20, valid_from=1e20 WHERE kind='fact'")
    conn.close()
    with Memory(path, embedder="hashing") as m:
        for now in (None, T0 + 2 * DAY):
            ctx = m.context("What is the dog called? Rex walks", user_id="u", now=now, budget=2048)
            assert not ctx.abstain and "[?]\nAlice: Rex likes long walks." in ctx.render()
        assert "Rex" in m.context("dog Rex", user_id="u", budget=2048).render()
        m.end_session(user_id="u", session_id="s2")
        assert m.context("Rex", user_id="u").render()
        m.search("Rex", user_id="u", layers=["archive"])
        m.stats()
