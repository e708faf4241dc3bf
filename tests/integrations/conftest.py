"""The integration tests' memory: a fresh one on the hashing embedder per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import lamina


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[lamina.Memory]:
    m = lamina.Memory(tmp_path / "memory.db", embedder="hashing")
    yield m
    m.close()
