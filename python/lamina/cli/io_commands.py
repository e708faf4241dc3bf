"""The ``lamina mcp``, ``lamina export``, ``lamina import`` and ``lamina migrate`` commands (added
to the ``lamina`` command line by :func:`add_io_parsers`), and how they open a database (a SQLite
file or a ``postgresql://`` URL): with the embedder it was built with, unless ``--embedder`` says
otherwise (:func:`open_db`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from typing import TextIO

from ..embedders import embedder_spec
from ..errors import LaminaError, NotFoundError
from ..memory.dump.reader import read_dump
from ..memory.facade import Memory
from ..memory.opening import open_store
from ..memory.store.dburl import is_postgres_url, redact_url

__all__ = ["add_io_parsers", "open_db", "stored_embedder", "embedder_spec"]


def stored_embedder(path: str) -> str | None:
    """The embedder spec a database was built with (``hashing-<dim>``, ``minilm``, ``mpnet`` or the stored
    name of a custom embedder); None for a file that does not exist or holds no memory yet."""
    if not is_postgres_url(path) and not os.path.exists(path):
        return None
    store = open_store(path)
    try:
        name = store.get_meta("embedder")
    finally:
        store.close()
    return None if name is None else embedder_spec(name)


def open_db(path: str, embedder: str | None, default: str = "auto") -> Memory:
    """Open a database with ``embedder``, else with the one it was built with, else (a new
    database) with ``default``."""
    spec = embedder or stored_embedder(path) or default
    return Memory(path, embedder=spec)


def _fail(cmd: str, e: BaseException) -> int:
    print(f"lamina {cmd}: error: {e}", file=sys.stderr)
    return 1


def _not_a_db(path: str, e: sqlite3.Error) -> ValueError:
    return ValueError(f"cannot open {path}: not a lamina database ({e})")


def _cmd_export(args: argparse.Namespace) -> int:
    from ..memory.dump.jsonl import export_jsonl

    if not is_postgres_url(args.db) and not os.path.exists(args.db):
        return _fail("export", FileNotFoundError(f"no database at {args.db}"))
    try:
        with open_db(args.db, args.embedder) as mem:
            users, rename = _export_users(mem, args.user or None, args.tenant)
            if args.out == "-":
                end = export_jsonl(mem, sys.stdout, user_ids=users, vectors=args.vectors, rename=rename)
            else:
                # written next to the target, then renamed: a failed export (an unknown user, say)
                # leaves no partial file, and an existing file as it was
                out_dir = os.path.dirname(os.path.abspath(args.out))
                fd, tmp = tempfile.mkstemp(prefix=".lamina-export-", suffix=".tmp", dir=out_dir)
                try:
                    with open(fd, "w", encoding="utf-8") as f:
                        end = export_jsonl(mem, f, user_ids=users, vectors=args.vectors, rename=rename)
                    os.replace(tmp, args.out)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
    except sqlite3.Error as e:
        return _fail("export", _not_a_db(args.db, e))
    except (LaminaError, ValueError, KeyError, OSError) as e:
        return _fail("export", e)
    print(f"lamina export: {end.users} users, {end.items} items", file=sys.stderr)
    return 0


def _export_users(
    mem: Memory, users: list[str] | None, tenant: str | None
) -> tuple[list[str] | None, Callable[[str], str] | None]:
    """The stored ids to export and how to name them in the dump. With ``tenant``: its users
    (those named, else all), named without the tenant prefix. Without: the users named, a name
    that is no stored user but one tenant's user (adopted, or written by a server with keys)
    standing for that one."""
    from ..serve.adoption import tenants_of
    from ..serve.tenancy import check_tenant, owns, public_user_id, stored_user_id

    if tenant is not None:
        check_tenant(tenant)
        if users is None:
            users = [public_user_id(tenant, u) for u in mem.users() if owns(tenant, u)]
        return [stored_user_id(tenant, u) for u in users], lambda stored: public_user_id(tenant, stored)
    if users is None:
        return None, None
    stored = mem.users()
    have = set(stored)
    out: list[str] = []
    names: dict[str, str] = {}
    for u in users:
        where = [] if u in have else tenants_of(stored, u)
        if len(where) > 1:
            raise NotFoundError(f"user {u!r} is in tenants {', '.join(where)}: name one with --tenant")
        if len(where) == 1:
            print(f"lamina export: user {u!r} is tenant {where[0]!r}'s", file=sys.stderr)
            names[stored_user_id(where[0], u)] = u
            u = stored_user_id(where[0], u)
        out.append(u)
    return out, (lambda s: names.get(s, s)) if names else None


def _user_map(args: argparse.Namespace, users: list[str]) -> dict[str, str] | None:
    if args.as_user is not None:
        if len(users) != 1:
            raise ValueError(f"--as needs a dump of one user; this one holds {len(users)} (use --user-map OLD=NEW)")
        return {users[0]: args.as_user}
    if not args.user_map:
        return None
    out: dict[str, str] = {}
    for pair in args.user_map:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise ValueError(f"--user-map expects OLD=NEW, got {pair!r}")
        if old not in users:
            raise ValueError(f"--user-map names user {old!r}, which the dump does not hold")
        out[old] = new
    return out


def _cmd_import(args: argparse.Namespace) -> int:
    from ..memory.dump.jsonl import import_dump

    try:
        src: TextIO
        if args.file == "-":
            src = sys.stdin
            dump = read_dump(src)
        else:
            with open(args.file, encoding="utf-8") as src:
                dump = read_dump(src)
        user_map = _user_map(args, [ud.user.user_id for ud in dump.users])
        # a new database takes the dump's embedder: its vectors are used as they are
        with open_db(args.db, args.embedder, default=embedder_spec(dump.header.embedder)) as mem:
            reports = import_dump(mem, dump, user_map=user_map, replace=args.replace)
    except sqlite3.Error as e:
        return _fail("import", _not_a_db(args.db, e))
    except (LaminaError, ValueError, KeyError, OSError) as e:
        return _fail("import", e)
    for r in reports:
        print(
            f"lamina import: {r.from_user_id!r} as {r.user_id!r}: {r.items} items, {r.sessions} sessions, "
            f"{r.revisions} revisions, {r.notes} notes, {r.links} links, {r.reembedded} vectors computed"
            + (" (replaced)" if r.replaced else ""),
            file=sys.stderr,
        )
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from ..memory.dump.jsonl import migrate

    src_name, dst_name = redact_url(args.src), redact_url(args.dst)
    if not is_postgres_url(args.src) and not os.path.exists(args.src):
        return _fail("migrate", FileNotFoundError(f"no database at {src_name}"))
    try:
        spec = stored_embedder(args.src)
        if spec is None:
            raise ValueError(f"{src_name} holds no memory (no embedder recorded)")
        with open_db(args.src, spec) as src, Memory(args.dst, embedder=spec) as dst:
            checks = migrate(src, dst, user_ids=args.user or None)
    except sqlite3.Error as e:
        return _fail("migrate", _not_a_db(args.src, e))
    except (LaminaError, ValueError, KeyError, OSError, ImportError) as e:
        return _fail("migrate", e)
    bad = [c for c in checks if not c.same_counts]
    for c in checks:
        r = c.report
        print(
            f"lamina migrate: {r.user_id!r}: {r.items} items, {r.sessions} sessions, {r.revisions} revisions"
            + ("" if c.same_counts else f"; COUNTS DIFFER: {c.differences}"),
            file=sys.stderr,
        )
    print(f"lamina migrate: {len(checks)} users from {src_name} to {dst_name}", file=sys.stderr)
    return 1 if bad else 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ..serve.mcp_server import build_mcp_server, run_stdio
    except ImportError as e:  # (the optional dependency)
        return _fail("mcp", ImportError(f"{e}; install it with: pip install 'lamina[serve]'"))
    try:
        mem = open_db(args.db, args.embedder)
    except sqlite3.Error as e:
        return _fail("mcp", _not_a_db(args.db, e))
    except (LaminaError, ValueError, OSError) as e:
        return _fail("mcp", e)
    try:
        run_stdio(build_mcp_server(mem, default_budget=args.budget, max_messages=args.max_messages))
    finally:
        mem.close()
    return 0


def add_io_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``mcp``, ``export`` and ``import`` subcommands."""
    emb = "embedder (default: the one the database was built with)"
    m = sub.add_parser("mcp", help="serve a memory database over MCP (stdio)")
    m.add_argument("--db", required=True, help="SQLite file (created if missing)")
    m.add_argument("--embedder", default=None, help=emb + "; a new database: auto")
    m.add_argument("--budget", type=int, default=1024, help="get_context's default token budget")
    m.add_argument(
        "--max-messages", type=int, default=1000, help="messages per add_memory call (more: a tool error; default 1000)"
    )
    m.set_defaults(func=_cmd_mcp)
    e = sub.add_parser("export", help="write users' memories as JSONL (docs/reference/export-format.md)")
    e.add_argument("--db", required=True, help="SQLite file or postgresql:// URL")
    e.add_argument("--user", action="append", help="a user to export (repeatable; default: every user)")
    e.add_argument("--vectors", action="store_true", help="every vector (default: turns and facts re-embedded)")
    e.add_argument("-o", "--out", default="-", help="output file (default: stdout)")
    e.add_argument("--embedder", default=None, help=emb)
    e.add_argument(
        "--tenant", default=None, help="the users of this tenant of a served database (named without the tenant)"
    )
    e.set_defaults(func=_cmd_export)
    i = sub.add_parser("import", help="read a JSONL dump into a database (one transaction per user)")
    i.add_argument("file", nargs="?", default="-", help="the dump (default: stdin)")
    i.add_argument("--db", required=True, help="SQLite file (created if missing) or postgresql:// URL")
    who = i.add_mutually_exclusive_group()
    who.add_argument("--as", dest="as_user", default=None, help="import the dump's one user under this id")
    who.add_argument("--user-map", action="append", metavar="OLD=NEW", help="rename a user (repeatable)")
    i.add_argument("--replace", action="store_true", help="delete existing users of the target ids first")
    i.add_argument("--embedder", default=None, help=emb + "; a new database: the dump's")
    i.set_defaults(func=_cmd_import)
    g = sub.add_parser(
        "migrate",
        help="copy every user of one database into another (e.g. a SQLite file to PostgreSQL) via the export format",
    )
    g.add_argument("--from", dest="src", required=True, help="the source: a SQLite file or postgresql:// URL")
    g.add_argument("--to", dest="dst", required=True, help="the target (created if missing; its users must be new)")
    g.add_argument("--user", action="append", help="a user to copy (repeatable; default: every user)")
    g.set_defaults(func=_cmd_migrate)
