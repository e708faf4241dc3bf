"""``LISTEN`` / ``NOTIFY`` for handles on PostgreSQL: :class:`ChangeListener`.

Every write of a :class:`~lamina.memory.store.postgres.PostgresStore` announces, inside its
transaction, each user it touched on the channel :data:`~lamina.memory.store.pgschema.CHANNEL`
(payload ``"<write number> <user_id>"``; PostgreSQL delivers the notices at commit, none for a
write that rolls back). A :class:`ChangeListener` holds a dedicated connection that ``LISTEN`` s
on that channel in a daemon thread and hands each notice to a callback; :class:`lamina.Memory`
uses it to mark the notified users stale and catch them up (the change log, as a request would)
in the background, so the next request on a replica finds its state current.

The notices are an optimisation, never the guard: a notice can be lost (the listening
connection drops, the server restarts, a handle opens between a write and its notice), so every
request still compares the database's write number with the handle's before it reads. A lost
connection is reconnected (after ``retry`` seconds, doubling up to 30 s); after every
(re)connection the ``on_connect`` callback runs, since notices sent meanwhile were missed.

Thread safety: the callbacks run on the listener's thread; :meth:`ChangeListener.close` may be
called from any thread (it waits for the thread to end).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from .dburl import redact_url
from .pgschema import CHANNEL

__all__ = ["ChangeListener", "parse_notice"]

_log = logging.getLogger("lamina")


def parse_notice(payload: str) -> tuple[int, str | None] | None:
    """``(write number, user_id)`` of a notice's payload (user None: the notice names no user,
    so any may have moved); None for a payload that is not a lamina notice."""
    head, _, user = payload.partition(" ")
    if not head.isdigit():
        return None
    return int(head), (user if user else None)


class ChangeListener:
    """A daemon thread that ``LISTEN`` s on :data:`~lamina.memory.store.pgschema.CHANNEL`.

    Parameters
    ----------
    url : str
        The database's libpq URL (the listener opens a connection of its own).
    on_notice : callable (version: int, user_id: str or None) -> None
        Called on the listener's thread for each notice, in the order they arrive.
    on_connect : callable () -> None
        Called on the listener's thread after each (re)connection (notices sent before it were
        not received).
    retry : float
        Seconds to wait before the first reconnection attempt (doubling up to 30 s).
    poll : float
        Seconds the thread waits for notices before it checks whether it was closed.

    Attributes
    ----------
    received : int
        Notices received (lamina's; others on the channel are ignored).
    connects : int
        Successful connections (1 + reconnections).
    failures : int
        Connections lost or attempts that failed.
    """

    def __init__(
        self,
        url: str,
        on_notice: Callable[[int, str | None], None],
        on_connect: Callable[[], None],
        *,
        retry: float = 0.2,
        poll: float = 0.5,
    ) -> None:
        if not retry > 0 or not poll > 0:
            raise ValueError(f"retry and poll must be > 0 seconds, got {retry}, {poll}")
        self.url = url
        self.on_notice = on_notice
        self.on_connect = on_connect
        self.retry = float(retry)
        self.poll = float(poll)
        self.received = 0
        self.connects = 0
        self.failures = 0
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._thread = threading.Thread(target=self._run, name="lamina-listen", daemon=True)
        self._thread.start()

    @property
    def listening(self) -> bool:
        """Whether the listener holds a connection that ``LISTEN`` s now."""
        return self._listening.is_set()

    def wait_listening(self, timeout: float) -> bool:
        """Wait until the listener listens (True) or ``timeout`` seconds passed (False)."""
        return self._listening.wait(timeout)

    def backend_pid(self) -> int | None:
        """The server process of the listening connection (None: not connected)."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    def _run(self) -> None:
        wait = self.retry
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._conn = conn
                    self.connects += 1
                    self._listening.set()
                    wait = self.retry
                    self._call(self.on_connect)
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=self.poll):
                            self._notice(n.payload)
            except (psycopg.Error, OSError) as e:
                if self._stop.is_set():
                    break
                self.failures += 1
                _log.warning(
                    "lamina: the LISTEN connection to %s failed (%s); reconnecting in %.1f s",
                    redact_url(self.url),
                    str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                    wait,
                )
            finally:
                self._listening.clear()
                self._conn = None
            self._stop.wait(wait)
            wait = min(30.0, 2 * wait)

    def _notice(self, payload: str) -> None:
        parsed = parse_notice(payload)
        if parsed is None:
            return
        self.received += 1
        self._call(self.on_notice, *parsed)

    @staticmethod
    def _call(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # (a callback's failure must not end the listener)
            _log.exception("lamina: a LISTEN callback failed")

    def close(self, timeout: float = 10.0) -> None:
        """Stop listening and close the connection (idempotent; waits for the thread)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
