from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _cuda_devices() -> int:
    try:
        import lamina

        return lamina.cuda_device_count()
    except Exception:
        return 0


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") and _cuda_devices() == 0:
        pytest.skip("needs a CUDA build of lamina and a CUDA device")
    if item.get_closest_marker("data") and not SHARED_DATA.exists():
        pytest.skip(f"needs the shared evaluation data at {SHARED_DATA}")


@pytest.fixture(params=["scalar", "avx2", "avx512"])
def isa(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Run a test on each SIMD path of the KV selection kernels this CPU supports."""
    from lamina import _core

    try:
        _core.kv_simd_isa(request.param)
    except ValueError:
        pytest.skip(f"{request.param} not available on this CPU")
    yield request.param
    _core.kv_simd_isa("")
