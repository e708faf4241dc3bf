"""Several handles (processes, or connections in one process) on one database — a SQLite file or
a PostgreSQL database, the tests taking ``db`` run on both: ids and user namespaces never
collide, a handle catches up with the others' writes before it reads or writes, and a handle
opened before another's delete never serves or re-stores the deleted text."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lamina import Memory, MemoryConfig, NotFoundError
from memkit import DAY, T0

SECRET = "zebracorn-7731"


def _texts(db: str | Path) -> list[str]:
    """Every item's text and summary as stored (read past lamina, with the database's own client)."""
    if str(db).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(db)) as pg:
            return [f"{t}\n{s or ''}" for t, s in pg.execute("SELECT text, summary FROM lamina.items")]
    con = sqlite3.connect(db)
    try:
        return [f"{t}\n{s or ''}" for t, s in con.execute("SELECT text, summary FROM items")]
    finally:
        con.close()


def _writer(path: str | Path, who: int, n: int, shared: bool) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        import lamina
        m = lamina.Memory({str(path)!r}, embedder="hashing")
        for i in range({n}):
            user = "shared" if {shared} else "u{who}"
            m.add([{{"speaker": "P{who}", "text": f"process {who} says {{i}}"}}], user_id=user,
                  session_id="s{who}", timestamp={T0} + i)
        m.close()
        print("ok")
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True], ids=["own-users", "one-user"])
def test_four_processes_add_500_each_without_an_error(db: str, shared: bool) -> None:
    p = db
    Memory(p, embedder="hashing").close()  # create the file (and its embedder) once
    procs = [_writer(p, w, 500, shared) for w in range(4)]
    outs = [pr.communicate(timeout=600) for pr in procs]
    for pr, (out, err) in zip(procs, outs):
        assert pr.returncode == 0 and out.strip() == "ok", err[-2000:]
    with Memory(p, embedder="hashing") as m:
        st = m.stats()
        assert st.archive_turns == 2000 and st.users == (1 if shared else 4)
        for w in range(4):
            user = "shared" if shared else f"u{w}"
            hits = m.search(f"process {w} says", user_id=user, k=600, layers=["archive"])
            assert sum(1 for h in hits if h.text.startswith(f"process {w} says ")) == 500


def test_handles_on_one_file_never_collide_on_ids_or_users(db: str) -> None:
    p = db
    a, b = Memory(p, embedder="hashing"), Memory(p, embedder="hashing")
    ids: list[int] = []
    for i in range(30):
        h = a if i % 2 else b
        ids += h.add([{"speaker": "X", "text": f"turn {i}"}], user_id=f"user{i % 5}", session_id="s", timestamp=T0 + i)
    assert len(set(ids)) == 30
    assert sorted(a.users()) == sorted(b.users()) == [f"user{i}" for i in range(5)]
    for h in (a, b):  # each handle sees every turn, whoever wrote it
        for i in range(5):
            got = {x.text for x in h.search("turn", user_id=f"user{i}", k=50, layers=["archive"])}
            assert got == {f"turn {j}" for j in range(30) if j % 5 == i}
    a.close()
    b.close()
    with Memory(p, embedder="hashing") as m:
        assert m.stats().archive_turns == 30


def test_a_stale_handle_never_serves_or_restores_deleted_text(db: str) -> None:
    p = db
    cfg = MemoryConfig(working_capacity=8)
    early = Memory(p, embedder="hashing", config=cfg)
    lines = ["We planned the trip.", f"The door code is {SECRET}.", "See you on Monday.", "Bring the maps."]
    ids = early.add(
        [{"speaker": "Ann", "text": t, "id": f"D1:{i}"} for i, t in enumerate(lines)],
        user_id="ann",
        session_id="s1",
        timestamp=T0,
    )
    assert SECRET in early.context("door code", user_id="ann", now=T0 + DAY).render()
    other = Memory(p, embedder="hashing", config=cfg)  # another process, say
    other.delete(ids[1], user_id="ann")
    other.close()
    # the early handle has the secret in its working memory; it must catch up first
    assert SECRET not in early.context("door code", user_id="ann", now=T0 + DAY).render()
    assert all(SECRET not in h.text for h in early.search("door code", user_id="ann", k=10, layers=["archive"]))
    with pytest.raises(NotFoundError):
        early.get(ids[1])
    early.add([{"speaker": "Ann", "text": "One more thing."}], user_id="ann", session_id="s1", timestamp=T0 + 60)
    early.end_session(user_id="ann", session_id="s1")  # consolidates the caught-up working memory
    assert SECRET not in early.context("door code", user_id="ann", now=T0 + DAY).render()
    early.close()
    assert not any(SECRET in t for t in _texts(p))
    with Memory(p, embedder="hashing", config=cfg) as m:
        assert SECRET not in m.context("door code", user_id="ann", now=T0 + DAY).render()
        assert m.stats(user_id="ann").archive_turns == 4


def test_a_handle_sees_a_user_deleted_or_created_elsewhere(db: str) -> None:
    p = db
    a = Memory(p, embedder="hashing")
    a.add([{"speaker": "B", "text": "I live in Oslo."}], user_id="bea", session_id="s", timestamp=T0)
    b = Memory(p, embedder="hashing")
    b.delete_user(user_id="bea")
    b.add([{"speaker": "C", "text": "I live in Lima."}], user_id="cai", session_id="s", timestamp=T0)
    assert a.users() == ["cai"]
    with pytest.raises(NotFoundError):  # (a read of the deleted user, as of another handle)
        a.context("where", user_id="bea", now=T0 + 1)
    with pytest.raises(NotFoundError):
        a.end_session(user_id="bea", session_id="s")
    assert "Lima" in a.context("where does C live", user_id="cai", now=T0 + 1).render()
    # a's next write to the deleted user starts the user afresh, with no trace of the old turns
    a.add([{"speaker": "B", "text": "Back again."}], user_id="bea", session_id="s2", timestamp=T0 + 5)
    assert [h.text for h in b.search("again", user_id="bea", k=5, layers=["archive"])] == ["Back again."]
    a.close()
    b.close()


def test_end_session_of_a_session_added_by_another_handle(db: str) -> None:
    p = db
    a, b = Memory(p, embedder="hashing"), Memory(p, embedder="hashing")
    a.users()  # a's state is loaded before b writes
    b.add([{"speaker": "D", "text": "My dog is called Rex."}], user_id="dan", session_id="s1", timestamp=T0)
    rep = a.end_session(user_id="dan", session_id="s1")
    assert rep.segments >= 1
    assert [f.object for f in b.facts(user_id="dan")] == ["Rex"]
    a.close()
    b.close()


def test_a_user_deleted_and_created_again_elsewhere_is_never_taken_as_unchanged(db: str) -> None:
    """Versions are database-wide write numbers: a user deleted and created again by another
    handle cannot come back to the version a stale handle holds (it used to: both were 1)."""
    p = db
    a = Memory(p, embedder="hashing")
    a.add([{"speaker": "U", "text": f"my secret password is {SECRET}"}], user_id="u", session_id="s1", timestamp=T0)
    b = Memory(p, embedder="hashing")
    b.delete_user(user_id="u")
    b.add([{"speaker": "U", "text": "hello again"}], user_id="u", session_id="s2", timestamp=T0 + 5)
    assert [h.text for h in a.search("password", user_id="u", k=10, layers=["archive"])] == ["hello again"]
    with pytest.raises(NotFoundError):
        a.end_session(user_id="u", session_id="s1")  # that session went with the user
    a.end_session(user_id="u", session_id="s2")
    a.close()
    b.close()
    assert not any(SECRET in t for t in _texts(p))


def test_a_write_blocked_by_a_slow_writer_raises_store_busy(db: str) -> None:
    """A write that waits longer than busy_timeout for another connection's write raises
    lamina.StoreBusy (nothing written), not a raw sqlite3 error."""
    import threading

    from lamina import StoreBusy
    from lamina.llm.extract import ExtractiveSummarizer

    p = db
    started, release = threading.Event(), threading.Event()

    class Slow(ExtractiveSummarizer):
        def summarize(self, turns, max_words=60):  # type: ignore[no-untyped-def]
            started.set()
            release.wait(30)
            return super().summarize(turns, max_words)

    slow = Memory(p, embedder="hashing", summarizer=Slow())
    slow.add([{"speaker": "A", "text": "We went hiking in the hills."}], user_id="a", session_id="s", timestamp=T0)
    other = Memory(p, embedder="hashing", busy_timeout=0.2)
    worker = threading.Thread(target=lambda: slow.end_session(user_id="a", session_id="s"))
    worker.start()
    assert started.wait(30)
    try:
        with pytest.raises(StoreBusy):
            other.add([{"speaker": "B", "text": "Hello."}], user_id="b", session_id="s", timestamp=T0)
    finally:
        release.set()
        worker.join(60)
    assert other.users() == ["a"]  # the refused add wrote nothing
    other.add([{"speaker": "B", "text": "Hello."}], user_id="b", session_id="s", timestamp=T0)  # now it can
    assert other.users() == ["a", "b"]
    slow.close()
    other.close()


def test_a_wipe_that_ran_while_another_delete_committed_does_not_cover_it(tmp_path: Path) -> None:
    """Each delete counts a wipe generation; a wipe records only the generation it covered, so a
    delete committed during another handle's wipe (and blocked by a reader) is still wiped by a
    later write."""
    p = tmp_path / "m.db"
    a, c = Memory(p, embedder="hashing"), Memory(p, embedder="hashing")
    a_ids = a.add([{"speaker": "U", "text": "alpha one"}], user_id="u", session_id="s", timestamp=T0)
    c_ids = c.add([{"speaker": "V", "text": f"the vault code is {SECRET}"}], user_id="v", session_id="s", timestamp=T0)
    reader = sqlite3.connect(p, isolation_level=None)
    real = a._store.forget  # (the interleaving is forced: a's wipe, then a reader and c's delete)

    def forget_then_interleave() -> bool:
        ok = real()
        reader.execute("BEGIN")
        reader.execute("SELECT 1 FROM items").fetchone()
        c.delete(c_ids[0], user_id="v")  # its own wipe is blocked by the reader
        reader.execute("COMMIT")
        return ok

    a._store.forget = forget_then_interleave  # type: ignore[method-assign]
    a.delete(a_ids[0], user_id="u")
    a._store.forget = real  # type: ignore[method-assign]
    a.add([{"speaker": "U", "text": "a later write"}], user_id="u", session_id="s", timestamp=T0 + 1)
    for f in (p, Path(f"{p}-wal")):
        assert not f.exists() or SECRET.encode() not in f.read_bytes(), f
    reader.close()
    a.close()
    c.close()


def test_a_delete_does_not_wait_for_a_reader_to_wipe_the_log(tmp_path: Path) -> None:
    """The WAL truncation after a delete does not wait for another connection's read (it used
    to wait the whole busy timeout, holding the write lock; with busy_timeout=60 a delete took a
    minute): the delete returns, the wipe is retried by a later write."""
    import threading

    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", busy_timeout=60)
    (sid,) = m.add([{"speaker": "U", "text": f"code {SECRET}"}], user_id="u", session_id="s", timestamp=T0)
    reader = sqlite3.connect(p, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM items").fetchone()
    worker = threading.Thread(target=lambda: m.delete(sid, user_id="u"))
    worker.start()
    worker.join(20)  # (a generous bound: the point is that it does not wait 60 s)
    finished = not worker.is_alive()
    reader.execute("COMMIT")
    reader.close()
    worker.join()
    assert finished
    m.add([{"speaker": "U", "text": "later"}], user_id="u", session_id="s", timestamp=T0 + 1)
    assert SECRET.encode() not in Path(f"{p}-wal").read_bytes()
    m.close()


_REPLICA = textwrap.dedent(
    """
    import json, sys
    import lamina
    m = lamina.Memory(sys.argv[1], embedder="hashing")
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "add":
            out = m.add([{"speaker": "Ann", "text": cmd["text"]}], user_id=cmd["user"], session_id="s",
                        timestamp=cmd["t"])
        elif cmd["op"] == "delete":
            m.delete(cmd["id"], user_id=cmd["user"])
            out = None
        elif cmd["op"] == "search":
            out = [h.text for h in m.search(cmd["q"], user_id=cmd["user"], k=1000, layers=["archive", "working"])]
        else:
            out = m.context(cmd["q"], user_id=cmd["user"], budget=4000, now=cmd["t"]).render()
        print(json.dumps(out), flush=True)
    m.close()
    """
)


class _Replica:
    """A Memory in another process, driven one command at a time (each call returns once the
    process acknowledged it: a write acknowledged is committed)."""

    def __init__(self, db: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _REPLICA, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def __call__(self, **cmd: object) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the replica died (exit {self.proc.poll()})"
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(60)
        self.proc.stdout.close()
        assert code == 0


def test_two_processes_read_each_others_writes_and_never_serve_an_acknowledged_delete(db: str) -> None:
    """Two processes on one database, each with its own in-memory state: a write acknowledged by
    one is in the very next read of the other (read-your-writes across handles), and an item
    deleted through one is never served by the other afterwards — not by search, not by a
    context, though the other process had it loaded (in working memory and the archive)."""
    Memory(db, embedder="hashing").close()  # (the embedder is recorded once)
    a, b = _Replica(db), _Replica(db)
    try:
        for i in range(6):
            writer, reader = (a, b) if i % 2 == 0 else (b, a)
            text = f"note {i}: the locker code is {SECRET}-{i}"
            (tid,) = writer(op="add", user="u", text=text, t=T0 + i)
            assert text in reader(op="search", user="u", q=f"locker code {i}")  # the next read sees it
            assert f"{SECRET}-{i}" in reader(op="context", user="u", q="locker code", t=T0 + DAY)
            deleter = reader if i % 3 else writer  # the reader or the writer deletes it
            deleter(op="delete", user="u", id=tid)
            for h in (a, b):  # gone everywhere, from the next read on
                assert all(f"{SECRET}-{i}" not in t for t in h(op="search", user="u", q=f"locker code {i}"))
                assert f"{SECRET}-{i}" not in h(op="context", user="u", q="locker code", t=T0 + DAY)
        assert len(a(op="search", user="u", q="note")) == 0
    finally:
        a.close()
        b.close()
    assert not any(SECRET in t for t in _texts(db))


def test_lamina_writers_queue_on_the_lock_file_beside_the_database(tmp_path: Path) -> None:
    """Every lamina write takes the writers' lock (an exclusive flock on ``<database>-lock``):
    while another process holds it, a write waits, and past busy_timeout raises StoreBusy
    having written nothing; once it is given back, writes go through."""
    import fcntl
    import os

    from lamina import StoreBusy

    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", busy_timeout=0.3)
    m.add([{"speaker": "A", "text": "We went hiking."}], user_id="a", session_id="s", timestamp=T0)
    lock = Path(f"{p}-lock")
    assert lock.exists() and lock.stat().st_size == 0  # (an empty file: nothing of the data)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys\n"
            f"fd = os.open({str(lock)!r}, os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusy, match="busy_timeout"):
            m.add([{"speaker": "B", "text": "Hello."}], user_id="b", session_id="s", timestamp=T0)
        assert m.users() == ["a"]
    finally:
        holder.communicate("\n", timeout=30)
    m.add([{"speaker": "B", "text": "Hello."}], user_id="b", session_id="s", timestamp=T0)
    assert m.users() == ["a", "b"]
    # the lock is free between writes: another process takes it without waiting
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    m.close()


def test_a_child_forked_during_a_write_does_not_keep_the_writers_lock(tmp_path: Path) -> None:
    """A flock is inherited by a fork()ed child (SQLite's own locks are not): a child forked
    while a write holds the writers' lock closes its copy, so the lock is free once the
    parent's write ends, while the child lives on."""
    import fcntl
    import os
    import signal
    import warnings

    from lamina.llm.extract import ExtractiveSummarizer

    children: list[int] = []

    class Forking(ExtractiveSummarizer):
        def summarize(self, turns, max_words=60):  # type: ignore[no-untyped-def]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # (fork of a threaded process)
                pid = os.fork()
            if pid == 0:  # the child: outlive the parent's write, then leave without cleanup
                import time

                time.sleep(30)
                os._exit(0)
            children.append(pid)
            return super().summarize(turns, max_words)

    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", summarizer=Forking())
    m.add([{"speaker": "A", "text": "We went hiking in the hills."}], user_id="a", session_id="s", timestamp=T0)
    try:
        m.end_session(user_id="a", session_id="s")  # (the summariser runs inside the write)
        assert children, "the summariser was not called inside end_session"
        fd = os.open(f"{p}-lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the child kept it
        finally:
            os.close(fd)
        m.add([{"speaker": "B", "text": "Hello."}], user_id="b", session_id="s", timestamp=T0)
        assert m.users() == ["a", "b"]
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        m.close()
