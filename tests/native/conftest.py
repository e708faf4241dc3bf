from __future__ import annotations

import pytest


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
