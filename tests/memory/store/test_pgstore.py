"""lamina.memory.store.postgres: what is PostgreSQL's own in PostgresStore (the Store protocol itself is
tested on both backends in test_store.py): the migrations table, the per-user layout with no
foreign keys (distributable by user), the write lock's timeout, values PostgreSQL refuses, URLs
without their passwords."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from lamina import InvalidInput, Memory, StoreBusy
from lamina.memory.store.dburl import is_postgres_url, redact_url
from lamina.memory.store.pgschema import MIGRATIONS, PG_SCHEMA_VERSION
from lamina.memory.store.postgres import PostgresStore


def test_migrations_are_recorded_once_and_a_newer_schema_is_refused(pg_url: str) -> None:
    a = PostgresStore(pg_url)
    b = PostgresStore(pg_url)  # a second open applies nothing again
    rows = a.conn.execute("SELECT version, name FROM lamina.migrations ORDER BY version").fetchall()
    assert rows == [(v, name) for v, name, _ in MIGRATIONS] and a.get_meta("schema_version") == str(PG_SCHEMA_VERSION)
    assert a.tag == b.tag != 0
    a.conn.execute("INSERT INTO lamina.migrations(version, name) VALUES (99, 'from the future')")
    with pytest.raises(ValueError, match="schema version 99 is not supported"):
        PostgresStore(pg_url)
    a.close()
    b.close()


def test_every_per_user_table_is_keyed_by_the_user_and_nothing_references_another(pg_url: str) -> None:
    """The Citus layout: each table holding a user's rows has user_id first in its primary key
    (or, for the append-only tombstones, a column to distribute by); no foreign keys at all."""
    s = PostgresStore(pg_url)
    tables = {
        r[0] for r in s.conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema='lamina'")
    }
    assert tables == {
        "migrations",
        "meta",
        "users",
        "sessions",
        "items",
        "revisions",
        "tombstones",
        "gone_users",
        "notes",
        "note_revisions",
        "links",
    }
    pk_first = dict(
        s.conn.execute(
            "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
            " AND kcu.table_schema = tc.table_schema WHERE tc.table_schema='lamina'"
            " AND tc.constraint_type='PRIMARY KEY' AND kcu.ordinal_position=1"
        ).fetchall()
    )
    for t in ("users", "sessions", "items", "revisions", "notes", "note_revisions", "links"):
        assert pk_first[t] == "user_id", t
    cols = {
        r[0]
        for r in s.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema='lamina' AND table_name='tombstones'"
        )
    }
    assert "user_id" in cols
    fks = s.conn.execute(
        "SELECT COUNT(*) FROM information_schema.table_constraints WHERE table_schema='lamina'"
        " AND constraint_type='FOREIGN KEY'"
    ).fetchone()
    assert fks == (0,)
    s.close()


def test_a_write_waiting_past_busy_timeout_raises_store_busy(pg_url: str) -> None:
    holder = PostgresStore(pg_url)
    waiter = PostgresStore(pg_url, busy_timeout=0.2)
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.tx():
            holder.set_meta("held", "1")
            inside.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(10)
    try:
        with pytest.raises(StoreBusy, match="busy_timeout"):
            with waiter.tx():
                waiter.set_meta("x", "1")  # pragma: no cover - the lock is held
    finally:
        release.set()
        t.join()
    with waiter.tx():  # free again: the write goes through, and nothing of the failed one stayed
        waiter.set_meta("y", "1")
    assert waiter.get_meta("x") is None and waiter.get_meta("held") == "1"
    holder.close()
    waiter.close()


def test_a_text_postgresql_cannot_store_raises_invalid_input_and_writes_nothing(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing") as m:
        with pytest.raises(InvalidInput, match="NUL"):
            m.add([{"speaker": "A", "text": "bad \x00 byte"}], user_id="u", session_id="s")
        assert m.users() == []
        m.add([{"speaker": "A", "text": "fine"}], user_id="u", session_id="s")
        assert [h.text for h in m.search("fine", user_id="u", k=5, layers=["archive"])] == ["fine"]


def test_urls_lose_their_passwords_in_paths_and_messages(pg_url: str) -> None:
    assert is_postgres_url("postgresql://a@b/c") and is_postgres_url("postgres://x") and not is_postgres_url("a.db")
    assert redact_url("postgresql://bob:s3cret@db.example:5433/mem?sslmode=require") == (
        "postgresql://bob:***@db.example:5433/mem?sslmode=require"
    )
    assert redact_url(pg_url) == pg_url  # (no password: unchanged)
    with pytest.raises(ValueError, match="postgresql://"):
        PostgresStore("mysql://bob:s3cret@x/y")
    with Memory(pg_url, embedder="hashing") as m:
        assert m.path == pg_url and m.stats().path == pg_url


def test_forget_vacuums_and_clears_the_pending_wipe(pg_url: str) -> None:
    with Memory(pg_url, embedder="hashing") as m:
        (tid,) = m.add([{"speaker": "A", "text": "my pin is 4321"}], user_id="u", session_id="s")
        m.delete(tid, user_id="u")
        assert not m._store.wipe_pending()
    s = PostgresStore(pg_url)
    assert s.conn.execute("SELECT COUNT(*) FROM lamina.items WHERE text LIKE '%4321%'").fetchone() == (0,)
    # VACUUM ran on the tables the delete touched (its dead tuples and index entries are pruned)
    counts = s.conn.execute(
        "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE schemaname='lamina' AND relname IN"
        " ('items', 'revisions')"
    ).fetchall()
    assert sorted(counts) == [("items", 1), ("revisions", 1)]
    s.close()


def test_without_psycopg_a_postgresql_url_says_which_extra_to_install() -> None:
    """(No server needed.) Where psycopg is not installed, a postgresql:// URL raises an
    ImportError naming the extra; SQLite files and the rest of lamina work without it."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import lamina\n"
        "lamina.Memory(None, embedder='hashing').close()\n"
        "try:\n"
        "    lamina.Memory('postgresql://nobody@/nowhere', embedder='hashing')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'lamina[postgres]'" in out.stdout


def test_a_database_without_metadata_is_migrated_and_keeps_its_items(pg_url: str) -> None:
    """A database of migration 3 (items without ``metadata``) gains the column at the next open;
    its items read back with no metadata, new ones keep theirs."""
    import psycopg

    with Memory(pg_url, embedder="hashing") as mem:
        (old,) = mem.add([{"speaker": "Ann", "text": "I live in Oslo."}], user_id="u")
    with psycopg.connect(pg_url, autocommit=True) as con:
        con.execute("ALTER TABLE lamina.items DROP COLUMN metadata")
        con.execute("DELETE FROM lamina.migrations WHERE version = 4")
    with Memory(pg_url, embedder="hashing") as mem:
        assert mem.get(old).metadata == {}
        (new,) = mem.add([{"speaker": "Ann", "text": "I moved to Rome.", "metadata": {"topic": "move"}}], user_id="u")
    with Memory(pg_url, embedder="hashing") as mem:
        assert mem.get(new).metadata == {"topic": "move"}
        assert [it.id for it in mem.search("Rome", user_id="u", layers=["archive"], filters={"topic": "move"})] == [new]
