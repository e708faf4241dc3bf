"""Shared helpers of the memory tests: times, chat lines, embedders with hand-placed vectors, one
held at a gate, and read-only views of a database (the stored truth, read with ``sqlite3`` or
``psycopg``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lamina import Memory
from lamina.embedders.hashing import Hashing
from lamina.memory.types import LAYERS

T0 = 1_683_550_000.0  # 2023-05-08
DAY = 86_400.0

FILLER = [
    ("Alice", "The weather was lovely this morning."),
    ("Bob", "I watched a football match yesterday."),
    ("Alice", "Did you try the new bakery downtown?"),
    ("Bob", "Yes, their croissants are great."),
    ("Alice", "I have been reading a mystery novel."),
    ("Bob", "Sounds fun, who is the author?"),
]


#: Small talk with one fact in it (Alice's sister's kitten, Pepper).
KITTEN_CHAT = [
    ("Alice", "The weather was lovely this morning."),
    ("Bob", "I watched a football match yesterday."),
    ("Alice", "My sister adopted a grey kitten called Pepper."),
    ("Bob", "Did you try the new bakery downtown?"),
    ("Alice", "I have been reading a mystery novel."),
    ("Bob", "Sounds fun, who is the author?"),
]

#: Words of random chat turns.
CHAT_WORDS = "coffee garden piano dinner movie weekend trip sister office meeting concert beach recipe book".split()


def random_turns(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` chat turns of Ben and Ann in turn (Ben first), each eight random :data:`CHAT_WORDS`."""
    return [("Ann" if i % 2 else "Ben", " ".join(rng.choice(CHAT_WORDS) for _ in range(8))) for i in range(n)]


def chat(mem: Memory, user: str, session: str, lines: Sequence[tuple[str, str]], t: float, prefix: str) -> list[int]:
    """Add ``lines`` as one batch, one minute apart, with source ids ``prefix:i``."""
    msgs = [
        {"speaker": sp, "text": tx, "id": f"{prefix}:{i}", "timestamp": t + 60 * i} for i, (sp, tx) in enumerate(lines)
    ]
    return mem.add(msgs, user_id=user, session_id=session)


def day_session(mem: Memory, s: int, lines: Sequence[tuple[str, str]], user: str = "u") -> list[int]:
    """Session ``s{s}`` of ``user`` on day ``s`` (source ids ``D{s}:i``), ended; returns the turn ids."""
    ids = chat(mem, user, f"s{s}", lines, T0 + s * DAY, f"D{s}")
    mem.end_session(user_id=user, session_id=f"s{s}")
    return ids


def words(text: str) -> int:
    """Whitespace-separated words of a text, counted independently of ``str.split``."""
    return len(re.findall(r"\S+", text))


def unit(v: Any) -> np.ndarray:
    x = np.asarray(v, dtype=np.float64)
    return x / np.linalg.norm(x)


def hashed(text: str, dim: int, lo: int = 0) -> np.ndarray:
    """A deterministic unit vector for a text, non-zero only in dimensions ``lo..dim-1``."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.zeros(dim)
    v[lo:] = np.random.default_rng(seed).random(dim - lo) + 0.1
    return unit(v)


class NoiseEmbedder:
    """Unit vectors from a hash of the text: cosine carries no meaning."""

    name = "noise-64"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


#: Texts the rule fact extractor turns into facts (the functional ones supersede), each naming a
#: token ``{t}`` that a test follows through the memory.
FACT_TEMPLATES = (
    "I moved to {t}ville last week.",
    "My dog is called {t}.",
    "I work as a {t} engineer.",
    "We talked about {t} over coffee.",
)


def token_numbers(text: str | None, token: re.Pattern[str]) -> set[int]:
    """The numbers of the tokens (``token``'s first group, matched lower-cased) ``text`` holds."""
    return {int(x) for x in token.findall((text or "").lower())}


class GatedEmbedder:
    """The hashing embedder, held in ``embed`` while ``gate`` is clear (it starts clear), to keep
    a call busy; ``entered`` is set when a call reaches the embedder."""

    def __init__(self) -> None:
        self._inner = Hashing()
        self.gate = threading.Event()
        self.entered = threading.Event()

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def name(self) -> str:
        return self._inner.name

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        self.entered.set()
        assert self.gate.wait(30)
        return self._inner.embed(texts)


def everything(mem: Memory, user_id: str, layer: str) -> list[Any]:
    """Every active item of a user's layer (``search`` with a k above the item count)."""
    k = mem.stats().items + 1
    return mem.search("anything at all", user_id=user_id, k=k, layers=[layer])


def active_leaves(mem: Memory, user_id: str = "u") -> list[Any]:
    """Active episodic leaves (``search(layers=["episodic"])`` returns leaves and summaries)."""
    return [it for it in everything(mem, user_id, "episodic") if it.kind == "segment"]


def leaf_texts(mem: Memory, user_id: str = "u") -> set[str]:
    """The texts of the one-turn active leaves (``Speaker: text`` without the speaker)."""
    return {it.text.split(": ", 1)[-1] for it in active_leaves(mem, user_id)}


def public_view(mem: Memory, ids: Sequence[int], queries: Sequence[str], users: Sequence[str]) -> dict[str, Any]:
    """What the public API shows of a memory: every item by ``get``, stats, users, facts, and
    each layer's search results with their scores."""
    out: dict[str, Any] = {
        "items": {i: mem.get(i) for i in ids},
        "stats": mem.stats().to_dict(),
        "users": mem.users(),
    }
    for u in users:
        out[f"stats/{u}"] = mem.stats(user_id=u).to_dict()
        out[f"facts/{u}"] = mem.facts(user_id=u, current=False)
        for q in queries:
            for L in LAYERS:
                hits = mem.search(q, user_id=u, k=1000, layers=[L])
                out[f"search/{u}/{L}/{q}"] = [(it.id, it.layer, round(it.score, 5)) for it in hits]
    return out


# -- the database file -----------------------------------------------------------------------
@contextlib.contextmanager
def db(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a memory's database file (committed state only)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        yield conn
    finally:
        conn.close()


def rows(path: str | Path, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Rows of a query on a memory's database: a SQLite file, or a PostgreSQL URL (the tables of
    its ``lamina`` schema; ``?`` placeholders as in SQLite)."""
    if str(path).startswith("postgresql://"):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(str(path), options="-c search_path=lamina", row_factory=dict_row) as pg:
            return [dict(r) for r in pg.execute(sql.replace("?", "%s").encode(), args)]  # type: ignore[call-overload]
    with db(path) as conn:
        return [dict(r) for r in conn.execute(sql, args)]


def item_rows(path: str | Path, user_id: str | None = None) -> dict[int, dict[str, Any]]:
    """Every stored item (sources / members decoded; metadata as sorted (key, value) pairs, lists
    as tuples), by id."""
    sql = "SELECT * FROM items" + (" WHERE user_id=?" if user_id is not None else "")
    out = {}
    for r in rows(path, sql, *(() if user_id is None else (user_id,))):
        r["sources"] = tuple(json.loads(r["sources"]))
        r["members"] = tuple(json.loads(r["members"]))
        if "metadata" in r:
            md = json.loads(r["metadata"])
            r["metadata"] = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in md.items()))
        out[r["id"]] = r
    return out


def dump(path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted (to compare two states of a file)."""
    with db(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}")) for t in sorted(tables)}


def pooled(r: dict[str, Any]) -> str | None:
    """The capacity pool of a stored item: episodic (leaves, session summaries: parent -1),
    semantic (facts, notes), or None."""
    if r["layer"] == "episodic" and (r["kind"] == "segment" or r["parent_id"] == -1):
        return "episodic"
    if r["layer"] == "semantic" and r["kind"] in ("fact", "note"):
        return "semantic"
    return None


def check_tree(path: str | Path, user_id: str) -> list[dict[str, Any]]:
    """The MemTree's structural invariants on disk; returns the active tree rows. Every active
    episodic item with a tree parent (> 0) hangs under an active summary one level up; a
    summary's sources are stored turns of the user (the turns it quotes: never a deleted one,
    never none); top-level items (parent 0) are at depth 1."""
    recs = item_rows(path, user_id)
    tree = [
        r
        for r in recs.values()
        if r["layer"] == "episodic" and r["status"] == "active" and r["parent_id"] not in (None, -1)
    ]
    for r in tree:
        if r["parent_id"] == 0:
            assert r["depth"] == 1, r
            continue
        p = recs[r["parent_id"]]
        assert p["status"] == "active" and p["kind"] == "summary" and p["layer"] == "episodic", (r, p)
        assert r["depth"] == p["depth"] + 1, (r, p)
    turns = {r["source_id"] for r in recs.values() if r["kind"] == "turn"}
    for r in tree:
        if r["kind"] == "summary":
            assert r["sources"] and set(r["sources"]) <= turns, r
    return tree


#: Turns of fill(): places, a pet, a job and small talk.
LINES = [
    "I moved to Paris last spring.",
    "My dog is called Max.",
    "The weather is nice.",
    "I work as a nurse.",
    "We watched a movie.",
    "I moved to Berlin for a job.",
    "Let's get coffee soon.",
    "I love hiking.",
]


def fill(m: Memory) -> list[int]:
    """Three sessions of two users, a context per session, and a turn left in a live session."""
    ids = []
    for s in range(3):
        for u in ("alice", "bob"):
            ids += m.add(
                [
                    {"speaker": u.title(), "text": LINES[(s * 3 + j) % len(LINES)], "id": f"{u}{s}:{j}"}
                    for j in range(5)
                ],
                user_id=u,
                session_id=f"s{s}",
                timestamp=T0 + s * DAY,
            )
            m.context("where does she live", user_id=u, now=T0 + s * DAY + 100)
            m.end_session(user_id=u, session_id=f"s{s}")
    ids += m.add(
        [{"speaker": "Alice", "text": "Still in the live session."}],
        user_id="alice",
        session_id="s9",
        timestamp=T0 + 9e5,
    )
    return ids
