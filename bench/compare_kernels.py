"""lamina.native.kernels vs the best numpy formulation of the same formula, in one process.

For every kernel at ``--rows`` rows (d = ``--dim`` for the row updates) this prints the best-of
``--repeat`` wall time of lamina on one thread and on all threads, of numpy (single-threaded:
its BLAS is pinned to one thread with threadpoolctl), the speed-up over numpy, and the achieved
bandwidth (minimum bytes the kernel must move / time) as a fraction of this machine's streaming
bandwidth, measured here as a large numpy copy (read + write bytes / time; one thread, and all
threads with one chunk per thread).

Bar (issue 3): each row kernel >= 3x numpy at 1M rows and >= 50% of the one-thread streaming
bandwidth on one thread. ``evict_to_capacity`` and ``select_hot`` are selections, not row
kernels: their bandwidth column is informative only.

    PYTHONPATH=python python bench/compare_kernels.py --out /tmp/kernels.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:  # numpy's BLAS pinned to one thread: the references are timed single-threaded
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - optional
    threadpool_limits = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lamina  # noqa: E402
from _util import best_of  # noqa: E402
from lamina.native import kernels as K  # noqa: E402

# ---------------------------------------------------------------------------- numpy references
# The fastest plain-numpy formulations we know: in-place ufuncs with preallocated scratch
# buffers (allocated outside the timed region, which favours numpy).


def np_ema_blend(rows, targets, alpha, scratch):
    delta = np.subtract(targets, rows, out=scratch)  # rows + (1-α)(t - rows) == α·rows + (1-α)·t
    delta *= np.float32(1.0 - alpha)
    rows += delta
    return np.einsum("ij,ij->i", delta, delta)


def np_damped_update(rows, targets, lam, scratch):
    delta = np.subtract(targets, rows, out=scratch)  # (t + λ·x)/(1+λ) == x + (t - x)/(1+λ)
    delta *= np.float32(1.0 / (1.0 + lam))
    rows += delta
    return np.einsum("ij,ij->i", delta, delta)


def np_softmax_gate(r, beta, scratch):
    z = np.multiply(r, np.float32(beta), out=scratch)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def np_softmax_gate_eps(r, beta, eps, max_doublings, scratch):
    g = np_softmax_gate(r, beta, scratch).copy()
    used = np.full(len(r), beta, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.where(g > 0, g * np.log(g), 0).sum(axis=1)
        active = np.flatnonzero(H > eps)
        for _ in range(max_doublings):
            if active.size == 0:
                break
            used[active] *= 2
            z = r[active] * used[active, None].astype(np.float32)
            z -= z.max(axis=1, keepdims=True)
            np.exp(z, out=z)
            z /= z.sum(axis=1, keepdims=True)
            g[active] = z
            H = -np.where(z > 0, z * np.log(z), 0).sum(axis=1)
            active = active[H > eps]
    return g, used


def np_heat(visits, ilen, last, now, a, b, c, mu, s64):
    x = np.subtract(last, now, out=s64)
    x *= 1.0 / mu
    r = x.astype(np.float32)
    np.exp(r, out=r)
    r *= np.float32(c)
    r += np.multiply(visits, a, dtype=np.float32)
    r += np.multiply(ilen, b, dtype=np.float32)
    return r


def np_select_hot(heat, threshold, namespaces=None):
    idx = np.flatnonzero(heat > threshold)
    if namespaces is None:
        return idx
    return idx[np.argsort(namespaces[idx], kind="stable")]


def np_evict(scores, namespaces, capacity):
    n = len(scores)
    idx = np.arange(n)
    order = np.lexsort((-idx, scores, namespaces))  # namespace, score asc, index desc
    ns_s = namespaces[order]
    starts = np.flatnonzero(np.r_[True, ns_s[1:] != ns_s[:-1]])
    counts = np.diff(np.r_[starts, n])
    rank = idx - np.repeat(starts, counts)
    evict = rank < np.repeat(np.maximum(counts - capacity, 0), counts)
    return np.sort(order[evict])


# ---------------------------------------------------------------------------- timing


CLOCK = time.perf_counter


def copy_bandwidth(nbytes: int, threads: int, repeat: int) -> float:
    """Streaming bandwidth in bytes/s: (read + write) bytes of a large numpy copy."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    chunks = np.array_split(np.arange(src.size), threads)
    bounds = [(c[0], c[-1] + 1) for c in chunks if c.size]
    if threads == 1:
        t = best_of(lambda: np.copyto(dst, src), repeat, CLOCK)
    else:
        with ThreadPoolExecutor(threads) as ex:

            def run():
                list(ex.map(lambda b: np.copyto(dst[b[0] : b[1]], src[b[0] : b[1]]), bounds))

            t = best_of(run, repeat, time.perf_counter)
    return 2 * src.nbytes / t


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--layers", type=int, default=3, help="L, columns of the gate input")
    ap.add_argument("--namespaces", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="'all threads' count (0: default)")
    ap.add_argument("--only", default="", help="comma-separated kernel names to run")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    ap.add_argument(
        "--clock",
        choices=["wall", "thread"],
        default="wall",
        help="one-thread timings by wall clock or by the calling thread's CPU time "
        "(thread: robust on a shared machine; all-thread runs always use wall time)",
    )
    args = ap.parse_args()
    # numpy (and any BLAS it calls) on one thread: the numpy columns are one-thread timings,
    # and idle BLAS worker threads must not compete with lamina's threads for the cores
    blas_limit = threadpool_limits(limits=1) if threadpool_limits is not None else None
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter

    n, d, R = args.rows, args.dim, args.repeat
    all_threads = args.threads or lamina.get_num_threads()
    rng = np.random.default_rng(0)
    only = set(filter(None, args.only.split(",")))

    bw1 = copy_bandwidth(256 << 20, 1, R)
    bwT = copy_bandwidth(256 << 20, all_threads, R) if all_threads > 1 else bw1
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} logical CPUs; numpy {np.__version__}; "
        f"lamina {lamina.__version__} simd={lamina.build_info()['simd_active']}"
    )
    print(
        f"one-thread clock: {args.clock}; numpy BLAS threads: "
        f"{1 if blas_limit is not None else 'default (threadpoolctl missing)'}"
    )
    print(
        f"streaming bandwidth (numpy copy, read+write): 1 thread {bw1 / 1e9:.1f} GB/s, "
        f"{all_threads} threads {bwT / 1e9:.1f} GB/s"
    )

    cases: list[dict] = []

    def case(name, nbytes, lam_fn, np_fn, row_kernel=True):
        if only and name not in only:
            return
        res = {"kernel": name, "bytes": nbytes, "row_kernel": row_kernel}
        t_np = best_of(np_fn, R, CLOCK)
        for label, t in (("1", 1), ("all", all_threads)):
            lamina.set_num_threads(t)
            tl = best_of(lam_fn, R, CLOCK if t == 1 else time.perf_counter)
            bw = bw1 if t == 1 else bwT
            res[f"t_lamina_{label}"] = tl
            res[f"ratio_{label}"] = t_np / tl
            res[f"gbps_{label}"] = nbytes / tl / 1e9
            res[f"bw_frac_{label}"] = nbytes / tl / bw
        lamina.set_num_threads(0)
        res["t_numpy"] = t_np
        cases.append(res)
        print(
            f"{name:<24} numpy {t_np * 1e3:8.2f} ms | 1 thr {res['t_lamina_1'] * 1e3:8.2f} ms "
            f"x{res['ratio_1']:5.1f} {res['gbps_1']:6.1f} GB/s ({res['bw_frac_1']:4.0%}) | "
            f"{all_threads} thr {res['t_lamina_all'] * 1e3:8.2f} ms x{res['ratio_all']:5.1f} "
            f"{res['gbps_all']:6.1f} GB/s ({res['bw_frac_all']:4.0%})" + ("" if row_kernel else "  [selection]"),
            flush=True,
        )

    # -- row updates, n x d
    if not only or only & {"ema_blend", "ema_blend_renorm", "damped_update", "ema_blend_index"}:
        rows = rng.standard_normal((n, d), dtype=np.float32)
        targets = rng.standard_normal((n, d), dtype=np.float32)
        scratch = np.empty_like(rows)
        drift = np.empty(n, np.float32)
        upd_bytes = 3 * rows.nbytes + drift.nbytes  # read rows, read targets, write rows, drift
        case(
            "ema_blend",
            upd_bytes,
            lambda: K.ema_blend(rows, targets, 0.9, out=drift),
            lambda: np_ema_blend(rows, targets, 0.9, scratch),
        )
        case(
            "ema_blend_renorm",
            upd_bytes,
            lambda: K.ema_blend(rows, targets, 0.9, renormalize=True, out=drift),
            lambda: (
                np_ema_blend(rows, targets, 0.9, scratch),
                rows.__itruediv__(np.linalg.norm(rows, axis=1, keepdims=True)),
            ),
        )
        case(
            "damped_update",
            upd_bytes,
            lambda: K.damped_update(rows, targets, 4.0, out=drift),
            lambda: np_damped_update(rows, targets, 4.0, scratch),
        )
        m = n // 10
        index = np.sort(rng.choice(n, m, replace=False)).astype(np.int64)
        tsub = targets[:m].copy()
        ssub = np.empty_like(tsub)

        def np_index():
            sub = rows[index]
            np_ema_blend(sub, tsub, 0.9, ssub)
            rows[index] = sub

        case("ema_blend_index", 3 * tsub.nbytes + 8 * m, lambda: K.ema_blend(rows, tsub, 0.9, index=index), np_index)
        del rows, targets, scratch

    # -- softmax gate, n x L
    r = rng.standard_normal((n, args.layers), dtype=np.float32)
    g_out = np.empty_like(r)
    g_scratch = np.empty_like(r)
    gate_bytes = 2 * r.nbytes + 8 * n
    case(
        "softmax_gate",
        gate_bytes,
        lambda: K.softmax_gate(r, 2.0, out=g_out),
        lambda: np_softmax_gate(r, 2.0, g_scratch),
    )
    case(
        "softmax_gate_eps",
        gate_bytes,
        lambda: K.softmax_gate(r, 2.0, max_entropy=0.5, out=g_out),
        lambda: np_softmax_gate_eps(r, 2.0, 0.5, 32, g_scratch),
    )

    # -- heat
    visits = rng.integers(0, 100, n).astype(np.int64)
    ilen = rng.integers(1, 20, n).astype(np.int64)
    now = 1.7e9
    last = now - rng.uniform(0, 3e7, n)
    heat = np.empty(n, np.float32)
    s64 = np.empty(n)
    case(
        "heat_scores",
        visits.nbytes + ilen.nbytes + last.nbytes + heat.nbytes,
        lambda: K.heat_scores(visits, ilen, last, now, out=heat),
        lambda: np_heat(visits, ilen, last, now, 1.0, 1.0, 1.0, 1e7, s64),
    )
    visits32 = visits.astype(np.float32)
    ilen32 = ilen.astype(np.int32)
    case(
        "heat_scores_f32_i32",
        visits32.nbytes + ilen32.nbytes + last.nbytes + heat.nbytes,
        lambda: K.heat_scores(visits32, ilen32, last, now, out=heat),
        lambda: np_heat(visits32, ilen32, last, now, 1.0, 1.0, 1.0, 1e7, s64),
    )

    # -- selections
    h = K.heat_scores(visits, ilen, last, now)
    thr = float(np.quantile(h, 0.9))
    ns = rng.integers(0, args.namespaces, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    n_hot = int((h > thr).sum())
    case(
        "select_hot",
        h.nbytes + 8 * n_hot,
        lambda: K.select_hot(h, thr),
        lambda: np_select_hot(h, thr),
        row_kernel=False,
    )
    case(
        "select_hot_ns",
        h.nbytes + 16 * n_hot,
        lambda: K.select_hot(h, thr, ns),
        lambda: np_select_hot(h, thr, ns),
        row_kernel=False,
    )
    scores = (h * rng.random(n, dtype=np.float32)).astype(np.float32)
    cap = max(1, n // args.namespaces // 2)
    assert np.array_equal(K.evict_to_capacity(scores, ns, cap), np_evict(scores, ns, cap))
    case(
        "evict_to_capacity",
        scores.nbytes + ns.nbytes + 8 * n // 2,
        lambda: K.evict_to_capacity(scores, ns, cap),
        lambda: np_evict(scores, ns, cap),
        row_kernel=False,
    )

    rows_k = [c for c in cases if c["row_kernel"]]
    ok_ratio = all(c["ratio_1"] >= 3 for c in rows_k)
    ok_bw = all(c["bw_frac_1"] >= 0.5 for c in rows_k)
    print(
        f"\nbar (row kernels, one thread): >= 3x numpy: {'PASS' if ok_ratio else 'FAIL'}; "
        f">= 50% streaming bandwidth: {'PASS' if ok_bw else 'FAIL'}"
    )
    if args.out:
        report = {
            "machine": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform()},
            "numpy": np.__version__,
            "lamina": lamina.build_info(),
            "params": vars(args) | {"all_threads": all_threads},
            "stream_bw_1thread": bw1,
            "stream_bw_all": bwT,
            "cases": cases,
            "bar": {"ratio_3x_one_thread": ok_ratio, "bw_50pct_one_thread": ok_bw},
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2, default=str)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
