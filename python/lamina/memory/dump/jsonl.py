"""Export and import of users' memories as JSONL (``lamina export`` / ``lamina import``).

The format (a header line, per user its user, session, item and revision lines and the A-Mem
notes of its turns: note, note revision and link lines, an end line) is
defined in :mod:`lamina.memory.dump.format` and documented in ``docs/reference/export-format.md``. These
functions connect it to a :class:`lamina.Memory`:

* :func:`iter_export` yields the lines of a dump of some or all users, one user read at a time
  (an HTTP route streams it); :func:`export_jsonl` writes them to a file;
* :func:`import_jsonl` reads and validates a whole dump first (a bad line raises
  :class:`~lamina.memory.dump.format.DumpError` naming the line and field, before anything is written),
  checks every target user, then imports each user in one transaction
  (:meth:`lamina.Memory.import_user`: fresh ids, references remapped).

Import into a fresh store reproduces the exported memory: the same items, the same
``context()`` for the same queries (with the same embedder; see the format document for what
changes when the embedder differs).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TextIO

from ...errors import InvalidInput
from ...native import _info
from ..facade import Memory
from ..reports import ImportReport
from .format import Dump, DumpFooter, DumpHeader, UserDump, dump_lines
from .reader import read_dump

__all__ = [
    "UserMap",
    "iter_export",
    "iter_dump",
    "export_jsonl",
    "import_dump",
    "import_jsonl",
    "renamed",
    "migrate",
    "MigrationCheck",
]

#: How an import names the users of a dump: a mapping (users it does not name keep their id)
#: or a function of the dump's user id.
UserMap = Mapping[str, str] | Callable[[str], str]


def renamed(ud: UserDump, user_id: str) -> UserDump:
    """The same dump of a user under another user id (every entry carries it)."""
    if user_id == ud.user.user_id:
        return ud
    return UserDump(
        user=dataclasses.replace(ud.user, user_id=user_id),
        sessions=[dataclasses.replace(s, user_id=user_id) for s in ud.sessions],
        items=[dataclasses.replace(it, user_id=user_id) for it in ud.items],
        revisions=[dataclasses.replace(rv, user_id=user_id) for rv in ud.revisions],
        notes=[dataclasses.replace(n, user_id=user_id) for n in ud.notes],
        note_revisions=[dataclasses.replace(nr, user_id=user_id) for nr in ud.note_revisions],
        links=[dataclasses.replace(lk, user_id=user_id) for lk in ud.links],
    )


def iter_export(
    memory: Memory,
    *,
    user_ids: Sequence[str] | None = None,
    vectors: bool = False,
    rename: Callable[[str], str] | None = None,
) -> Iterator[str]:
    """The JSONL lines (each ending in a newline) of a dump of ``user_ids`` (default: every user).

    Parameters
    ----------
    memory : Memory
    user_ids : list of str, optional
        Users to export, in this order; an unknown one raises :class:`lamina.NotFoundError` (a
        user deleted while the lines are consumed too).
    vectors : bool
        Every item's vector (``"vectors": "all"`` in the header); by default turns and facts go
        without theirs and are re-embedded on import.
    rename : callable, optional
        The user id to write for each exported user (a server strips its tenant prefix).

    Each user is read in one snapshot (:meth:`lamina.Memory.export_user`) as the lines reach it.
    """
    uids = list(memory.users() if user_ids is None else user_ids)

    def users() -> Iterator[UserDump]:
        for uid in uids:
            ud = memory.export_user(user_id=uid, vectors=vectors)
            yield ud if rename is None else renamed(ud, rename(uid))

    return iter_dump(memory, users(), vectors=vectors)


def iter_dump(memory: Memory, users: Iterable[UserDump], *, vectors: bool = False) -> Iterator[str]:
    """The JSONL lines of a dump of users already read (:meth:`lamina.Memory.export_user`), with
    ``memory``'s embedder in the header; ``users`` is consumed lazily. ``vectors``: how they
    were read (the header's ``vectors``)."""
    header = DumpHeader(
        embedder=memory.embedder.name,
        dim=int(memory.embedder.dim),
        vectors="all" if vectors else "derived",
        lamina_version=str(_info.build_info()["version"]),
        created_at=time.time(),
    )
    return dump_lines(header, users)


def export_jsonl(
    memory: Memory,
    out: TextIO,
    *,
    user_ids: Sequence[str] | None = None,
    vectors: bool = False,
    rename: Callable[[str], str] | None = None,
) -> DumpFooter:
    """Write a dump (see :func:`iter_export`) to a text file; returns its counts."""
    last = ""
    for last in iter_export(memory, user_ids=user_ids, vectors=vectors, rename=rename):
        out.write(last)
    out.flush()
    end = json.loads(last)  # (the end line: the counts)
    return DumpFooter(users=int(end["users"]), items=int(end["items"]))


def _target(user_map: UserMap | None, uid: str) -> str:
    if user_map is None:
        return uid
    if callable(user_map):
        return user_map(uid)
    return user_map.get(uid, uid)


def import_dump(
    memory: Memory, dump: Dump, *, user_map: UserMap | None = None, replace: bool = False
) -> list[ImportReport]:
    """Import a validated dump: each user in one transaction, in the dump's order.

    Every target user is checked before anything is written: two dump users mapped to one id,
    or (without ``replace``) a target that exists already, raise :class:`lamina.InvalidInput`.

    Parameters
    ----------
    user_map : mapping or callable, optional
        The user id to import each dump user as (default: its own).
    replace : bool
        Delete existing users of the target ids first (each in its user's transaction).
    """
    if not isinstance(dump, Dump):
        raise TypeError(f"dump must be a lamina.Dump, got {type(dump).__name__}")
    targets = [_target(user_map, ud.user.user_id) for ud in dump.users]
    for uid, t in zip((ud.user.user_id for ud in dump.users), targets):
        if not isinstance(t, str) or not t.strip():
            raise InvalidInput(f"the user map gives {t!r} for user {uid!r}: expected a non-empty str")
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise InvalidInput(f"several users of the dump would be imported as {', '.join(map(repr, dup))}")
    if not replace:
        existing = sorted(set(targets) & set(memory.users()))
        if existing:
            raise InvalidInput(
                f"user(s) {', '.join(map(repr, existing))} exist already in {memory.path or 'this memory'}; "
                "import with replace=True (lamina import --replace) or as other users (--as / --user-map)"
            )
    return [
        memory.import_user(ud, embedder=dump.header.embedder, user_id=t, replace=replace)
        for ud, t in zip(dump.users, targets)
    ]


def import_jsonl(
    memory: Memory, lines: Iterable[str | bytes], *, user_map: UserMap | None = None, replace: bool = False
) -> list[ImportReport]:
    """Read and validate a whole dump (an open file or any iterable of lines), then import it
    (:func:`import_dump`). A bad line raises :class:`~lamina.memory.dump.format.DumpError` (an
    :class:`lamina.InvalidInput`) before anything is written."""
    return import_dump(memory, read_dump(lines), user_map=user_map, replace=replace)


@dataclasses.dataclass(slots=True)
class MigrationCheck:
    """One user moved by :func:`migrate`: what was imported and whether the target's counts of
    the user (items, per layer, per kind, sessions, facts) equal the source's.

    Attributes
    ----------
    report : ImportReport
    same_counts : bool
    differences : dict
        ``field -> (source, target)`` for every count that differs (empty when ``same_counts``).
    """

    report: ImportReport
    same_counts: bool
    differences: dict[str, tuple[object, object]]


_COUNTED = ("sessions", "open_sessions", "items", "layers", "kinds", "archive_turns", "facts_current")


def migrate(source: Memory, target: Memory, *, user_ids: Sequence[str] | None = None) -> list[MigrationCheck]:
    """Move users from one memory to another (a SQLite file to PostgreSQL, say) through the export
    format: each user is exported with every vector (``vectors=True``: nothing re-embedded, so
    the target serves the same contexts), validated line by line (:func:`import_jsonl`) and
    imported in one transaction of the target, one user at a time (memory stays one user's dump).

    Both memories must use the same embedder; a user that exists in the target already raises
    :class:`lamina.InvalidInput` before anything of that user is written (users before it stay
    moved). Returns a :class:`MigrationCheck` per user, in order.
    """
    if source.embedder.name != target.embedder.name:
        raise InvalidInput(
            f"the target memory uses embedder {target.embedder.name!r}, the source {source.embedder.name!r}; "
            "open the target with the source's embedder"
        )
    out: list[MigrationCheck] = []
    for uid in list(source.users() if user_ids is None else user_ids):
        (rep,) = import_jsonl(target, iter_export(source, user_ids=[uid], vectors=True))
        a, b = source.stats(user_id=uid).to_dict(), target.stats(user_id=uid).to_dict()
        diff = {k: (a[k], b[k]) for k in _COUNTED if a[k] != b[k]}
        out.append(MigrationCheck(report=rep, same_counts=not diff, differences=diff))
    return out
