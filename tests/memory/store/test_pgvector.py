"""The archive through pgvector (PostgreSQL 16 with pgvector 0.6 from pgserver): migration 2 adds
``items.vec`` and fills it from the stored bytea embeddings; writes keep it equal to each turn's
embedding; past ``MemoryConfig.pgvector_threshold`` a user's archive search goes through the
user's HNSW index (built in the background after the rows are in), and finds what the arena's
exact search finds, rows written after the build included, deleted rows never."""

from __future__ import annotations

import time

import numpy as np
import psycopg
import pytest

from lamina import InvalidInput, Memory, MemoryConfig
from lamina.memory.store.pgschema import MIGRATIONS
from lamina.memory.store.postgres import PostgresStore, archive_index_name
from memkit import T0

CFG = MemoryConfig(working_capacity=8, pgvector_threshold=60)
NO_PGVECTOR = MemoryConfig(working_capacity=8, pgvector_threshold=None)
TOPICS = ["tea", "maps", "rain", "chess", "bikes", "opera", "moss", "kites", "salt", "jazz", "clay"]


def turns(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {
            "speaker": "Ann",
            "text": f"entry {i}: {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 7) % len(TOPICS)]} on day {i % 13}",
            "id": f"e{i}",
            "timestamp": T0 + 60 * i,
        }
        for i in range(start, start + n)
    ]


def stored_vectors(url: str) -> dict[int, tuple[bytes, str | None, str]]:
    with psycopg.connect(url) as conn:
        return {
            int(i): (bytes(e), v, k)
            for i, e, v, k in conn.execute("SELECT id, embedding, vec::text, kind FROM lamina.items")
        }


def assert_vec_mirrors_embedding(url: str) -> None:
    rows = stored_vectors(url)
    assert rows
    for i, (emb, vec, kind) in rows.items():
        if kind != "turn":
            assert vec is None, i
            continue
        assert vec is not None, i
        got = np.array([float(x) for x in vec.strip("[]").split(",")], dtype=np.float32)
        assert got.tobytes() == emb, f"item {i}: vec differs from its embedding"


def wait_built(m: Memory, user: str) -> None:
    store = m._store
    assert isinstance(store, PostgresStore)
    end = time.monotonic() + 120
    while store.building() and time.monotonic() < end:
        time.sleep(0.05)
    assert store.archive_index_ready(user), "the archive index was not built"


def archive(m: Memory, query: str, k: int = 10) -> list[tuple[float, int]]:
    return [(it.score, it.id) for it in m.search(query, user_id="u", k=k, layers=["archive"], now=T0 + 1e6)]


def exact(url: str, query: str, k: int = 10) -> list[tuple[float, int]]:
    """The same search by a handle without pgvector (the arenas' exact scan at these sizes)."""
    with Memory(url, embedder="hashing", config=NO_PGVECTOR, listen=False) as ref:
        assert ref._st.vectors.remote is None
        return archive(ref, query, k)


def same(got: list[tuple[float, int]], want: list[tuple[float, int]]) -> bool:
    """The same top-k up to rounding (pgvector computes the cosine itself) and the order of tied
    rows: scores equal to 1e-5 in order, and the same rows wherever a score is not tied at the
    k-th place."""
    if len(got) != len(want) or any(abs(a[0] - b[0]) > 1e-5 for a, b in zip(got, want)):
        return False
    last = want[-1][0]
    return {i for s, i in got if s - last > 1e-5} == {i for s, i in want if s - last > 1e-5}


def test_pgvector_threshold_is_checked() -> None:
    assert MemoryConfig(pgvector_threshold=None).pgvector_threshold is None
    with pytest.raises(InvalidInput, match="pgvector_threshold must be >= 1"):
        MemoryConfig(pgvector_threshold=0)
    with pytest.raises(TypeError, match="pgvector_threshold must be an int"):
        MemoryConfig(pgvector_threshold=1.5)  # type: ignore[arg-type]


def test_migration_2_fills_the_vector_column_from_the_bytea_embeddings(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing", config=CFG, listen=False) as m:
        m.add(turns(30), user_id="u", session_id="s")
        m.end_session(user_id="u", session_id="s")  # (segments, summaries: rows that are not turns)
        m.update(m.search("tea", user_id="u", k=1, layers=["archive"])[0].id, "an edited line about owls", user_id="u")
    assert_vec_mirrors_embedding(pg_url)
    # the database as the first schema left it: no vec column, migration 2 not recorded
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE lamina.items DROP COLUMN vec")
        conn.execute("DELETE FROM lamina.migrations WHERE version = 2")
    s = PostgresStore(pg_url)
    assert s.vectors
    versions = [r[0] for r in s.conn.execute("SELECT version FROM lamina.migrations ORDER BY version")]
    assert versions == [v for v, _, _ in MIGRATIONS]
    s.close()
    assert_vec_mirrors_embedding(pg_url)


def test_a_large_archive_is_searched_through_its_hnsw_index(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing", config=CFG, listen=False) as m:
        m.add(turns(150), user_id="u", session_id="s")
        m.add(turns(20, 500), user_id="small", session_id="s")
        store = m._store
        assert isinstance(store, PostgresStore)
        calls: list[str] = []
        real = store.archive_search

        def counted(user_id: str, *a: object, **kw: object) -> object:
            calls.append(user_id)
            return real(user_id, *a, **kw)  # type: ignore[arg-type]

        store.archive_search = counted  # type: ignore[method-assign,assignment]
        queries = ["tea and chess", "rain on day 3", "opera and moss", "kites", "entry 42 salt"]
        # first search past the threshold: the arena answers, the index build starts
        assert same(archive(m, queries[0]), exact(pg_url, queries[0]))
        assert not calls
        wait_built(m, "u")
        for q in queries:
            assert same(archive(m, q), exact(pg_url, q)), q
        assert calls == ["u"] * len(queries)
        m.search("tea", user_id="small", k=5, layers=["archive"])  # (20 rows: the arena's)
        assert calls == ["u"] * len(queries) and not store.archive_index_ready("small")
        # rows written after the build are in the index; a deleted turn is never returned
        new = m.add(turns(20, 300), user_id="u", session_id="s2")
        m.end_session(user_id="u", session_id="s2")
        for q in ["entry 305", "entry 318: jazz"]:
            got = archive(m, q)
            assert same(got, exact(pg_url, q)) and {i for _, i in got} & set(new)
        top = archive(m, "entry 42 salt")[0][1]
        m.delete(top, user_id="u")
        assert top not in {i for _, i in archive(m, "entry 42 salt", k=50)}
        assert calls == ["u"] * (len(queries) + 4)
    assert_vec_mirrors_embedding(pg_url)


def test_another_handle_uses_the_same_index_and_a_missing_one_is_rebuilt(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing", config=CFG, listen=False) as a:
        a.add(turns(120), user_id="u", session_id="s")
        archive(a, "tea")
        wait_built(a, "u")
    with Memory(pg_url, embedder="hashing", config=CFG, listen=False) as b:
        store = b._store
        assert isinstance(store, PostgresStore)
        assert store.archive_index_ready("u")  # (built once, in the database, for every handle)
        assert same(archive(b, "maps and rain"), exact(pg_url, "maps and rain"))
        assert not store.building()
        store.conn.execute(f"DROP INDEX lamina.{archive_index_name('u')}")
        store._index_state.clear()
        assert same(archive(b, "maps and rain"), exact(pg_url, "maps and rain"))  # (the arena, while it is rebuilt)
        wait_built(b, "u")


def test_below_the_threshold_the_archive_is_scanned_exactly_never_through_a_local_graph(pg_url: str) -> None:
    """On PostgreSQL with pgvector the archive never gets a per-handle hnswlib graph (which every
    replica would build again after every load): up to the threshold, and while the index is
    built, the arena's exact scan answers; the active layers keep ann_threshold."""
    cfg = MemoryConfig(working_capacity=8, ann_threshold=40, pgvector_threshold=1000)
    with Memory(pg_url, embedder="hashing", config=cfg, listen=False) as m:
        m.add(turns(150), user_id="u", session_id="s")
        for q in ("tea and chess", "kites"):
            assert same(archive(m, q), exact(pg_url, q))
        assert m._st.vectors.ann_builds == 0 and not m._st.vectors.graph_namespaces()
        assert "u/archive" not in m.stats(user_id="u").ann_layers
    with Memory(None, embedder="hashing", config=cfg) as sqlite:  # (SQLite: the graph past ann_threshold)
        sqlite.add(turns(150), user_id="u", session_id="s")
        sqlite.search("tea and chess", user_id="u", k=10, layers=["archive"])
        assert sqlite._st.vectors.ann_builds == 1
        assert "u/archive" in sqlite.stats(user_id="u").ann_layers
