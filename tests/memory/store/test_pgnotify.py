"""LISTEN / NOTIFY on PostgreSQL (lamina.memory.store.pgnotify): a write announces its users at commit
(none for a write that rolls back); a handle that listens catches a notified user up in the
background, so its state is current before its next call, without that handle writing or
reading; a lost listening connection is reconnected and never breaks a call; the per-call
version check stays the guard."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from lamina import InvalidInput, Memory
from lamina.memory.store.pgnotify import parse_notice
from lamina.memory.store.pgschema import CHANNEL, notice_payload
from memkit import T0

WAIT = 15.0  # seconds a test waits for a notice's effect (arrives in milliseconds on an idle machine)


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"not within {WAIT:g} s: {what}")
        time.sleep(0.01)


def turn(text: str, i: int) -> list[dict[str, object]]:
    return [{"speaker": "Ann", "text": text, "id": f"m{i}", "timestamp": T0 + 60 * i}]


def write_in_another_process(url: str, user: str, text: str) -> int:
    """Add one turn through a Memory in a separate Python process; the new item's id."""
    code = (
        "import sys; from lamina import Memory\n"
        "m = Memory(sys.argv[1], embedder='hashing', listen=False)\n"
        "print(m.add([{'speaker': 'Ann', 'text': sys.argv[3], 'timestamp': 1.7e9}],"
        " user_id=sys.argv[2], session_id='p')[0])\n"
        "m.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, url, user, text], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_notice_payloads_name_the_write_and_the_user() -> None:
    assert parse_notice(notice_payload(42, "ann")) == (42, "ann")
    assert parse_notice(notice_payload(7, "a user with spaces")) == (7, "a user with spaces")
    long_id = "x" * 9000  # (no NOTIFY payload holds it: the notice names the write only)
    assert parse_notice(notice_payload(3, long_id)) == (3, None)
    assert parse_notice("not lamina's") is None and parse_notice("") is None


def test_a_write_in_another_process_is_caught_up_here_without_a_call(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing") as b:
        assert b.listener is not None and b.listener.wait_listening(WAIT)
        b.add(turn("I keep bees in the garden.", 0), user_id="ann", session_id="s")
        before = b._st.users["ann"].version
        received = b.listener.received
        new_id = write_in_another_process(pg_url, "ann", "My sister lives in Oslo.")
        # B makes no call: the notice alone brings its state of ann to the write
        wait_for(lambda: new_id in b._st.recs, "the other process's turn in b's state")
        with b._lock:  # (the listener thread catches up under it: its whole change, or none)
            assert b._st.users["ann"].version > before and b.listener.received > received
        with psycopg.connect(pg_url) as conn:
            (stored,) = conn.execute("SELECT version FROM lamina.users WHERE user_id='ann'").fetchone() or (None,)
        assert b._st.users["ann"].version == stored
        assert "Oslo" in b.context("Where does the sister live?", user_id="ann").render()


def test_two_handles_a_user_new_to_b_and_a_deleted_user(pg_url: str) -> None:
    a = Memory(pg_url, embedder="hashing", listen=False)
    b = Memory(pg_url, embedder="hashing")
    try:
        assert b.listener is not None and b.listener.wait_listening(WAIT)
        a.add(turn("My cat is called Misty.", 1), user_id="cat", session_id="s")
        wait_for(lambda: "cat" in b._st.unloaded, "a user b never loaded, known after the notice")
        assert "cat" in b.users()
        b.context("cat", user_id="cat")  # (loaded now)
        a.delete_user(user_id="cat")

        def gone() -> bool:  # (under b's lock: its listener thread may be mid catch-up)
            with b._lock:
                return "cat" not in b._st.users and "cat" not in b._st.unloaded

        wait_for(gone, "the deleted user gone from b")
        with b._lock:
            assert not any(r.user_id == "cat" for r in b._st.recs.values())
    finally:
        a.close()
        b.close()


def test_a_rolled_back_write_sends_no_notice(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing", listen=False) as m, psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        with pytest.raises(InvalidInput):
            m.add(turn("a NUL \x00 PostgreSQL refuses", 2), user_id="ann", session_id="s")
        m.add(turn("a turn that commits", 3), user_id="ann", session_id="s")
        got = [parse_notice(n.payload) for n in conn.notifies(timeout=2.0, stop_after=2)]
        assert got == [(m._st.users["ann"].version, "ann")]


def test_a_lost_listening_connection_is_reconnected_and_calls_go_on(pg_url: str) -> None:
    a = Memory(pg_url, embedder="hashing", listen=False)
    b = Memory(pg_url, embedder="hashing")
    errors: list[BaseException] = []
    stop = threading.Event()
    try:
        listener = b.listener
        assert listener is not None and listener.wait_listening(WAIT)
        a.add(turn("I play the cello on Sundays.", 4), user_id="ann", session_id="s")
        b.context("cello", user_id="ann")

        def reader() -> None:  # b serves calls all along
            while not stop.is_set():
                try:
                    b.context("What does Ann play?", user_id="ann")
                except BaseException as e:  # pragma: no cover - the failure the test looks for
                    errors.append(e)
                    return

        t = threading.Thread(target=reader)
        t.start()
        for kill in range(2):  # the server ends the listener's session, twice
            pid = listener.backend_pid()
            assert pid is not None
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_for(lambda w=2 + kill: listener.connects >= w and listener.listening, "the listener reconnected")
            assert listener.backend_pid() != pid
        assert listener.failures >= 2
        new = a.add(turn("I moved to Lisbon in May.", 5), user_id="ann", session_id="s")[0]
        wait_for(lambda: new in b._st.recs, "a write after the reconnection caught up by its notice")
        stop.set()
        t.join(WAIT)
        assert not errors
        assert "Lisbon" in b.context("I moved to Lisbon", user_id="ann").render()
    finally:
        stop.set()
        a.close()
        b.close()


def test_without_notices_every_call_still_sees_the_writes(pg_url: str) -> None:
    """The guard is the per-call version check: a handle that does not listen (or whose notices
    were lost) reads every acknowledged write of another handle in its next call."""
    with Memory(pg_url, embedder="hashing", listen=False) as a, Memory(pg_url, embedder="hashing", listen=False) as b:
        assert a.listener is None and b.listener is None
        a.add(turn("I grow tomatoes.", 6), user_id="ann", session_id="s")
        b.context("tomatoes", user_id="ann")
        new = a.add(turn("I bought a red bicycle.", 7), user_id="ann", session_id="s")[0]
        time.sleep(0.2)
        assert new not in b._st.recs  # (nothing woke b)
        assert "bicycle" in b.context("a red bicycle", user_id="ann").render()
        assert new in b._st.recs
