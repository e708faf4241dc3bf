"""Memory persistence: exact state on reopen, atomic add, crash-consistent end_session."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina import Memory, MemoryConfig

T0 = 1_683_550_000.0
LINES = ["I moved to Paris last spring.", "My dog is called Max.", "The weather is nice.", "I work as a nurse.",
         "We watched a movie.", "I moved to Berlin for a job.", "Let's get coffee soon.", "I love hiking."]


def _snapshot(m: Memory) -> dict[str, Any]:
    """Everything that defines the state: records, vectors of active items, indexes, drift."""
    recs = {}
    for i, r in m._recs.items():
        d = {k: getattr(r, k) for k in r.FIELDS}  # (not the read-path render caches)
        d["sources"] = tuple(d["sources"])
        d["vec"] = m._vec(r).tobytes() if r.status == "active" else None
        recs[i] = d
    users = {uid: (u.idx, {s: list(q) for s, q in u.working.items()},
                   {p: list(k) for p, k in u.children.items() if k}, {k: list(v) for k, v in u.current.items() if v},
                   dict(u.profiles), u.drift_total, u.drift_last, u.drift_updates, dict(u.n_active))
             for uid, u in m._users.items()}
    return {"recs": recs, "users": users, "sessions": dict(m._sessions)}


def _fill(m: Memory) -> None:
    for s in range(3):
        for u in ("alice", "bob"):
            m.add([{"speaker": u.title(), "text": LINES[(s * 3 + j) % len(LINES)], "id": f"{u}{s}:{j}"}
                   for j in range(5)], u, f"s{s}", timestamp=T0 + s * 86400)
            m.context("where does she live", u, now=T0 + s * 86400 + 100)
            m.end_session(u, f"s{s}")
    m.add([{"speaker": "Alice", "text": "Still in the live session."}], "alice", "s9", timestamp=T0 + 9e5)


def test_reopen_restores_exact_state(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    cfg = MemoryConfig(working_capacity=4, episodic_capacity=4, max_segment_turns=2)
    with Memory(p, embedder="hashing", config=cfg) as m:
        _fill(m)
        ctx_before = m.context("Where does Alice live now?", "alice", now=T0 + 1e6)
        before = _snapshot(m)  # includes the access bumps of that context
    with Memory(p, embedder="hashing", config=cfg) as m2:
        after = _snapshot(m2)
        ctx_after = m2.context("Where does Alice live now?", "alice", now=T0 + 1e6)
    assert before["users"] == after["users"] and before["sessions"] == after["sessions"]
    assert before["recs"].keys() == after["recs"].keys()
    for i in before["recs"]:
        assert before["recs"][i] == after["recs"][i], i
    assert [(it.id, round(it.score, 6)) for it in ctx_before.items] == [(it.id, round(it.score, 6)) for it in ctx_after.items]
    assert ctx_before.render() == ctx_after.render()


def test_reopen_with_other_embedder_refused(tmp_path: Path) -> None:
    p = tmp_path / "m.db"
    with Memory(p, embedder="hashing") as m:
        m.add([{"speaker": "A", "text": "hello"}], "u", "s")
    with pytest.raises(ValueError, match="embedder"):
        Memory(p, embedder="hashing-128")


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    class Boom:
        calls = 0

        def summarize(self, turns: Any, max_words: int) -> str:
            Boom.calls += 1
            if Boom.calls > 1:
                raise RuntimeError("summariser exploded")
            return "ok"

    p = tmp_path / "m.db"
    m = Memory(p, embedder="hashing", config=MemoryConfig(working_capacity=4), summarizer=Boom())
    m.add([{"speaker": "A", "text": f"line {i}"} for i in range(3)], "u", "s", timestamp=T0)
    before = _snapshot(m)
    with pytest.raises(RuntimeError):
        m.add([{"speaker": "A", "text": f"more {i}"} for i in range(6)], "u", "s", timestamp=T0 + 1)  # overflow
    assert _snapshot(m) == before
    with pytest.raises(RuntimeError):
        m.end_session("u", "s")
    assert _snapshot(m) == before
    m.close()
    with Memory(p, embedder="hashing", config=MemoryConfig(working_capacity=4)) as m2:
        assert _snapshot(m2) == before


_CHILD = textwrap.dedent("""
    import sys
    from lamina import Memory, MemoryConfig
    path, mode = sys.argv[1], sys.argv[2]
    m = Memory(path, embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2,
                                                             episodic_capacity=6))
    start = len(m.users()) and m.stats()["archive_turns"]
    for b in range(10_000):
        n = start + b
        msgs = [{"speaker": "Ann", "text": f"batch {n} line {j}: I moved to city{n % 7}.", "id": f"b{n}:{j}"}
                for j in range(3)]
        m.add(msgs, "ann", f"s{n // 4}", timestamp=1.7e9 + n)
        print("ACK", n, flush=True)
        if mode == "end" and n % 4 == 3:
            m.end_session("ann", f"s{n // 4}")
            print("END", n // 4, flush=True)
""")


def _run_and_kill(db: Path, mode: str, seed: int) -> list[str]:
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


def _check_consistent(db: Path, acked: set[int], ended: set[int]) -> None:
    with Memory(db, embedder="hashing", config=MemoryConfig(working_capacity=4, max_segment_turns=2,
                                                            episodic_capacity=6)) as m:
        if not acked:
            return
        turns = {r.source_id: r for r in m._recs.values() if r.kind == "turn"}
        for n in acked:
            for j in range(3):  # every acknowledged turn, with its exact text
                assert turns[f"b{n}:{j}"].text == f"batch {n} line {j}: I moved to city{n % 7}."
        batches: dict[int, int] = {}
        for sid in (x for x in turns if x.startswith("b")):
            b = int(sid[1:].split(":")[0])
            batches[b] = batches.get(b, 0) + 1
        assert all(v == 3 for v in batches.values())  # add is all-or-nothing
        for s in ended:
            assert m._sessions[("ann", f"s{s}")][0] == "ended"
        # structural invariants of whatever state was committed last
        u = m._users["ann"]
        for parent, kids in u.children.items():
            for k in kids:
                assert m._recs[k].status == "active" and m._recs[k].parent_id == parent
        for r in m._recs.values():
            if r.status == "active":
                assert r.id in m._vectors
            if r.kind == "segment":
                assert all(x in m._recs for x in r.members)
        # and the database is usable: keep going
        m.add([{"speaker": "Ann", "text": "after the crash"}], "ann", "after", timestamp=2e9)
        m.end_session("ann", "after")
        assert not m.context("batch line: I moved to city3.", "ann").abstain


@pytest.mark.parametrize("mode", ["add", "end"])
def test_kill9_at_random_points(tmp_path: Path, mode: str) -> None:
    db = tmp_path / f"crash-{mode}.db"
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
