"""lamina.kv selection vs the best numpy formulation of each method, in one process.

For each method and sequence length this prints the best-of-``--repeat`` wall time of
``lamina.kv.select`` on one thread and on all threads, of a vectorised numpy implementation of
the same method (single-threaded; numpy's BLAS is pinned to one thread with threadpoolctl),
and the speed-ups; ``x cpu`` is the ratio of the process CPU times of numpy and of lamina on one thread, which stays meaningful when other jobs
share the machine (wall-clock ratios then understate what the threads can do). The numpy versions are the
fastest plain-numpy formulations we know: in-place ufuncs over shifted views for pooling,
``argpartition`` for top-k, one ``argpartition`` per layer for cross-head top-k, and a loop over
rows only where per-row budgets differ (as the reference implementations do). Their tie
handling is numpy's (arbitrary), so agreement is checked on the multiset of kept scores.

Inputs: per-position scores (L, H, S) that look like window-mean attention (log-normal
weights, normalised per row); with ``--window-rows w`` also window attention (L, H, w, S)
(w * 4 * L * H * S bytes: 1 GiB at w = 32, S = 32k).

Bar (issue 3): snapkv / lava selection at S = 32k >= 5x the numpy reference.

    PYTHONPATH=python python bench/compare_kv.py --out /tmp/kv.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

try:  # numpy's BLAS pinned to one thread: the references are timed single-threaded
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - optional
    threadpool_limits = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import best_of  # noqa: E402
from lamina import kv  # noqa: E402

F32 = np.float32

# ------------------------------------------------------------------------------ numpy versions


def np_pool(a: np.ndarray, kind: str, k: int) -> np.ndarray:
    if kind == "none" or k == 1:
        return a
    r, n = k // 2, a.shape[-1]
    pad = np.full(a.shape[:-1] + (n + 2 * r,), -np.inf if kind == "max" else 0.0, dtype=F32)
    pad[..., r : r + n] = a
    out = pad[..., :n].copy()
    op = np.maximum if kind == "max" else np.add
    for d in range(1, k):
        op(out, pad[..., d : d + n], out=out)
    if kind == "avg":
        out /= F32(k)
    return out


def np_gqa(p: np.ndarray, hkv: int, kind: str) -> np.ndarray:
    L, H, n = p.shape
    if H == hkv:
        return p
    p4 = p.reshape(L, hkv, H // hkv, n)
    return p4.max(axis=2) if kind == "max" else p4.mean(axis=2)


def np_window_mean(x: np.ndarray, n: int) -> np.ndarray:
    return x[..., :n] if x.ndim == 3 else x[..., :n].mean(axis=2)


def np_top_uniform(s: np.ndarray, k: int) -> np.ndarray:
    n = s.shape[-1]
    if k == 0:
        return np.zeros(s.shape[:-1] + (0,), dtype=np.int64)
    idx = np.argpartition(s, n - k, axis=-1)[..., n - k :]
    idx.sort(axis=-1)
    return idx


def np_top_row(row: np.ndarray, k: int) -> np.ndarray:
    n = row.size
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.argpartition(row, n - k)[n - k :]
    idx.sort()
    return idx


def np_window_tail(shape: tuple[int, ...], n: int, S: int) -> np.ndarray:
    return np.broadcast_to(np.arange(n, S), shape + (S - n,))


def np_snapkv(x, b, hkv, w=64, k=5, pool="avg"):
    S = x.shape[-1]
    n = S - w
    s = np_gqa(np_pool(np_window_mean(x, n), pool, k), hkv, "mean")
    idx = np_top_uniform(s, b - w)
    return np.concatenate([idx, np_window_tail(idx.shape[:-1], n, S)], axis=-1), s


def np_h2o(x, b, hkv):
    S = x.shape[-1]
    recent = b // 2
    n = S - recent
    acc = x[..., :n] if x.ndim == 3 else x[..., :n].sum(axis=2)
    s = np_gqa(acc, hkv, "mean")
    idx = np_top_uniform(s, b - recent)
    return np.concatenate([idx, np_window_tail(idx.shape[:-1], n, S)], axis=-1), s


def np_pyramidkv(x, b, hkv, w=64, k=5, beta=20.0):
    L, S = x.shape[0], x.shape[-1]
    n, bp = S - w, b - w
    s = np_gqa(np_pool(np_window_mean(x, n), "avg", k), hkv, "mean")
    lb = kv.PyramidKV(beta=beta).layer_budgets(L, bp, n)  # O(L) arithmetic, same budgets
    out = []
    for layer in range(L):
        idx = np_top_uniform(s[layer], int(lb[layer]))
        out.append(np.concatenate([idx, np_window_tail(idx.shape[:-1], n, S)], axis=-1))
    return out, s


def np_counts(s_layer: np.ndarray, total: int) -> np.ndarray:
    hkv, n = s_layer.shape
    flat = s_layer.ravel()
    top = np.argpartition(flat, flat.size - total)[flat.size - total :]
    return np.bincount(top // n, minlength=hkv)


def np_rows_varying(s: np.ndarray, k: np.ndarray, n: int, S: int) -> list[np.ndarray]:
    tail = np.arange(n, S)
    return [
        np.concatenate([np_top_row(s[l, g], int(k[l, g])), tail]) for l in range(s.shape[0]) for g in range(s.shape[1])
    ]


def np_adakv(x, b, hkv, w=64, k=5, alpha=0.2):
    L, S = x.shape[0], x.shape[-1]
    n, bp = S - w, b - w
    s = np_gqa(np_pool(np_window_mean(x, n), "avg", k), hkv, "mean")
    F = int(bp * alpha)
    pinned = s.copy()
    if F:
        np.put_along_axis(pinned, np.argpartition(s, n - F, axis=-1)[..., n - F :], np.inf, axis=-1)
    counts = np.stack([np_counts(pinned[layer], hkv * bp) for layer in range(L)])
    return np_rows_varying(s, counts, n, S), s


def np_lava(x, b, hkv, norms, w=32, k=7, alpha=0.2):
    L, S = x.shape[0], x.shape[-1]
    n, bp = S - w, b - w
    p = np_pool(np_window_mean(x, n), "max", k)
    nu = norms[..., :n].max(axis=-1)
    s = np_gqa(p, hkv, "max") * nu[..., None]
    z = s.sum(axis=(1, 2))
    slogs = np.log(s, out=np.zeros_like(s), where=s > 0)
    slogs *= s
    ent = (np.log(z) - slogs.sum(axis=(1, 2), dtype=np.float64) / z) / np.log(hkv * n)
    lb = np.floor(L * bp * ent / ent.sum()).astype(np.int64)
    kk = np.empty((L, hkv), dtype=np.int64)
    for layer in range(L):
        c = np_counts(s[layer], hkv * int(lb[layer]))
        kk[layer] = np.round((1 - alpha) * c + alpha * lb[layer]).astype(np.int64)
    kk = np.minimum(kk, n)
    return np_rows_varying(s, kk, n, S), s


# ---------------------------------------------------------------------------------- harness


def kept_score_sums(rows: list[np.ndarray] | np.ndarray, s: np.ndarray, n: int) -> float:
    """Sum of the scores of kept non-window positions (tie-insensitive agreement check)."""
    flat = s.reshape(-1, n)
    if isinstance(rows, np.ndarray):
        rows = list(rows.reshape(-1, rows.shape[-1]))
    else:  # a list of per-layer (H_kv, len) blocks or of rows
        rows = [r for block in rows for r in (block if np.ndim(block) == 2 else [block])]
    total = 0.0
    for r, idx in enumerate(rows):
        idx = np.asarray(idx)
        total += float(flat[r, idx[idx < n]].astype(np.float64).sum())
    return total


def make_scores(rng: np.random.Generator, L: int, H: int, S: int) -> np.ndarray:
    x = np.exp(rng.standard_normal((L, H, S), dtype=F32) * F32(1.5))
    x /= x.sum(axis=-1, keepdims=True)
    return x


def make_window(rng: np.random.Generator, L: int, H: int, w: int, S: int) -> np.ndarray:
    x = np.empty((L, H, w, S), dtype=F32)
    for layer in range(L):
        x[layer] = np.exp(rng.standard_normal((H, w, S), dtype=F32) * F32(1.5))
        x[layer] /= x[layer].sum(axis=-1, keepdims=True)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seq", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument(
        "--window-rows", type=int, default=0, help="also time window attention input (L, H, w, S) with this w (0: off)"
    )
    ap.add_argument("--methods", nargs="+", default=["snapkv", "lava", "adakv", "pyramidkv", "h2o"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    # numpy (and any BLAS it calls) on one thread: the numpy columns are one-thread timings,
    # and idle BLAS worker threads must not compete with lamina's threads for the cores
    blas_limit = threadpool_limits(limits=1) if threadpool_limits is not None else None

    L, H, hkv, b = args.layers, args.heads, args.kv_heads, args.budget
    threads = lamina.get_num_threads()
    info = lamina.build_info()
    facts = {
        "machine": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "lamina_threads": threads,
        "simd_active": info.get("simd_active"),
        "numpy": np.__version__,
        "numpy_threads": 1 if blas_limit is not None else "default (threadpoolctl missing)",
        "python": platform.python_version(),
        "L": L,
        "H": H,
        "H_kv": hkv,
        "budget": b,
    }
    print(json.dumps(facts))
    rng = np.random.default_rng(0)
    results = []
    inputs: list[tuple[str, int, Callable[[], np.ndarray]]] = []
    for S in args.seq:
        inputs.append(("scores", S, lambda S=S: make_scores(rng, L, H, S)))
        if args.window_rows:
            inputs.append(("window", S, lambda S=S: make_window(rng, L, H, args.window_rows, S)))
    header = (
        f"{'method':10s} {'input':7s} {'S':>6s} {'numpy ms':>9s} {'1 thr ms':>9s} {'x':>6s} "
        f"{f'{threads} thr ms':>9s} {'x':>6s} {'x cpu':>6s}  agree"
    )
    print(header)
    for kind, S, make in inputs:
        x = make()
        norms = (rng.random((L, hkv, S), dtype=F32) * 20 + 1).astype(F32)
        for m in args.methods:
            vn = norms if m == "lava" else None
            w64 = 64 if kind == "scores" else args.window_rows
            w32 = 32 if kind == "scores" else args.window_rows
            ref: Callable[[], Any]
            if m == "snapkv":
                ref = partial(np_snapkv, x, b, hkv, w=w64)
            elif m == "h2o":
                ref = partial(np_h2o, x, b, hkv)
            elif m == "pyramidkv":
                ref = partial(np_pyramidkv, x, b, hkv, w=w64)
            elif m == "adakv":
                ref = partial(np_adakv, x, b, hkv, w=w64)
            elif m == "lava":
                ref = partial(np_lava, x, b, hkv, norms, w=w32)
            else:
                raise SystemExit(f"no numpy version of {m}")
            run = partial(kv.select, x, b, m, value_norms=vn, n_kv_heads=hkv)

            t_np = best_of(ref, args.repeat)
            t_1 = best_of(partial(run, threads=1), args.repeat)
            t_n = best_of(partial(run, threads=0), args.repeat)
            # CPU time of the two single-threaded runs: robust to other load on a shared box
            c_np = best_of(ref, args.repeat, time.process_time)
            c_1 = best_of(partial(run, threads=1), args.repeat, time.process_time)
            # agreement: same multiset of kept scores for uniform methods; totals otherwise
            ks = run(threads=0)
            rows_np, s_np = ref()
            n = s_np.shape[-1]
            if m in ("snapkv", "h2o", "pyramidkv", "adakv"):
                mine = [ks.head(layer, g) for layer in range(L) for g in range(hkv)]
                a, c = kept_score_sums(mine, s_np, n), kept_score_sums(rows_np, s_np, n)
                agree = f"{abs(a - c) / max(abs(c), 1e-30):.1e}"
            else:
                agree = f"total {ks.total} (np {sum(len(r) for r in rows_np)})"
            row = {
                "method": m,
                "input": kind,
                "S": S,
                "numpy_s": t_np,
                "lamina_1t_s": t_1,
                "lamina_s": t_n,
                "speedup_1t": t_np / t_1,
                "speedup": t_np / t_n,
                "numpy_cpu_s": c_np,
                "lamina_1t_cpu_s": c_1,
                "speedup_1t_cpu": c_np / c_1,
                "agreement": agree,
            }
            results.append(row)
            print(
                f"{m:10s} {kind:7s} {S:6d} {t_np * 1e3:9.1f} {t_1 * 1e3:9.1f} {t_np / t_1:6.1f} "
                f"{t_n * 1e3:9.1f} {t_np / t_n:6.1f} {c_np / c_1:6.1f}  {agree}",
                flush=True,
            )
        del x
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"facts": facts, "results": results}, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
