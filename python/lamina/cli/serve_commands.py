"""``lamina serve`` and ``lamina keys``: the command-line side of the service.

This module imports neither FastAPI nor uvicorn until a command runs, so ``lamina --help`` works
without the ``serve`` extra.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
from typing import Any

from .groups import command_group

__all__ = ["add_serve_parsers", "is_loopback"]

_EXTRA_HINT = "lamina serve needs the serve extra: pip install 'lamina[serve]'"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only loopback addresses (``127.0.0.1``, ``::1``, ``localhost``)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..serve.app import ENV_CONFIG, ServeConfig, create_app
        from ..serve.auth import METRICS_ENV_VAR, MIN_KEY_LEN, KeyRing, hash_key
        from ..serve.limits import Limits
        from ..serve.metrics import ServeMetrics, TimedEmbedder
        from ..serve.ratelimit import RateLimits
    except ImportError as e:  # pragma: no cover - depends on the installation
        print(f"{_EXTRA_HINT} ({e})", file=sys.stderr)
        return 2
    from ..errors import InvalidInput
    from ..memory import Memory
    from ..memory.opening import database_embedder
    from ..memory.store.dburl import redact_url

    try:
        keys = KeyRing.from_sources(args.keys)
        metrics_key = _metrics_key(args)
        if metrics_key is not None and len(metrics_key) < MIN_KEY_LEN:
            raise InvalidInput(
                f"the metrics key (--metrics-key / {METRICS_ENV_VAR}) has {len(metrics_key)} characters; it needs "
                f"at least {MIN_KEY_LEN} ('lamina keys new' makes one)"
            )
        admin_key = _admin_key(args)
        if admin_key is not None and len(admin_key) < MIN_KEY_LEN:
            raise InvalidInput(f"the admin key has {len(admin_key)} characters; it needs at least {MIN_KEY_LEN}")
        rate_limits = RateLimits() if args.rate_limit is None else RateLimits.parse(args.rate_limit)
        limits = Limits(
            max_body_bytes=args.max_body_bytes,
            max_messages=args.max_messages,
            threads=args.threads,
            max_pending=args.max_pending,
            queue_timeout=args.queue_timeout,
            max_import_bytes=args.max_import_bytes,
            max_imports=args.max_imports,
        )
    except InvalidInput as e:
        print(f"lamina serve: {e}", file=sys.stderr)
        return 2
    if not keys.enabled:
        if not is_loopback(args.host):
            print(
                f"lamina serve: refusing to serve {args.host} without API keys; give --keys keys.toml or "
                "LAMINA_API_KEYS='tenant:key,...', or bind to 127.0.0.1",
                file=sys.stderr,
            )
            return 2
        print(f"lamina serve: no API keys, so no authentication: serving {args.host} (loopback) only", file=sys.stderr)
    else:
        print(f"lamina serve: {len(keys.tenants)} tenant(s) with API keys", file=sys.stderr)
        if metrics_key is None:
            print("lamina serve: no --metrics-key: /metrics answers 404", file=sys.stderr)
    for warning in _secrets_on_the_command_line(args):
        print(f"lamina serve: warning: {warning}", file=sys.stderr)
    db = None if args.db == ":memory:" else args.db
    cfg = ServeConfig(
        db=db,
        embedder=args.embedder,
        keys=keys,
        limits=limits,
        tenant_metrics_max_age=args.tenant_metrics_max_age,
        mcp=not args.no_mcp,
        host=args.host,
        metrics_key=None if metrics_key is None else hash_key(metrics_key),
        admin_key=None if admin_key is None else hash_key(admin_key),
        ui=not args.no_ui,
        eval_results=args.eval,
        max_loaded_users=args.max_loaded_users,
        rate_limits=rate_limits,
    )
    common: dict[str, Any] = dict(
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        timeout_keep_alive=args.keep_alive,
        timeout_graceful_shutdown=args.graceful_timeout,
        backlog=max(2048, limits.max_pending),
    )
    if args.forwarded_allow_ips is not None:  # (else uvicorn's default: $FORWARDED_ALLOW_IPS or 127.0.0.1)
        common["forwarded_allow_ips"] = args.forwarded_allow_ips
    # uvicorn shuts down gracefully on SIGTERM / SIGINT, then re-raises the signal to the handler
    # it found: a quiet one makes a graceful stop exit 0 (not -15, nor a KeyboardInterrupt)
    stopped: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stopped.append(signum))
    if args.workers > 1 and db is None:
        print("lamina serve: --workers > 1 needs a --db file (the workers share it)", file=sys.stderr)
        return 2
    # open the memory here: a database that cannot be served (another embedder, not a lamina
    # file) is one clear line and exit status 2, not a traceback from the app's startup
    metrics = ServeMetrics()
    try:
        mem = Memory(
            db, TimedEmbedder(database_embedder(db, args.embedder), metrics), max_loaded_users=args.max_loaded_users
        )
    except Exception as e:
        print(f"lamina serve: cannot open {redact_url(args.db)}: {e}", file=sys.stderr)
        return 2
    if args.workers > 1:  # each worker opens its own (the check above was the parent's)
        mem.close()
        os.environ[ENV_CONFIG] = cfg.to_env()
        uvicorn.run("lamina.serve.app:app_from_env", factory=True, workers=args.workers, **common)
    else:
        try:
            uvicorn.run(create_app(cfg, memory=mem, metrics=metrics), **common)
        finally:
            mem.close()  # after uvicorn finished the open requests and the app its work pool
    if stopped:
        print(f"lamina serve: stopped ({signal.Signals(stopped[0]).name}); the memory is closed", file=sys.stderr)
    return 0


def _key(file: str | None, flag: str, plain: str | None, env: str) -> str | None:
    """A key: the first line of ``file`` (given as ``flag``), else ``plain``, else ``$env``
    (InvalidInput for an unreadable file)."""
    from ..errors import InvalidInput

    if file is not None:
        try:
            with open(file, encoding="utf-8") as f:
                return f.readline().strip() or None
        except OSError as e:
            raise InvalidInput(f"cannot read {flag} {file}: {e.strerror or e}") from None
    return plain or os.environ.get(env) or None


def _add_key_file_arg(p: argparse.ArgumentParser, key: str, more: str) -> None:
    """``--KEY-key-file``: a file whose first line is that key (read by :func:`_key`); ``more`` ends its help."""
    p.add_argument(f"--{key}-key-file", default=None, help=f"a file whose first line is the {key} key {more}")


def _metrics_key(args: argparse.Namespace) -> str | None:
    """The metrics key: ``--metrics-key-file``, else ``--metrics-key``, else ``LAMINA_METRICS_KEY``."""
    from ..serve.auth import METRICS_ENV_VAR

    return _key(args.metrics_key_file, "--metrics-key-file", args.metrics_key, METRICS_ENV_VAR)


def _admin_key(args: argparse.Namespace) -> str | None:
    """The admin key: ``--admin-key-file``, else ``LAMINA_ADMIN_KEY``."""
    from ..serve.admin_api import ENV_ADMIN_KEY

    return _key(args.admin_key_file, "--admin-key-file", None, ENV_ADMIN_KEY)


def _secrets_on_the_command_line(args: argparse.Namespace) -> list[str]:
    """Warnings for secrets given as arguments (every local user sees a command line: ``ps``)."""
    from urllib.parse import urlsplit

    out = []
    if args.metrics_key:
        out.append("--metrics-key puts the key on the command line; use LAMINA_METRICS_KEY or --metrics-key-file")
    try:
        password = urlsplit(str(args.db)).password if "://" in str(args.db) else None
    except ValueError:
        password = None
    if password:
        out.append(
            "the --db URL holds a password, visible on the command line; leave it out and set PGPASSWORD "
            "or a ~/.pgpass file (libpq reads both)"
        )
    return out


def _cmd_keys_hash(args: argparse.Namespace) -> int:
    from ..serve.auth import hash_key

    key = args.key if args.key is not None else sys.stdin.readline().rstrip("\n")
    print(hash_key(key))
    return 0


def _cmd_keys_new(args: argparse.Namespace) -> int:
    from ..serve.auth import hash_key, new_key
    from ..serve.tenancy import check_tenant

    key = new_key()
    if args.tenant is None:  # just a key (LAMINA_API_KEYS='tenant:key', the metrics key)
        print(key)
        return 0
    tenant = check_tenant(args.tenant)
    # the key on stderr, the keys-file entry (its hash only) on stdout: `>> keys.toml` stores no key
    print(f"API key of tenant {tenant!r} (give it to the client; it is stored nowhere):\n{key}", file=sys.stderr)
    print(f'\n[tenants.{tenant}]\nkeys = ["{hash_key(key)}"]')
    return 0


def _cmd_model_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..llm.local_chat import LocalChat
        from ..serve.chat_api import create_chat_app
    except ImportError as e:
        print(f"lamina model serve: {e}; needs pip install 'lamina[serve,model]'", file=sys.stderr)
        return 2
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            print(f"lamina model serve: --api-key-env {args.api_key_env} is not set", file=sys.stderr)
            return 2
    if key is None and not is_loopback(args.host):
        print("lamina model serve: without an API key it binds to loopback only (--api-key-env)", file=sys.stderr)
        return 2
    try:
        chat = LocalChat(path=args.model, threads=args.threads or None)
        model = chat.model  # load now: a missing file fails here, not on the first request
    except Exception as e:  # (a missing extra, file or unsupported model: said plainly)
        print(f"lamina model serve: cannot load the model: {e}", file=sys.stderr)
        return 2
    name = args.name or model.path.stem
    print(f"lamina model serve: {name} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_chat_app(chat, model_name=name, api_key=key), host=args.host, port=args.port,
                log_level=args.log_level)  # fmt: skip
    return 0


def add_serve_parsers(sub: Any) -> None:
    """Add ``serve``, ``model serve`` and ``keys`` to the ``lamina`` command line's subparsers."""
    s = sub.add_parser(
        "serve",
        help="serve a memory over HTTP (needs lamina[serve])",
        description="Serve a lamina memory over HTTP (OpenAPI at /docs). Without API keys it binds to loopback only.",
    )
    s.add_argument(
        "--db",
        required=True,
        help="SQLite file (created if missing), or postgresql://user:password@host/dbname "
        "(needs lamina[postgres]); ':memory:' for none",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8420)
    s.add_argument(
        "--keys", default=None, help="TOML keys file with hashed keys (see 'lamina keys'); also LAMINA_API_KEYS"
    )
    s.add_argument(
        "--embedder",
        default="auto",
        help="auto (default: the database's own; a new one: MiniLM, float32 if installed, else int8) | hashing | minilm | minilm-int8 | mpnet",
    )
    s.add_argument(
        "--workers", type=int, default=1, help="uvicorn worker processes sharing the --db file or PostgreSQL database"
    )
    s.add_argument("--threads", type=int, default=4, help="memory calls running at once per worker")
    s.add_argument(
        "--max-loaded-users",
        type=int,
        default=None,
        help="the most users each worker keeps loaded in memory (least recently used evicted, "
        "loaded again when next used; default: no limit, all loaded at start)",
    )
    s.add_argument("--max-pending", type=int, default=256, help="calls running or queued before 503")
    s.add_argument("--queue-timeout", type=float, default=10.0, help="seconds a call may wait for a thread before 503")
    s.add_argument("--max-body-bytes", type=int, default=4 << 20)
    s.add_argument("--max-messages", type=int, default=1000, help="messages per add")
    s.add_argument(
        "--max-import-bytes",
        type=int,
        default=512 << 20,
        help="largest body of POST /v1/users/{user_id}/import (a JSONL dump; default 512 MiB)",
    )
    s.add_argument(
        "--max-imports",
        type=int,
        default=2,
        help="import bodies received or held at once (more: 503); imports hold about "
        "max-imports x max-import-bytes of memory",
    )
    s.add_argument(
        "--metrics-key",
        default=None,
        help="with API keys: the bearer key GET /metrics requires (also LAMINA_METRICS_KEY; without it "
        "/metrics answers 404 when keys are configured; without keys /metrics is open)",
    )
    s.add_argument(
        "--rate-limit",
        default=None,
        help="budgets: 'auth=N/T' failed authentications per client address and 'writes=N/T' writes per key "
        "and per address (N requests per T seconds; 429 past them), comma-separated, or 'off' "
        "(default auth=30/60s)",
    )
    s.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="addresses of trusted proxies whose X-Forwarded-For / X-Forwarded-Proto are believed "
        "(comma-separated, '*' for any; default: $FORWARDED_ALLOW_IPS or 127.0.0.1)",
    )
    _add_key_file_arg(s, "metrics", "(instead of --metrics-key, which every local user can read on the command line)")
    _add_key_file_arg(
        s,
        "admin",
        "(also LAMINA_ADMIN_KEY): the bearer key of the admin routes (POST /v1/admin/tenants/T/adopt); "
        "without it they answer 404",
    )
    s.add_argument("--no-mcp", action="store_true", help="do not serve the MCP server at /mcp")
    s.add_argument("--no-ui", action="store_true", help="do not serve the memory inspector at /ui")
    s.add_argument("--eval", default=None, help="a 'lamina eval' results file (JSON) the inspector at /ui plots")
    s.add_argument("--keep-alive", type=int, default=30, help="seconds an idle keep-alive connection stays open")
    s.add_argument("--graceful-timeout", type=int, default=30, help="seconds shutdown waits for open requests")
    s.add_argument(
        "--tenant-metrics-max-age", type=float, default=15.0, help="seconds /metrics reuses its per-tenant counts"
    )
    s.add_argument("--log-level", default="warning")
    s.add_argument("--access-log", action="store_true", help="log every request (slower)")
    s.set_defaults(func=_cmd_serve)
    ms = command_group(sub, "model", help="the local model (needs lamina[model] and the model file)", dest="model_cmd")
    mv = ms.add_parser(
        "serve",
        help="an OpenAI-compatible chat endpoint on the local model (needs lamina[serve])",
        description="POST /v1/chat/completions and GET /v1/models on lamina.LocalChat (tools through prompting).",
    )
    mv.add_argument("--model", default=None, help="a llama-architecture .gguf (default: the packaged SmolLM2-135M)")
    mv.add_argument("--name", default=None, help="the model id to report (default: the file's name)")
    mv.add_argument("--host", default="127.0.0.1")
    mv.add_argument("--port", type=int, default=8421)
    mv.add_argument("--threads", type=int, default=0, help="model worker threads (0: lamina's default)")
    mv.add_argument("--api-key-env", default=None, help="require 'Bearer <key>' with the key read from this variable")
    mv.add_argument("--log-level", default="warning")
    mv.set_defaults(func=_cmd_model_serve)
    ks = command_group(sub, "keys", help="make and hash API keys for 'lamina serve --keys'", dest="keys_cmd")
    h = ks.add_parser("hash", help="print the keys-file hash of a key (read from stdin when not given)")
    h.add_argument("key", nargs="?", default=None)
    h.set_defaults(func=_cmd_keys_hash)
    n = ks.add_parser("new", help="a new random key: with TENANT, the key on stderr and its keys-file entry on stdout")
    n.add_argument("tenant", nargs="?", default=None)
    n.set_defaults(func=_cmd_keys_new)
