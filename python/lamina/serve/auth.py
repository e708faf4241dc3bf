"""API keys: which tenant a ``Authorization: Bearer <key>`` header speaks for.

Keys are stored hashed: ``sha256:<hex of SHA-256 of the key's UTF-8 bytes>`` (``lamina keys
hash KEY`` prints it; ``lamina keys new TENANT`` makes a random key and its keys-file entry).
The keys file is TOML, one table per tenant::

    # keys.toml
    [tenants.acme]
    keys = ["sha256:3f0c...", "sha256:9a1b..."]   # several keys: rotation

    [tenants.globex]
    keys = ["sha256:77de..."]

The environment variable ``LAMINA_API_KEYS="tenant1:key1,tenant2:key2"`` adds plain keys
(hashed on load), for tests and containers. A key maps to exactly one tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import InvalidInput
from .http_errors import error_response
from .tenancy import check_tenant

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "KeyRing",
    "KeyGate",
    "hash_key",
    "key_id",
    "new_key",
    "bearer_key",
    "check_hash",
    "metrics_key_matches",
    "ENV_VAR",
    "METRICS_ENV_VAR",
    "MIN_KEY_LEN",
    "OPEN_PATHS",
]

#: Environment variable with plain ``tenant:key`` pairs, comma-separated.
ENV_VAR = "LAMINA_API_KEYS"
#: Environment variable with the plain key ``/metrics`` requires (``lamina serve --metrics-key``).
METRICS_ENV_VAR = "LAMINA_METRICS_KEY"
_PREFIX = "sha256:"
#: The fewest characters of a configured plain key (``LAMINA_API_KEYS``, the metrics key).
MIN_KEY_LEN = 32


def hash_key(key: str) -> str:
    """The keys-file form of ``key``: ``sha256:<64 hex digits>``."""
    if not isinstance(key, str) or not key:
        raise InvalidInput("an API key must be a non-empty string")
    return _PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id(key_hash: str) -> str:
    """The id of a key in logs (the audit log): ``sha256:`` and the first 16 hex digits of its
    hash (:func:`hash_key`), which names the key among a tenant's without revealing it."""
    return key_hash[: len(_PREFIX) + 16]


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header value (None: no bearer key)."""
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key


def new_key() -> str:
    """A fresh random API key (32 bytes, URL-safe base64)."""
    return "lmn_" + secrets.token_urlsafe(32)


def metrics_key_matches(expected_hash: str, authorization: str | None) -> bool:
    """Whether an ``Authorization`` header carries the key of ``expected_hash`` (compared by
    hash, in constant time)."""
    key = bearer_key(authorization)
    if key is None:
        return False
    got = _PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return hmac.compare_digest(got, expected_hash)


def check_hash(h: object, where: str) -> str:
    """``h`` as a key hash (``sha256:`` and 64 lowercase hex digits; InvalidInput otherwise)."""
    return _check_hash(h, where)


def _check_hash(h: object, where: str) -> str:
    if not isinstance(h, str) or not h.startswith(_PREFIX) or len(h) != len(_PREFIX) + 64:
        raise InvalidInput(
            f"{where}: {h!r} is not a key hash; expected 'sha256:' and 64 hex digits (lamina keys hash KEY)"
        )
    hexpart = h[len(_PREFIX) :].lower()
    try:
        bytes.fromhex(hexpart)
    except ValueError:
        raise InvalidInput(f"{where}: {h!r} is not a key hash (not hexadecimal)") from None
    return _PREFIX + hexpart


@dataclass(frozen=True)
class KeyRing:
    """Hashed API keys and their tenants.

    An empty ring means the service runs without authentication (the anonymous tenant; the
    command line then binds to a loopback address only).

    Thread safety: immutable, thread-safe.
    """

    tenants_by_hash: Mapping[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """Whether any key is configured."""
        return bool(self.tenants_by_hash)

    @property
    def tenants(self) -> list[str]:
        """The tenants with at least one key, sorted."""
        return sorted(set(self.tenants_by_hash.values()))

    def tenant_of(self, key: str) -> str | None:
        """The tenant of ``key``, or None when it is unknown."""
        # looked up by the key's hash: the lookup's timing can tell only about hashes, not keys
        return self.tenants_by_hash.get(_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest())

    @classmethod
    def from_sources(
        cls, keys_file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> KeyRing:
        """Keys from a TOML keys file and from ``LAMINA_API_KEYS`` in ``env`` (default ``os.environ``).

        Raises
        ------
        InvalidInput
            An unreadable or malformed keys file or variable (naming the entry), a key of two tenants.
        """
        pairs: list[tuple[str, str, str]] = []  # (hash, tenant, where)
        if keys_file is not None:
            pairs.extend(_read_keys_file(Path(keys_file)))
        env = os.environ if env is None else env
        raw = env.get(ENV_VAR, "").strip()
        if raw:
            for i, part in enumerate(p for p in raw.split(",") if p.strip()):
                tenant, sep, key = part.strip().partition(":")
                if not sep or not key:
                    # (the entry is not echoed: without its ':' it may be a key)
                    raise InvalidInput(
                        f"{ENV_VAR} entry {i + 1} must be 'tenant:key' "
                        f"({'no key after the colon' if sep else 'no colon'}; the entry is not shown: it may hold a key)"
                    )
                if len(key) < MIN_KEY_LEN:
                    raise InvalidInput(
                        f"{ENV_VAR}: the key of tenant {tenant!r} has {len(key)} characters; a key needs at least "
                        f"{MIN_KEY_LEN} ('lamina keys new' makes one)"
                    )
                pairs.append((hash_key(key), check_tenant(tenant), f"{ENV_VAR} entry {i + 1}"))
        out: dict[str, str] = {}
        for h, tenant, where in pairs:
            if out.get(h, tenant) != tenant:
                raise InvalidInput(f"{where}: the same key is given to tenants {out[h]!r} and {tenant!r}")
            out[h] = tenant
        return cls(out)


def _read_keys_file(path: Path) -> list[tuple[str, str, str]]:
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InvalidInput(f"cannot read keys file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InvalidInput(f"keys file {path} is not valid TOML: {e}") from None
    tenants = doc.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise InvalidInput(f"keys file {path} needs [tenants.<name>] tables with keys = ['sha256:...']")
    out = []
    for name, table in tenants.items():
        check_tenant(name)
        keys = table.get("keys") if isinstance(table, dict) else None
        if not isinstance(keys, list) or not keys:
            raise InvalidInput(f"keys file {path}: [tenants.{name}] needs keys = ['sha256:...'] (a non-empty list)")
        for j, h in enumerate(keys):
            out.append((_check_hash(h, f"keys file {path}, tenants.{name}.keys[{j}]"), name, f"keys file {path}"))
    return out


#: Paths a server with keys answers without one: health, the API's description, and ``/metrics``
#: (which checks its own key: ``lamina serve --metrics-key``).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


class KeyGate:
    """ASGI middleware: with keys configured, 401 ``unauthorized`` for an HTTP request without a
    known bearer key, before anything reads its body (but on :data:`OPEN_PATHS`).

    The routes authenticate again (they need the caller's tenant); this gate only makes sure an
    anonymous request costs one hash and no body buffering. Without keys it passes everything.

    Parameters
    ----------
    app : ASGI app
    keys : KeyRing
    self_authenticated : tuple of str
        Path prefixes whose routes authenticate on their own (the inspector at ``/ui``: its
        session cookie, not a bearer header); the gate passes them.
    on_refused : callable, optional
        ``on_refused(scope)`` before each 401 for an unknown key (the rate limits count failed authentications:
        :meth:`~lamina.serve.ratelimit.RateState.failed_auth`).
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        self_authenticated: tuple[str, ...] = (),
        on_refused: Callable[[Scope], None] | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.self_authenticated = self_authenticated
        self.on_refused = on_refused

    def _passes(self, path: str) -> bool:
        return path in OPEN_PATHS or any(path == p or path.startswith(p + "/") for p in self.self_authenticated)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys.enabled or self._passes(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        auth: str | None = None
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                auth = v.decode("latin-1")
        key = bearer_key(auth)
        if key is None:
            message = "missing API key: send 'Authorization: Bearer <key>'"
        elif self.keys.tenant_of(key) is None:
            message = "unknown API key"
        else:
            await self.app(scope, receive, send)
            return
        scope["lamina.route"] = "unauthenticated"  # (the metrics' route label)
        if self.on_refused is not None and key is not None:  # (a wrong key; a missing one guesses nothing)
            self.on_refused(scope)
        await error_response(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
