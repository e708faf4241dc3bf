"""Export and import of one user's stored state (the entries of :mod:`lamina.memory.dump.format`).

:func:`export_user` reads a user's rows from the store (inside a read snapshot: one consistent
view); :func:`import_user` writes a validated :class:`~lamina.memory.dump.format.UserDump` through the
store inside the caller's write (one transaction), with fresh item ids: every reference of the
dump (a leaf's ``members``, a tree node's ``parent_id``, a fact's ``superseded_by``, a
revision's item, a note's turn, a note revision's turn and cause, a link's two turns) is
remapped to the new ids, and the new ids keep the dump's order, so the state built from the
imported rows is the exported one. :func:`import_vectors` settles the vector of every item
before the write (the dump's, or re-embedded; outside the lock).

The A-Mem notes travel as the note store holds them (:mod:`lamina.memory.dump.note_entries`: spans and
indices, no text). An export leaves out what an import could not take: a revision's ``cause``
that names a turn deleted since becomes None (as a ``superseded_by`` naming a deleted fact),
and a note that does not fit its turn (spans outside the turn's text, written before notes were
rewritten on every update) is not exported, nor its history or links.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ...errors import InvalidInput, NotFoundError
from ..inputs import check_id
from ..reports import ImportReport
from ..state.host import MemoryHost
from ..state.records import NO_TREE, ROOT, STORED_FIELDS, unit
from ..state.tx import Tx
from ..store.notestore import LinkRow, NoteRevisionRow, NoteRow
from ..store.protocol import Store, seq_of
from .format import TEXT_KINDS, DumpError, ItemEntry, RevisionEntry, SessionEntry, UserDump, UserEntry
from .note_entries import EntryProblem, LinkEntry, NoteEntry, NoteRevisionEntry, NotesCheck, Span
from .reader import check_references

__all__ = ["export_user", "import_vectors", "import_user", "UserTransfers"]

Vec = npt.NDArray[np.float32]


def export_user(store: Store, user_id: str, *, vectors: bool) -> UserDump | None:
    """Every stored row of a user (None: no such user), read inside the caller's snapshot.
    ``vectors``: every item's vector; otherwise only those of items not in
    :data:`~lamina.memory.dump.format.TEXT_KINDS`."""
    rows = store.users(user_id)
    if not rows:
        return None
    _uid, _ns, total, last, updates, decays = rows[0]
    ud = UserDump(UserEntry(user_id, float(total), float(last), int(updates), int(decays)))
    for _u, sid, status, started, ended, ends in sorted(store.sessions(user_id), key=lambda s: s[1]):
        ud.sessions.append(SessionEntry(user_id, sid, status, started, ended, int(ends)))
    for row in store.load_items(user_id):
        emb = row["embedding"]
        keep = vectors or row["kind"] not in TEXT_KINDS
        fields: dict[str, Any] = {k: row[k] for k in STORED_FIELDS}
        fields["sources"] = tuple(row["sources"])
        fields["members"] = tuple(row["members"])
        vec = np.frombuffer(emb, dtype=np.float32).copy() if keep else None
        ud.items.append(ItemEntry(**fields, embedding=vec))
        for text, changed_at in store.revisions(int(row["id"])):
            ud.revisions.append(RevisionEntry(user_id, int(row["id"]), text, changed_at))
    # a fact superseded by a fact deleted since names an item that is gone: no link to write
    ids = {it.id for it in ud.items}
    for it in ud.items:
        if it.superseded_by is not None and it.superseded_by not in ids:
            it.superseded_by = None
    _export_notes(store, ud, ids)
    return ud


E = TypeVar("E")


def _fits(check: Callable[[E], None], entry: E) -> bool:
    try:
        check(entry)
    except EntryProblem:
        return False
    return True


def _export_notes(store: Store, ud: UserDump, ids: set[int]) -> None:
    """Add the user's notes, note revisions and links to ``ud`` (its items read already), as
    entries an import takes (module docstring)."""
    uid = ud.user.user_id
    check = NotesCheck(uid, ud.items)
    for item_id, keywords, tags, updated_at in store.user_notes(uid):
        own, gained = _tag_indices(tags)
        note = NoteEntry(uid, item_id, _spans(keywords), own, gained, updated_at)
        if _fits(check.note, note):
            ud.notes.append(note)
    for item_id, tags, changed_at, cause in store.user_note_revisions(uid):
        own, gained = _tag_indices(tags)
        rev = NoteRevisionEntry(uid, item_id, own, gained, changed_at, cause if cause in ids else None)
        if _fits(check.revision, rev):
            ud.note_revisions.append(rev)
    for src, dst, weight, shared, kind, created_at in store.user_links(uid):
        link = LinkEntry(uid, src, dst, weight, _spans(shared), kind, created_at)
        if _fits(check.link, link):
            ud.links.append(link)


def _spans(stored: str) -> tuple[Span, ...]:
    return tuple((int(a), int(b), int(n)) for a, b, n in json.loads(stored))


def _tag_indices(stored: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    t = json.loads(stored)
    return tuple(int(i) for i in t["own"]), tuple(int(i) for i in t["gained"])


def _stored_spans(spans: Sequence[Span]) -> str:
    return json.dumps([list(sp) for sp in spans])


def _stored_tags(own: Sequence[int], gained: Sequence[int]) -> str:
    return json.dumps({"own": list(own), "gained": list(gained)})


def _note_rows(ud: UserDump, new: dict[int, int]) -> tuple[list[NoteRow], list[NoteRevisionRow], list[LinkRow]]:
    """The note store's rows of a dump's notes, note revisions and links, ids remapped."""
    notes: list[NoteRow] = [
        (new[n.item_id], _stored_spans(n.keywords), _stored_tags(n.own, n.gained), n.updated_at) for n in ud.notes
    ]
    revisions: list[NoteRevisionRow] = [
        (new[r.item_id], _stored_tags(r.own, r.gained), r.changed_at, None if r.cause is None else new[r.cause])
        for r in ud.note_revisions
    ]
    links: list[LinkRow] = [
        (new[k.src], new[k.dst], k.weight, _stored_spans(k.shared), k.kind, k.created_at) for k in ud.links
    ]
    return notes, revisions, links


def import_vectors(
    ud: UserDump,
    embed: Callable[[list[str]], Vec],
    embed_turns: Callable[[list[tuple[str, str | None]]], Vec],
    dim: int,
    usable: bool,
) -> tuple[dict[int, Vec], int]:
    """The vector of every item of a dump (by the dump's id), and how many were computed.

    ``usable``: the dump's vectors are of this memory's embedder (its header names it), so
    they are taken as they are. Otherwise, and for items that carry none, turns are embedded by
    ``embed_turns`` from (text, speaker) and facts by ``embed`` from their text (what the write
    path does), a segment's vector is the normalised
    mean of its member turns' (the consolidation's rule), and any other item (summary, note,
    profile: vectors the loop blended or moved over time) is embedded from its text, which
    approximates what the exporting memory held.

    Raises
    ------
    DumpError
        The dump is not whole (:func:`~lamina.memory.dump.reader.check_references`) or a vector has
        another dimension.
    """
    check_references(ud)
    out: dict[int, Vec] = {}
    if usable:
        for it in ud.items:
            if it.embedding is not None:
                if it.embedding.shape != (dim,):
                    raise DumpError(f"item {it.id}, field 'embedding': shape {it.embedding.shape}, expected ({dim},)")
                out[it.id] = it.embedding
    todo = [it for it in ud.items if it.id not in out and (it.kind != "segment" or not it.members)]
    turns = [it for it in todo if it.kind == "turn"]
    rest = [it for it in todo if it.kind != "turn"]
    if turns:
        X = embed_turns([(it.text, it.speaker) for it in turns])
        out.update({it.id: np.ascontiguousarray(X[i], dtype=np.float32) for i, it in enumerate(turns)})
    if rest:
        X = embed([it.text for it in rest])
        out.update({it.id: np.ascontiguousarray(X[i], dtype=np.float32) for i, it in enumerate(rest)})
    for it in ud.items:
        if it.id not in out:  # a segment of another space: from its member turns
            out[it.id] = unit(np.stack([out[m] for m in it.members]).mean(axis=0))
    return out, sum(1 for it in ud.items if not (usable and it.embedding is not None))


def _remap(ref: int | None, new: dict[int, int]) -> int | None:
    return ref if ref is None or ref in (ROOT, NO_TREE) else new[ref]


def _row(it: ItemEntry, user_id: str, rid: int, new: dict[int, int], vec: Vec) -> dict[str, Any]:
    row: dict[str, Any] = {k: getattr(it, k) for k in STORED_FIELDS}
    row.update(
        id=rid,
        user_id=user_id,
        seq=seq_of(rid),
        sources=tuple(it.sources),
        members=tuple(new[m] for m in it.members),
        parent_id=_remap(it.parent_id, new),
        superseded_by=_remap(it.superseded_by, new),
        embedding=np.ascontiguousarray(vec, dtype=np.float32).tobytes(),
    )
    return row


def import_user(
    tx: Tx, ud: UserDump, user_id: str, vectors: dict[int, Vec], reembedded: int, replaced: bool
) -> ImportReport:
    """Write a user's dump as ``user_id`` (absent from the store: the caller checked, or
    deleted it) inside the write ``tx``, its notes, note revisions and links through the note
    store; the state of the user is then loaded from the rows written, as an open loads it."""
    st, store = tx.st, tx.store
    tx.user(user_id)  # (creates the user's row with a fresh namespace index)
    e = ud.user
    store.set_drift(user_id, e.drift_total, e.drift_last, e.drift_updates)
    store.set_decays(user_id, e.decays)
    for s in ud.sessions:
        store.upsert_session(user_id, s.session_id, s.status, s.started_at, s.ended_at, s.ends)
    ids: Sequence[int] = store.new_ids(len(ud.items)) if ud.items else []
    new = {it.id: rid for it, rid in zip(ud.items, ids)}
    store.insert_items([_row(it, user_id, new[it.id], new, vectors[it.id]) for it in ud.items])
    for rv in ud.revisions:
        store.add_revision(new[rv.item_id], rv.text, rv.changed_at)
    notes, note_revisions, links = _note_rows(ud, new)
    store.put_notes(user_id, notes)
    store.add_note_revisions(user_id, note_revisions)
    store.add_links(user_id, links)
    st.reload_user(store, user_id, store.user_versions(user_id))
    return ImportReport(
        user_id=user_id,
        from_user_id=e.user_id,
        items=len(ud.items),
        sessions=len(ud.sessions),
        revisions=len(ud.revisions),
        notes=len(notes),
        links=len(links),
        reembedded=reembedded,
        replaced=replaced,
        ids={old: new[old] for old in sorted(new)},
    )


class UserTransfers:
    """The export and import of one user, as methods of :class:`lamina.Memory` (a mixin, typed
    by :class:`~lamina.memory.state.host.MemoryHost` like the read path's)."""

    def export_user(self: MemoryHost, *, user_id: str, vectors: bool = False) -> UserDump:
        """Everything stored of a user, as the entries of the export format
        (:mod:`lamina.memory.dump.format`; :func:`lamina.memory.dump.jsonl.export_jsonl` writes them as JSONL).

        Pending access statistics are written first; the rows are read in one snapshot of the
        store: items of every layer and status, sessions, revisions, the A-Mem notes of turns
        (with their revisions) and the links between turns, the user's statistics. For
        a database file the snapshot is taken under the memory's lock and read through a second,
        read-only connection without it, so other calls are not held up by a large export.

        Parameters
        ----------
        user_id : str
        vectors : bool
            Include every item's vector. By default the vectors of turns and facts (the
            embeddings of their own text) are left out and re-embedded on import; the others
            (centroids, blends, damped updates) are always included.

        Raises
        ------
        NotFoundError
            Unknown user.
        """
        self._check_user_call(user_id)
        ud: UserDump | None = None
        with self._op():
            self._check_open()
            self._flush_pending()
            # a file database: a second connection's snapshot, taken under the lock and read
            # without it (other users' calls go on meanwhile); in memory: read under the lock
            reader = self._store.read_snapshot()
            if reader is None:
                with self._store.read_tx():
                    ud = export_user(self._store, user_id, vectors=bool(vectors))
        if reader is not None:
            try:
                ud = export_user(reader, user_id, vectors=bool(vectors))
            finally:
                reader.close()
        if ud is None:
            raise NotFoundError(f"unknown user_id {user_id!r}")
        return ud

    def import_user(
        self: MemoryHost, dump: UserDump, *, embedder: str, user_id: str | None = None, replace: bool = False
    ) -> ImportReport:
        """Import one user of a validated dump (:func:`lamina.memory.dump.reader.read_dump`) in one
        atomic transaction, with fresh item ids (references remapped). The imported user's
        contexts are those of the exported one.

        Parameters
        ----------
        dump : UserDump
        embedder : str
            Name of the embedder that made the dump's vectors (the dump header's). When it is not
            this memory's, no vector of the dump is used: every vector is computed again (see
            :func:`lamina.memory.dump.user_transfer.import_vectors`).
        user_id : str, optional
            The user to import as (default: the dump's).
        replace : bool
            Delete an existing user of that id first (in the same transaction).

        Raises
        ------
        InvalidInput
            The user exists and ``replace`` is False (nothing is written).
        """
        self._check_open()
        if not isinstance(dump, UserDump):
            raise TypeError(f"dump must be a lamina.UserDump, got {type(dump).__name__}")
        if not isinstance(embedder, str):
            raise TypeError(f"embedder must be a str, got {type(embedder).__name__}")
        target = check_id(dump.user.user_id if user_id is None else user_id, "user_id")
        vectors, computed = import_vectors(
            dump, self._embed, self._embed_turns, self._dim, embedder == self._embedder.name
        )
        with self._write() as tx:
            u = self._user(target)
            if u is not None:
                if not replace:
                    raise InvalidInput(
                        f"user {target!r} already exists ({len(u.ids)} items); import with replace=True "
                        "(lamina import --replace) to delete it first, or as another user"
                    )
                tx.touch(target)
                tx.store.delete_user(target)
                tx.store.mark_deleted()
                self._embed.clear()
                tx.st.drop_user(target)
            return import_user(tx, dump, target, vectors, computed, u is not None)

    def rename_users(self: MemoryHost, renames: Mapping[str, str]) -> list[ImportReport]:
        """Give users new ids, all in one transaction: each user's rows are written under its new
        id (with fresh item ids, as an import writes them; the vectors are taken as they are,
        nothing is embedded) and the old user is deleted. Either every user is renamed or,
        on any error, none.

        Parameters
        ----------
        renames : mapping of str to str
            Old user id -> new user id. The new ids must be free (no existing user, no two
            users to one id).

        Returns
        -------
        list of ImportReport
            One per renamed user, in the mapping's order (``from_user_id``: the old id,
            ``user_id``: the new one, ``ids``: old item id -> new item id).

        Raises
        ------
        NotFoundError
            An old id names no user.
        InvalidInput
            A new id is taken, or two users would get the same one.
        """
        self._check_open()
        if not isinstance(renames, Mapping):
            raise TypeError(f"renames must be a mapping of old to new user ids, got {type(renames).__name__}")
        pairs = [(check_id(old, "user_id"), check_id(new, "user_id")) for old, new in renames.items()]
        targets = [new for _old, new in pairs]
        if len(set(targets)) != len(targets):
            raise InvalidInput(f"two users would be renamed to the same id: {sorted(targets)}")
        reports: list[ImportReport] = []
        with self._write() as tx:
            for old, new in pairs:
                if new != old and self._user(new) is not None:
                    raise InvalidInput(f"cannot rename {old!r} to {new!r}: user {new!r} already exists")
            for old, new in pairs:
                ud = export_user(tx.store, old, vectors=True)
                if ud is None:
                    raise NotFoundError(f"unknown user_id {old!r}")
                if new == old:
                    continue
                vectors, computed = import_vectors(ud, self._embed, self._embed_turns, self._dim, True)
                tx.touch(old)
                tx.store.delete_user(old)
                tx.store.mark_deleted()
                tx.st.drop_user(old)
                reports.append(import_user(tx, ud, new, vectors, computed, False))
            self._embed.clear()
        return reports
