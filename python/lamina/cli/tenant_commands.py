"""``lamina tenant adopt``: move a database's un-namespaced users (written in process or by
``lamina demo``) into a tenant of ``lamina serve`` (:mod:`lamina.serve.adoption`), atomically."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import LaminaError
from ..memory.store.dburl import is_postgres_url
from .groups import command_group
from .io_commands import open_db

__all__ = ["add_tenant_parser"]


def _cmd_adopt(args: argparse.Namespace) -> int:
    from ..serve.adoption import adopt_users

    if not is_postgres_url(args.db) and not os.path.exists(args.db):
        print(f"lamina tenant adopt: error: no database at {args.db}", file=sys.stderr)
        return 1
    users = None if not args.users else [u for part in args.users for u in part.split(",") if u]
    try:
        with open_db(args.db, args.embedder) as mem:
            report = adopt_users(mem, tenant=args.tenant, user_ids=users)
    except (LaminaError, ValueError, KeyError, TypeError, OSError) as e:
        print(f"lamina tenant adopt: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict()))
    for u in report.users:
        print(
            f"lamina tenant adopt: {u.user_id!r} -> tenant {report.tenant!r}: {u.items} items, {u.sessions} sessions",
            file=sys.stderr,
        )
    print(
        f"lamina tenant adopt: {len(report.users)} users, {report.items} items into tenant {report.tenant!r}",
        file=sys.stderr,
    )
    return 0


def add_tenant_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``lamina tenant adopt``."""
    tsub = command_group(
        sub, "tenant", help="tenants of a served database: adopt users written without one", dest="tenant_cmd"
    )
    a = tsub.add_parser(
        "adopt",
        help="move users that belong to no tenant into TENANT, in one transaction (their item ids change)",
    )
    a.add_argument("--db", required=True, help="SQLite file or postgresql:// URL")
    a.add_argument("--tenant", required=True, help="the tenant (as in the keys file)")
    a.add_argument(
        "--users", action="append", default=None, help="users to adopt, comma-separated or repeated (default: all)"
    )
    a.add_argument("--embedder", default=None, help="embedder (default: the one the database was built with)")
    a.add_argument("--json", action="store_true", help="also print the report as JSON on stdout")
    a.set_defaults(func=_cmd_adopt)
