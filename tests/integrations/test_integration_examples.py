"""The Python examples of docs/guides/integrations.md: one per framework, and each runs as written
with its framework required (tests/docs runs every block of the docs too, in page order)."""

from __future__ import annotations

from pathlib import Path

import pytest
from integkit import doc_examples, need

# the example's tag in docs/guides/integrations.md -> the framework module it needs
FRAMEWORKS = {
    "autogen": "autogen_core",
    "langchain": "langchain_core",
    "langgraph": "langgraph.store.base",
    "llamaindex": "llama_index.core.memory",
    "openai-agents": "agents",
}


@pytest.mark.parametrize("tag", sorted(FRAMEWORKS))
def test_docs_have_one_example_per_framework(tag: str) -> None:
    assert len(doc_examples(tag)) == 1


@pytest.mark.parametrize(("tag", "code"), [(t, c) for t in sorted(FRAMEWORKS) for c in doc_examples(t)])
def test_docs_example_runs(tag: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need(FRAMEWORKS[tag])
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/guides/integrations.md", "exec"), {"__name__": "__main__"})
