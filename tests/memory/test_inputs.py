"""lamina.memory.inputs: the checks of the caller's arguments."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from lamina import InvalidInput
from lamina.embedders import get_embedder
from lamina.memory.inputs import (
    MAX_BUDGET,
    MAX_K,
    MAX_TIME,
    MIN_TIME,
    check_count,
    check_id,
    check_layers,
    check_text,
    query_vector,
    to_time,
)


def test_to_time() -> None:
    assert to_time(None, "t") is None
    assert to_time(5, "t") == 5.0 and isinstance(to_time(5, "t"), float)
    assert to_time(np.float32(2.5), "t") == 2.5 and to_time(np.int64(3), "t") == 3.0
    utc = dt.datetime(2023, 5, 8, 12, 30, tzinfo=dt.timezone.utc)
    assert to_time(dt.datetime(2023, 5, 8, 12, 30), "t") == utc.timestamp()  # naive = UTC
    plus2 = dt.datetime(2023, 5, 8, 14, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_time(plus2, "t") == utc.timestamp()
    assert to_time("2023-05-08T12:30:00Z", "t") == to_time(" 2023-05-08 12:30 ", "t") == utc.timestamp()
    assert to_time("2023-05-08T14:30:00+02:00", "t") == utc.timestamp()
    with pytest.raises(InvalidInput, match="now.*ISO-8601"):
        to_time("yesterday", "now")
    with pytest.raises(InvalidInput, match="finite"):
        to_time(float("inf"), "t")
    with pytest.raises(TypeError, match="not bool"):
        to_time(True, "t")
    with pytest.raises(TypeError, match="list"):
        to_time([1], "t")  # type: ignore[arg-type]


def test_check_id_count_layers() -> None:
    assert check_id("u", "user_id") == "u"
    with pytest.raises(InvalidInput, match="user_id"):
        check_id(" \t", "user_id")
    with pytest.raises(TypeError, match="session_id must be a str"):
        check_id(3, "session_id")
    assert check_count(np.int32(7), "k") == 7 and isinstance(check_count(np.int32(7), "k"), int)
    with pytest.raises(InvalidInput, match="budget must be >= 1 token"):
        check_count(0, "budget", " (tokens)")
    with pytest.raises(TypeError):
        check_count(True, "k")
    with pytest.raises(TypeError):
        check_count(2.0, "k")
    assert check_layers(("archive", "history")) == ["archive", "history"]
    with pytest.raises(InvalidInput, match="attic"):
        check_layers(["working", "attic"])
    with pytest.raises(TypeError):
        check_layers("archive")


def test_to_time_bounds() -> None:
    """Event times outside what the render can show (years 1-9999 UTC) are refused, whatever
    their form; the bounds themselves are accepted."""
    utc = dt.timezone.utc
    assert dt.datetime.fromtimestamp(MIN_TIME, tz=utc) == dt.datetime(1, 1, 1, tzinfo=utc)
    assert dt.datetime.fromtimestamp(MAX_TIME, tz=utc) == dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=utc)
    assert to_time(MIN_TIME, "t") == MIN_TIME and to_time(MAX_TIME, "t") == MAX_TIME
    assert to_time("0001-01-01T00:00:00", "t") == MIN_TIME and to_time(dt.datetime(9999, 12, 31, 23, 59, 59), "t")
    for bad in (
        1e20,
        -1e14,
        MAX_TIME + 1,
        MIN_TIME - 1,
        np.float64(1e300),
        np.int64(2**62),
        10**400,  # beyond any float
        dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5))),  # 0000-12-31 19:00 UTC
        dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        "9999-12-31T23:00:00-05:00",
        "0001-01-01T00:00:00+01:00",
    ):
        with pytest.raises(InvalidInput, match="timestamp.*outside the years 1-9999"):
            to_time(bad, "timestamp")


def test_text_must_be_encodable_as_utf8() -> None:
    assert check_text("héllo ✓ 🙂", "text") == "héllo ✓ 🙂" and check_text("", "text") == ""
    for bad in ("\ud800", "ok \udfff", "a\ud83d"):  # lone surrogates
        with pytest.raises(InvalidInput, match=r"speaker is not valid Unicode text.*index"):
            check_text(bad, "speaker")
        with pytest.raises(InvalidInput, match="user_id is not valid Unicode"):
            check_id(bad, "user_id")
    assert check_text("\ud83d\ude42".encode("utf-16", "surrogatepass").decode("utf-16"), "t") == "🙂"
    with pytest.raises(TypeError, match="query must be a str"):
        check_text(b"x", "query")


def test_budget_and_k_are_bounded_before_any_state_change() -> None:
    from lamina import Memory

    assert check_count(MAX_K, "k", maximum=MAX_K) == MAX_K
    with pytest.raises(InvalidInput, match="k must be <= 100,000, got 100001"):
        check_count(MAX_K + 1, "k", maximum=MAX_K)
    with Memory(None, embedder="hashing") as mem:
        mem.add([{"text": "I live in Lisbon.", "timestamp": 1_700_000_000}], user_id="u", session_id="s")
        before = [(it.id, it.access_count) for it in mem.search("Lisbon", user_id="u", layers=["archive"])]
        for budget in (10**30, MAX_BUDGET + 1):
            with pytest.raises(InvalidInput, match="budget must be <= 10,000,000 tokens"):
                mem.context("Lisbon", user_id="u", budget=budget)
        for k in (2**63, MAX_K + 1):
            with pytest.raises(InvalidInput, match="k must be <= 100,000"):
                mem.search("Lisbon", user_id="u", k=k)
        # nothing was visited by the refused contexts
        assert [(it.id, it.access_count) for it in mem.search("Lisbon", user_id="u", layers=["archive"])] == before
        assert mem.context("Lisbon", user_id="u", budget=MAX_BUDGET).items


def test_dot_ids_are_refused_everywhere() -> None:
    """'.' and '..' cannot be a URL path segment (clients resolve them): no front end may create
    such a user, which the HTTP client could then never reach."""
    import io

    from lamina import Memory
    from lamina.memory.dump.jsonl import export_jsonl, import_jsonl
    from lamina.serve.tenancy import stored_user_id

    for bad in (".", ".."):
        with pytest.raises(InvalidInput, match=r"user_id must not be '\.{1,2}' \(it cannot be a URL path segment\)"):
            check_id(bad, "user_id")
        with pytest.raises(InvalidInput, match="path segment"):
            stored_user_id("acme", bad)
    assert check_id("...", "user_id") == "..." and check_id("./x", "user_id") == "./x"
    with Memory(None, embedder="hashing") as mem:
        with pytest.raises(InvalidInput, match="path segment"):
            mem.add([{"text": "hi"}], user_id="..", session_id="s")
        mem.add([{"text": "hi", "timestamp": 1_700_000_000}], user_id="u", session_id="s")
        f = io.StringIO()
        export_jsonl(mem, f)
    with Memory(None, embedder="hashing") as other, pytest.raises(InvalidInput, match="path segment"):
        import_jsonl(other, io.StringIO(f.getvalue()), user_map=lambda _u: ".")


def test_query_vector() -> None:
    emb = get_embedder("hashing")
    q = query_vector(emb.embed, emb.dim, "hello there", None)
    assert q.shape == (1, emb.dim) and q.dtype == np.float32
    np.testing.assert_array_equal(q[0], emb.embed(["hello there"])[0])
    v = np.ones(emb.dim, dtype=np.float32)
    assert query_vector(emb.embed, emb.dim, "ignored", v).shape == (1, emb.dim)
    with pytest.raises(TypeError):
        query_vector(emb.embed, emb.dim, 3, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="empty"):
        query_vector(emb.embed, emb.dim, "  ", None)
    with pytest.raises(InvalidInput, match="shape"):
        query_vector(emb.embed, emb.dim, "q", np.ones(3, dtype=np.float32))
    with pytest.raises(InvalidInput, match="non-zero"):
        query_vector(emb.embed, emb.dim, "q", np.zeros(emb.dim, dtype=np.float32))
