"""``lamina.llm``: what the memory asks of language models, and the models it can ask.

* :mod:`~lamina.llm.extract` — the protocols the memory depends on (:class:`Summarizer` ψ,
  :class:`FactExtractor` 𝒜, :class:`Fact`, :class:`Turn`) and their rule-based defaults;
* :mod:`~lamina.llm.openai_chat` — the :class:`LLM` protocol, an OpenAI-compatible client
  (:class:`OpenAIChat`, stdlib HTTP only) and the LLM-backed ψ / 𝒜 with fallbacks;
* :mod:`~lamina.llm.local_chat` — :class:`LocalChat`, the protocol on the local GGUF runtime
  (:mod:`lamina.model`), imported when first used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .extract import Fact, FactExtractor, Summarizer, Turn
from .openai_chat import LLM, LLMFactExtractor, LLMSummarizer, OpenAIChat

if TYPE_CHECKING:
    from .local_chat import LocalChat


def __getattr__(name: str) -> Any:
    """``LocalChat`` loads the model runtime's modules when first used."""
    if name == "LocalChat":
        from .local_chat import LocalChat

        return LocalChat
    raise AttributeError(f"module 'lamina.llm' has no attribute {name!r}")


__all__ = [
    "Fact",
    "FactExtractor",
    "Summarizer",
    "Turn",
    "LLM",
    "LLMFactExtractor",
    "LLMSummarizer",
    "OpenAIChat",
    "LocalChat",
]
