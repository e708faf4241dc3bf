"""What the integration tests share: the framework of a test module (skips when it is not
installed, fails under LAMINA_REQUIRE_INTEGRATIONS=1, which CI sets), a memory on the hashing
embedder, and the Python examples of docs/guides/integrations.md."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import lamina

DOCS = Path(__file__).resolve().parents[2] / "docs" / "guides" / "integrations.md"


def need(module: str) -> ModuleType:
    """Import ``module`` (a framework): skip the test module without it, unless
    LAMINA_REQUIRE_INTEGRATIONS=1, where its absence fails the run."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("LAMINA_REQUIRE_INTEGRATIONS") == "1":
            pytest.fail(
                f"LAMINA_REQUIRE_INTEGRATIONS=1 but {module} does not import ({e}): pip install '.[integrations]'",
                pytrace=False,
            )
        pytest.skip(f"needs {module} (pip install '.[integrations]')", allow_module_level=True)


def doc_examples(tag: str) -> list[str]:
    """The ```python blocks of docs/guides/integrations.md that follow a ``<!-- example: tag -->`` line."""
    text = DOCS.read_text(encoding="utf-8")
    return re.findall(r"<!-- example: " + re.escape(tag) + r" -->\s*```python\n(.*?)```", text, flags=re.S)


def memory_fixture() -> Callable[..., Iterator[lamina.Memory]]:
    """A test module's ``memory`` fixture (``memory = memory_fixture()``): a fresh memory on the
    hashing embedder per test. (Not in a conftest.py: tests import names from the root conftest
    as ``conftest``, which a second conftest module would shadow.)"""

    @pytest.fixture
    def memory(tmp_path: Path) -> Iterator[lamina.Memory]:
        m = lamina.Memory(tmp_path / "memory.db", embedder="hashing")
        yield m
        m.close()

    return memory
