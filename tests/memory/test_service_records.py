"""Memory.service_record / update_service_record (what ``lamina serve``'s inspector sessions are
kept in), on SQLite and PostgreSQL: two handles on one database (two replicas) see each other's
values, replacements are atomic, the names are checked."""

from __future__ import annotations

import threading

import pytest

from lamina import InvalidInput, Memory
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.ui.session import SessionStore

KEY = "a-key-of-tenant-a-0123456789abcdefghijk"


def test_records_are_shared_and_replaced_atomically(db: str) -> None:
    with Memory(db, embedder="hashing") as one, Memory(db, embedder="hashing") as two:
        assert one.service_record("x") is None
        assert one.update_service_record("x", lambda old: "1" if old is None else old) == "1"
        assert two.service_record("x") == "1"

        def bump(m: Memory) -> None:
            for _ in range(25):
                m.update_service_record("x", lambda old: str(int(old or "0") + 1))

        threads = [threading.Thread(target=bump, args=(m,)) for m in (one, two, one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert one.service_record("x") == two.service_record("x") == "101"
        assert two.update_service_record("x", lambda old: None) is None and one.service_record("x") is None
        assert one.service_record("embedder") is None  # (the memory's own meta is apart)
        for bad in ("", "x" * 201):
            with pytest.raises(InvalidInput):
                one.service_record(bad)
        # an inspector session made through one replica is open on the other, and ends on both
        keys = KeyRing({hash_key(KEY): "a"})
        s1, s2 = SessionStore(lambda: one, keys), SessionStore(lambda: two, keys)
        token = s1.create("a", hash_key(KEY))
        got = s2.open(token)
        assert got is not None and got.caller.tenant == "a"
        s2.revoke(token)
        assert s1.open(token) is None


def test_service_logs_append_in_commit_order_across_handles(db: str) -> None:
    with Memory(db, embedder="hashing") as one, Memory(db, embedder="hashing") as two:
        assert one.service_log("log") == ([], 0)

        def append(m: Memory, who: str) -> None:
            for i in range(20):
                m.append_service_log("log", f"{who}{i}")

        threads = [threading.Thread(target=append, args=(m, w)) for m, w in ((one, "a"), (two, "b"), (one, "c"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        page, total = two.service_log("log", after=0, limit=1000)
        assert total == 60 and [n for n, _ in page] == list(range(1, 61))
        for w in "abc":  # each writer's entries in its own order
            assert [v for _, v in page if v[0] == w] == [f"{w}{i}" for i in range(20)]
        assert one.service_log("log", after=55, limit=3) == (page[55:58], 60)
        assert one.service_log("other") == ([], 0)
        for bad in ({"after": -1}, {"limit": 0}, {"limit": 1001}):
            with pytest.raises(InvalidInput):
                one.service_log("log", **bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            one.append_service_log("log", "")
        with pytest.raises(InvalidInput, match="'#'"):
            one.service_record("log#n")  # (a log's own records are out of reach)
