"""An OpenAI-compatible chat client (stdlib HTTP only) and LLM-backed ψ / 𝒜 with fallbacks.

The client is configured from arguments or the environment:
``LAMINA_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``; default ``https://api.openai.com/v1``),
``LAMINA_LLM_MODEL`` (or ``OPENAI_MODEL``), ``LAMINA_LLM_API_KEY`` (or ``OPENAI_API_KEY``).

:class:`LLMSummarizer` and :class:`LLMFactExtractor` prompt for JSON, validate it strictly,
and on any failure (network error, HTTP error, timeout, invalid JSON, wrong schema) log a
warning on the ``lamina`` logger and return the embedded default's answer, so a bad reply
never corrupts memory.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .extract import (
    ExtractiveSummarizer,
    Fact,
    FactExtractor,
    RuleFactExtractor,
    Summarizer,
    Turn,
    fact_sentence,
    is_functional,
)

__all__ = ["LLM", "LLMError", "OpenAIChat", "LLMSummarizer", "LLMFactExtractor"]

_log = logging.getLogger("lamina")


class LLMError(RuntimeError):
    """A chat call failed (transport, HTTP status, or malformed response)."""


@runtime_checkable
class LLM(Protocol):
    """A chat model: ``complete(messages) -> str`` (the assistant message content)."""

    def complete(self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int = 512) -> str:
        """The model's reply to chat ``messages`` (``{"role": ..., "content": ...}`` dicts)."""
        ...


class OpenAIChat:
    """Minimal OpenAI-compatible ``/chat/completions`` client over ``urllib``.

    Parameters
    ----------
    base_url, model, api_key : str, optional
        Fall back to the environment (see module docs). ``model`` is required one way or another.
    timeout : float
        Seconds per request.

    Thread safety: thread-safe (no shared mutable state; one HTTP request per call).
    """

    def __init__(
        self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, timeout: float = 30.0
    ) -> None:
        self.base_url = (
            base_url
            or os.environ.get("LAMINA_LLM_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or "https://api.openai.com/v1"
        ).rstrip("/")
        m = model or os.environ.get("LAMINA_LLM_MODEL") or os.environ.get("OPENAI_MODEL")
        if not m:
            raise ValueError("OpenAIChat needs a model: pass model=... or set LAMINA_LLM_MODEL")
        self.model = m
        self._key = api_key or os.environ.get("LAMINA_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"OpenAIChat(base_url={self.base_url!r}, model={self.model!r})"

    def post(self, body: dict[str, Any]) -> Any:
        """POST ``body`` (JSON) to the endpoint's ``/chat/completions``; returns the decoded JSON
        reply. Raises LLMError on an HTTP error, a failed request or a reply that is not JSON."""
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            raise LLMError(f"HTTP {e.code} from {self.base_url}") from e
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise LLMError(f"request to {self.base_url} failed: {e}") from e
        except (ValueError, UnicodeDecodeError) as e:
            raise LLMError("response is not JSON") from e

    def complete(self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int = 512) -> str:
        payload = self.post(
            {"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        )
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise LLMError("response has no choices[0].message.content") from e
        if not isinstance(content, str):
            raise LLMError("choices[0].message.content is not a string")
        return content


def _json_from(text: str) -> Any:
    """Parse JSON from a reply, tolerating a fenced ```json block around it."""
    s = text.strip()
    if s.startswith("```"):
        s = s.split("\n", 1)[1] if "\n" in s else s[3:]
        s = s.rsplit("```", 1)[0]
    return json.loads(s)


def _dialogue(turns: Sequence[Turn]) -> str:
    return "\n".join(f"{t.speaker or 'unknown'}: {t.text}" for t in turns)


class LLMSummarizer:
    """ψ by an LLM (JSON ``{"summary": str}``), falling back to ``fallback`` on any failure."""

    def __init__(self, llm: LLM, fallback: Summarizer | None = None) -> None:
        self.llm = llm
        self.fallback: Summarizer = fallback or ExtractiveSummarizer()
        self.failures = 0

    def summarize(self, turns: Sequence[Turn], max_words: int = 60) -> str:
        prompt = (
            f"Summarise this dialogue excerpt in at most {max_words} words. Keep names, dates, places "
            "and facts; attribute statements to their speaker. Reply with JSON only: "
            '{"summary": "..."}\n\n' + _dialogue(turns)
        )
        try:
            reply = self.llm.complete(
                [{"role": "user", "content": prompt}], temperature=0.0, max_tokens=4 * max_words + 64
            )
            obj = _json_from(reply)
            if not isinstance(obj, dict) or not isinstance(obj.get("summary"), str) or not obj["summary"].strip():
                raise ValueError('expected {"summary": non-empty string}')
            words = obj["summary"].split()
            return " ".join(words[:max_words])
        except Exception as e:  # noqa: BLE001 — any failure falls back, by contract
            self.failures += 1
            _log.warning("lamina: LLM summary failed (%s: %s); using the extractive summary", type(e).__name__, e)
            return self.fallback.summarize(turns, max_words)


class LLMFactExtractor:
    """𝒜 by an LLM (JSON ``{"facts": [{"subject", "predicate", "object", "turn"}]}``).

    ``turn`` is the 0-based index of the turn that states the fact (its provenance). Subjects
    must be speakers of the excerpt; anything else invalidates the reply, which then falls back
    to ``fallback`` (and is logged).
    """

    def __init__(self, llm: LLM, fallback: FactExtractor | None = None) -> None:
        self.llm = llm
        self.fallback: FactExtractor = fallback or RuleFactExtractor()
        self.failures = 0

    def extract(self, turns: Sequence[Turn]) -> list[Fact]:
        if not turns:
            return []
        numbered = "\n".join(f"[{i}] {t.speaker or 'unknown'}: {t.text}" for i, t in enumerate(turns))
        prompt = (
            "Extract durable personal facts stated by the speakers about themselves (where they live, "
            "work, family, pets, preferences, plans). Use snake_case predicates such as lives_in, "
            "works_as, works_at, dog_name, likes. Reply with JSON only: "
            '{"facts": [{"subject": speaker, "predicate": str, "object": str, "turn": index}]}\n\n' + numbered
        )
        try:
            reply = self.llm.complete([{"role": "user", "content": prompt}], temperature=0.0, max_tokens=800)
            obj = _json_from(reply)
            if not isinstance(obj, dict) or not isinstance(obj.get("facts"), list):
                raise ValueError('expected {"facts": [...]}')
            speakers = {t.speaker for t in turns if t.speaker}
            out: list[Fact] = []
            for f in obj["facts"]:
                if not isinstance(f, dict):
                    raise ValueError("each fact must be an object")
                s, p, o, i = f.get("subject"), f.get("predicate"), f.get("object"), f.get("turn")
                if not all(isinstance(v, str) and v.strip() for v in (s, p, o)):
                    raise ValueError("subject, predicate and object must be non-empty strings")
                if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(turns):
                    raise ValueError(f"turn must be an index in [0, {len(turns)})")
                assert isinstance(s, str) and isinstance(p, str) and isinstance(o, str)
                if s not in speakers:
                    raise ValueError(f"subject {s!r} is not a speaker of the excerpt")
                pred = "_".join(p.strip().lower().split())
                t = turns[i]
                out.append(
                    Fact(
                        subject=s,
                        predicate=pred,
                        object=o.strip(),
                        text=fact_sentence(s, pred, o.strip()),
                        sources=(t.source_id,),
                        timestamp=t.timestamp,
                        functional=is_functional(pred),
                    )
                )
            return out
        except Exception as e:  # noqa: BLE001 — any failure falls back, by contract
            self.failures += 1
            _log.warning("lamina: LLM fact extraction failed (%s: %s); using the rule extractor", type(e).__name__, e)
            return self.fallback.extract(turns)
