from __future__ import annotations

import subprocess
import sys

import lamina
from cuda_probe import driver_device_count


def test_build_info_fields():
    info = lamina.build_info()
    for key in ("version", "compiler", "cxx_flags", "simd_compiled", "simd_available", "simd_active", "cuda"):
        assert key in info
    assert info["version"] == lamina.__version__
    assert "-O3" in info["cxx_flags"] and "march=native" not in info["cxx_flags"]
    assert info["simd_active"] in info["simd_available"]
    assert isinstance(lamina.has_cuda(), bool)
    assert lamina.has_cuda() == info["cuda"]


def test_cuda_device_count_matches_the_driver():
    n = lamina.cuda_device_count()
    assert isinstance(n, int)
    if not lamina.has_cuda():
        assert n == 0
    else:  # the devices the CUDA driver itself reports (libcuda through ctypes; 0 without one)
        assert n == driver_device_count()


def test_threads_setting():
    old = lamina.get_num_threads()
    try:
        lamina.set_num_threads(1)
        assert lamina.get_num_threads() == 1
    finally:
        lamina.set_num_threads(0)
    assert lamina.get_num_threads() == old


def test_cli_bench_search_runs():
    out = subprocess.run(
        [sys.executable, "-m", "lamina", "bench-search", "--rows", "3000", "--dim", "32", "--batches", "1", "4"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "agreement with numpy: 1.000" in out.stdout
