"""Shared helpers for lamina's comparison scripts (timing, bandwidth, tables)."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


def timeit(fn: Callable[[], Any], min_time: float = 0.4, min_reps: int = 3, max_reps: int = 200) -> float:
    """Median wall time of fn() in seconds, after one warm-up call."""
    fn()
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - t_start < min_time and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def best_of(fn: Callable[[], Any], repeat: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Shortest of ``repeat`` runs of fn() on ``clock`` (seconds), after one warm-up call (page
    faults, thread start)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def run_times(fn: Callable[[], Any], runs: int = 3) -> list[float]:
    """Wall time in seconds of each of ``runs`` calls of fn(), after one warm-up call."""
    fn()
    out: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def stream_bandwidth(nbytes: int = 512 << 20, threads: int = 1) -> float:
    """Streaming bandwidth in GB/s from a large numpy copy (bytes read + bytes written).

    numpy's copy is single-threaded; `threads` > 1 copies disjoint halves from threads.
    """
    n = nbytes // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    if threads <= 1:
        t = timeit(lambda: np.copyto(dst, src), min_time=0.5)
        return 2 * src.nbytes / t / 1e9
    import threading

    chunks = np.array_split(np.arange(n), threads)
    bounds = [(c[0], c[-1] + 1) for c in chunks]

    def run() -> None:
        ts = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
        for t_ in ts:
            t_.start()
        for t_ in ts:
            t_.join()

    t = timeit(run, min_time=0.5)
    return 2 * src.nbytes / t / 1e9


@contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Limit BLAS/OpenMP threads of numpy (and FAISS) when threadpoolctl is available."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    if n is None:
        yield
        return
    with threadpool_limits(limits=n):
        yield


def machine_facts() -> dict[str, Any]:
    import lamina

    facts: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "lamina": lamina.build_info(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    facts["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return facts


Column = str | tuple[str, str] | tuple[str, str, str]


def _column(c: Column) -> tuple[str, str, str]:
    if isinstance(c, str):
        return c, c, ""
    if len(c) == 2:
        return c[0], c[1], ""
    return c


def print_table(rows: list[dict[str, Any]], columns: list[Column]) -> None:
    """Print ``rows`` as a right-aligned table, ``-`` for a missing value.

    Each column is ``key``, ``(key, header)`` or ``(key, header, format)``: the header defaults
    to the key and the format to ``""`` (``str()``; floats then print in full, so give them one).
    """
    cols = [_column(c) for c in columns]
    widths = [max([len(h), 10] + [len(format(r[k], f)) for r in rows if r.get(k) is not None]) for k, h, f in cols]
    print("  ".join(h.rjust(w) for (_, h, _), w in zip(cols, widths)))
    for r in rows:
        cells = []
        for (key, _, fmt), w in zip(cols, widths):
            v = r.get(key)
            cells.append(("-" if v is None else format(v, fmt)).rjust(w))
        print("  ".join(cells))


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=str)
    print(f"wrote {path}")
