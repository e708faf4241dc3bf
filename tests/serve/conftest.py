from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from servekit import KEY_A, KEY_B, MAX_BODY, MAX_IMPORT, MAX_MESSAGES, METRICS_KEY, ServerProc, serve_process

from lamina.serve.auth import hash_key


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """One real ``lamina serve`` (subprocess, SQLite file, hashing embedder) for the session:
    tenant ``a`` from a keys file, tenant ``b`` from ``LAMINA_API_KEYS``. Tests keep apart by
    their own user ids."""
    tmp = tmp_path_factory.mktemp("serve")
    keys = tmp / "keys.toml"
    keys.write_text(f'[tenants.a]\nkeys = ["{hash_key(KEY_A)}"]\n', encoding="utf-8")
    args = [
        "--db",
        str(tmp / "served.db"),
        "--embedder",
        "hashing",
        "--keys",
        str(keys),
        "--max-body-bytes",
        str(MAX_BODY),
        "--max-messages",
        str(MAX_MESSAGES),
        "--max-import-bytes",
        str(MAX_IMPORT),
        "--tenant-metrics-max-age",
        "0",
    ]
    with serve_process(tmp, args, env_keys=f"b:{KEY_B}", extra_env={"LAMINA_METRICS_KEY": METRICS_KEY}) as sp:
        yield sp
    assert sp.proc.returncode == 0, Path(sp.log).read_text()


@pytest.fixture
def a(server: ServerProc) -> Iterator[httpx.Client]:
    """An HTTP client of the shared server, as tenant ``a``."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_A}"}) as c:
        yield c


@pytest.fixture
def b(server: ServerProc) -> Iterator[httpx.Client]:
    """An HTTP client of the shared server, as tenant ``b``."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY_B}"}) as c:
        yield c
