"""Text embedders sharing one protocol: ``.embed(texts) -> (n, dim) float32 unit rows``, ``.dim``."""

from __future__ import annotations

from .minilm import MiniLM, find_minilm_dir

__all__ = ["MiniLM", "find_minilm_dir"]
