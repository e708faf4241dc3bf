"""CUDA backend: dispatch (always runs) and GPU kernels vs their CPU twins (marked gpu).

GPU tests compare every device result with the CPU implementation on fresh random data (the
seed is in each failure message), with device outputs poisoned before the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina
from lamina import _core
from lamina.native import _device

# ---------------------------------------------------------------------------------------------
# helpers


class FakeDeviceArray:
    """Exposes a __cuda_array_interface__ without any device memory behind it."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4", /, **extra: Any) -> None:
        self.shape = shape
        iface: dict[str, Any] = {
            "shape": shape,
            "typestr": typestr,
            "data": (0xDEAD0000, False),
            "version": 3,
        }
        iface.update(extra)
        self.__cuda_array_interface__ = {k: v for k, v in iface.items() if v is not _DROP}


_DROP = object()


def fresh_rng() -> tuple[np.random.Generator, int]:
    seed = int(np.random.SeedSequence().entropy % (2**63))
    return np.random.default_rng(seed), seed


# ---------------------------------------------------------------------------------------------
# __cuda_array_interface__ parsing (no device needed)


def test_parse_basic_fields() -> None:
    a = FakeDeviceArray((3, 4), "<f4", stream=7)
    info = _core._cuda_array_info(a, "x")
    assert info["shape"] == (3, 4)
    assert info["typestr"] == "<f4"
    assert info["itemsize"] == 4
    assert info["ptr"] == 0xDEAD0000
    assert info["readonly"] is False
    assert info["version"] == 3
    assert info["stream"] == 7
    assert info["strides"] is None
    assert info["c_contiguous"] is True


def test_parse_stream_none_and_legacy_values() -> None:
    assert _core._cuda_array_info(FakeDeviceArray((2,), stream=None))["stream"] is None
    assert _core._cuda_array_info(FakeDeviceArray((2,)))["stream"] is None
    assert _core._cuda_array_info(FakeDeviceArray((2,), stream=1))["stream"] == 1
    assert _core._cuda_array_info(FakeDeviceArray((2,), stream=2))["stream"] == 2
    # v2 producers (e.g. PyTorch) carry no stream semantics: ignored
    assert _core._cuda_array_info(FakeDeviceArray((2,), version=2, stream=5))["stream"] is None


def test_parse_rejects_stream_zero() -> None:
    with pytest.raises(ValueError, match="0 is disallowed"):
        _core._cuda_array_info(FakeDeviceArray((2,), stream=0))


@pytest.mark.parametrize(
    "shape,strides,contig",
    [
        ((3, 4), (16, 4), True),
        ((3, 4), (32, 4), False),  # padded rows
        ((3, 4), (4, 12), False),  # Fortran order
        ((1, 4), (999, 4), True),  # size-1 dimension: stride irrelevant
        ((0, 4), (7, 3), True),  # empty
    ],
)
def test_parse_strides(shape: tuple[int, int], strides: tuple[int, int], contig: bool) -> None:
    info = _core._cuda_array_info(FakeDeviceArray(shape, strides=strides))
    assert info["strides"] == strides
    assert info["c_contiguous"] is contig
    if contig:
        _core._check_cuda_array(FakeDeviceArray(shape, strides=strides), "x", 2, "f4", "float32")
    else:
        with pytest.raises(ValueError, match="C-contiguous"):
            _core._check_cuda_array(FakeDeviceArray(shape, strides=strides), "x", 2, "f4", "float32")


@pytest.mark.parametrize(
    "extra,exc,match",
    [
        ({"mask": object()}, ValueError, "masked"),
        ({"shape": _DROP}, ValueError, "'shape'"),
        ({"version": _DROP}, ValueError, "'version'"),
        ({"data": (0x1000,)}, ValueError, "'data'"),
        ({"data": (0, False)}, ValueError, "null data pointer"),
        ({"typestr": "f4"}, ValueError, "type string"),
        ({"typestr": "<fx"}, ValueError, "type string"),
        ({"typestr": ">f4"}, TypeError, "big-endian"),
        ({"strides": (4,)}, ValueError, "'strides'"),
        ({"shape": (2, -1)}, ValueError, "negative"),
        ({"stream": "s"}, ValueError, "'stream'"),
    ],
)
def test_parse_rejects_malformed(extra: dict[str, Any], exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        _core._cuda_array_info(FakeDeviceArray((2, 2), **extra))


def test_parse_rejects_non_dict_and_missing_interface() -> None:
    class NotDict:
        __cuda_array_interface__ = [1, 2]

    with pytest.raises(ValueError, match="not a dict"):
        _core._cuda_array_info(NotDict())
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        _core._cuda_array_info(np.zeros(3))


def test_checked_dtype_ndim_writable() -> None:
    with pytest.raises(TypeError, match="float32"):
        _core._check_cuda_array(FakeDeviceArray((2, 2), "<f8"), "q", 2, "f4", "float32")
    with pytest.raises(ValueError, match="2-dimensional"):
        _core._check_cuda_array(FakeDeviceArray((4,)), "q", 2, "f4", "float32")
    ro = FakeDeviceArray((2, 2), data=(0x1000, True))
    with pytest.raises(ValueError, match="read-only"):
        _core._check_cuda_array(ro, "out", 2, "f4", "float32", True)
    info = _core._check_cuda_array(FakeDeviceArray((2, 2), "|u1"), "m", 2, "u1", "uint8")
    assert info["itemsize"] == 1


# ---------------------------------------------------------------------------------------------
# dispatch (no device needed)


def _expected_no_gpu_message() -> str:
    return "LAMINA_CUDA=ON" if not lamina.has_cuda() else "no CUDA device"


def test_mixed_host_and_device_is_an_error() -> None:
    q = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="host memory"):
        lamina.topk(q, FakeDeviceArray((5, 4)), 1)
    with pytest.raises(ValueError, match="host memory"):
        lamina.topk(FakeDeviceArray((2, 4)), np.zeros((5, 4), np.float32), 1)
    with pytest.raises(ValueError, match="host memory"):
        out = (np.zeros((2, 1), np.float32), FakeDeviceArray((2, 1), "<i8"))
        lamina.topk(q, np.zeros((5, 4), np.float32), 1, out=out)


@pytest.mark.skipif(lamina.cuda_device_count() > 0, reason="checks the no-device error path")
def test_device_arrays_without_cuda_say_how_to_rebuild() -> None:
    with pytest.raises(RuntimeError, match=_expected_no_gpu_message()):
        lamina.topk(FakeDeviceArray((2, 4)), FakeDeviceArray((5, 4)), 1)
    with pytest.raises(RuntimeError, match=_expected_no_gpu_message()):
        lamina.VectorArena(4, device="cuda")
    if not lamina.has_cuda():
        with pytest.raises(RuntimeError, match=r"pip install \. -Ccmake\.define\.LAMINA_CUDA=ON"):
            _device.require_cuda()


def test_cpu_arena_refuses_device_arrays() -> None:
    a = lamina.VectorArena(4)
    with pytest.raises(ValueError, match="device='cuda'"):
        a.add(FakeDeviceArray((2, 4)))
    a.add(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="CUDA device"):
        a.search(FakeDeviceArray((1, 4)), 1)


@pytest.mark.parametrize("bad,exc", [("gpu", ValueError), ("cuda:x", ValueError), (0, TypeError)])
def test_parse_device(bad: Any, exc: type) -> None:
    assert _device.parse_device("cpu") == ("cpu", 0)
    assert _device.parse_device("cuda") == ("cuda", 0)
    assert _device.parse_device("cuda:3") == ("cuda", 3)
    with pytest.raises(exc):
        _device.parse_device(bad)
    with pytest.raises(exc):
        lamina.VectorArena(4, device=bad)


def test_cpu_topk_out_is_filled_in_place() -> None:
    rng, seed = fresh_rng()
    x = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal((3, 8)).astype(np.float32)
    s_ref, i_ref = lamina.topk(q, x, 5)
    s = np.full((3, 5), np.nan, np.float32)
    i = np.full((3, 5), -7, np.int64)
    rs, ri = lamina.topk(q, x, 5, out=(s, i))
    assert rs is s and ri is i
    np.testing.assert_array_equal(s, s_ref, err_msg=f"seed={seed}")
    np.testing.assert_array_equal(i, i_ref, err_msg=f"seed={seed}")
    with pytest.raises(ValueError, match="out ids"):
        lamina.topk(q, x, 5, out=(s, np.zeros((3, 5), np.int32)))
    with pytest.raises(TypeError, match="pair"):
        lamina.topk(q, x, 5, out=s)


def test_device_view_interface() -> None:
    owner = object()
    v = _device.DeviceView(owner, 0x1000, (3, 4), (64, 4), "<f4", 0)
    info = _core._cuda_array_info(v)
    assert info["shape"] == (3, 4) and info["readonly"] is True and info["stream"] is None
    assert info["c_contiguous"] is False  # padded rows: consumers see the real stride


# ---------------------------------------------------------------------------------------------
# GPU kernels vs CPU twins (skip per test without a CUDA build + device)


def _cupy() -> Any:
    return pytest.importorskip("cupy")


def _exact_scores(q: np.ndarray, x: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
    """float64 score of query i against row ids[i, j] (nan for padding)."""
    q64 = q.astype(np.float64)
    x64 = x.astype(np.float64)
    out = np.full(ids.shape, np.nan)
    for i in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            r = ids[i, j]
            if r < 0:
                continue
            dot = float(q64[i] @ x64[r])
            if metric == "ip":
                out[i, j] = dot
            elif metric == "cosine":
                nx = float(np.sqrt(x64[r] @ x64[r]))
                out[i, j] = 0.0 if nx == 0 else dot / (np.sqrt(q64[i] @ q64[i]) * nx)
            else:
                out[i, j] = max(float(q64[i] @ q64[i]) + float(x64[r] @ x64[r]) - 2 * dot, 0.0)
    return out


def assert_same_topk(
    cpu: tuple[np.ndarray, np.ndarray],
    gpu: tuple[np.ndarray, np.ndarray],
    q: np.ndarray,
    x: np.ndarray,
    metric: str,
    seed: int,
    rows: Any = None,
) -> None:
    """GPU == CPU twin up to float32 rounding: equal padding, scores within tolerance, and where
    ids differ the two candidates must score equally (a near tie) by an exact recomputation."""
    cs, ci = cpu
    gs, gi = gpu
    msg = f"seed={seed} metric={metric}"
    assert gs.shape == cs.shape and gi.shape == ci.shape, msg
    assert np.array_equal(ci < 0, gi < 0), msg
    pad = ci < 0
    assert np.all(gs[pad] == cs[pad]), msg
    scale = 1e-4 * (1.0 + np.abs(cs[~pad]).max(initial=0.0))
    np.testing.assert_allclose(gs[~pad], cs[~pad], rtol=1e-4, atol=scale, err_msg=msg)
    diff = (ci != gi) & ~pad
    if diff.any():
        xr = x if rows is None else rows
        ec = _exact_scores(q, xr, np.where(diff, ci & 0xFFFFFFFF, -1), metric)
        eg = _exact_scores(q, xr, np.where(diff, gi & 0xFFFFFFFF, -1), metric)
        np.testing.assert_allclose(eg[diff], ec[diff], rtol=1e-4, atol=scale, err_msg=msg)
    for row in gi:  # no id twice
        real = row[row >= 0]
        assert len(set(real.tolist())) == len(real), msg


def _poisoned_out(cp: Any, nq: int, k: int) -> tuple[Any, Any]:
    return cp.full((nq, k), cp.nan, cp.float32), cp.full((nq, k), -7, cp.int64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
@pytest.mark.parametrize("nq,k", [(1, 1), (1, 10), (3, 40), (20, 10), (70, 100), (5, 300)])
def test_gpu_topk_matches_cpu(dtype: str, metric: str, nq: int, k: int) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    n, d = int(rng.integers(200, 3000)), int(rng.choice([8, 33, 64, 384]))
    x = rng.standard_normal((n, d)).astype(dtype)
    q = rng.standard_normal((nq, d)).astype(np.float32)
    cpu = lamina.topk(q, x, k, metric)
    out = _poisoned_out(cp, nq, k)
    gs, gi = lamina.topk(cp.asarray(q), cp.asarray(x), k, metric, out=out)
    assert gs is out[0] and gi is out[1]
    assert_same_topk(cpu, (cp.asnumpy(gs), cp.asnumpy(gi)), q, x, metric, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("nq", [1, 5, 40])
def test_gpu_topk_exact_ties_order_by_id(dtype: str, nq: int) -> None:
    """Small-integer data makes every score exact, so GPU and CPU must agree bit for bit,
    including the order of the many exact ties (duplicated rows): smaller id first."""
    cp = _cupy()
    rng, seed = fresh_rng()
    base = rng.integers(-3, 4, size=(7, 48)).astype(dtype)
    x = base[rng.integers(0, 7, size=1500)]
    q = rng.integers(-3, 4, size=(nq, 48)).astype(np.float32)
    for metric in ("ip", "l2"):
        cs, ci = lamina.topk(q, x, 64, metric)
        gs, gi = lamina.topk(cp.asarray(q), cp.asarray(x), 64, metric)
        np.testing.assert_array_equal(cp.asnumpy(gi), ci, err_msg=f"seed={seed} {metric}")
        np.testing.assert_array_equal(cp.asnumpy(gs), cs, err_msg=f"seed={seed} {metric}")


@pytest.mark.gpu
def test_gpu_topk_padding_strided_rows_and_allocation() -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    x = rng.standard_normal((6, 20)).astype(np.float32)
    q = rng.standard_normal((4, 20)).astype(np.float32)
    for metric in ("ip", "l2"):
        cpu = lamina.topk(q, x, 9, metric)
        gs, gi = lamina.topk(cp.asarray(q), cp.asarray(x), 9, metric)
        assert isinstance(gs, cp.ndarray) and gs.dtype == cp.float32 and gi.dtype == cp.int64
        assert_same_topk(cpu, (cp.asnumpy(gs), cp.asnumpy(gi)), q, x, metric, seed)
    wide = cp.asarray(rng.standard_normal((300, 40)).astype(np.float32))
    view = wide[:, :24]  # rows padded to 40 columns: row stride honoured, no copy
    xs = cp.asnumpy(view)
    q2 = rng.standard_normal((3, 24)).astype(np.float32)
    cpu = lamina.topk(q2, np.ascontiguousarray(xs), 5)
    gs, gi = lamina.topk(cp.asarray(q2), view, 5)
    assert_same_topk(cpu, (cp.asnumpy(gs), cp.asnumpy(gi)), q2, xs, "ip", seed)


@pytest.mark.gpu
def test_gpu_topk_rejects_bad_input() -> None:
    cp = _cupy()
    x = cp.ones((10, 4), cp.float32)
    q = cp.ones((2, 4), cp.float32)
    bad = x.copy()
    bad[3, 1] = cp.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        lamina.topk(q, bad, 2)
    qbad = q.copy()
    qbad[1, 0] = cp.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        lamina.topk(qbad, x, 2)
    with pytest.raises(ValueError, match="zero norm"):
        lamina.topk(cp.zeros((1, 4), cp.float32), x, 2, "cosine")
    with pytest.raises(TypeError, match="float32"):
        lamina.topk(q.astype(cp.float64), x, 2)
    with pytest.raises(ValueError, match="columns"):
        lamina.topk(cp.ones((2, 5), cp.float32), x, 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        lamina.topk(cp.ones((4, 2), cp.float32).T, x, 2)
    with pytest.raises(ValueError, match="k must be in"):
        lamina.topk(q, x, 5000)


@pytest.mark.gpu
def test_gpu_topk_runs_on_the_callers_stream() -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    x = rng.standard_normal((5000, 64)).astype(np.float16)
    q = rng.standard_normal((32, 64)).astype(np.float32)
    cpu = lamina.topk(q, x, 8)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        dq, dx = cp.asarray(q), cp.asarray(x)  # produced on s
        gs, gi = lamina.topk(dq, dx, 8)
        res = (cp.asnumpy(gs, stream=s), cp.asnumpy(gi, stream=s))
    s.synchronize()
    assert_same_topk(cpu, res, q, x, "ip", seed)


@pytest.mark.gpu
def test_gpu_topk_with_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")
    rng, seed = fresh_rng()
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    q = rng.standard_normal((4, 32)).astype(np.float32)
    cpu = lamina.topk(q, x, 7, "cosine")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        gs, gi = lamina.topk(torch.from_numpy(q).cuda(), torch.from_numpy(x).cuda(), 7, "cosine")
        assert isinstance(gs, torch.Tensor) and gs.is_cuda and gi.dtype == torch.int64
    torch.cuda.synchronize()
    assert_same_topk(cpu, (gs.cpu().numpy(), gi.cpu().numpy()), q, x, "cosine", seed)


def _twin_arenas(dtype: str, d: int, rng: np.random.Generator, n_ns: int, n: int, codec: Any = None) -> tuple[Any, Any]:
    """The same add / remove / re-add / set_layer sequence on a CPU and a GPU arena."""
    cpu = lamina.VectorArena(d, dtype, capacity=16, codec=codec)
    gpu = lamina.VectorArena(d, dtype, capacity=16, device="cuda", codec=codec)
    x = rng.standard_normal((n, d)).astype(dtype)
    ns = rng.integers(0, n_ns, size=n).astype(np.uint64)
    layer = rng.integers(0, 3, size=n).astype(np.uint8)
    h1 = cpu.add(x, ns, layer)
    np.testing.assert_array_equal(h1, gpu.add(x, ns, layer))
    gone = rng.choice(h1, size=n // 5, replace=False)
    cpu.remove(gone)
    gpu.remove(gone)
    y = rng.standard_normal((n // 10, d)).astype(dtype)  # reuses removed rows (new generations)
    ns2 = rng.integers(0, n_ns, size=len(y)).astype(np.uint64)
    h2 = cpu.add(y, ns2, 1)
    np.testing.assert_array_equal(h2, gpu.add(y, ns2, 1))
    alive = np.concatenate([np.setdiff1d(h1, gone), h2])
    moved = rng.choice(alive, size=min(30, len(alive)), replace=False)
    cpu.set_layer(moved, 2)
    gpu.set_layer(moved, 2)
    return cpu, gpu, alive


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_arena_matches_cpu_arena(dtype: str) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    d = int(rng.choice([16, 100, 384]))
    cpu, gpu, alive = _twin_arenas(dtype, d, rng, n_ns=6, n=int(rng.integers(500, 3000)))
    msg = f"seed={seed}"
    assert len(cpu) == len(gpu) and cpu.high_water == gpu.high_water, msg
    for a, b in zip(cpu.columns(), gpu.columns()):
        np.testing.assert_array_equal(a, b, err_msg=msg)
    np.testing.assert_array_equal(cpu.get(alive[:50]), gpu.get(alive[:50]), err_msg=msg)
    np.testing.assert_array_equal(cpu.contains(alive), gpu.contains(alive), err_msg=msg)
    np.testing.assert_array_equal(cpu.layers_of(alive), gpu.layers_of(alive), err_msg=msg)
    rows = np.asarray(cpu.vectors)
    assert not rows[~cpu.live_mask()].any(), msg  # removed rows (not reused) read as zeros...
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(gpu.vectors)), rows, err_msg=msg)  # ...on the GPU too
    nq = 12
    q = rng.standard_normal((nq, d)).astype(np.float32)
    per_query = rng.integers(0, 7, size=nq).astype(np.uint64)  # namespace 6 is empty
    for metric in ("ip", "cosine", "l2"):
        for ns, layers in ((None, None), (3, None), (per_query, None), (None, [0, 2]), (per_query, [1])):
            c = cpu.search(q, 10, metric, ns, layers)
            g_host = gpu.search(q, 10, metric, ns, layers)
            g_dev = gpu.search(cp.asarray(q), 10, metric, ns, layers)
            assert isinstance(g_dev[0], cp.ndarray)
            for g in (g_host, (cp.asnumpy(g_dev[0]), cp.asnumpy(g_dev[1]))):
                assert_same_topk(c, g, q, rows, metric, seed, rows=rows)


@pytest.mark.gpu
@pytest.mark.parametrize("codec", ["binary", "int8"])
def test_gpu_code_scan_matches_the_cpu_code_scan(codec: str) -> None:
    """The GPU code scan against its CPU twin: with every row a candidate both equal the exact
    search; at the default oversampling their results overlap (the estimates' float rounding
    may order near-ties differently) and the scores returned are exact."""
    cp = _cupy()
    rng, seed = fresh_rng()
    d = int(rng.choice([70, 384]))
    cpu, gpu, alive = _twin_arenas("float32", d, rng, n_ns=5, n=int(rng.integers(500, 2000)), codec=codec)
    msg = f"seed={seed}"
    assert gpu.codec == codec and gpu.code_bytes == cpu.code_bytes, msg
    rows = np.asarray(cpu.vectors)
    q = rng.standard_normal((9, d)).astype(np.float32)
    per_query = rng.integers(0, 6, size=9).astype(np.uint64)
    for metric in ("ip", "cosine", "l2"):
        for ns, layers in ((None, None), (2, None), (per_query, None), (per_query, [1])):
            c = cpu.search(q, 10, metric, ns, layers, oversample=0)
            g = gpu.search(cp.asarray(q), 10, metric, ns, layers, oversample=100)  # m = 1000
            assert_same_topk(c, (cp.asnumpy(g[0]), cp.asnumpy(g[1])), q, rows, metric, seed, rows=rows)
            c_r = cpu.search(q, 10, metric, ns, layers)
            g_r = gpu.search(q, 10, metric, ns, layers)
            overlap = np.mean(
                [len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, (a >= 0).sum()) for a, b in zip(c_r[1], g_r[1])]
            )
            assert overlap >= 0.9, f"{msg} {metric} {ns} overlap {overlap:.3f}"
            found = g_r[1] >= 0
            slots = g_r[1][found] & 0xFFFFFFFF
            exact = np.einsum("ij,ij->i", rows[slots], np.repeat(q, 10, 0).reshape(9, 10, d)[found])
            if metric == "ip":
                np.testing.assert_allclose(g_r[0][found], exact, rtol=1e-4, atol=1e-4, err_msg=msg)


@pytest.mark.gpu
def test_gpu_arena_multi_tenant_one_query_per_agent() -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    agents, per, d = 64, int(rng.integers(20, 200)), 64
    cpu = lamina.VectorArena(d, "float16")
    gpu = lamina.VectorArena(d, "float16", device="cuda")
    for a in rng.permutation(agents):  # interleaved namespaces
        x = rng.standard_normal((per, d)).astype(np.float16)
        np.testing.assert_array_equal(cpu.add(x, int(a)), gpu.add(cp.asarray(x), int(a)))
    q = rng.standard_normal((agents, d)).astype(np.float32)
    ns = np.arange(agents, dtype=np.uint64)
    c = cpu.search(q, 16, "ip", ns)
    gs, gi = gpu.search(cp.asarray(q), 16, "ip", ns)
    rows = np.asarray(cpu.vectors)
    assert_same_topk(c, (cp.asnumpy(gs), cp.asnumpy(gi)), q, rows, "ip", seed, rows=rows)
    owners = gpu.namespaces_of(cp.asnumpy(gi).ravel())
    np.testing.assert_array_equal(owners.reshape(agents, 16), np.repeat(ns[:, None], 16, 1))


@pytest.mark.gpu
def test_gpu_arena_errors() -> None:
    cp = _cupy()
    a = lamina.VectorArena(4, device="cuda")
    with pytest.raises(ValueError, match="empty"):
        a.search(np.ones((1, 4), np.float32), 1)
    bad = cp.ones((2, 4), cp.float32)
    bad[1, 2] = cp.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        a.add(bad)
    assert len(a) == 0
    h = a.add(cp.ones((2, 4), cp.float32))
    a.remove(h[:1])
    with pytest.raises(IndexError, match="stale"):
        a.remove(h[:1])
    with pytest.raises(TypeError, match="float32"):
        a.add(cp.ones((2, 4), cp.float16))


# ---------------------------------------------------------------------------------------------
# row kernels (heat, EMA blend, damped update)


def test_row_kernels_refuse_mixed_devices() -> None:
    rows = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="host memory"):
        lamina.native.kernels.ema_blend(rows, FakeDeviceArray((4, 3)), 0.5)
    with pytest.raises(ValueError, match="host memory"):
        lamina.native.kernels.damped_update(FakeDeviceArray((4, 3)), rows, 0.5)
    with pytest.raises(ValueError, match="host memory"):
        lamina.native.kernels.ema_blend(FakeDeviceArray((4, 3)), FakeDeviceArray((4, 3)), np.ones(4))
    with pytest.raises(ValueError, match="host memory"):
        lamina.native.kernels.heat_scores(
            np.zeros(4, np.int32), FakeDeviceArray((4,), "<i4"), FakeDeviceArray((4,), "<f8"), 1.0
        )


@pytest.mark.gpu
@pytest.mark.parametrize("vt,lt", [("int32", "int64"), ("float32", "int32"), ("int64", "float32")])
def test_gpu_heat_matches_cpu_bitwise(vt: str, lt: str) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    n = int(rng.integers(1, 50_000))
    visits = rng.integers(0, 1000, n).astype(vt)
    ilen = rng.integers(0, 500, n).astype(lt)
    last = rng.uniform(0, 2e7, n)
    now, a, b, c, mu = 1.5e7, 0.7, 0.2, 3.0, 1e6
    cpu = lamina.native.kernels.heat_scores(visits, ilen, last, now, a, b, c, mu)
    out = cp.full(n, cp.nan, cp.float32)
    res = lamina.native.kernels.heat_scores(
        cp.asarray(visits), cp.asarray(ilen), cp.asarray(last), now, a, b, c, mu, out=out
    )
    assert res is out
    np.testing.assert_array_equal(cp.asnumpy(out), cpu, err_msg=f"seed={seed}")
    bad = cp.asarray(last)
    bad[n // 2] = cp.nan
    with pytest.raises(ValueError, match="NaN"):
        lamina.native.kernels.heat_scores(cp.asarray(visits), cp.asarray(ilen), bad, now)


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ["ema_blend", "damped_update"])
@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
def test_gpu_row_updates_match_cpu(fn: str, indexed: bool, per_row: bool) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    n, d = int(rng.integers(1, 3000)), int(rng.choice([1, 7, 64, 384]))
    rows = rng.standard_normal((n, d)).astype(np.float32)
    m = int(rng.integers(0, n + 1)) if indexed else n
    index = rng.permutation(n)[:m].astype(np.int64) if indexed else None
    targets = rng.standard_normal((m, d)).astype(np.float32)
    param: Any = rng.uniform(0, 1, m).astype(np.float64) if per_row else float(rng.uniform(0, 1))
    kw: dict[str, Any] = {}
    renorms = [False, True] if fn == "ema_blend" else [False]
    for renorm in renorms:
        if fn == "ema_blend":
            kw = {"renormalize": renorm}
        cpu_rows = rows.copy()
        cpu_drift = getattr(lamina.native.kernels, fn)(cpu_rows, targets, param, index, **kw)
        g_rows = cp.asarray(rows)
        g_param = cp.asarray(param) if per_row else param
        out = cp.full(m, cp.nan, cp.float32)
        g_drift = getattr(lamina.native.kernels, fn)(
            g_rows, cp.asarray(targets), g_param, None if index is None else cp.asarray(index), out=out, **kw
        )
        assert g_drift is out
        msg = f"seed={seed} {fn} renorm={renorm}"
        np.testing.assert_allclose(cp.asnumpy(g_rows), cpu_rows, rtol=2e-6, atol=2e-6, err_msg=msg)
        np.testing.assert_allclose(cp.asnumpy(out), cpu_drift, rtol=1e-4, atol=1e-5, err_msg=msg)


@pytest.mark.gpu
def test_gpu_row_updates_errors() -> None:
    cp = _cupy()
    rows = cp.ones((5, 4), cp.float32)
    t = cp.ones((2, 4), cp.float32)
    with pytest.raises(IndexError, match="out of range"):
        lamina.native.kernels.ema_blend(rows, t, 0.5, cp.asarray([0, 5], cp.int64))
    with pytest.raises(ValueError, match="more than once"):
        lamina.native.kernels.ema_blend(rows, t, 0.5, cp.asarray([1, 1], cp.int64))
    with pytest.raises(ValueError, match="out of range"):
        lamina.native.kernels.ema_blend(rows, t, 1.5, cp.asarray([0, 1], cp.int64))
    with pytest.raises(ValueError, match="out of range"):
        lamina.native.kernels.damped_update(rows, t, cp.asarray([0.5, -1.0]), cp.asarray([0, 1], cp.int64))
    np.testing.assert_array_equal(cp.asnumpy(rows), np.ones((5, 4), np.float32))  # nothing written
    tb = cp.ones((5, 4), cp.float32)
    tb[3, 1] = cp.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        lamina.native.kernels.damped_update(rows, tb, 0.5)
    with pytest.raises(ValueError, match="shares memory"):
        lamina.native.kernels.ema_blend(rows, rows, 0.5)


# ---------------------------------------------------------------------------------------------
# softmax gate, select_hot, evict_to_capacity


def test_selection_kernels_refuse_mixed_devices() -> None:
    k = lamina.native.kernels
    with pytest.raises(ValueError, match="host memory"):
        k.softmax_gate(np.zeros((3, 4), np.float32), 1.0, out=FakeDeviceArray((3, 4)))
    with pytest.raises(ValueError, match="host memory"):
        k.softmax_gate(FakeDeviceArray((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="host memory"):
        k.select_hot(FakeDeviceArray((5,)), 0.5, np.zeros(5, np.uint64))
    with pytest.raises(ValueError, match="host memory"):
        k.evict_to_capacity(FakeDeviceArray((5,)), np.zeros(5, np.uint64), 2)
    with pytest.raises(ValueError, match="host memory"):
        k.evict_to_capacity(FakeDeviceArray((5,)), FakeDeviceArray((5,), "<u8"), 2, live=np.ones(5, bool))


@pytest.mark.skipif(lamina.cuda_device_count() > 0, reason="checks the no-device error path")
def test_selection_kernels_without_cuda_say_so() -> None:
    k = lamina.native.kernels
    msg = _expected_no_gpu_message()
    with pytest.raises(RuntimeError, match=msg):
        k.softmax_gate(FakeDeviceArray((3, 4)), 1.0)
    with pytest.raises(RuntimeError, match=msg):
        k.select_hot(FakeDeviceArray((5,)), 0.5)
    with pytest.raises(RuntimeError, match=msg):
        k.evict_to_capacity(FakeDeviceArray((5,)), FakeDeviceArray((5,), "<u8"), {1: 2})


@pytest.mark.gpu
@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
def test_gpu_softmax_gate_matches_cpu_bitwise(entropy: bool, per_row: bool) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    for L in (1, 3, 8, 13):
        b = int(rng.integers(1, 3000))
        rel = rng.standard_normal((b, L)).astype(np.float32)
        rel[: b // 4, :2] = 0.25  # tied maxima: the doubling stops at the bound
        bdt = np.float32 if rng.random() < 0.5 else np.float64
        beta: Any = rng.uniform(0.05, 4.0, b).astype(bdt) if per_row else float(rng.uniform(0.05, 4.0))
        eps = float(rng.uniform(0.0, 0.8)) if entropy else None
        g_cpu, b_cpu = lamina.native.kernels.softmax_gate(rel, beta, eps, max_doublings=20)
        out = cp.full((b, L), cp.nan, cp.float32)
        g_dev, b_dev = lamina.native.kernels.softmax_gate(
            cp.asarray(rel), cp.asarray(beta) if per_row else beta, eps, max_doublings=20, out=out
        )
        assert g_dev is out
        msg = f"seed={seed} L={L}"
        np.testing.assert_array_equal(cp.asnumpy(g_dev), g_cpu, err_msg=msg)
        np.testing.assert_array_equal(cp.asnumpy(b_dev), b_cpu, err_msg=msg)


@pytest.mark.gpu
def test_gpu_softmax_gate_errors() -> None:
    cp = _cupy()
    rel = cp.ones((4, 3), cp.float32)
    rel[2, 1] = cp.inf
    with pytest.raises(ValueError, match=r"relevance\[2\]"):
        lamina.native.kernels.softmax_gate(rel, 1.0)
    ok = cp.ones((4, 3), cp.float32)
    with pytest.raises(ValueError, match="> 0"):
        lamina.native.kernels.softmax_gate(ok, -1.0, 0.1)
    with pytest.raises(ValueError, match=r"beta\[1\]"):
        lamina.native.kernels.softmax_gate(ok, cp.asarray([1.0, -1.0, 1.0, 1.0]), 0.1)
    with pytest.raises(ValueError, match="max_doublings"):
        lamina.native.kernels.softmax_gate(ok, 1.0, 0.1, max_doublings=2000)


@pytest.mark.gpu
@pytest.mark.parametrize("grouped", [False, True])
def test_gpu_select_hot_matches_cpu(grouped: bool) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    n = int(rng.integers(0, 200_000))
    heat = np.round(rng.standard_normal(n) * 4).astype(np.float32)  # many ties
    ns = rng.integers(0, 50, n).astype(np.uint64) * np.uint64(2**40) if grouped else None
    for thr in (0.0, 1.0 + 1e-12, -3.5, float(rng.uniform(-2, 2))):
        cpu = lamina.native.kernels.select_hot(heat, thr, ns)
        dev = lamina.native.kernels.select_hot(cp.asarray(heat), thr, None if ns is None else cp.asarray(ns))
        assert isinstance(dev, cp.ndarray) and dev.dtype == cp.int64
        np.testing.assert_array_equal(cp.asnumpy(dev), cpu, err_msg=f"seed={seed} thr={thr}")
    if n:
        bad = cp.asarray(heat)
        bad[n - 1] = cp.nan
        with pytest.raises(ValueError, match=rf"heat\[{n - 1}\]"):
            lamina.native.kernels.select_hot(bad, 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("with_live", [False, True])
@pytest.mark.parametrize("mapping", [False, True])
def test_gpu_evict_to_capacity_matches_cpu(with_live: bool, mapping: bool) -> None:
    cp = _cupy()
    rng, seed = fresh_rng()
    n = int(rng.integers(0, 100_000))
    scores = np.round(rng.standard_normal(n) * 3).astype(np.float32)  # many ties
    scores[rng.random(n) < 0.05] = -0.0
    ns = rng.integers(0, 300, n).astype(np.uint64)
    live = rng.random(n) < 0.8 if with_live else None
    if live is not None:
        scores[~live & (rng.random(n) < 0.1)] = np.nan  # dead rows are not read
    cap: Any = (
        {int(k): int(rng.integers(0, 400)) for k in rng.choice(300, 120, replace=False)}
        if mapping
        else int(rng.integers(0, 400))
    )
    cpu = lamina.native.kernels.evict_to_capacity(scores, ns, cap, live=live)
    dev = lamina.native.kernels.evict_to_capacity(
        cp.asarray(scores), cp.asarray(ns), cap, live=None if live is None else cp.asarray(live)
    )
    np.testing.assert_array_equal(cp.asnumpy(dev), cpu, err_msg=f"seed={seed}")
    if n and live is None:
        bad = cp.asarray(scores)
        bad[n // 2] = cp.inf
        with pytest.raises(ValueError, match=rf"scores\[{n // 2}\]"):
            lamina.native.kernels.evict_to_capacity(bad, cp.asarray(ns), 1)


# ---------------------------------------------------------------------------------------------
# KV selection and compression


def test_kv_refuses_mixed_devices() -> None:
    from lamina import kv

    with pytest.raises(ValueError, match="host memory"):
        kv.select(FakeDeviceArray((2, 4, 64)), 16, "lava", value_norms=np.ones((2, 4), np.float32))
    keep = kv.select(np.random.default_rng(0).random((2, 4, 64), dtype=np.float32), 16, "h2o")
    with pytest.raises(ValueError, match="host memory"):
        kv.compress(FakeDeviceArray((2, 4, 64, 8)), np.zeros((2, 4, 64, 8), np.float32), keep)
    with pytest.raises(TypeError, match="float32"):
        kv.select(FakeDeviceArray((2, 4, 64), "<f2"), 16, "snapkv")
    with pytest.raises(ValueError, match="w <= S"):
        kv.select(FakeDeviceArray((2, 4, 70, 64)), 16, "snapkv")


@pytest.mark.skipif(lamina.cuda_device_count() > 0, reason="checks the no-device error path")
def test_kv_device_arrays_without_cuda_say_so() -> None:
    from lamina import kv

    with pytest.raises(RuntimeError, match=_expected_no_gpu_message()):
        kv.select(FakeDeviceArray((2, 4, 64)), 16, "snapkv", window_size=8)
    with pytest.raises(RuntimeError, match=_expected_no_gpu_message()):
        kv.value_norms(FakeDeviceArray((2, 4, 64, 8)))


def test_keepset_with_device_indices() -> None:
    from lamina import kv

    idx = FakeDeviceArray((6,), "<i8")
    ks = kv.KeepSet(
        indices=idx,
        offsets=np.array([0, 3, 6], np.int64),  # type: ignore[arg-type]
        lengths=np.array([[3, 3]], np.int64),
        seq_len=8,
    )
    assert ks.on_device and ks.total == 6
    with pytest.raises(ValueError, match="to_host"):
        ks.mask()
    with pytest.raises(ValueError, match="to_host"):
        ks.padded()
    with pytest.raises(TypeError, match="int64"):
        kv.KeepSet(
            indices=FakeDeviceArray((6,), "<i4"),
            offsets=np.array([0, 3, 6], np.int64),  # type: ignore[arg-type]
            lengths=np.array([[3, 3]], np.int64),
            seq_len=8,
        )
    host = kv.select(np.ones((1, 2, 8), np.float32), 4, "streaming", n_sink=1)
    assert not host.on_device and host.to_host() is host
    with pytest.raises(ValueError, match="host arrays"):
        kv.compress(np.zeros((1, 2, 8, 4), np.float32), np.zeros((1, 2, 8, 4), np.float32), ks)


def _kv_inputs(rng: np.random.Generator, window: bool, ties: bool) -> tuple[np.ndarray, int]:
    L, hkv = int(rng.integers(1, 5)), int(rng.choice([1, 2, 4]))
    H = hkv * int(rng.choice([1, 2, 4]))
    S = int(rng.integers(40, 700))
    if window:
        w = int(rng.integers(1, 17))
        a = rng.random((L, H, w, S)).astype(np.float32)
        a /= a.sum(-1, keepdims=True)
    else:
        a = rng.random((L, H, S)).astype(np.float32)
    if ties:
        a = np.round(a * 8) / 8
    return np.ascontiguousarray(a, dtype=np.float32), hkv


def _assert_same_keep(cpu: Any, dev: Any, cp: Any, msg: str) -> None:
    assert dev.on_device, msg
    np.testing.assert_array_equal(cp.asnumpy(dev.indices), cpu.indices, err_msg=msg)
    np.testing.assert_array_equal(dev.offsets, cpu.offsets, err_msg=msg)
    np.testing.assert_array_equal(dev.lengths, cpu.lengths, err_msg=msg)
    for key in ("entropy", "layer_budgets", "head_counts", "head_budgets"):
        if key in cpu.info:
            np.testing.assert_array_equal(
                np.asarray(dev.info[key]), np.asarray(cpu.info[key]), err_msg=f"{msg} info[{key}]"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["streaming", "h2o", "snapkv", "adakv", "pyramidkv", "lava"])
@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_gpu_kv_select_matches_cpu(method: str, window: bool, ties: bool) -> None:
    cp = _cupy()
    from lamina import kv

    rng, seed = fresh_rng()
    x, hkv = _kv_inputs(rng, window, ties)
    L, S = x.shape[0], x.shape[-1]
    params: dict[str, Any] = {}
    if method in ("snapkv", "adakv", "pyramidkv", "lava"):
        if not window:
            params["window_size"] = int(rng.integers(1, 17))
        params["kernel_size"] = int(rng.choice([1, 3, 5, 7]))
        params["pooling"] = str(rng.choice(["avg", "max", "none"]))
        params["gqa"] = str(rng.choice(["mean", "max"]))
    if method == "h2o":
        params["normalize"] = bool(window and rng.random() < 0.5)
        params["gqa"] = str(rng.choice(["mean", "max"]))
    if method == "streaming":
        params["n_sink"] = int(rng.integers(0, 5))
    norms = None
    if method == "lava":
        vals = rng.standard_normal((L, hkv, S, 8)).astype(np.float32)
        norms = kv.value_norms(vals)
        np.testing.assert_array_equal(cp.asnumpy(kv.value_norms(cp.asarray(vals))), norms)
        if rng.random() < 0.5:
            norms = np.ascontiguousarray(norms.max(-1))
    w = params.get("window_size", x.shape[2] if window else 0)
    budgets = [int(rng.integers(max(w, 5), S + 5)), float(rng.uniform(0.2, 0.8))]
    for budget in budgets:
        msg = f"seed={seed} {method} budget={budget} params={params} shape={x.shape} hkv={hkv}"
        try:
            cpu = kv.select(x, budget, method, value_norms=norms, n_kv_heads=hkv, **params)
        except ValueError:  # e.g. a budget below the window: the device path must refuse too
            with pytest.raises(ValueError):
                kv.select(
                    cp.asarray(x),
                    budget,
                    method,
                    value_norms=None if norms is None else cp.asarray(norms),
                    n_kv_heads=hkv,
                    **params,
                )
            continue
        dev = kv.select(
            cp.asarray(x),
            budget,
            method,
            value_norms=None if norms is None else cp.asarray(norms),
            n_kv_heads=hkv,
            **params,
        )
        _assert_same_keep(cpu, dev, cp, msg)


@pytest.mark.gpu
def test_gpu_kv_scores_match_cpu_bitwise() -> None:
    cp = _cupy()
    from lamina import kv

    rng, seed = fresh_rng()
    for window in (False, True):
        x, hkv = _kv_inputs(rng, window, False)
        m = kv.SnapKV(
            window_size=None if window else 4,
            kernel_size=int(rng.choice([1, 3, 5])),
            pooling=str(rng.choice(["avg", "max"])),
            gqa=str(rng.choice(["mean", "max"])),
        )
        cpu = m.score(x, hkv)
        dev = m.score(cp.asarray(x), hkv)
        np.testing.assert_array_equal(cp.asnumpy(dev), cpu, err_msg=f"seed={seed}")
    bad = cp.asarray(x)
    bad[0, 0, 0, 0] = cp.nan
    with pytest.raises(ValueError, match="NaN"):
        kv.select(bad, 16, "snapkv")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "int8"])
@pytest.mark.parametrize("padded", [False, True])
def test_gpu_kv_compress_matches_cpu(dtype: str, padded: bool) -> None:
    cp = _cupy()
    from lamina import kv

    rng, seed = fresh_rng()
    x, hkv = _kv_inputs(rng, True, True)
    L, S = x.shape[0], x.shape[-1]
    D = int(rng.choice([1, 3, 64, 128]))
    keys = rng.integers(-100, 100, (L, hkv, S, D)).astype(dtype)
    vals = (rng.integers(-100, 100, (L, hkv, S, D)) // 3).astype(dtype)
    budget = int(rng.integers(x.shape[2], S + 1))
    cpu_keep = kv.select(x, budget, "adakv", n_kv_heads=hkv)
    dev_keep = kv.select(cp.asarray(x), budget, "adakv", n_kv_heads=hkv)
    cpu = kv.compress(keys, vals, cpu_keep, padded=padded)
    dev = kv.compress(cp.asarray(keys), cp.asarray(vals), dev_keep, padded=padded)
    msg = f"seed={seed} D={D}"
    np.testing.assert_array_equal(cp.asnumpy(dev.keys), cpu.keys, err_msg=msg)
    np.testing.assert_array_equal(cp.asnumpy(dev.values), cpu.values, err_msg=msg)
    np.testing.assert_array_equal(dev.offsets, cpu.offsets, err_msg=msg)
    with pytest.raises(ValueError, match="host"):
        kv.compress(cp.asarray(keys), cp.asarray(vals), cpu_keep)
