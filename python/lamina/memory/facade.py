"""``lamina.Memory``: the façade of the memory loop. Each public method checks its arguments,
takes the lock and runs the stages: :mod:`~lamina.memory.write.ingest` (add),
:mod:`~lamina.memory.write.consolidate` (end of session, with :mod:`~lamina.memory.write.semantic` and
:mod:`~lamina.memory.write.retention`), :mod:`~lamina.memory.read.candidates` and :mod:`~lamina.memory.read.fill`
(context). Every write goes through :meth:`Memory._write`, the one unit of work."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..embedders import Embedder, SpanEmbedder, TextCache, check_embeddings, get_embedder, is_lexical
from ..errors import InvalidInput, LaminaError, NotFoundError
from ..llm.extract import ExtractiveSummarizer, FactExtractor, RuleFactExtractor, Summarizer
from ..llm.openai_chat import LLM, LLMFactExtractor, LLMSummarizer
from ..native._device import parse_device
from ..text.domains import DomainClassifier
from .bulk import Bulk
from .config import MemoryConfig
from .dump.user_transfer import UserTransfers
from .inputs import TimeLike, check_id, check_text, to_time, wall_clock
from .metadata import Metadata, check_metadata
from .opening import Closing, check_embedder, embedder_for, is_auto, open_store, recorded_embedder
from .pgarchive import archive_remote
from .read.inspection import Inspection
from .read.reading import Reading
from .reports import DeleteReport, SessionReport
from .service_records import ServiceRecords
from .state.gcquiet import collector_paused
from .state.memstate import MemoryState, UserState
from .state.records import Record
from .state.turnvec import turn_vectors
from .state.tx import Models, Tx
from .store.dburl import is_postgres_url
from .store.protocol import Store
from .types import MemoryItem
from .write import consolidate, ingest, notes

if TYPE_CHECKING:
    from .store.pgnotify import ChangeListener

__all__ = ["Memory", "ClosedError", "DEFAULT_SESSION"]

#: The session of an ``add`` that names none: one running session per user.
DEFAULT_SESSION = "default"

_log = logging.getLogger("lamina")
_EMBED_CACHE_TEXTS = 4096  # distinct texts whose vectors a Memory keeps (6 MB at d = 384; a delete clears them)


class ClosedError(LaminaError, ValueError):
    """The :class:`Memory` was closed."""


class Memory(Reading, Inspection, UserTransfers, ServiceRecords, Bulk, Closing):
    """Multi-layer long-term memory for LLM agents, persisted in SQLite or PostgreSQL.

    Parameters
    ----------
    path : str, os.PathLike or None
        SQLite database file (created if missing; reopening restores the exact state), or a
        PostgreSQL URL ``postgresql://user:password@host/dbname`` (extra ``lamina[postgres]``;
        several processes and hosts share it). None keeps everything in memory.
    embedder : "auto", "hashing", "minilm", "minilm-int8", "mpnet" or an :class:`~lamina.embedders.Embedder`
        A database records its embedder and ``"auto"`` (the default) opens it with that one; a new
        database gets MiniLM when its model files are installed, else the native hashing embedder
        (``"hashing"`` chooses it explicitly). An explicit embedder other than the recorded one
        raises :class:`~lamina.InvalidInput` naming both (:mod:`lamina.memory.opening`).
    config : MemoryConfig, optional
    llm : LLM, optional
        A chat model (e.g. :class:`lamina.OpenAIChat`); when given, ψ and 𝒜 are prompted (JSON
        validated; failures fall back to the defaults and are logged).
    summarizer, fact_extractor : optional
        Replace ψ / 𝒜 explicitly (they take precedence over ``llm``).
    busy_timeout : float
        Seconds a write waits for another connection's write (another process on the same file)
        before it raises :class:`lamina.StoreBusy` (default 30: an LLM summariser may hold a
        write for seconds).
    device : {"cpu", "cuda", "cuda:N"}
        Where the vector index lives. ``"cuda"`` (a CUDA build and a device) keeps the search
        arenas in device memory, updated row by row on every write; the store stays the source
        of truth, and opening a database rebuilds them there. Scores are computed on the GPU
        and may round differently from the CPU's (near-ties can then order differently).
    max_loaded_users : int, optional
        The most users whose state (records, vectors in the native arenas, trees, lexical
        entries) this handle keeps in memory. Users are then loaded on first use rather than at
        open, and after each call the least recently used ones beyond the limit are evicted
        (their pending access statistics written first); an evicted user is loaded again from
        the store when next used, with the same contexts. None (default): no limit, every user
        loaded at open. A single ``context_batch`` over more users than the limit holds them all
        until it returns.
    listen : bool
        On PostgreSQL, ``LISTEN`` for other handles' writes on a connection of its own and catch
        the notified users up in the background (:mod:`lamina.memory.store.pgnotify`), so the next
        call finds them current. Every call still checks the database's write number first (a
        notice is an optimisation, never the guard). Ignored for SQLite. Default True.

    Identifiers (``user_id``, ``session_id``) are keyword-only on every method. Unknown ids raise
    :class:`lamina.NotFoundError` (a ``KeyError``), values lamina cannot accept
    :class:`lamina.InvalidInput` (a ``ValueError``), wrong types ``TypeError``; nothing is
    written then.

    Thread safety
    -------------
    Thread-safe. One ``Memory`` may be shared by many threads: every operation that reads or
    changes state holds one internal re-entrant lock, so operations are linearizable (each takes
    effect atomically at some point between its call and its return). Embedding, the expensive
    part, runs outside the lock, and native searches release the GIL. On PostgreSQL (``listen``)
    a background thread takes the same lock to catch notified users up between calls.

    Durability and atomicity
    ------------------------
    Every public write (``add``, ``end_session``, ``update``, ``delete``, ``delete_user``) is one
    SQLite transaction: when it returns, its effects survive a killed process (WAL); when it
    raises (bad input, a failed summariser, a crash), nothing of it is visible, in the database or
    in memory. The access statistics that ``context`` bumps (visit counts, last access: they feed
    heat) are kept in memory and written before the next write, by :meth:`flush` and by
    :meth:`close`; a killed process loses only those bumps since its last write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        embedder: str | Embedder | None = "auto",
        config: MemoryConfig | None = None,
        *,
        llm: LLM | None = None,
        summarizer: Summarizer | None = None,
        fact_extractor: FactExtractor | None = None,
        busy_timeout: float = 30.0,
        domains: DomainClassifier | None = None,
        device: str = "cpu",
        max_loaded_users: int | None = None,
        listen: bool = True,
    ) -> None:
        parse_device(device)  # TypeError / ValueError before anything is opened
        if max_loaded_users is not None:
            if isinstance(max_loaded_users, bool) or not isinstance(max_loaded_users, int):
                raise TypeError(f"max_loaded_users must be an int or None, got {type(max_loaded_users).__name__}")
            if max_loaded_users < 1:
                raise InvalidInput(f"max_loaded_users must be >= 1, got {max_loaded_users}")
        self._max_users = max_loaded_users
        self._listener: ChangeListener | None = None
        if domains is not None and not isinstance(domains, DomainClassifier):
            raise TypeError(f"domains must be a lamina.DomainClassifier, got {type(domains).__name__}")
        #: labels unlabelled turns at ``add`` when given; classifies ``domain="auto"`` queries
        self.domains = domains
        self._query_domains = domains if domains is not None else DomainClassifier()
        if config is None:
            config = MemoryConfig()
        if not isinstance(config, MemoryConfig):
            raise TypeError(f"config must be a lamina.MemoryConfig, got {type(config).__name__}")
        self.config = config
        # an explicit embedder is resolved (and a bad one refused) before anything is opened
        chosen = None if is_auto(embedder) else get_embedder(embedder)
        self._store: Store = open_store(path, str(config.synchronous), busy_timeout)
        self._path = self._store.path  # (a PostgreSQL URL without its password)
        try:
            recorded = recorded_embedder(self._store)
            self._embedder = chosen if chosen is not None else embedder_for(recorded, "auto", where=str(self._path))
            self._dim = int(self._embedder.dim)
            with self._store.tx():
                recorded = recorded_embedder(self._store)  # (another process may have created it since)
                if recorded is None:
                    self._store.set_meta("embedder", self._embedder.name)
                    self._store.set_meta("dim", str(self._dim))
            check_embedder(recorded, self._embedder.name, where=str(self._path))
        except BaseException:
            self._store.close()
            raise
        config = config.for_embedder(lexical=is_lexical(self._embedder))
        self.config = config
        # every text the loop embeds (turns, summary sentences, summaries, facts, queries) once
        self._embed = TextCache(self._embed_new, self._dim, _EMBED_CACHE_TEXTS)
        self._lock = threading.RLock()
        self._closed = False
        self.llm = llm
        base_sum = ExtractiveSummarizer(self._embed)
        if summarizer is None:
            summarizer = LLMSummarizer(llm, base_sum) if llm is not None else base_sum
        if fact_extractor is None:
            fact_extractor = LLMFactExtractor(llm, RuleFactExtractor()) if llm is not None else RuleFactExtractor()
        self._models = Models(self._embed, summarizer, fact_extractor)
        try:
            with self._store.read_tx():
                self._st = MemoryState.load(self._store, config, self._dim, device, lazy=max_loaded_users is not None)
        except BaseException:  # e.g. device="cuda" without a usable device: nothing stays open
            self._store.close()
            raise
        if self._store.wipe_pending():  # a delete whose wipe did not go through
            self._forget_files()
        if getattr(self._store, "vectors", False) and config.pgvector_threshold is not None:
            self._st.vectors.remote = functools.partial(archive_remote, self)
        if listen and is_postgres_url(path):
            from .store.pgnotify import ChangeListener

            assert isinstance(path, str)
            self._listener = ChangeListener(path, self._on_notice, self._catch_up_now)

    # ------------------------------------------------------------------ replicas: notices, the cache limit
    @property
    def listener(self) -> ChangeListener | None:
        """The ``LISTEN`` connection's thread on PostgreSQL (None: SQLite, or ``listen=False``)."""
        return self._listener

    def _on_notice(self, version: int, user_id: str | None) -> None:
        """A write committed (listener thread): catch up now, in the background, unless it was
        this handle's own."""
        from .store.postgres import PostgresStore

        if isinstance(self._store, PostgresStore) and self._store.wrote(version):
            return
        self._catch_up_now()

    def _catch_up_now(self) -> None:
        """Catch up with the store's writes unless a call holds the lock (it checks itself)."""
        if not self._lock.acquire(timeout=0.5):
            return
        try:
            if not self._closed:
                self._sync()
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def _op(self) -> Iterator[None]:
        """The lock around one public call; then the users beyond ``max_loaded_users`` are evicted."""
        with self._lock:
            try:
                yield
            finally:
                self._trim()

    def _trim(self) -> None:
        """Evict the least recently used users beyond ``max_loaded_users`` (caller holds the lock,
        outside any transaction); their pending access statistics are written first."""
        st = self._st
        if self._max_users is None or self._closed or len(st.users) <= self._max_users:
            return
        victims = st.lru_victims(self._max_users)
        if any(r.user_id in victims for r in st.pending.values()):
            try:
                self._flush_pending()
            except Exception as e:  # (e.g. StoreBusy: they stay loaded, evicted after a later call)
                _log.warning("lamina: could not write access statistics (%s); %d users stay loaded", e, len(victims))
                return
        for uid in victims:
            st.evict_user(uid)

    # ------------------------------------------------------------------ the unit of work
    @contextlib.contextmanager
    def _write(self) -> Iterator[Tx]:
        """One write: the lock, pending access bumps written, one store transaction (which holds
        the database's write lock, so no other process writes meanwhile), the state caught up
        with other writers inside it, then the stages, whose rows the yielded :class:`Tx`
        collects; checks that raise before anything is touched leave the state as it is. On any
        later failure the transaction rolls back and the users the write touched are rebuilt
        from the store, so nothing of the write remains."""
        with self._op():
            self._check_open()
            self._flush_pending()
            tx = Tx(self._store, self._st)
            try:
                with self._store.tx():
                    self._st.sync(self._store)
                    yield tx
                    tx.commit()
                    wipe = self._store.wipe_pending()
            except BaseException:
                self._restore(tx.users)
                raise
            if wipe:  # a delete (this one, or one whose wipe was blocked) left rows in the files
                self._forget_files()

    def _restore(self, user_ids: set[str]) -> None:
        """Rebuild these users' state from the store (after a failed write)."""
        if not user_ids:
            return
        try:
            with self._store.read_tx():
                versions = self._store.user_versions()
                for uid in sorted(user_ids):
                    self._st.reload_user(self._store, uid, versions)
        except Exception:  # pragma: no cover - the database itself is unusable
            _log.exception("lamina: could not rebuild state after a failed write")
            raise

    def _sync(self) -> None:
        """Catch up with other processes' writes before a read (caller holds the lock)."""
        self._check_open()
        if self._st.data_version != self._store.data_version():
            with self._store.read_tx():
                self._st.sync(self._store)

    def _flush_pending(self) -> None:
        """Write pending access bumps (caller holds the lock, outside any transaction)."""
        st = self._st
        if not st.pending:
            return
        rows = [(r.access_count, r.last_access, r.id) for r in st.pending.values() if r.id in st.recs]
        with self._store.tx():
            self._store.bump_access(rows)
        st.pending.clear()

    def _forget_files(self) -> None:
        """After a committed delete: no copy of the deleted rows stays in the database files
        (:meth:`Store.forget`; the state no longer holds them: their vectors were removed, which
        zeroes the arena rows, and the graphs that held them scrubbed). A wipe that another
        connection's long read blocks stays pending in the store and is retried after every
        later write of any process, and at the next open."""
        if not self._store.forget():
            _log.warning("lamina: another connection reads %s; its write-ahead log is wiped later", self._path)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this Memory is closed")

    def _check_user_call(self, user_id: str) -> None:
        """What a call on one user checks first: the memory open, ``user_id`` an id."""
        self._check_open()
        check_id(user_id, "user_id")

    def _embed_new(self, texts: list[str]) -> npt.NDArray[np.float32]:
        x = self._embedder.embed(texts)
        return check_embeddings(x, len(texts), self._dim, type(self._embedder).__name__)

    def _embed_turns(self, turns: list[tuple[str, str | None]]) -> npt.NDArray[np.float32]:
        """Vectors of turns ``(text, speaker)``, shape (len(turns), dim), as
        ``MemoryConfig.turn_vectors`` says (:mod:`lamina.memory.state.turnvec`)."""
        if self.config.turn_vectors == "text":
            return self._embed([t for t, _ in turns])
        emb = self._embedder
        late = emb if self.config.turn_vectors == "late" and isinstance(emb, SpanEmbedder) else None
        return turn_vectors(self._embed, turns, late=late, embed_whole=self.config.turn_vectors != "parts")

    def _user(self, user_id: str) -> UserState | None:
        """A user's state (loaded from the store if another writer moved it); caller holds the lock."""
        st = self._st
        if user_id not in st.unloaded:
            st.used(user_id)
            return st.users.get(user_id)
        with self._store.read_tx():
            return st.user(self._store, user_id)

    def _known_user(self, user_id: str) -> UserState:
        u = self._user(user_id)
        if u is None:
            raise NotFoundError(f"unknown user_id {user_id!r} (nothing was added for it; user ids are case-sensitive)")
        return u

    def _record(self, item_id: int, user_id: str | None) -> Record:
        """The record of an id this database made (and, with ``user_id``, that user's)."""
        if isinstance(item_id, bool) or not isinstance(item_id, (int, np.integer)):
            raise TypeError(f"item_id must be an int, got {type(item_id).__name__}")
        iid = int(item_id)
        if iid <= 0 or not self._store.owns(iid):
            raise NotFoundError(f"item id {iid} does not belong to this database (ids are database-specific)")
        r = self._st.recs.get(iid)
        if r is None and self._st.unloaded:  # perhaps an item of a user another writer moved
            with self._store.read_tx():
                owner = self._store.item_user(iid)
            if owner is not None:
                self._user(owner)
                r = self._st.recs.get(iid)
        if r is None:
            raise NotFoundError(f"item id {iid} does not exist (deleted?)")
        if user_id is not None:
            check_id(user_id, "user_id")
            self._known_user(user_id)
            if r.user_id != user_id:
                raise NotFoundError(f"item id {iid} does not belong to user {user_id!r}")
        return r

    # ------------------------------------------------------------------ write path
    def add(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        user_id: str,
        session_id: str | None = None,
        timestamp: TimeLike = None,
        metadata: Metadata | None = None,
    ) -> list[int]:
        """Append turns to working memory and the archive (one atomic transaction).

        Parameters
        ----------
        messages : list of dict
            Each: ``speaker`` or ``role`` (str), ``text`` or ``content`` (non-empty str), and
            optionally ``id`` (source id, str or int; default ``t<item id>``), ``timestamp``
            (event time: seconds since the epoch, datetime or ISO string), ``domain`` (str),
            ``commitment`` ("persist"; "ephemeral": never consolidated, purged at session end; "verify": shown with a
            recheck marker; "clarify": never injected by a firewalled context, which asks
            instead), ``metadata`` (str -> str | int | float | bool | list[str],
            :mod:`lamina.memory.metadata`; it wins over the call's on a shared key). Another key
            is refused (InvalidInput naming it: your own values go in ``metadata``). A message
            without ``domain`` is labelled by ``Memory(domains=...)`` when that classifier is given.
        user_id : str
        session_id : str, optional — default :data:`DEFAULT_SESSION`: one running session per user.
        timestamp : event time for messages without one (default: the wall clock now).
        metadata : dict, optional — metadata of every message (filterable: :mod:`lamina.memory.metadata`).

        Returns
        -------
        list of int — the item ids of the new turns, in order.

        Raises
        ------
        TypeError, InvalidInput
            Bad messages, ids or times (nothing is written).
        """
        self._check_user_call(user_id)
        session_id = DEFAULT_SESSION if session_id is None else check_id(session_id, "session_id")
        default_t = to_time(timestamp, "timestamp")
        msgs = ingest.parse_messages(messages, check_metadata(metadata))
        if self.domains is not None:
            for m in msgs:
                if m.domain is None:
                    m.domain = self.domains.classify(m.text)
        emb = self._embed_turns([(m.text, m.speaker) for m in msgs])
        wall = wall_clock()
        for m in msgs:
            if m.timestamp is None:
                m.timestamp = default_t if default_t is not None else wall
        with self._write() as tx:
            return ingest.add_turns(tx, self._models, msgs, emb, user_id, session_id)

    def end_session(self, *, user_id: str, session_id: str, now: TimeLike = None) -> SessionReport:
        """Consolidate a session (one atomic transaction).

        Flushes the session's working memory into episodic segments (and facts), adds the session
        summary ŝ = ψ(session) and blends it into the matching earlier episode (eq. 5, α),
        decays episodic strengths by α, promotes hot episodes (heat > τ) to semantic notes, and
        projects the layers onto their capacities (Π_C: the most redundant items go first; see
        :mod:`lamina.memory.write.retention`). Raw turns stay in the archive, except EPHEMERAL ones:
        they are purged (deleted, as by :meth:`delete`). Ending an ended session again does
        nothing.

        Parameters
        ----------
        now : event time of the consolidation (default: the session's last turn time).

        Raises
        ------
        NotFoundError
            Unknown user or session.

        Notes
        -----
        CPython's cyclic garbage collector is paused for the whole process while the call runs
        and one young collection ends it (:func:`lamina.memory.state.gcquiet.collector_paused`; a
        process that turned the collector off keeps it off).
        """
        self._check_user_call(user_id)
        check_id(session_id, "session_id")
        t_now = to_time(now, "now")
        # (the consolidation allocates much and keeps little: see gcquiet.collector_paused)
        with collector_paused(), self._write() as tx:
            u = self._known_user(user_id)
            if (user_id, session_id) not in self._st.sessions:
                raise NotFoundError(f"unknown session {session_id!r} for user {user_id!r}")
            tx.touch(user_id)
            report = consolidate.end_session(tx, self._models, u, session_id, t_now)
            # EPHEMERAL turns served the session (working memory, contexts) and are purged with
            # its end, as a delete would: their text leaves the store, not only the layers
            eph = {
                i
                for i in u.session_turns.get(session_id, ())
                if i in u.ids and self._st.recs[i].commitment == "ephemeral"
            }
            if eph:
                self._remove(tx, u, eph)
                report.purged = len(eph)
            return report

    def update(self, item_id: int, text: str, *, user_id: str | None = None, timestamp: TimeLike = None) -> MemoryItem:
        """Replace an item's text (re-embedded); the previous text is kept in :meth:`history`."""
        self._check_open()
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise InvalidInput("text is empty")
        check_text(text, "text")
        t = to_time(timestamp, "timestamp")
        with self._lock:  # a turn is embedded as the write path embeds it (with its speaker)
            r0 = self._record(item_id, user_id)
            turn = (text, r0.speaker) if r0.kind == "turn" else None
        emb = self._embed_turns([turn])[0] if turn is not None else self._embed([text])[0]
        with self._write() as tx:
            r = self._record(item_id, user_id)
            st = tx.st
            u = st.users[r.user_id]
            tx.touch(r.user_id)
            at = t if t is not None else wall_clock()
            tx.store.add_revision(r.id, r.text, at)
            old_text, r.text = r.text, text
            if r.kind == "turn":
                notes.renote(tx, u, r, old_text, at)
            u.stale = u.stale_last = None  # (the staleness cache of an item is keyed by its id)
            tx.changed(r, "text", emb=emb)
            if r.kind in ("summary", "note"):
                r.summary = text
                tx.changed(r, "summary")
            if r.status == "active":
                st.move(u, r, r.layer, emb)
            if r.id in u.seg_of:  # re-index the turn under its leaf
                st.reindex_turn_view(u, r, emb)
            return st.item(r)

    def delete(self, item_id: int, *, user_id: str | None = None) -> DeleteReport:
        """Delete an item. Deleting a raw turn also deletes what was derived from it (segments,
        summaries, facts, notes whose sources include it), so its text leaves every layer."""
        self._check_open()
        with self._lock:
            with self._write() as tx:
                r = self._record(item_id, user_id)
                st = tx.st
                u = st.users[r.user_id]
                doomed = {r.id}
                if r.kind == "turn" and r.source_id is not None:
                    doomed.update(u.derived.get(r.source_id, ()))  # what derives from the turn
                tx.touch(r.user_id)
                self._remove(tx, u, doomed)
        return DeleteReport(deleted=len(doomed), ids=tuple(sorted(doomed)))

    def _remove(self, tx: Tx, u: UserState, doomed: set[int]) -> None:
        """Delete ``doomed`` (item ids of ``u``) inside ``tx``: tree nodes left without a parent
        are lifted, the rows and vectors leave the store, the embedding cache is cleared (no
        deleted text stays in it)."""
        st = tx.st
        moves = consolidate.lift_orphans(st, u, doomed)
        tx.flush()
        tx.store.update_items(sorted(moves.items()))
        tx.store.delete_items(u.user_id, sorted(doomed))
        tx.store.mark_deleted()
        self._embed.clear()
        # The state follows the change (not the user): the moved tree nodes, then the deleted
        # ids through the patch path another handle's catch-up takes.
        st.retree(u, moves)
        st.apply(u, [], doomed)

    def delete_user(self, *, user_id: str) -> DeleteReport:
        """Delete every item, session and statistic of a user."""
        self._check_user_call(user_id)
        with self._lock:
            with self._write() as tx:
                doomed = tuple(sorted(self._known_user(user_id).ids))
                self._drop_user(tx, user_id)
        return DeleteReport(deleted=len(doomed), ids=doomed)

    def flush(self) -> None:
        """Write pending access statistics of ``context`` calls to the database."""
        self._check_open()
        with self._lock:
            self._flush_pending()

    @property
    def embedder(self) -> Embedder:
        """The embedder in use."""
        return self._embedder

    @property
    def path(self) -> str | None:
        """The database file, or the PostgreSQL URL without its password (None: in memory)."""
        return self._path

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the database (idempotent). Later calls raise :class:`ClosedError`."""
        if self._listener is not None:  # (first, outside the lock: its thread may wait for it)
            self._listener.close()
        with self._lock:
            if not self._closed:
                self._flush_pending()
                self._closed = True
                self._store.close()

    def __repr__(self) -> str:
        return f"Memory(path={self._path!r}, embedder={self._embedder.name!r}, users={len(self._st.users) + len(self._st.unloaded)})"
