"""Fused native kernels of the memory loop (docs/design.md §2-3; equations from the MLMF paper).

=====================  ==========================================  ===========================
function               paper                                       what
=====================  ==========================================  ===========================
:func:`softmax_gate`   γ, β of eq. 7; ε of Alg. 1 line 26          layer gate, entropy bound
:func:`ema_blend`      α of eq. 5                                  in-place EMA of rows
:func:`damped_update`  λ of eq. 9-10 (closed form)                 retention-regularised step
:func:`heat_scores`    MemoryOS heat (a, b, c, μ)                  promotion / eviction score
:func:`select_hot`     MemoryOS promotion (heat > τ)               rows to promote
:func:`evict_to_capacity`  Π_C of Alg. 1 (lines 7, 13, 19)         rows to evict per namespace
=====================  ==========================================  ===========================

Conventions shared by every function here:

* Arrays are taken as they are: exact dtype, C-contiguous, the documented number of
  dimensions; anything else raises ``TypeError`` (dtype, non-array) or ``ValueError`` (shape,
  contiguity) naming the fix. Nothing is converted or copied silently.
* NaN or ±Inf in an input raises ``ValueError``. The in-place row updates find them during
  their single pass: rows whose inputs are not finite are left unchanged, all other rows are
  updated, then ``ValueError`` names the first bad row (see :func:`ema_blend`).
* The GIL is released while a kernel runs; large inputs are split over
  ``lamina.get_num_threads()`` threads (or ``threads=``), small ones run on one thread.
  Results never depend on the thread count.
* ``out=`` (where offered) receives the result in place and is returned; it must have the
  result's dtype and shape and be writable. On an error it may be partly written.
* Device dispatch: every function here also takes CUDA arrays (``__cuda_array_interface__``:
  CuPy, PyTorch) and then runs on their device, on the caller's current stream (the call
  waits for its error flags and, for :func:`select_hot` / :func:`evict_to_capacity`, the
  result count); outputs are allocated with the input's library. Mixing host and device
  arrays raises ``ValueError``. The GPU results equal the CPU's (same formulas, same tie
  rules); only the drift of the row updates may differ by float32 rounding (another
  summation order). ``threads`` is ignored on the device.
* The per-element formulas live in ``cpp/lamina/kernel_math.hpp`` and are shared with the
  CUDA backend. exp/log there are float32 polynomials (≤ 2 ulp); values of exp below
  FLT_MIN flush to 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from .. import _core
from . import _device
from ._checks import check_int, check_threads

__all__ = [
    "softmax_gate",
    "ema_blend",
    "damped_update",
    "heat_scores",
    "select_hot",
    "evict_to_capacity",
]

FloatArray = npt.NDArray[np.float32]
RowParam = float | npt.NDArray[np.floating]
CountArray = npt.NDArray[np.float32] | npt.NDArray[np.int32] | npt.NDArray[np.int64]


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _real(x: object, name: str) -> float:
    if not _is_real(x):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    return float(x)  # type: ignore[arg-type]


def _row_param(x: object, name: str) -> float | np.ndarray:
    """A scalar becomes a Python float; an array is passed on untouched (checked natively)."""
    if _is_real(x):
        return float(x)  # type: ignore[arg-type]
    if isinstance(x, np.ndarray):
        return float(x) if x.ndim == 0 and _is_real(x[()]) else x
    raise TypeError(f"{name} must be a float or a 1-D float32/float64 numpy array, got {type(x).__name__}")


def _array_or_none(x: object) -> object:
    """x when it is an array (host or device), else None (for device dispatch)."""
    return x if isinstance(x, np.ndarray) or _device.is_device_array(x) else None


def _device_param(x: object, name: str) -> object:
    if _device.is_device_array(x):
        return x
    if _is_real(x):
        return float(x)  # type: ignore[arg-type]
    raise TypeError(f"{name} must be a float or a 1-D float32/float64 CUDA array for device rows")


def _device_rows(
    fn: str, rows: object, targets: object, param: object, pname: str, index: object, renormalize: bool, out: object
) -> object:
    m = int(targets.shape[0]) if len(getattr(targets, "shape", ())) else 0  # type: ignore[attr-defined]
    drift = out if out is not None else _device.empty_like_device(rows, (m,), np.float32)
    stream = _device.current_stream(rows)
    p = _device_param(param, pname)
    if fn == "ema":
        _core.cuda_ema_blend(rows, targets, p, index, renormalize, drift, stream)
    else:
        _core.cuda_damped_update(rows, targets, p, index, drift, stream)
    return drift


def _update_rows(
    fn: str,
    rows: FloatArray,
    targets: FloatArray,
    param: RowParam,
    pname: str,
    index: npt.NDArray[np.int64] | None,
    renormalize: bool,
    out: FloatArray | None,
    threads: int,
) -> FloatArray:
    """:func:`ema_blend` (``fn == "ema"``, ``param`` α) or :func:`damped_update` (λ) on the
    device the arrays are on."""
    if _device.on_device(
        ("rows", rows), ("targets", targets), ("index", index), ("out", out), (pname, _array_or_none(param))
    ):
        return _device_rows(fn, rows, targets, param, pname, index, renormalize, out)  # type: ignore[return-value]
    p, t = _row_param(param, pname), check_threads(threads)
    if fn == "ema":
        return _core.ema_blend(rows, targets, p, index, renormalize, out, t)
    return _core.damped_update(rows, targets, p, index, out, t)


def softmax_gate(
    relevance: FloatArray,
    beta: RowParam,
    max_entropy: float | None = None,
    *,
    max_doublings: int = 32,
    out: FloatArray | None = None,
    threads: int = 0,
) -> tuple[FloatArray, npt.NDArray[np.float64]]:
    """Layer gate γ = softmax(β·r) per row — eq. 7 — with the entropy bound H(γ) ≤ ε of
    Algorithm 1 line 26.

    ``γ_i = exp(β·r_i) / Σ_j exp(β·r_j)``, computed stably as ``exp(β·(r_i − r_max))``
    (``r_min`` for β < 0), so no overflow for any finite β; β = 0 gives the uniform gate 1/L.

    With ``max_entropy`` (ε): every row whose entropy ``H(γ) = −Σ γ_j ln γ_j`` (nats) exceeds ε
    has its β doubled and γ recomputed until ``H(γ) ≤ ε``, at most ``max_doublings`` times
    (and never beyond float32 range), so ``beta_used = β·2^k`` with ``0 ≤ k ≤ max_doublings``.
    H falls monotonically towards ``ln(number of tied maxima)`` as β grows, so a row whose top
    relevances tie (e.g. all equal) cannot go below that and stops at the bound.

    Cost with ε: for L = 2 or 3 (the memory loop's working / episodic / semantic gate) on the
    AVX2 and AVX-512 paths, each row's doubling count is predicted from its two logit gaps
    with a certified bound on the entropy (a per-ε table of its exact level set, widened by
    the float kernel's error), so about one softmax per row is computed instead of one per
    doubling; rows the proof cannot settle (about 1%) take the exact doublings. The results
    are the same bits as doubling one step at a time. Other L: one softmax per row and per
    doubling.

    Parameters
    ----------
    relevance : ndarray, shape (b, L), float32, C-contiguous, finite
        r: relevance of each of the L memory layers to each of b queries (L ≥ 1).
    beta : float or ndarray of shape (b,), float32/float64
        β, the gate temperature (sharpness), one for all rows or one per row. Finite.
        Must be > 0 when ``max_entropy`` is given (doubling then sharpens towards the most
        relevant layer).
    max_entropy : float, optional
        ε ≥ 0 in nats. None: no bound, β is used as given.
    max_doublings : int
        Bound on the doublings per row (0 … 1024).
    out : ndarray, shape (b, L), float32, optional
        Receives γ.
    threads : int
        Worker threads (0: default).

    Returns
    -------
    gamma : ndarray, shape (b, L), float32
        γ, rows sum to 1 (up to rounding).
    beta_used : ndarray, shape (b,), float64
        The β each row was finally evaluated with (``beta`` itself without ε).

    Raises
    ------
    TypeError
        Wrong dtype / non-array ``relevance``, ``beta`` or ``out``.
    ValueError
        Wrong shape, L = 0, NaN/Inf in ``relevance``, non-finite β or |β| beyond float32,
        β ≤ 0 with ``max_entropy``, ε < 0 or not finite, ``max_doublings`` out of range.
    """
    eps = None if max_entropy is None else _real(max_entropy, "max_entropy")
    if isinstance(max_doublings, (bool, np.bool_)) or not isinstance(max_doublings, (int, np.integer)):
        raise TypeError(f"max_doublings must be an int, got {type(max_doublings).__name__}")
    if _device.on_device(("relevance", relevance), ("out", out), ("beta", _array_or_none(beta))):
        shape = tuple(int(s) for s in relevance.shape)
        if len(shape) != 2:
            raise ValueError(f"relevance must be 2-dimensional (b, L), got shape {shape}")
        gamma = out if out is not None else _device.empty_like_device(relevance, shape, np.float32)
        beta_used = _device.empty_like_device(relevance, (shape[0],), np.float64)
        _core.cuda_softmax_gate(
            relevance,
            _device_param(beta, "beta"),
            eps,
            int(max_doublings),
            gamma,
            beta_used,
            _device.current_stream(relevance),
        )
        return gamma, beta_used
    gamma, beta_used = _core.softmax_gate(
        relevance, _row_param(beta, "beta"), eps, int(max_doublings), out, check_threads(threads)
    )
    return gamma, beta_used


def ema_blend(
    rows: FloatArray,
    targets: FloatArray,
    alpha: RowParam,
    index: npt.NDArray[np.int64] | None = None,
    renormalize: bool = False,
    *,
    out: FloatArray | None = None,
    threads: int = 0,
) -> FloatArray:
    """EMA blend of eq. 5, in place: ``rows ← α·rows + (1−α)·targets``; returns ‖Δ‖² per row.

    ``M^(e)_t = α·M^(e)_{t−1} + (1−α)·ψ(S_t)`` (eq. 5): α is the retention decay (α = 1 keeps a
    row, α = 0 replaces it by its target, both exactly). One fused pass over memory per row.

    Parameters
    ----------
    rows : ndarray, shape (n, d), float32, C-contiguous, writable
        The rows (e.g. episode embeddings). Updated in place.
    targets : ndarray, shape (m, d), float32, C-contiguous
        Without ``index``: m = n, row i blends with ``targets[i]``. With ``index``: one target
        row per index entry, ``rows[index[k]]`` blends with ``targets[k]``. Must not share
        memory with ``rows``.
    alpha : float or ndarray of shape (m,), float32/float64
        α ∈ [0, 1], one for all updated rows or one per updated row (per index entry).
    index : ndarray, shape (m,), int64, optional
        Rows to update, each in [0, n) (no negative indices), no duplicates.
    renormalize : bool
        Scale each blended row to unit L2 norm (an all-zero result stays zero). The drift is
        then measured against the normalised row.
    out : ndarray, shape (m,), float32, optional
        Receives the drift.
    threads : int
        Worker threads (0: default).

    Returns
    -------
    drift : ndarray, shape (m,), float32
        ``‖row_new − row_old‖²`` of each updated row (in the order of ``index``).

    Raises
    ------
    TypeError
        Wrong dtype or non-array arguments.
    ValueError
        Shape mismatches, non-contiguous or read-only ``rows``, α outside [0, 1] or non-finite,
        duplicate indices, ``targets``/``out`` overlapping ``rows``, NaN/Inf in ``rows`` or
        ``targets`` (raised after the pass: the offending rows are left unchanged, the others
        are updated — the call is not atomic on this error).
    IndexError
        An index outside [0, n).
    """
    if not isinstance(renormalize, (bool, np.bool_)):
        raise TypeError(f"renormalize must be a bool, got {type(renormalize).__name__}")
    return _update_rows("ema", rows, targets, alpha, "alpha", index, bool(renormalize), out, threads)


def damped_update(
    rows: FloatArray,
    targets: FloatArray,
    lam: RowParam,
    index: npt.NDArray[np.int64] | None = None,
    *,
    out: FloatArray | None = None,
    threads: int = 0,
) -> FloatArray:
    """Retention-regularised update of eq. 9-10 in closed form, in place; returns ‖Δ‖².

    The minimiser of ``‖e − e*‖² + λ‖e − e_prev‖²`` (generation target plus λ times the
    retention loss 𝓛_ret of eq. 9, weighted as in eq. 10) is
    ``e = (e* + λ·e_prev) / (1 + λ)``; it is evaluated as the equal convex combination
    ``(λ/(1+λ))·e_prev + (1/(1+λ))·e*`` (no overflow for large λ; λ = 0 copies the target
    exactly). The returned drift ``‖e − e_prev‖²`` is 𝓛_ret's term for this step.

    Parameters
    ----------
    rows : ndarray, shape (n, d), float32, C-contiguous, writable
        e_prev (e.g. entity profile embeddings). Updated in place.
    targets : ndarray, shape (m, d), float32, C-contiguous
        e*; one row per row of ``rows`` (m = n) or, with ``index``, one per index entry.
    lam : float or ndarray of shape (m,), float32/float64
        λ ≥ 0, finite: the retention weight (larger keeps more of the previous row).
    index : ndarray, shape (m,), int64, optional
        Rows to update, each in [0, n), no duplicates (as in :func:`ema_blend`).
    out, threads
        As in :func:`ema_blend`.

    Returns
    -------
    drift : ndarray, shape (m,), float32

    Raises
    ------
    TypeError, ValueError, IndexError
        As :func:`ema_blend`, with λ < 0 or non-finite in place of the α range.
    """
    return _update_rows("damped", rows, targets, lam, "lam", index, False, out, threads)


def heat_scores(
    visits: CountArray,
    interaction_len: CountArray,
    last_access: npt.NDArray[np.float64],
    now: float,
    a: float = 1.0,
    b: float = 1.0,
    c: float = 1.0,
    mu: float = 1e7,
    *,
    out: FloatArray | None = None,
    threads: int = 0,
) -> FloatArray:
    """MemoryOS heat: ``a·N_visit + b·L_interaction + c·exp(−(now − last_access)/μ)``.

    MemoryOS (references/memory-algorithms.md §1.4) writes the weights as α, β, γ; here they
    are ``a, b, c`` so they do not clash with α (eq. 5) and β, γ (eq. 7). The defaults are the
    paper's: a = b = c = 1, μ = 1e7 s (≈ 116 days). ``now − last_access`` is taken in float64,
    the exponential in float32. ``last_access > now`` is allowed (recency above 1).

    Parameters
    ----------
    visits : ndarray, shape (n,), float32, int32 or int64
        N_visit, times each item was retrieved. Read in its own dtype (no copy).
    interaction_len : ndarray, shape (n,), float32, int32 or int64
        L_interaction, e.g. pages / turns the item holds.
    last_access : ndarray, shape (n,), float64
        Event time of the last access, seconds.
    now : float
        Current event time, seconds.
    a, b, c : float
        Weights (finite).
    mu : float
        μ > 0, the recency time scale in seconds.
    out : ndarray, shape (n,), float32, optional
    threads : int

    Returns
    -------
    heat : ndarray, shape (n,), float32

    Raises
    ------
    TypeError
        Unsupported dtypes (e.g. float64 counts: convert visibly with ``.astype``).
    ValueError
        Length mismatch, NaN/Inf in any input, μ ≤ 0, a heat that overflows float32.
    """
    now_, a_, b_, c_, mu_ = (_real(x, name) for x, name in ((now, "now"), (a, "a"), (b, "b"), (c, "c"), (mu, "mu")))
    if _device.on_device(
        ("visits", visits), ("interaction_len", interaction_len), ("last_access", last_access), ("out", out)
    ):
        n = int(last_access.shape[0]) if len(getattr(last_access, "shape", ())) else 0
        heat = out if out is not None else _device.empty_like_device(last_access, (n,), np.float32)
        stream = _device.current_stream(last_access)
        _core.cuda_heat_scores(visits, interaction_len, last_access, now_, a_, b_, c_, mu_, heat, stream)
        return heat
    return _core.heat_scores(visits, interaction_len, last_access, now_, a_, b_, c_, mu_, out, check_threads(threads))


def select_hot(
    heat: FloatArray,
    threshold: float,
    namespaces: npt.NDArray[np.uint64] | None = None,
    *,
    threads: int = 0,
) -> npt.NDArray[np.int64]:
    """Rows to promote: indices with ``heat > threshold`` (MemoryOS promotion, heat > τ).

    Parameters
    ----------
    heat : ndarray, shape (n,), float32, finite
    threshold : float
        τ; the comparison is strict and exact (a float64 threshold is honoured exactly).
    namespaces : ndarray, shape (n,), uint64, optional
        Without it the result is ascending. With it the result is grouped by namespace:
        namespaces in ascending numeric order, indices ascending within each namespace, so
        each namespace's candidates are one contiguous run (``namespaces[slots]`` is sorted).
    threads : int

    Returns
    -------
    slots : ndarray, shape (k,), int64
        A device array (the input's library) when ``heat`` is a CUDA array.

    Raises
    ------
    TypeError
        Wrong dtypes.
    ValueError
        NaN/Inf in ``heat``, NaN threshold, length mismatch.
    """
    if _device.on_device(("heat", heat), ("namespaces", namespaces)):
        n = int(heat.shape[0]) if len(getattr(heat, "shape", ())) == 1 else 0
        buf = _device.empty_like_device(heat, (n,), np.int64)
        k = _core.cuda_select_hot(heat, _real(threshold, "threshold"), namespaces, buf, _device.current_stream(heat))
        return _device.trimmed(buf, int(k))  # type: ignore[no-any-return]
    return _core.select_hot(heat, _real(threshold, "threshold"), namespaces, check_threads(threads))


def evict_to_capacity(
    scores: FloatArray,
    namespaces: npt.NDArray[np.uint64],
    capacity: int | Mapping[int, int],
    *,
    live: npt.NDArray[np.bool_ | np.uint8] | None = None,
    threads: int = 0,
) -> npt.NDArray[np.int64]:
    """Capacity projection Π_C of Algorithm 1: rows to evict so each namespace keeps ≤ C rows.

    For every namespace holding c > C (live) rows, the c − C rows that come first in the order
    *lower score first; among equal scores the larger index first* are evicted — so the
    highest-scoring rows stay and, on ties, the smaller (older) index is kept, as in top-k.
    The result is deterministic and independent of the thread count. Cost O(n): rows are
    grouped by a hash + counting sort on the namespace, then one ``nth_element`` per
    over-full namespace (in parallel).

    Parameters
    ----------
    scores : ndarray, shape (n,), float32
        Retention score per row (e.g. heat × strength); finite for live rows.
    namespaces : ndarray, shape (n,), uint64
        Namespace (user / agent id) per row.
    capacity : int or mapping {namespace: capacity}
        C ≥ 0 for every namespace, or a per-namespace mapping; namespaces that are not in the
        mapping are unbounded (never evicted from). Capacity larger than a namespace's count
        evicts nothing there.
    live : ndarray, shape (n,), bool or uint8, optional
        Rows with ``live == 0`` are ignored: not counted, never returned, scores not read.
    threads : int

    Returns
    -------
    slots : ndarray, shape (k,), int64
        Row indices to evict, ascending (a device array for CUDA inputs; the capacity mapping
        itself is always a host object). On the GPU n must be below 2**31.

    Raises
    ------
    TypeError
        Wrong dtypes, or ``capacity`` neither an int nor a mapping of ints.
    ValueError
        Length mismatch, NaN/Inf score on a live row, negative capacity, a mapping key outside
        [0, 2**64).
    """
    if isinstance(capacity, Mapping):
        keys = np.empty(len(capacity), dtype=np.uint64)
        vals = np.empty(len(capacity), dtype=np.int64)
        for k, (ns, cap) in enumerate(capacity.items()):
            if not _is_real(ns) or not isinstance(ns, (int, np.integer)):
                raise TypeError(f"capacity mapping keys must be int namespaces, got {type(ns).__name__}")
            n_cap = check_int(cap, f"capacity for namespace {ns}", 0)
            if not 0 <= int(ns) < 2**64:
                raise ValueError(f"namespace {ns} in the capacity mapping is outside [0, 2**64)")
            keys[k] = int(ns)
            vals[k] = n_cap
        default = -1
    elif isinstance(capacity, (int, np.integer)) and not isinstance(capacity, (bool, np.bool_)):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        default = int(min(int(capacity), np.iinfo(np.int64).max))
        keys = np.empty(0, dtype=np.uint64)
        vals = np.empty(0, dtype=np.int64)
    else:
        raise TypeError(f"capacity must be an int or a mapping {{namespace: capacity}}, got {type(capacity).__name__}")
    if _device.on_device(("scores", scores), ("namespaces", namespaces), ("live", live)):
        n = int(scores.shape[0]) if len(getattr(scores, "shape", ())) == 1 else 0
        buf = _device.empty_like_device(scores, (n,), np.int64)
        k = _core.cuda_evict_to_capacity(
            scores, namespaces, default, keys, vals, live, buf, _device.current_stream(scores)
        )
        return _device.trimmed(buf, int(k))  # type: ignore[no-any-return]
    return _core.evict_to_capacity(scores, namespaces, default, keys, vals, live, check_threads(threads))
