"""Token buckets in PostgreSQL: the rate limits of ``lamina serve`` shared by every process and
replica on one database (:class:`PgBuckets`; the budgets themselves are
:mod:`lamina.serve.ratelimit`'s).

A bucket is a row of the table ``lamina.rate_buckets`` (budget, identity, tokens, time): taking a
token is one ``INSERT ... ON CONFLICT DO UPDATE`` that refills the row for the time passed and
takes one, atomically, so that concurrent takes on any replica count once each. Times are the
database server's clock (``clock_timestamp()``): the replicas' clocks do not matter. The table is
``UNLOGGED`` (a crash of PostgreSQL empties it: every bucket full again, as after a restart of a
single server) and is made, with the schema ``lamina``, by the first handle that needs it.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from .dburl import is_postgres_url, redact_url
from .pgschema import WRITE_LOCK

__all__ = ["PgBuckets"]

_NOW = "extract(epoch FROM clock_timestamp())"
_CREATE = (
    "CREATE UNLOGGED TABLE IF NOT EXISTS lamina.rate_buckets (budget TEXT NOT NULL, k TEXT NOT NULL,"
    " tokens DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (budget, k))"
)
_LEVEL = (
    f"SELECT LEAST(%(n)s, tokens + ({_NOW} - at) * %(rate)s), {_NOW} FROM lamina.rate_buckets"
    " WHERE budget = %(budget)s AND k = %(k)s"
)
_TAKE = (
    f"INSERT INTO lamina.rate_buckets AS b (budget, k, tokens, at) VALUES (%(budget)s, %(k)s, %(n)s - 1, {_NOW})"
    f" ON CONFLICT (budget, k) DO UPDATE SET tokens = LEAST(%(n)s, b.tokens + ({_NOW} - b.at) * %(rate)s) - 1,"
    f" at = {_NOW} RETURNING b.tokens"
)


class PgBuckets:
    """The buckets of one budget (``n`` tokens per ``seconds``, at most ``n`` held) in a
    PostgreSQL database, on a connection of their own.

    Parameters
    ----------
    url : str
        ``postgresql://...``
    budget : str
        The budget's name (several budgets share the table).
    n : int
        The burst and the refill per period (>= 1).
    seconds : float

    Thread safety: thread-safe (one lock around the connection); blocking (one round trip per call).
    """

    def __init__(self, url: str, budget: str, n: int, seconds: float) -> None:
        if not is_postgres_url(url):
            raise ValueError(f"url must start with postgresql:// or postgres://, got {redact_url(str(url))!r}")
        if n < 1 or not seconds > 0:
            raise ValueError(f"a bucket needs n >= 1 and seconds > 0, got {n}, {seconds}")
        self.url = url
        self.budget = budget
        self.n = float(n)
        self.rate = n / seconds
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(url, autocommit=True)
        try:
            with self._conn.transaction():  # (under the database's write lock: one creator at a time)
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                self._conn.execute("CREATE SCHEMA IF NOT EXISTS lamina")
                self._conn.execute(_CREATE)
        except BaseException:
            self._conn.close()
            raise

    def _args(self, key: str) -> dict[str, Any]:
        return {"budget": self.budget, "k": key, "n": self.n, "rate": self.rate}

    def _execute(self, sql: str, key: str) -> tuple[Any, ...] | None:
        with self._lock:
            if self._conn.closed:  # (closed by close(): an app started again reconnects)
                self._conn = psycopg.connect(self.url, autocommit=True)
            return self._conn.execute(sql, self._args(key)).fetchone()

    def level(self, key: str) -> float:
        """The tokens ``key`` holds now (``n`` for a key never seen)."""
        row = self._execute(_LEVEL, key)
        return self.n if row is None else float(row[0])

    def take(self, key: str) -> float:
        """Take one token of ``key`` (its level may go below zero: a longer wait); returns the level left."""
        row = self._execute(_TAKE, key)
        assert row is not None
        return float(row[0])

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()
