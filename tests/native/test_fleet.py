"""lamina.native.fleet: the fleet step's CPU twin against a numpy model, its argument checks, and the
GPU step (one graph launch) against the CPU twin (marked gpu: they skip without a device)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina
from lamina.native import kernels
from lamina.native.fleet import FleetConfig, FleetResult, FleetStep, HeatColumns
from lamina.native.search import VectorArena


def fresh_rng() -> tuple[np.random.Generator, int]:
    seed = int(np.random.SeedSequence().entropy % (2**63))
    return np.random.default_rng(seed), seed


def fleet_data(
    rng: np.random.Generator, agents: int = 6, per_agent: int = 40, dim: int = 24, layers: int = 3
) -> dict[str, Any]:
    """Rows of `agents` namespaces (7, 14, ...) with layer labels 0 .. layers-1, in one arena."""
    n = agents * per_agent
    x = rng.standard_normal((n, dim)).astype(np.float32)
    ns = np.repeat(np.arange(1, agents + 1, dtype=np.uint64) * np.uint64(7), per_agent)
    lay = rng.integers(0, layers, size=n).astype(np.uint8)
    perm = rng.permutation(n)  # agents interleaved in the arena
    return {"x": x[perm], "ns": ns[perm], "layer": lay[perm]}


def fill(arena: VectorArena, data: dict[str, Any]) -> np.ndarray:
    return arena.add(data["x"], namespace=data["ns"], layer=data["layer"])


def columns(rng: np.random.Generator, n: int, visits_dtype: Any = np.int64) -> HeatColumns:
    return HeatColumns(
        rng.integers(0, 20, n).astype(visits_dtype),
        rng.integers(1, 9, n).astype(np.int32),
        rng.uniform(0.0, 1e6, n),
        np.zeros(n, np.float32),
    )


def copy_cols(c: HeatColumns) -> HeatColumns:
    return HeatColumns(c.visits.copy(), c.interaction_len.copy(), c.last_access.copy(), c.heat.copy())


def model_step(
    data: dict[str, Any], live: np.ndarray, q: np.ndarray, ns: np.ndarray, cfg: FleetConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: per query and layer, the k best live rows of its agent (float64 scores)."""
    x = data["x"].astype(np.float64)
    b, L, k = q.shape[0], len(cfg.layers), cfg.k
    ids = np.full((b, L, k), -1, np.int64)
    sc = np.full((b, L, k), -np.inf)
    for i in range(b):
        for li, layer in enumerate(cfg.layers):
            rows = np.flatnonzero((data["ns"] == ns[i]) & (data["layer"] == layer) & live)
            s = x[rows] @ q[i].astype(np.float64)
            if cfg.metric == "cosine":
                s = s / (np.linalg.norm(x[rows], axis=1) * np.linalg.norm(q[i]))
            order = np.argsort(-s, kind="stable")[:k]
            ids[i, li, : order.size] = rows[order]
            sc[i, li, : order.size] = s[order]
    return sc, ids


# ---------------------------------------------------------------------------------------------
# the CPU twin


@pytest.mark.parametrize("metric", ["ip", "cosine"])
@pytest.mark.parametrize("visits_dtype", [np.int64, np.int32, np.float32])
def test_cpu_step_matches_the_model(metric: str, visits_dtype: Any) -> None:
    rng, seed = fresh_rng()
    data = fleet_data(rng)
    arena = VectorArena(24)
    slots = fill(arena, data)
    assert np.array_equal(slots, np.arange(slots.size))  # fresh rows: slot == row
    cfg = FleetConfig(layers=(2, 0, 1), k=5, metric=metric, relevance_top=3, beta=4.0, max_entropy=0.6)  # type: ignore[arg-type]
    agents = np.array([7, 21, 42, 7], np.uint64)  # agent 7 twice: its rows may be bumped twice
    q = rng.standard_normal((4, 24)).astype(np.float32)
    q[3] = q[0]  # agent 7 asks the same twice
    cols = columns(rng, arena.high_water, visits_dtype)
    before = copy_cols(cols)
    res = FleetStep(arena, cfg).run(q, namespaces=agents, now=2e6, columns=cols)
    msg = f"seed={seed}"

    msc, mids = model_step(data, np.ones(slots.size, bool), q, agents, cfg)
    np.testing.assert_array_equal(res.ids, mids, err_msg=msg)
    np.testing.assert_allclose(res.scores, msc, rtol=1e-5, atol=1e-5, err_msg=msg)
    assert res.scores.dtype == np.float32 and res.ids.dtype == np.int64
    # relevance: the mean of the first relevance_top scores, summed in float32 best first
    want = np.zeros((4, 3), np.float32)
    for i in range(4):
        for li in range(3):
            s = res.scores[i, li][res.ids[i, li] >= 0][:3]
            acc = np.float32(0)
            for v in s:
                acc = np.float32(acc + v)
            want[i, li] = acc / np.float32(len(s)) if len(s) else 0
    np.testing.assert_array_equal(res.relevance, want, err_msg=msg)
    g, bu = kernels.softmax_gate(want, 4.0, 0.6)
    np.testing.assert_array_equal(res.gamma, g, err_msg=msg)
    np.testing.assert_array_equal(res.beta_used, bu, err_msg=msg)
    np.testing.assert_allclose(res.gamma.sum(axis=1), 1.0, rtol=1e-5)
    # heat bump: +1 per return, last_access = now, heat recomputed only where bumped
    returned = res.ids[res.ids >= 0]
    hits = np.bincount(returned, minlength=slots.size)
    np.testing.assert_array_equal(cols.visits, before.visits + hits.astype(visits_dtype), err_msg=msg)
    bumped = hits > 0
    assert np.all(cols.last_access[bumped] == 2e6)
    np.testing.assert_array_equal(cols.last_access[~bumped], before.last_access[~bumped])
    full = kernels.heat_scores(cols.visits, cols.interaction_len, cols.last_access, 2e6)
    np.testing.assert_array_equal(cols.heat[bumped], full[bumped], err_msg=msg)
    assert np.all(cols.heat[~bumped] == 0)
    both = np.intersect1d(res.ids[0][res.ids[0] >= 0], res.ids[3][res.ids[3] >= 0])
    assert both.size and np.all(hits[both] == 2)  # the same agent asked twice: bumped twice


def test_cpu_step_skips_removed_rows_and_empty_layers() -> None:
    rng, seed = fresh_rng()
    data = fleet_data(rng, agents=2, per_agent=30, layers=2)
    arena = VectorArena(24)
    slots = fill(arena, data)
    gone = slots[data["ns"] == 7][:10]
    arena.remove(gone)
    live = np.ones(slots.size, bool)
    live[gone] = False
    cfg = FleetConfig(layers=(0, 1, 9), k=40)  # layer 9 holds nothing; k beyond each layer's rows
    q = rng.standard_normal((3, 24)).astype(np.float32)
    agents = np.array([7, 14, 99], np.uint64)  # agent 99 has no rows at all
    cols = columns(rng, arena.high_water)
    before = copy_cols(cols)
    res = FleetStep(arena, cfg).run(q, namespaces=agents, now=5.0, columns=cols)
    _, mids = model_step(data, live, q, agents, cfg)
    np.testing.assert_array_equal(res.ids, mids, err_msg=f"seed={seed}")
    assert not np.isin(res.ids, gone).any()
    assert np.all(res.ids[:, 2] == -1) and np.all(res.scores[:, 2] == -np.inf)
    assert np.all(res.relevance[:, 2] == 0) and np.all(res.ids[2] == -1)
    np.testing.assert_allclose(res.gamma[2], 1 / 3, rtol=1e-6)  # all relevances 0: uniform
    np.testing.assert_array_equal(cols.visits[gone], before.visits[gone])


def test_cpu_step_fills_out_in_place() -> None:
    rng, _ = fresh_rng()
    data = fleet_data(rng, agents=2)
    arena = VectorArena(24)
    fill(arena, data)
    cfg = FleetConfig(layers=(0, 1), k=4)
    out = FleetResult(
        np.full((2, 2, 4), np.nan, np.float32),
        np.full((2, 2, 4), 7, np.int64),
        np.full((2, 2), np.nan, np.float32),
        np.full((2, 2), np.nan, np.float32),
        np.full(2, np.nan),
    )
    q = rng.standard_normal((2, 24)).astype(np.float32)
    step = FleetStep(arena, cfg)
    res = step.run(q, namespaces=np.array([7, 14], np.uint64), now=1.0, columns=columns(rng, arena.high_water), out=out)
    assert res is out and np.isfinite(out.gamma).all() and np.isfinite(out.beta_used).all()
    assert step.stats.eager == 1 and step.stats.replays == 0


# ---------------------------------------------------------------------------------------------
# argument checks (the same on both devices: FleetConfig is checked in Python)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"layers": ()}, ValueError, "at least one"),
        ({"layers": (1, 1)}, ValueError, "more than once"),
        ({"layers": (256,)}, ValueError, "layers"),
        ({"layers": "01"}, TypeError, "sequence"),
        ({"layers": (0,), "k": 0}, ValueError, "k must be"),
        ({"layers": (0,), "metric": "l2"}, ValueError, "higher-is-better"),
        ({"layers": (0,), "k": 3, "relevance_top": 4}, ValueError, "relevance_top"),
        ({"layers": (0,), "beta": float("nan")}, ValueError, "beta"),
        ({"layers": (0,), "beta": -1.0, "max_entropy": 0.5}, ValueError, "> 0"),
        ({"layers": (0,), "max_entropy": -0.1}, ValueError, "max_entropy"),
        ({"layers": (0,), "max_doublings": 2000}, ValueError, "max_doublings"),
        ({"layers": (0,), "heat": (1.0, 1.0, 1.0, 0.0)}, ValueError, "mu"),
        ({"layers": (0,), "heat": (1.0, 1.0)}, TypeError, "heat"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, Any], exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        FleetConfig(**kwargs)


def test_run_rejects_bad_arguments() -> None:
    rng, _ = fresh_rng()
    arena = VectorArena(8)
    arena.add(rng.standard_normal((10, 8)).astype(np.float32), namespace=3)
    step = FleetStep(arena, FleetConfig(layers=(0,), k=2, relevance_top=2))
    q = rng.standard_normal((2, 8)).astype(np.float32)
    ns = np.array([3, 3], np.uint64)
    good = columns(rng, 10)
    with pytest.raises(TypeError, match="uint64"):
        step.run(q, namespaces=np.array([3, 3]), now=0.0, columns=good)
    with pytest.raises(ValueError, match="one per query"):
        step.run(q, namespaces=np.array([3], np.uint64), now=0.0, columns=good)
    with pytest.raises(ValueError, match="finite"):
        step.run(q, namespaces=ns, now=float("inf"), columns=good)
    with pytest.raises(ValueError, match="one entry per arena row"):
        step.run(q, namespaces=ns, now=0.0, columns=columns(rng, 9))
    with pytest.raises(TypeError, match="float32, int32 or int64"):
        step.run(
            q,
            namespaces=ns,
            now=0.0,
            columns=HeatColumns(good.visits.astype(np.float64), good.interaction_len, good.last_access, good.heat),
        )
    ro = copy_cols(good)
    ro.visits.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        step.run(q, namespaces=ns, now=0.0, columns=ro)
    with pytest.raises(TypeError, match="HeatColumns"):
        step.run(q, namespaces=ns, now=0.0, columns=(1, 2, 3, 4))  # type: ignore[arg-type]
    shapes = [
        ((2, 1, 3), np.float32),
        ((2, 1, 2), np.int64),
        ((2, 1), np.float32),
        ((2, 1), np.float32),
        ((2,), np.float64),
    ]
    bad_out = FleetResult(*(np.empty(s, d) for s, d in shapes))
    with pytest.raises(ValueError, match="shape"):
        step.run(q, namespaces=ns, now=0.0, columns=good, out=bad_out)
    with pytest.raises(ValueError, match="NaN or Inf"):
        step.run(np.full((2, 8), np.nan, np.float32), namespaces=ns, now=0.0, columns=good)
    with pytest.raises(TypeError, match="VectorArena"):
        FleetStep(object(), FleetConfig(layers=(0,)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        FleetStep(VectorArena(8), FleetConfig(layers=(0,))).run(q, namespaces=ns, now=0.0, columns=good)


# ---------------------------------------------------------------------------------------------
# the GPU step against the CPU twin


def _cupy() -> Any:
    return pytest.importorskip("cupy", reason="the gpu tests use CuPy arrays")


def _twin_pair(
    rng: np.random.Generator, dtype: str = "float32", **kw: Any
) -> tuple[VectorArena, VectorArena, dict[str, Any]]:
    data = fleet_data(rng, **kw)
    cpu, gpu = VectorArena(data["x"].shape[1], dtype), VectorArena(data["x"].shape[1], dtype, device="cuda")
    a, b = fill(cpu, data), fill(gpu, data)
    assert np.array_equal(a, b)
    return cpu, gpu, data


def _to_device(cp: Any, c: HeatColumns) -> HeatColumns:
    return HeatColumns(*(cp.asarray(x) for x in (c.visits, c.interaction_len, c.last_access, c.heat)))


def _assert_twin(
    cp: Any, res: FleetResult, cres: FleetResult, gcols: HeatColumns, ccols: HeatColumns, msg: str
) -> None:
    np.testing.assert_array_equal(cp.asnumpy(res.ids), cres.ids, err_msg=msg)
    np.testing.assert_allclose(cp.asnumpy(res.scores), cres.scores, rtol=1e-5, atol=1e-5, err_msg=msg)
    np.testing.assert_allclose(cp.asnumpy(res.relevance), cres.relevance, rtol=1e-5, atol=1e-5, err_msg=msg)
    np.testing.assert_allclose(cp.asnumpy(res.gamma), cres.gamma, rtol=1e-4, atol=1e-6, err_msg=msg)
    np.testing.assert_array_equal(cp.asnumpy(gcols.visits), ccols.visits, err_msg=msg)
    np.testing.assert_array_equal(cp.asnumpy(gcols.last_access), ccols.last_access, err_msg=msg)
    np.testing.assert_array_equal(cp.asnumpy(gcols.heat), ccols.heat, err_msg=msg)


@pytest.mark.gpu
@pytest.mark.parametrize("metric", ["ip", "cosine"])
@pytest.mark.parametrize("graph", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_step_matches_the_cpu_twin(metric: str, graph: bool, dtype: str) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    cpu, gpu, data = _twin_pair(rng, dtype, agents=8, per_agent=300, dim=64)
    cfg = FleetConfig(layers=(1, 0, 2), k=10, metric=metric, beta=3.0, max_entropy=0.7)  # type: ignore[arg-type]
    ccols = columns(rng, cpu.high_water)
    gcols = _to_device(cp, ccols)
    cstep, gstep = FleetStep(cpu, cfg), FleetStep(gpu, cfg, graph=graph)
    for t in range(3):  # fresh queries and outputs each step: captured anew or updated, then replayed
        agents = rng.choice(np.arange(1, 9, dtype=np.uint64) * np.uint64(7), size=5)
        q = rng.standard_normal((5, 64)).astype(np.float32)
        cres = cstep.run(q, namespaces=agents, now=1e6 + t, columns=ccols)
        res = gstep.run(cp.asarray(q), namespaces=agents, now=1e6 + t, columns=gcols)
        _assert_twin(cp, res, cres, gcols, ccols, f"seed={seed} step={t}")
    s = gstep.stats
    if graph:
        assert s.replays == 3 and s.eager == 0
    else:
        assert s.eager == 3 and s.replays == 0 and s.captures == 0


@pytest.mark.gpu
def test_gpu_graph_is_replayed_updated_and_recovers_from_errors() -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    cpu, gpu, data = _twin_pair(rng, agents=4, per_agent=100, dim=32)
    cfg = FleetConfig(layers=(0, 1), k=4)
    ccols = columns(rng, cpu.high_water)
    gcols = _to_device(cp, ccols)
    cstep, gstep = FleetStep(cpu, cfg), FleetStep(gpu, cfg)
    q = cp.asarray(rng.standard_normal((3, 32)).astype(np.float32))
    out = FleetResult(
        cp.empty((3, 2, 4), cp.float32),
        cp.empty((3, 2, 4), cp.int64),
        cp.empty((3, 2), cp.float32),
        cp.empty((3, 2), cp.float32),
        cp.empty(3, cp.float64),
    )
    for t, agents in enumerate(([7, 14, 21], [28, 7, 7], [21, 21, 14])):  # namespaces change freely
        ns = np.array(agents, np.uint64)
        q[...] = cp.asarray(rng.standard_normal((3, 32)).astype(np.float32))
        cres = cstep.run(cp.asnumpy(q), namespaces=ns, now=float(t), columns=ccols)
        gstep.run(q, namespaces=ns, now=float(t), columns=gcols, out=out)
        _assert_twin(cp, out, cres, gcols, ccols, f"seed={seed} step={t}")
    s = gstep.stats
    assert s.replays == 3 and s.instantiations == 1 and s.captures == 1, s
    # another batch size: a new capture, applied to the executable graph or instantiated
    q2 = rng.standard_normal((2, 32)).astype(np.float32)
    ns2 = np.array([14, 28], np.uint64)
    cres = cstep.run(q2, namespaces=ns2, now=9.0, columns=ccols)
    res = gstep.run(cp.asarray(q2), namespaces=ns2, now=9.0, columns=gcols)
    _assert_twin(cp, res, cres, gcols, ccols, f"seed={seed} batch 2")
    s2 = gstep.stats
    assert s2.captures == 2 and s2.updates + s2.instantiations == 2 and s2.replays == 4, s2
    # a NaN query raises after the replay; the next step runs normally
    bad = cp.asarray(np.full((3, 32), np.nan, np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        gstep.run(bad, namespaces=np.array([7, 7, 7], np.uint64), now=10.0, columns=_to_device(cp, ccols))
    res = gstep.run(cp.asarray(q2), namespaces=ns2, now=11.0, columns=gcols)
    cres = cstep.run(q2, namespaces=ns2, now=11.0, columns=ccols)
    _assert_twin(cp, res, cres, gcols, ccols, f"seed={seed} after error")
    # rows change layers and some are removed: the (namespace, layer) index is rebuilt
    moved = np.flatnonzero((data["ns"] == 14) & (data["layer"] == 0))[:5]
    cpu.set_layer(moved, 1)
    gpu.set_layer(moved, 1)
    gone = np.flatnonzero(data["ns"] == 28)[:7]
    cpu.remove(gone)
    gpu.remove(gone)
    cres = cstep.run(q2, namespaces=ns2, now=11.5, columns=ccols)
    res = gstep.run(cp.asarray(q2), namespaces=ns2, now=11.5, columns=gcols)
    _assert_twin(cp, res, cres, gcols, ccols, f"seed={seed} after set_layer / remove")
    # the arena grows: new pointers, a new capture, the same answers
    more = rng.standard_normal((5000, 32)).astype(np.float32)
    cpu.add(more, namespace=7, layer=1)
    gpu.add(more, namespace=7, layer=1)
    ccols = columns(rng, cpu.high_water)
    gcols = _to_device(cp, ccols)
    cres = cstep.run(q2, namespaces=ns2, now=12.0, columns=ccols)
    res = gstep.run(cp.asarray(q2), namespaces=ns2, now=12.0, columns=gcols)
    _assert_twin(cp, res, cres, gcols, ccols, f"seed={seed} after growth")


@pytest.mark.gpu
def test_gpu_step_rejects_host_arrays_and_short_columns() -> None:
    cp = _cupy()
    rng, _ = fresh_rng()
    _, gpu, _ = _twin_pair(rng, agents=2, per_agent=20, dim=16)
    step = FleetStep(gpu, FleetConfig(layers=(0,), k=3))
    ns = np.array([7], np.uint64)
    q = rng.standard_normal((1, 16)).astype(np.float32)
    cols = _to_device(cp, columns(rng, gpu.high_water))
    with pytest.raises(ValueError, match="device arrays"):
        step.run(q, namespaces=ns, now=0.0, columns=columns(rng, gpu.high_water))
    with pytest.raises(TypeError, match="numpy array or a device array"):
        step.run(q.tolist(), namespaces=ns, now=0.0, columns=cols)
    with pytest.raises(ValueError, match="one entry per arena row"):
        step.run(cp.asarray(q), namespaces=ns, now=0.0, columns=_to_device(cp, columns(rng, 3)))
    with pytest.raises(ValueError, match="host memory"):
        step.run(cp.asarray(q), namespaces=ns, now=0.0, columns=columns(rng, gpu.high_water))


@pytest.mark.gpu
@pytest.mark.parametrize("codec", ["binary", "int8"])
@pytest.mark.parametrize("host_queries", [True, False])
def test_gpu_coded_step_matches_the_cpu_twin(codec: str, host_queries: bool) -> None:
    """With a codec: the code scan + exact re-ranking inside the graph, numpy or device queries.
    Code estimates may round differently near ties (float contraction), so the candidates, and
    then a few results, may differ from the CPU's: the results must agree on nearly all ids, and
    every score returned must be the exact score of its row."""
    cp = _cupy()
    rng, seed = fresh_rng()
    data = fleet_data(rng, agents=6, per_agent=400, dim=64)
    cpu, gpu = VectorArena(64, codec=codec), VectorArena(64, device="cuda", codec=codec)
    assert np.array_equal(fill(cpu, data), fill(gpu, data))
    cfg = FleetConfig(layers=(0, 1, 2), k=10, oversample=4)
    ccols = columns(rng, cpu.high_water)
    gcols = _to_device(cp, ccols)
    cstep, gstep = FleetStep(cpu, cfg), FleetStep(gpu, cfg)
    agree = []
    for t in range(3):
        agents = rng.choice(np.arange(1, 7, dtype=np.uint64) * np.uint64(7), size=4)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        cres = cstep.run(q, namespaces=agents, now=float(t), columns=ccols)
        res = gstep.run(q if host_queries else cp.asarray(q), namespaces=agents, now=float(t), columns=gcols)
        gi, gs = cp.asnumpy(res.ids), cp.asnumpy(res.scores)
        found = gi >= 0
        exact = np.einsum("bd,bld->bl", q, data["x"][np.where(found, gi, 0)].reshape(4, -1, 64)).reshape(gi.shape)
        np.testing.assert_allclose(gs[found], exact[found], rtol=1e-4, atol=1e-4, err_msg=f"seed={seed}")
        agree += [
            len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, (b >= 0).sum())
            for a, b in zip(gi.reshape(-1, 10), cres.ids.reshape(-1, 10))
        ]
    assert np.mean(agree) >= 0.97, f"seed={seed} agreement {np.mean(agree):.3f}"
    assert gstep.stats.replays == 3


def test_cpu_coded_step_uses_the_codec() -> None:
    rng, seed = fresh_rng()
    data = fleet_data(rng, agents=3, per_agent=300, dim=64)
    arena = VectorArena(64, codec="binary")
    fill(arena, data)
    q = rng.standard_normal((3, 64)).astype(np.float32)
    ns = np.array([7, 14, 21], np.uint64)
    res = FleetStep(arena, FleetConfig(layers=(0, 1), k=5, oversample=1)).run(
        q, namespaces=ns, now=1.0, columns=columns(rng, arena.high_water)
    )
    for li, layer in enumerate((0, 1)):
        s, i = arena.search(q, 5, namespace=ns, layers=[layer], oversample=1)
        np.testing.assert_array_equal(res.ids[:, li], i, err_msg=f"seed={seed}")
        np.testing.assert_array_equal(res.scores[:, li], s, err_msg=f"seed={seed}")
    with pytest.raises(ValueError, match="needs an arena with a codec"):
        FleetStep(VectorArena(64), FleetConfig(layers=(0,), oversample=2))


def test_fleet_is_exported_alongside_the_arena() -> None:
    assert lamina.native.fleet.FleetStep is FleetStep  # type: ignore[attr-defined]
