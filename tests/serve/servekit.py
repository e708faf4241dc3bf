"""Shared helpers of the service tests: a real ``lamina serve`` subprocess on a free port, an
in-thread uvicorn server for apps built in the test, and a blocking adapter over async objects."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from prockit import free_port, lamina_cmd, stop_process, wait_ready

KEY_A = "key-of-tenant-a-0123456789abcdefghijk"
KEY_B = "key-of-tenant-b-9876543210kjihgfedcba"
#: the shared server's metrics key (LAMINA_METRICS_KEY)
METRICS_KEY = "metrics-key-0123456789abcdef0123456"
#: the shared server's limits (the size tests rely on them)
MAX_BODY = 65536
MAX_MESSAGES = 50
MAX_IMPORT = 4 * MAX_BODY


@dataclass
class ServerProc:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        code = stop_process(self.proc, sig, timeout)
        if code is None:
            raise AssertionError(f"lamina serve did not stop within {timeout} s; log:\n{self.log.read_text()}")
        return code


@contextlib.contextmanager
def serve_process(
    tmp: Path,
    args: Sequence[str],
    env_keys: str | None = None,
    ready_timeout: float = 60.0,
    extra_env: dict[str, str] | None = None,
) -> Iterator[ServerProc]:
    """Start ``lamina serve ARGS --port <free>`` and wait for ``/readyz``; stop it (SIGTERM) after."""
    port = free_port()
    env = dict(os.environ)
    env.pop("LAMINA_API_KEYS", None)
    env.pop("LAMINA_METRICS_KEY", None)
    env.update(extra_env or {})
    if env_keys is not None:
        env["LAMINA_API_KEYS"] = env_keys
    log = tmp / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(lamina_cmd("serve", *args, "--port", str(port)), env=env, stdout=out, stderr=out)
    sp = ServerProc(proc, f"http://127.0.0.1:{port}", log)
    try:
        wait_ready(
            proc,
            lambda: httpx.get(sp.url + "/readyz", timeout=1.0).status_code == 200,
            log,
            "lamina serve",
            ready_timeout,
            0.05,
        )
        yield sp
    finally:
        sp.stop()


@contextlib.contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread on a free port; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(30)


class Blocking:
    """The methods of an async object (``AsyncMemory``, ``AsyncClient``) as blocking calls, on a
    loop of its own (for the parametrised API tests)."""

    def __init__(self, obj: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._obj = obj
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._obj, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(fn(*args, **kwargs))

        return call
