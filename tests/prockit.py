"""``lamina`` commands as subprocesses for tests: the command line with this interpreter, a free
port, the wait until a started server answers, and its stop (shared by the service's and the local
model endpoint's tests)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lamina_cmd(*args: str) -> list[str]:
    """``python -m lamina ARGS`` with this interpreter and its ``-S`` flag (the test environment
    may run without site-packages and a PYTHONPATH; the environment is passed on)."""
    return [sys.executable, *(["-S"] if sys.flags.no_site else []), "-m", "lamina", *args]


def wait_ready(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path, what: str, timeout: float, poll: float
) -> None:
    """Return once ``ready()`` (an HTTP probe; a refused connection counts as not yet) is true,
    polling every ``poll`` seconds; fail with ``what``'s log if the process exits or ``timeout``
    seconds pass first."""
    import httpx  # (lazily: llmkit reports a missing httpx instead of failing on import)

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if ready():
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready after {timeout:g} s:\n{log.read_text()}")
        time.sleep(poll)


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
    """Send ``sig`` to ``proc`` (unless it has exited) and wait up to ``timeout`` seconds for it,
    killing it past that. Returns its exit status; None when it had to be killed."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
