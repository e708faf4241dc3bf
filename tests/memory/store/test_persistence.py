"""Memory persistence: the exact state on reopen, the embedder a database remembers, access bumps
written by flush / close (these on SQLite and PostgreSQL: the tests taking ``db``), atomic add
and crash-consistent end_session under kill -9."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import lamina
from lamina import Memory, MemoryConfig
from lamina.memory.types import LAYERS
from memkit import T0, check_tree, fill, item_rows, public_view, rows

QUERIES = ["Where does Alice live now?", "dog", "nurse job"]


def test_reopen_restores_exact_state(db: str) -> None:
    p = db
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=4, max_segment_turns=2)
    with Memory(p, embedder="hashing", config=cfg) as m:
        fill(m)
        ctx_before = m.context("Where does Alice live now?", user_id="alice", now=T0 + 1e6)
        ids = sorted(item_rows(p))
        # includes the access bumps of that context (in memory until the close writes them)
        before = public_view(m, ids, QUERIES, ["alice", "bob"])
        assert any(it.access_count for it in before["items"].values())
    with Memory(p, embedder="hashing", config=cfg) as m2:
        after = public_view(m2, ids, QUERIES, ["alice", "bob"])
        ctx_after = m2.context("Where does Alice live now?", user_id="alice", now=T0 + 1e6)
        # the live session is still open and continues where it was
        assert m2.stats(user_id="alice").open_sessions == 1
        assert [it.text for it in m2.search("live session", user_id="alice", layers=["working"])] == [
            "Still in the live session."
        ]
    assert before.keys() == after.keys()
    for k in before:
        assert before[k] == after[k], k
    assert [(it.id, round(it.score, 6)) for it in ctx_before.items] == [
        (it.id, round(it.score, 6)) for it in ctx_after.items
    ]
    assert ctx_before.render() == ctx_after.render()


def test_reopen_with_other_embedder_refused(db: str) -> None:
    p = db
    with Memory(p, embedder="hashing") as m:
        m.add([{"speaker": "A", "text": "hello"}], user_id="u", session_id="s")
    with pytest.raises(lamina.InvalidInput, match="embedder"):
        Memory(p, embedder="hashing-128")
    with Memory(p, embedder="hashing") as m:  # the refused open left the file usable
        assert m.stats().archive_turns == 1


def test_flush_writes_access_bumps(db: str) -> None:
    p = db
    m = Memory(p, embedder="hashing")
    (i,) = m.add([{"speaker": "A", "text": "my parrot is called Kiwi"}], user_id="u", session_id="s", timestamp=T0)
    m.context("parrot Kiwi", user_id="u", now=T0 + 5)
    assert m.get(i).access_count == 1 and item_rows(p)[i]["access_count"] == 0  # reads stay off the disk path
    m.flush()
    assert (item_rows(p)[i]["access_count"], item_rows(p)[i]["last_access"]) == (1, T0 + 5)
    m.close()


_CHILD = textwrap.dedent("""
    import sys
    from lamina import Memory, MemoryConfig
    path, mode = sys.argv[1], sys.argv[2]
    m = Memory(path, embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2,
                                                             episodic_capacity=6))
    start = len(m.users()) and m.stats().archive_turns
    for b in range(10_000):
        n = start + b
        msgs = [{"speaker": "Ann", "text": f"batch {n} line {j}: I moved to city{n % 7}.", "id": f"b{n}:{j}"}
                for j in range(3)]
        m.add(msgs, user_id="ann", session_id=f"s{n // 4}", timestamp=1.7e9 + n)
        print("ACK", n, flush=True)
        if mode == "end" and n % 4 == 3:
            m.end_session(user_id="ann", session_id=f"s{n // 4}")
            print("END", n // 4, flush=True)
""")


def _run_and_kill(db: Path | str, mode: str, seed: int) -> list[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    p = subprocess.Popen([sys.executable, "-c", _CHILD, str(db), mode], stdout=subprocess.PIPE, text=True, env=env)
    rng = random.Random(seed)
    lines: list[str] = []
    deadline = time.monotonic() + rng.uniform(0.8, 2.0)
    assert p.stdout is not None
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
    p.send_signal(signal.SIGKILL)
    rest = p.stdout.read()
    lines.extend(x.strip() for x in rest.splitlines() if x.strip())
    p.stdout.close()
    p.wait()
    return lines


def _check_consistent(db: Path | str, acked: set[int], ended: set[int]) -> None:
    if not acked:
        return
    recs = item_rows(db)
    turns = {r["source_id"]: r for r in recs.values() if r["kind"] == "turn"}
    for n in acked:
        for j in range(3):  # every acknowledged turn, with its exact text
            assert turns[f"b{n}:{j}"]["text"] == f"batch {n} line {j}: I moved to city{n % 7}."
    batches: dict[int, int] = {}
    for sid in (x for x in turns if x.startswith("b")):
        b = int(sid[1:].split(":")[0])
        batches[b] = batches.get(b, 0) + 1
    assert all(v == 3 for v in batches.values())  # add is all-or-nothing
    status = {r["session_id"]: r["status"] for r in rows(db, "SELECT session_id, status FROM sessions")}
    for s in ended:
        assert status[f"s{s}"] == "ended"
    # structural invariants of whatever state was committed last
    check_tree(db, "ann")
    for r in recs.values():
        if r["kind"] == "segment":
            assert all(x in recs for x in r["members"])
    # A-Mem notes are written with their turns: one per turn, none without its turn, links
    # between turns that exist
    turn_ids = {r["id"] for r in turns.values()}
    assert sorted(r["item_id"] for r in rows(db, "SELECT item_id FROM notes")) == sorted(turn_ids)
    links = rows(db, "SELECT src, dst FROM links")
    assert links and all(x["src"] in turn_ids and x["dst"] in turn_ids for x in links)
    assert {r["item_id"] for r in rows(db, "SELECT item_id FROM note_revisions")} <= turn_ids
    with Memory(
        db, embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2, episodic_capacity=6)
    ) as m:
        # every active item is indexed: the searches of its layer find it
        active = {i for i, r in recs.items() if r["status"] == "active"}
        found = {it.id for L in LAYERS for it in m.search("city", user_id="ann", k=len(recs) + 1, layers=[L])}
        assert found == active
        assert m.stats().archive_turns == len(turns)
        # and the database is usable: keep going
        m.add([{"speaker": "Ann", "text": "after the crash"}], user_id="ann", session_id="after", timestamp=2e9)
        m.end_session(user_id="ann", session_id="after")
        assert not m.context("batch line: I moved to city3.", user_id="ann").abstain


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["add", "end"])
def test_kill9_at_random_points(db: str, mode: str) -> None:
    """A writer killed (SIGKILL) mid-write: on SQLite the file, on PostgreSQL the server (which
    aborts the dead client's transaction and frees its write lock) keeps every acknowledged add
    exactly once, all-or-nothing batches and a consistent tree; the next handle goes on."""
    acked: set[int] = set()
    ended: set[int] = set()
    for round_ in range(3):
        for line in _run_and_kill(db, mode, seed=round_ + (10 if mode == "end" else 0)):
            kind, n = line.split()
            (acked if kind == "ACK" else ended).add(int(n))
        _check_consistent(db, acked, ended)
    assert acked  # the child made progress
    if mode == "end":
        assert ended
