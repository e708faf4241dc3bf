"""The fleet step: search → gate → heat bump for a batch of agents in one call.

One step answers ``b`` queries, query ``i`` on behalf of the agent whose memories carry
namespace ``namespaces[i]`` in a :class:`~lamina.native.search.VectorArena`, over ``L`` arena layers
(docs/design.md, read path steps 1, 2 and 4):

1. **search** — for each layer ``layers[l]``, the top-``k`` of query ``i`` among that agent's
   live rows with that layer label (``scores``, ``ids``: shape ``(b, L, k)``, arena slots,
   ``-1`` / ``-inf`` padding, as :meth:`VectorArena.search`): exact, or with an arena codec
   the code scan of ``k * oversample`` candidates re-scored exactly (``FleetConfig.oversample``);
2. **relevance** — ``r[i, l]``: the mean of the first ``min(relevance_top, found)`` scores of
   that list (summed best first in float32, divided by the count in float32; 0 for an empty
   list);
3. **gate** — ``γ = softmax(β·r)`` per query with the entropy bound ε (eq. 7, Alg. 1 line 26;
   :func:`lamina.native.kernels.softmax_gate`), and the β each query used;
4. **heat bump** — for every returned slot ``s`` (arena row ``s & 0xffffffff``), once per time
   it was returned: ``visits[row] += 1``, ``last_access[row] = now``; then ``heat[row]`` is
   recomputed from the bumped columns (:func:`lamina.native.kernels.heat_scores`).

On a ``device="cuda"`` arena the step is one CUDA graph launch: captured on the first step,
replayed afterwards. The namespaces and ``now`` reach the graph through pinned host memory, so
they may change freely; a new batch size, another bucket of the longest agent (powers of two of
2048 rows), new array pointers (queries, ``out``, the heat columns) or an arena that grew make a
new capture, applied with ``cudaGraphExecUpdate``. Pass the same ``queries`` buffer, the same
``out`` and the same columns every step to replay without capturing. ``graph=False`` runs the
same kernels as separate launches (the baseline of ``bench/bench_fleet.py``). On a CPU arena
the step runs the CPU kernels; it is the twin the GPU step is tested against: steps 2-4 give the
same bits from the same search results, and the GPU search scores may differ from the CPU's by
float32 summation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .. import _core
from . import _device, kernels
from ._checks import check_int
from .search import VectorArena, _oversample

__all__ = ["FleetConfig", "FleetResult", "FleetStats", "FleetStep", "HeatColumns"]

#: A numpy array on a CPU arena, a device array (CuPy / PyTorch, the queries' library) on a
#: ``device="cuda"`` arena.
FleetArray = Any

_COUNT_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64))


def _real(x: object, name: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    v = float(x)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


@dataclass(frozen=True)
class FleetConfig:
    """The fixed part of a fleet step (checked on construction).

    Parameters
    ----------
    layers : tuple of int
        The ``L`` arena layer labels searched, in gate order (distinct, each in [0, 255]).
    k : int
        Results per (query, layer), >= 1 (at most 1024 on the GPU).
    oversample : int, optional
        With an arena that has a codec: the code scan keeps ``k * oversample`` candidates per
        query and layer, re-scored exactly from the float rows (as
        :meth:`VectorArena.search`); None, the codec's default
        (:data:`lamina.native.search.DEFAULT_OVERSAMPLE`); 0, the exact scan. Without a codec: None or 0.
    metric : {"ip", "cosine"}
        Higher-is-better scores (the gate needs them; ``"l2"`` is refused).
    relevance_top : int
        Scores averaged into a layer's relevance r (1 .. k).
    beta : float
        β, the gate temperature (a finite float32 value; > 0 with ``max_entropy``).
    max_entropy : float, optional
        ε ≥ 0 (nats): queries whose gate entropy exceeds it double β (at most
        ``max_doublings`` times). None: no bound.
    max_doublings : int
        0 … 1024.
    heat : tuple of 4 floats
        ``(a, b, c, μ)`` of the heat ``a·N_visit + b·L_interaction + c·exp(−Δt/μ)``; μ > 0.
    """

    layers: tuple[int, ...]
    k: int = 10
    oversample: int | None = None
    metric: Literal["ip", "cosine"] = "ip"
    relevance_top: int = 3
    beta: float = 1.0
    max_entropy: float | None = None
    max_doublings: int = 32
    heat: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1e7)

    def __post_init__(self) -> None:
        raw: object = self.layers
        if isinstance(raw, (str, bytes)) or not isinstance(raw, (tuple, list, range, np.ndarray)):
            raise TypeError(f"layers must be a sequence of ints, got {type(raw).__name__}")
        ls = tuple(check_int(x, "layers[]", 0, 255) for x in raw)
        if not ls:
            raise ValueError("layers must name at least one arena layer")
        if len(set(ls)) != len(ls):
            raise ValueError(f"layers contains a layer more than once: {ls}; name each layer once")
        object.__setattr__(self, "layers", ls)
        check_int(self.k, "k", 1)
        if self.oversample is not None:
            check_int(self.oversample, "oversample", 0)
        if self.metric not in ("ip", "cosine"):
            raise ValueError(
                f"metric must be 'ip' or 'cosine' (the gate needs higher-is-better scores), got {self.metric!r}"
            )
        check_int(self.relevance_top, "relevance_top", 1, self.k)
        beta = _real(self.beta, "beta")
        if abs(beta) > float(np.finfo(np.float32).max):
            raise ValueError(f"beta = {beta} is not a finite float32 value")
        if self.max_entropy is not None:
            eps = _real(self.max_entropy, "max_entropy")
            if eps < 0:
                raise ValueError(f"max_entropy (epsilon) must be >= 0, got {eps}")
            if beta <= 0:
                raise ValueError(f"beta = {beta} must be > 0 when max_entropy is given")
        check_int(self.max_doublings, "max_doublings", 0, 1024)
        if not isinstance(self.heat, tuple) or len(self.heat) != 4:
            raise TypeError("heat must be a tuple (a, b, c, mu)")
        a, b, c, mu = (_real(x, n) for x, n in zip(self.heat, ("a", "b", "c", "mu")))
        if mu <= 0:
            raise ValueError(f"mu (the recency time scale, seconds) must be > 0, got {mu}")
        object.__setattr__(self, "heat", (a, b, c, mu))


@dataclass(frozen=True)
class HeatColumns:
    """The heat state of the arena's rows, indexed by arena row (``slot & 0xffffffff``).

    All four have one entry per row, at least the arena's ``high_water`` (numpy arrays for a
    CPU arena, device arrays on the arena's device for a CUDA arena). ``visits``,
    ``last_access`` and ``heat`` are updated in place by each step.

    Attributes
    ----------
    visits : array, shape (n,), float32 / int32 / int64, writable — N_visit
    interaction_len : array, shape (n,), float32 / int32 / int64 — L_interaction
    last_access : array, shape (n,), float64, writable — seconds
    heat : array, shape (n,), float32, writable
    """

    visits: FleetArray
    interaction_len: FleetArray
    last_access: FleetArray
    heat: FleetArray


@dataclass(frozen=True)
class FleetResult:
    """What a step returns (numpy on a CPU arena, device arrays on a CUDA arena).

    Attributes
    ----------
    scores : array, shape (b, L, k), float32 — best first, ``-inf`` pads
    ids : array, shape (b, L, k), int64 — arena slots, ``-1`` pads
    relevance : array, shape (b, L), float32 — r per query and layer
    gamma : array, shape (b, L), float32 — γ, rows sum to 1
    beta_used : array, shape (b,), float64 — β per query after the entropy bound
    """

    scores: FleetArray
    ids: FleetArray
    relevance: FleetArray
    gamma: FleetArray
    beta_used: FleetArray


@dataclass(frozen=True)
class FleetStats:
    """How the steps of a :class:`FleetStep` ran: ``eager`` steps without a graph (every CPU
    step), graph ``captures`` (including ones redone after the workspace grew), captures applied
    by ``updates`` (cudaGraphExecUpdate) or new ``instantiations``, and graph ``replays``
    (launches)."""

    eager: int
    captures: int
    updates: int
    instantiations: int
    replays: int


def _check_host_columns(cols: HeatColumns, rows: int) -> None:
    named = (
        ("visits", cols.visits),
        ("interaction_len", cols.interaction_len),
        ("last_access", cols.last_access),
        ("heat", cols.heat),
    )
    for name, x in named:
        if not isinstance(x, np.ndarray):
            raise TypeError(f"columns.{name} must be a numpy array for a CPU arena, got {type(x).__name__}")
        if x.ndim != 1 or not x.flags.c_contiguous:
            raise ValueError(f"columns.{name} must be 1-dimensional and contiguous, got shape {x.shape}")
    for name, x in named[:2]:
        if x.dtype not in _COUNT_DTYPES:
            raise TypeError(f"columns.{name} must have dtype float32, int32 or int64, got {x.dtype}")
    if cols.last_access.dtype != np.float64:
        raise TypeError(f"columns.last_access must have dtype float64, got {cols.last_access.dtype}")
    if cols.heat.dtype != np.float32:
        raise TypeError(f"columns.heat must have dtype float32, got {cols.heat.dtype}")
    n = cols.last_access.shape[0]
    for name, x in named:
        if x.shape[0] != n:
            raise ValueError(f"columns.{name} has {x.shape[0]} entries, expected {n} (one per arena row)")
        if name != "interaction_len" and not x.flags.writeable:
            raise ValueError(f"columns.{name} is read-only; the step updates it in place")
    if n < rows:
        raise ValueError(
            f"the heat columns have {n} entries but the arena has {rows} rows; give one entry per "
            "arena row (index: slot & 0xffffffff)"
        )


def _namespaces(namespaces: object, b: int) -> npt.NDArray[np.uint64]:
    if not isinstance(namespaces, np.ndarray) or namespaces.dtype != np.uint64:
        raise TypeError("namespaces must be a numpy array of dtype uint64 (one agent per query)")
    if namespaces.ndim != 1 or namespaces.shape[0] != b:
        raise ValueError(f"namespaces must have shape ({b},) (one per query), got {namespaces.shape}")
    return np.ascontiguousarray(namespaces)


class FleetStep:
    """Search → gate → heat bump for a batch of agents (see the module docstring).

    Thread safety: one step at a time per object (concurrent :meth:`run` calls are serialised
    on the GPU, and must not be made on the CPU); the arena may be read by others meanwhile,
    and its writers wait for the step.

    Parameters
    ----------
    arena : VectorArena
        The agents' memories (namespace = agent, layer = memory layer). With a codec the
        search scans the codes first (``config.oversample``).
    config : FleetConfig
    graph : bool
        On a CUDA arena, run each step as one CUDA graph launch (default) or as separate
        launches. Ignored on the CPU.
    """

    def __init__(self, arena: VectorArena, config: FleetConfig, *, graph: bool = True) -> None:
        if not isinstance(arena, VectorArena):
            raise TypeError(f"arena must be a lamina.VectorArena, got {type(arena).__name__}")
        if not isinstance(config, FleetConfig):
            raise TypeError(f"config must be a FleetConfig, got {type(config).__name__}")
        self._arena = arena
        self._config = config
        self._graph = bool(graph)
        self._cpu_steps = 0
        self._native: Any = None
        self._oversample = _oversample(arena.codec, config.oversample)
        if self._oversample > 0 and arena.codec is None:
            raise ValueError(
                f"oversample = {self._oversample} needs an arena with a codec (VectorArena(..., codec=...)); "
                "use 0 or None for the exact scan"
            )
        if arena.device != "cpu":
            c = config
            a, b, cc, mu = c.heat
            self._native = _core.CudaFleetStep(
                arena._dev(),
                list(c.layers),
                c.k,
                self._oversample,
                c.metric,
                c.relevance_top,
                c.beta,
                c.max_entropy,
                c.max_doublings,
                a,
                b,
                cc,
                mu,
            )

    @property
    def config(self) -> FleetConfig:
        return self._config

    @property
    def stats(self) -> FleetStats:
        """How the steps ran so far."""
        if self._native is None:
            return FleetStats(self._cpu_steps, 0, 0, 0, 0)
        s = self._native.stats()
        return FleetStats(s["eager"], s["captures"], s["updates"], s["instantiations"], s["replays"])

    def run(
        self,
        queries: FleetArray,
        *,
        namespaces: npt.NDArray[np.uint64],
        now: float,
        columns: HeatColumns,
        out: FleetResult | None = None,
    ) -> FleetResult:
        """One step.

        Parameters
        ----------
        queries : array, shape (b, dim), float32, C-contiguous, finite
            numpy for a CPU arena. For a CUDA arena a device array on its device, or a numpy
            array (copied to the device with the step's own staged copy; with a codec the
            queries are encoded on the host, so device queries are read back first).
        namespaces : ndarray, shape (b,), uint64 (host memory on either device)
            The agent of each query.
        now : float
            Event time of the step, seconds (finite).
        columns : HeatColumns
            The rows' heat state, bumped in place.
        out : FleetResult, optional
            Arrays to write the results into (the shapes and dtypes of :class:`FleetResult`);
            on a CUDA arena the same ``out`` every step lets the graph be replayed as captured.

        Returns
        -------
        FleetResult
            ``out`` when given.

        Raises
        ------
        TypeError
            Wrong dtypes, or host and device arrays mixed.
        ValueError
            Wrong shapes, empty arena, columns shorter than the arena's rows, NaN/Inf or (cosine)
            zero-norm queries, a heat that is not finite. The outputs and the columns may then be
            partly written.
        """
        if not isinstance(columns, HeatColumns):
            raise TypeError(f"columns must be a HeatColumns, got {type(columns).__name__}")
        t = _real(now, "now")
        if self._native is not None:
            return self._run_device(queries, namespaces, t, columns, out)
        if _device.is_device_array(queries):
            raise ValueError("queries are on a CUDA device but the arena is on the CPU; pass a numpy array")
        if not isinstance(queries, np.ndarray) or queries.ndim != 2:
            raise ValueError("queries must be a 2-dimensional numpy array (b, dim)")
        b = int(queries.shape[0])
        ns = _namespaces(namespaces, b)
        _check_host_columns(columns, self._arena.high_water)
        res = out if out is not None else self._empty_host(b)
        self._check_out(res, b)
        self._cpu_step(queries, ns, t, columns, res)
        self._cpu_steps += 1
        return res

    # ---- CPU twin ----------------------------------------------------------------------------

    def _empty_host(self, b: int) -> FleetResult:
        L, k = len(self._config.layers), self._config.k
        return FleetResult(
            np.empty((b, L, k), np.float32),
            np.empty((b, L, k), np.int64),
            np.empty((b, L), np.float32),
            np.empty((b, L), np.float32),
            np.empty((b,), np.float64),
        )

    def _check_out(self, res: FleetResult, b: int) -> None:
        if not isinstance(res, FleetResult):
            raise TypeError(f"out must be a FleetResult, got {type(res).__name__}")
        L, k = len(self._config.layers), self._config.k
        want = (
            ("scores", (b, L, k), np.float32),
            ("ids", (b, L, k), np.int64),
            ("relevance", (b, L), np.float32),
            ("gamma", (b, L), np.float32),
            ("beta_used", (b,), np.float64),
        )
        for name, shape, dt in want:
            x = getattr(res, name)
            if _device.is_device_array(x) != (self._native is not None):
                raise ValueError(f"out.{name} must be on the arena's device ({self._arena.device})")
            if tuple(int(s) for s in x.shape) != shape:
                raise ValueError(f"out.{name} must have shape {shape}, got {tuple(x.shape)}")
            if self._native is None and (x.dtype != dt or not x.flags.c_contiguous or not x.flags.writeable):
                raise TypeError(f"out.{name} must be a writable C-contiguous {np.dtype(dt).name} array")

    def _cpu_step(
        self,
        queries: npt.NDArray[np.float32],
        ns: npt.NDArray[np.uint64],
        now: float,
        cols: HeatColumns,
        res: FleetResult,
    ) -> None:
        c = self._config
        b = queries.shape[0]
        if b == 0:
            return
        native = self._arena._host()
        for li, layer in enumerate(c.layers):
            s, i = native.search(queries, c.k, c.metric, ns, [layer], 0, self._oversample)
            res.scores[:, li, :] = s
            res.ids[:, li, :] = i
        acc = np.zeros((b, len(c.layers)), np.float32)
        cnt = np.zeros((b, len(c.layers)), np.int64)
        for j in range(c.relevance_top):  # summed best first, in float32, as the GPU sums
            found = res.ids[:, :, j] >= 0
            acc = acc + np.where(found, res.scores[:, :, j], np.float32(0))
            cnt += found
        rel = np.zeros_like(acc)
        np.divide(acc, cnt.astype(np.float32), out=rel, where=cnt > 0)
        res.relevance[...] = rel
        _, bu = kernels.softmax_gate(rel, c.beta, c.max_entropy, max_doublings=c.max_doublings, out=res.gamma)
        res.beta_used[...] = bu
        ids = res.ids[res.ids >= 0]
        rows = ids & np.int64(0xFFFFFFFF)
        np.add.at(cols.visits, rows, cols.visits.dtype.type(1))
        cols.last_access[rows] = now
        a, bb, cc, mu = c.heat
        cols.heat[rows] = kernels.heat_scores(
            cols.visits[rows], cols.interaction_len[rows], cols.last_access[rows], now, a, bb, cc, mu
        )

    # ---- CUDA ----------------------------------------------------------------------------------

    def _run_device(
        self,
        queries: FleetArray,
        namespaces: npt.NDArray[np.uint64],
        now: float,
        cols: HeatColumns,
        out: FleetResult | None,
    ) -> FleetResult:
        host_queries = isinstance(queries, np.ndarray)
        if not host_queries and not _device.is_device_array(queries):
            raise TypeError(
                f"queries must be a numpy array or a device array on {self._arena.device} (CuPy / PyTorch), "
                f"got {type(queries).__name__}"
            )
        _device.on_device(
            ("queries", None if host_queries else queries),
            ("columns.visits", cols.visits),
            ("columns.interaction_len", cols.interaction_len),
            ("columns.last_access", cols.last_access),
            ("columns.heat", cols.heat),
        )
        if not _device.is_device_array(cols.heat):
            raise ValueError(
                f"the heat columns must be device arrays on {self._arena.device} for a CUDA arena, got numpy arrays"
            )
        shape = tuple(int(s) for s in getattr(queries, "shape", ()))
        if len(shape) != 2:
            raise ValueError(f"queries must be 2-dimensional (b, dim), got shape {shape}")
        b = shape[0]
        ns = _namespaces(namespaces, b)
        if out is None:
            L, k = len(self._config.layers), self._config.k
            like = cols.heat if host_queries else queries
            out = FleetResult(
                _device.empty_like_device(like, (b, L, k), np.float32),
                _device.empty_like_device(like, (b, L, k), np.int64),
                _device.empty_like_device(like, (b, L), np.float32),
                _device.empty_like_device(like, (b, L), np.float32),
                _device.empty_like_device(like, (b,), np.float64),
            )
        elif not isinstance(out, FleetResult):
            raise TypeError(f"out must be a FleetResult, got {type(out).__name__}")
        self._native.run(
            queries,
            ns,
            now,
            cols.visits,
            cols.interaction_len,
            cols.last_access,
            cols.heat,
            out.scores,
            out.ids,
            out.relevance,
            out.gamma,
            out.beta_used,
            self._graph,
            _device.current_stream(cols.heat if host_queries else queries),
        )
        return out
