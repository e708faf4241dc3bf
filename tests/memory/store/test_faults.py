"""Faults (#14): what the store promises when several processes (and threads) share one SQLite
file and processes die at any moment. Only the public API is used to write and read; the files
are read as bytes to check that deleted text is gone from them.

* two writer processes, one of them also deleting (its own turns and the other's), SIGKILLed
  at random moments: every acknowledged add is there unless its delete was acknowledged, no
  acknowledged-deleted text is shown or left in the files, the store opens cleanly and takes
  further writes;
* a reader process whose state holds a secret that another process then deletes: it never
  shows it again, its later writes do not bring it back, and no store file holds it;
* threads sharing one handle next to another process, mixed operations: no exception, exact
  counts;
* a reproducer of a bug the model check (test_model_check.py) found.

Every text carries a unique token (``Kq<n>x``), so any text shown is traced to its turn."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lamina import Memory, MemoryConfig, NotFoundError
from lamina.memory.types import LAYERS
from memkit import FACT_TEMPLATES, T0, check_tree, token_numbers

#: The bug test_end_session_after_deleting_a_turn_of_a_subtree reproduces: an end_session after
#: some deletes raises a raw KeyError (and writes nothing). Until it is fixed, the writers here
#: accept it; set to False with the fix.
TOLERATE_ORPHANED_SUBTREE = False
CFG_ARGS = "working_capacity=4, episodic_capacity=6, semantic_capacity=6"
CFG = MemoryConfig(working_capacity=4, episodic_capacity=6, semantic_capacity=6)
TOKEN = re.compile(r"kq(\d+)x")
TEMPLATES = list(FACT_TEMPLATES)


def tokens(text: str | None) -> set[int]:
    return token_numbers(text, TOKEN)


def shown_tokens(m: Memory, user: str, queries: list[str]) -> set[int]:
    """Every token ``user``'s memory shows: searches of every layer, facts (history too),
    contexts for the queries and the histories of their items."""
    out: set[int] = set()

    def add(it: Any) -> None:
        out.update(tokens(it.text), tokens(it.summary), tokens(it.object))
        for _t, _sp, tx in it.turns:
            out.update(tokens(tx))

    k = m.stats(user_id=user).items + 10
    for L in LAYERS:
        for it in m.search("anything at all", user_id=user, k=k, layers=[L]):
            assert it.user_id == user
            add(it)
    for it in m.facts(user_id=user, current=False):
        add(it)
    for q in queries:
        ctx = m.context(q, user_id=user, budget=1024)
        out.update(tokens(ctx.render()))
        for it in ctx.items:
            add(it)
            for h in m.history(it.id):
                add(h)
    return out


def store_files(path: Path) -> list[Path]:
    return sorted(f for f in path.parent.iterdir() if f.name.startswith(path.name))


def leaks(path: Path, needles: list[str]) -> list[str]:
    """(file: needle) for every needle (UTF-8) that occurs in some store file."""
    out = []
    for f in store_files(path):
        data = f.read_bytes()
        out += [f"{f.name}: {n}" for n in needles if n.encode() in data]
    return out


def integrity(path: Path) -> str:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return env


# ----------------------------------------------------------------------- kill -9, two writers
_WRITER = textwrap.dedent(
    """
    import random, re, sys
    from lamina import Memory, MemoryConfig, NotFoundError
    path, who, rnd, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    T = {templates!r}
    rng = random.Random(seed)
    m = Memory(path, embedder="hashing", config=MemoryConfig({cfg}))
    print("OPEN", flush=True)
    mine = []  # ids this process added (acknowledged)
    for n in range(1_000_000):
        user = rng.choice([f"w{{who}}", "shared"])
        sess = f"w{{who}}r{{rnd}}s{{n // 4}}"
        toks = [((rnd * 100_000 + n) * 4 + j) * 2 + who for j in range(rng.randint(1, 3))]
        msgs = [{{"speaker": f"P{{who}}", "text": T[t % 4].format(t=f"Kq{{t}}x")}} for t in toks]
        ids = m.add(msgs, user_id=user, session_id=sess, timestamp=1.7e9 + rnd * 1e5 + n)
        print("ADD", user, " ".join(f"{{i}}:{{t}}" for i, t in zip(ids, toks)), flush=True)
        mine += ids
        if n % 4 == 3:
            for u in (f"w{{who}}", "shared"):
                try:
                    m.end_session(user_id=u, session_id=sess)
                    print("END", u, sess, flush=True)
                except NotFoundError:
                    pass  # no turn of this session went to that user
                except KeyError:  # the known bug (see TOLERATE_ORPHANED_SUBTREE); nothing written
                    if not {tolerate}:
                        raise
                    print("KNOWNBUG", u, sess, flush=True)
        if who == 1 and n % 3 == 2:  # the deleter: one of its own turns, or any shared turn
            if rng.random() < 0.5:
                pool = [h.id for h in m.search("x", user_id="shared", k=10_000, layers=["archive"])]
            else:
                pool = mine
            if pool:
                victim = rng.choice(pool)
                try:
                    tok = re.search(r"Kq(\\d+)x", m.get(victim).text).group(1)
                except NotFoundError:
                    continue
                print("TRY", victim, flush=True)
                m.delete(victim)
                print("DEL", f"{{victim}}:{{tok}}", flush=True)
    """
).format(templates=TEMPLATES, cfg=CFG_ARGS, tolerate=TOLERATE_ORPHANED_SUBTREE)


class Acks:
    """What the writers acknowledged (each line printed after the call returned)."""

    def __init__(self) -> None:
        self.added: dict[int, tuple[str, int]] = {}  # id -> (user, token)
        self.deleted: dict[int, int] = {}  # id -> token
        self.tried: set[int] = set()  # deletes started (maybe committed, maybe not)
        self.ended: set[tuple[str, str]] = set()

    def read(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "ADD":
            for pair in rest[1:]:
                i, t = pair.split(":")
                self.added[int(i)] = (rest[0], int(t))
        elif kind == "DEL":
            i, t = rest[0].split(":")
            self.deleted[int(i)] = int(t)
        elif kind == "TRY":
            self.tried.add(int(rest[0]))
        elif kind == "END":
            self.ended.add((rest[0], rest[1]))


def _round(path: Path, rnd: int, rng: random.Random, acks: Acks) -> None:
    """Both writers start; each is SIGKILLed at its own random moment."""
    procs, lines, readers = [], [], []
    for who in (0, 1):
        p = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(who), str(rnd), str(rng.randrange(1 << 30))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        got: list[str] = []
        th = threading.Thread(target=lambda p=p, got=got: got.extend(p.stdout), daemon=True)  # type: ignore[union-attr]
        th.start()
        procs.append(p)
        lines.append(got)
        readers.append(th)
    start = time.monotonic()
    kills = sorted((rng.uniform(0.35, 1.6), i) for i in range(2))
    for at, i in kills:
        time.sleep(max(0.0, start + at - time.monotonic()))
        procs[i].send_signal(signal.SIGKILL)
    for p, th in zip(procs, readers):
        p.wait()
        th.join(10)
        err = p.stderr.read()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
        p.stdout.close()  # type: ignore[union-attr]
        # killed, never failed on its own (a traceback is a bug: locked database, KeyError, ...)
        assert p.returncode == -signal.SIGKILL, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
    for got in lines:
        for line in got:
            if line.endswith("\n"):  # a line cut by the kill was not acknowledged
                acks.read(line)


def _check_after_kills(path: Path, acks: Acks, watcher: Memory) -> None:
    assert integrity(path) == "ok"
    dead = set(acks.deleted.values())
    dead_ids = set(acks.deleted)
    with Memory(path, embedder="hashing", config=CFG) as m:
        for h in (m, watcher):  # a fresh handle, and one open since the start (stale each round)
            for iid, (user, tok) in acks.added.items():
                if iid in dead_ids:
                    with pytest.raises(NotFoundError):
                        h.get(iid)
                elif iid not in acks.tried:
                    it = h.get(iid, user_id=user)
                    assert tokens(it.text) == {tok} and it.kind == "turn", (iid, it.text)
            users = h.users()
            assert set(users) <= {"w0", "w1", "shared", "check"}
            for user in users:
                queries = [" ".join(f"Kq{t}x" for t in sorted(dead)[-3:]) or "dog"]
                shown = shown_tokens(h, user, queries)
                assert not shown & dead, (user, sorted(shown & dead))
                if user in ("w0", "w1"):  # isolation: only the tokens of that writer
                    assert {t % 2 for t in shown} <= {int(user[1])}, user
                live = [i for i, (u, _) in acks.added.items() if u == user and i not in dead_ids | acks.tried]
                arch = {it.id for it in h.search("x", user_id=user, k=100_000, layers=["archive"])}
                assert set(live) <= arch
                assert h.stats(user_id=user).archive_turns == len(arch)
        # the store takes further writes, of every kind
        ids = m.add([{"speaker": "C", "text": "after the kills"}], user_id="check", session_id="c", timestamp=2e9)
        m.end_session(user_id="check", session_id="c")
        m.delete(ids[0])
        assert watcher.search("after the kills", user_id="check", k=5, layers=["archive"]) == []


@pytest.mark.slow
def test_two_writers_killed_at_random_points(tmp_path: Path) -> None:
    """Two writer processes on one file (adds and end_sessions; the second also deletes its own
    and the other's turns), SIGKILLed at random moments, LAMINA_FAULT_KILLS kills in all
    (default 100, two per round). After
    each round, through a fresh handle and through one kept open since the start: the file
    passes ``integrity_check``; every acknowledged add is there (unless its delete was
    acknowledged; a delete cut by the kill may or may not have happened); an acknowledged
    delete is NotFoundError and its text is shown nowhere (searches of every layer, facts,
    contexts asking for it, histories); a writer's user shows only that writer's turns; the store
    takes further writes. At the end no store file holds an acknowledged-deleted text."""
    path = tmp_path / "m.db"
    Memory(path, embedder="hashing", config=CFG).close()
    rounds = max(1, int(os.environ.get("LAMINA_FAULT_KILLS", "100")) // 2)
    rng = random.Random(1414)
    acks = Acks()
    watcher = Memory(path, embedder="hashing", config=CFG)
    try:
        for rnd in range(rounds):
            _round(path, rnd, rng, acks)
            _check_after_kills(path, acks, watcher)
    finally:
        watcher.close()
    assert len(acks.added) > 50 and acks.deleted and acks.ended  # the writers made progress
    Memory(path, embedder="hashing", config=CFG).close()  # the last handle checkpoints the log
    assert leaks(path, [f"Kq{t}x" for t in acks.deleted.values()]) == []


# ----------------------------------------------------------------------- a stale reader process
SECRET_A = "Kq900001x"  # in a consolidated session: segments, summaries, a fact, a profile
SECRET_B = "Kq900003x"  # in the live session's working memory

_READER = textwrap.dedent(
    """
    import json, sys
    from lamina import Memory, MemoryConfig, NotFoundError
    path, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    m = Memory(path, embedder="hashing", config=MemoryConfig({cfg}))

    def view():
        out = [m.context(q, user_id="ann", budget=2048).render() for q in ("dog called", "{a} {b}", "moved")]
        for L in ("working", "episodic", "semantic", "archive", "history"):
            out += [h.text for h in m.search("{a} {b}", user_id="ann", k=500, layers=[L])]
            out += [t for h in m.search("dog", user_id="ann", k=500, layers=[L]) for _, _, t in h.turns]
        out += [f.text for f in m.facts(user_id="ann", current=False)]
        for i in ids:
            try:
                out.append(m.get(i).text)
            except NotFoundError:
                out.append("NotFound")
        return out

    print(json.dumps(view()), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "read":
            print(json.dumps(view()), flush=True)
        elif cmd == "write":
            m.add([{{"speaker": "Ann", "text": "One more thing before I go."}}], user_id="ann", session_id="live",
                  timestamp={t} + 9000)
            m.end_session(user_id="ann", session_id="live")
            print(json.dumps(["wrote"]), flush=True)
        elif cmd == "quit":
            break
    m.close()
    """
).format(cfg=CFG_ARGS, a=SECRET_A, b=SECRET_B, t=T0)


def test_a_stale_reader_process_never_shows_or_restores_deleted_text(tmp_path: Path) -> None:
    """A child process opens the store and reads (its state, and the visits it has not written
    yet, hold two secrets: one consolidated into segments, summaries and facts, one in working
    memory); the parent deletes both turns; the child's next reads show neither (a deleted id
    is NotFound), its writes (add + end_session of the live session) do not bring them back, and
    once every handle is closed no store file (.db, -wal, -shm) holds them."""
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing", config=CFG)
    t = T0
    old = m.add(
        [
            {"speaker": "Ann", "text": "We planned the trip to the coast."},
            {"speaker": "Ann", "text": f"My dog is called {SECRET_A}."},
            {"speaker": "Ann", "text": "The weather was lovely this morning."},
            {"speaker": "Ann", "text": "I work as a nurse in the city."},
        ],
        user_id="ann",
        session_id="old",
        timestamp=t,
    )
    m.end_session(user_id="ann", session_id="old")
    live = m.add(
        [
            {"speaker": "Ann", "text": "I moved to Lisbon last spring."},
            {"speaker": "Ann", "text": f"The door code is {SECRET_B} now."},
        ],
        user_id="ann",
        session_id="live",
        timestamp=t + 3600,
    )
    secrets = [old[1], live[1]]
    child = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path), ",".join(map(str, secrets))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert child.stdin is not None and child.stdout is not None

    def ask(cmd: str | None) -> str:
        if cmd is not None:
            child.stdin.write(cmd + "\n")  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
        line = child.stdout.readline()  # type: ignore[union-attr]
        assert line, child.stderr.read()  # type: ignore[union-attr]
        return " ".join(json.loads(line))

    try:
        before = ask(None)
        assert SECRET_A in before and SECRET_B in before  # the reader has them in its state
        rep_a, rep_b = m.delete(secrets[0], user_id="ann"), m.delete(secrets[1], user_id="ann")
        assert rep_a.deleted > 1 and rep_b.deleted == 1  # derived items went with the first
        after = ask("read")
        assert SECRET_A not in after and SECRET_B not in after
        assert after.count("NotFound") == 2
        assert ask("write") == "wrote"
        again = ask("read")
        assert SECRET_A not in again and SECRET_B not in again
        # the parent, whose state moved under it too, agrees
        assert not tokens(" ".join([m.context("dog code", user_id="ann").render()])) & {900001, 900003}
        assert not shown_tokens(m, "ann", [f"{SECRET_A} {SECRET_B}"]) & {900001, 900003}
        assert m.stats(user_id="ann").archive_turns == 5 and m.stats(user_id="ann").open_sessions == 0
        child.stdin.write("quit\n")
        child.stdin.close()
        assert child.wait(30) == 0, child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()  # type: ignore[union-attr]
    assert leaks(path, [SECRET_A, SECRET_B]) == []  # even before the last handle closes
    m.close()
    assert leaks(path, [SECRET_A, SECRET_B]) == []
    with Memory(path, embedder="hashing", config=CFG) as m2:
        assert not shown_tokens(m2, "ann", [f"{SECRET_A} {SECRET_B}"]) & {900001, 900003}


# ----------------------------------------------------------------------- threads and a process
_PROC = textwrap.dedent(
    """
    import sys
    from lamina import Memory, MemoryConfig
    path = sys.argv[1]
    m = Memory(path, embedder="hashing", config=MemoryConfig({cfg}))
    for n in range(120):
        user = "proc" if n % 2 else "shared"
        ids = m.add([{{"speaker": "P", "text": f"process line Kq{{700000 + n}}x here"}}], user_id=user,
                    session_id=f"p{{n // 5}}", timestamp={t} + n)
        print("ADD", user, ids[0], flush=True)
        if n % 5 == 4:
            for u in ("proc", "shared"):
                m.end_session(user_id=u, session_id=f"p{{n // 5}}")
    m.close()
    """
).format(cfg=CFG_ARGS, t=T0, tolerate=TOLERATE_ORPHANED_SUBTREE)


def test_threads_and_a_process_on_one_file(tmp_path: Path) -> None:
    """Four threads share one handle (two write and consolidate, one deletes what it wrote, one
    reads everything) while another process writes to its own user and a shared one: no
    exception anywhere, and afterwards exact counts through the threads' handle and a fresh one."""
    path = tmp_path / "m.db"
    m = Memory(path, embedder="hashing", config=CFG)
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROC, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    live: dict[int, str] = {}  # id -> user (acknowledged, not deleted)
    gone: set[int] = set()
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w: int) -> None:
        for n in range(80):
            user = f"t{w}" if n % 3 else "shared"
            tok = 800000 + w * 1000 + n
            ids = m.add(
                [{"speaker": f"T{w}", "text": TEMPLATES[n % 4].format(t=f"Kq{tok}x")}],
                user_id=user,
                session_id=f"w{w}s{n // 4}",
                timestamp=T0 + 100 + n,
            )
            with lock:
                live[ids[0]] = user
            if n % 4 == 3:
                for u in (f"t{w}", "shared"):
                    try:
                        m.end_session(user_id=u, session_id=f"w{w}s{n // 4}")
                    except NotFoundError:
                        pass
                    except KeyError:  # the known bug (TOLERATE_ORPHANED_SUBTREE); nothing written
                        if not TOLERATE_ORPHANED_SUBTREE:
                            raise

    def deleter() -> None:
        mine: list[int] = []
        for n in range(60):
            user = "t2" if n % 2 else "shared"
            ids = m.add(
                [{"speaker": "D", "text": f"deleter line Kq{810000 + n}x"}],
                user_id=user,
                session_id=f"d{n // 6}",
                timestamp=T0 + 200 + n,
            )
            with lock:
                live[ids[0]] = user
            mine += ids
            if n % 6 == 5:
                m.end_session(user_id="t2", session_id=f"d{n // 6}")
            if n % 3 == 2:
                victim = mine.pop(len(mine) // 2)
                m.delete(victim)
                with lock:
                    del live[victim]
                    gone.add(victim)

    def reader() -> None:
        while not stop.is_set():
            for user in m.users():
                m.context("where does he live", user_id=user, budget=256)
                m.search("dog", user_id=user, k=20, layers=["archive", "episodic"])
                m.stats(user_id=user)
            m.stats()

    def guard(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=guard, args=a) for a in [(writer, 0), (writer, 1), (deleter,)]]
    rd = threading.Thread(target=guard, args=(reader,))
    for th in [*threads, rd]:
        th.start()
    out, err = proc.communicate(timeout=300)
    for th in threads:
        th.join(300)
    stop.set()
    rd.join(60)
    assert not errors, errors
    assert proc.returncode == 0, err[-3000:]
    for line in out.splitlines():
        _, user, iid = line.split()
        live[int(iid)] = user
    assert len(live) == 120 + 2 * 80 + 60 - 20
    want = {u: sum(1 for x in live.values() if x == u) for u in set(live.values())}
    with Memory(path, embedder="hashing", config=CFG) as fresh:
        for h in (m, fresh):
            assert h.users() == sorted(want)
            for user, n in want.items():
                assert h.stats(user_id=user).archive_turns == n, user
                got = {it.id for it in h.search("x", user_id=user, k=1000, layers=["archive"])}
                assert got == {i for i, u in live.items() if u == user}, user
            for i in gone:
                with pytest.raises(NotFoundError):
                    h.get(i)
            assert h.stats().archive_turns == len(live)
    m.close()


# ----------------------------------------------------------------------- bugs found
def test_end_session_after_deleting_a_turn_of_a_subtree(tmp_path: Path) -> None:
    """Deleting a turn deletes the MemTree summaries whose sources hold it, but not their other
    children: those move up to the nearest surviving ancestor (they used to keep a parent_id of a
    deleted node, and the next end_session that evicted one raised KeyError, every time)."""
    m = Memory(tmp_path / "m.db", embedder="hashing", config=CFG)
    templates = [*TEMPLATES, "The {t} museum was closed today."]
    n = 0

    def add_to(user: str, session: str, kinds: list[int]) -> list[int]:
        nonlocal n
        msgs = []
        for k in kinds:
            n += 1
            msgs.append({"speaker": "Ann", "text": templates[k].format(t=f"Qz{n}x")})
        return m.add(msgs, user_id=user, session_id=session, timestamp=1.7e9 + 60 * n)

    def add(session: str, kinds: list[int]) -> list[int]:
        return add_to("ann", session, kinds)

    try:
        a = add("s2", [3, 4])
        add("s2", [4, 4])
        add("s0", [2, 4, 4, 1])
        add("s0", [3, 4, 0])
        m.delete(a[1])  # a turn still in working memory
        add("s2", [0, 4])
        add("s1", [2, 0])
        m.end_session(user_id="ann", session_id="s2")
        add("s1", [1, 2, 0, 2])
        m.delete(a[0])  # its segment goes, and the summaries above it, which hold other segments
        check_tree(tmp_path / "m.db", "ann")  # no active node under a deleted one
        add("s1", [0, 1])
        add("s2", [4, 1, 4, 3])
        add("s2", [3])
        m.end_session(user_id="ann", session_id="s1")  # (raised KeyError before the fix)
        assert m.stats(user_id="ann").open_sessions == 2  # s0 and s2
        # the same in random workloads of adds, end_sessions and deletes (most of which hit it, so
        # that the test does not hang on one segmentation)
        for seed in range(8):
            rng, user, ids = random.Random(seed), f"user{seed}", []
            for _ in range(60):
                r = rng.random()
                if r < 0.45:
                    ids += add_to(user, f"s{rng.randrange(3)}", [rng.randrange(5) for _ in range(rng.randint(1, 4))])
                elif r < 0.8:
                    with contextlib.suppress(NotFoundError):
                        m.end_session(user_id=user, session_id=f"s{rng.randrange(3)}")
                elif ids:
                    with contextlib.suppress(NotFoundError):
                        m.delete(ids.pop(rng.randrange(len(ids))))
                    check_tree(tmp_path / "m.db", user)
    finally:
        m.close()


@pytest.mark.slow
def test_a_delete_blocked_by_a_long_reader_is_wiped_by_the_next_writes(tmp_path: Path) -> None:
    """A delete whose WAL checkpoint another connection's read snapshot blocks (held past the
    5 s busy timeout, e.g. a backup) leaves the store marked; the next write of any handle wipes
    it (it used to wait for a later delete or the last close)."""
    path = tmp_path / "m.db"
    secret = "Kq990001x"
    m = Memory(path, embedder="hashing", config=CFG)
    try:
        (sid, _) = m.add(
            [{"speaker": "Ann", "text": f"My PIN is {secret}."}, {"speaker": "Ann", "text": "Hi there."}],
            user_id="ann",
            session_id="s",
            timestamp=T0,
        )
        reader = sqlite3.connect(path)  # another process reading the file (a backup, a report)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM items").fetchone()
        m.delete(sid, user_id="ann")  # waits out the busy timeout, then returns: acknowledged
        reader.rollback()
        reader.close()
        for i in range(3):  # the handle keeps working; the log could be truncated now
            m.add([{"speaker": "Ann", "text": f"Hello again {i}."}], user_id="ann", session_id="s2", timestamp=T0 + i)
        m.end_session(user_id="ann", session_id="s2")
        assert m.search(secret, user_id="ann", k=10, layers=["archive"])[0].text != f"My PIN is {secret}."
        assert leaks(path, [secret]) == []
    finally:
        m.close()
    assert leaks(path, [secret]) == []
