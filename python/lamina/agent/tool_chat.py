"""Tool-calling chat models: the :class:`ChatModel` protocol and two implementations.

* :class:`OpenAIToolChat` — an OpenAI-compatible ``/chat/completions`` endpoint with native
  ``tools`` (function calling), stdlib HTTP only, configured like :class:`lamina.llm.openai_chat.OpenAIChat`.
* :class:`PromptedToolChat` — any plain :class:`lamina.llm.openai_chat.LLM` (e.g. :class:`lamina.LocalChat`)
  driven by a prompt that lists the tools and asks for one JSON object per reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..llm.openai_chat import LLM, LLMError, OpenAIChat

__all__ = ["ToolCall", "ChatReply", "ChatModel", "OpenAIToolChat", "PromptedToolChat"]


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by the model: ``name`` and its raw JSON ``arguments``."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatReply:
    """A model turn: assistant ``content`` (may be empty) and the tool calls it asked for."""

    content: str
    tool_calls: tuple[ToolCall, ...] = field(default=())


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that may call tools (schemas in the OpenAI function-calling format)."""

    def chat(self, messages: list[dict[str, Any]], *, tools: Sequence[dict[str, Any]]) -> ChatReply:
        """The model's next turn for ``messages`` given the ``tools`` it may call."""
        ...


class OpenAIToolChat:
    """An OpenAI-compatible chat endpoint with native tool calls.

    Parameters
    ----------
    base_url, model, api_key, timeout :
        As :class:`lamina.llm.openai_chat.OpenAIChat` (the same environment variables).
    temperature : float
    max_tokens : int
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        temperature: float = 0.0,
        max_tokens: int = 512,
    ) -> None:
        self._cfg = OpenAIChat(base_url=base_url, model=model, api_key=api_key, timeout=timeout)
        self.model = self._cfg.model
        self.base_url = self._cfg.base_url
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)

    def __repr__(self) -> str:
        return f"OpenAIToolChat(base_url={self.base_url!r}, model={self.model!r})"

    def chat(self, messages: list[dict[str, Any]], *, tools: Sequence[dict[str, Any]]) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        payload = self._cfg.post(body)
        try:
            msg = payload["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as e:
            raise LLMError("response has no choices[0].message") from e
        calls = []
        for i, c in enumerate(msg.get("tool_calls") or []):
            try:
                fn = c["function"]
                args = fn.get("arguments") or "{}"
                calls.append(ToolCall(id=str(c.get("id") or f"call_{i}"), name=str(fn["name"]), arguments=str(args)))
            except (KeyError, TypeError, AttributeError) as e:
                raise LLMError("malformed tool call in the response") from e
        return ChatReply(content=msg.get("content") or "", tool_calls=tuple(calls))


_PROMPT = (
    "You can call these functions (JSON schemas):\n{tools}\n\n"
    'Reply with ONE JSON object only: {{"function": NAME, "arguments": {{...}}}} to call a function, '
    'or {{"reply": TEXT}} to answer the user.'
)


class PromptedToolChat:
    """Tool calls by prompting a plain :class:`lamina.llm.openai_chat.LLM` (no native function calling).

    The tool list is appended to the system message; a reply that parses as
    ``{"function": ..., "arguments": {...}}`` becomes a :class:`ToolCall`, anything else is the
    assistant's text (so a small model that ignores the format still answers).
    Tool results and earlier tool calls are rendered as plain ``user`` / ``assistant`` text.
    """

    def __init__(self, llm: LLM, *, max_tokens: int = 256) -> None:
        self.llm = llm
        self.max_tokens = int(max_tokens)
        self._n = 0

    def _render(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
        spec = json.dumps([t["function"] for t in tools], separators=(",", ":"))
        out: list[dict[str, str]] = []
        for m in messages:
            role = str(m.get("role", "user"))
            text = str(m.get("content") or "")
            if role == "tool":
                out.append({"role": "user", "content": f"[function {m.get('name', '')} returned] {text}"})
                continue
            if role == "assistant" and m.get("tool_calls"):
                fn = m["tool_calls"][0]["function"]
                text = json.dumps({"function": fn["name"], "arguments": json.loads(fn["arguments"] or "{}")})
            out.append({"role": role if role in ("system", "user", "assistant") else "user", "content": text})
        instr = _PROMPT.format(tools=spec)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + instr}
        else:
            out.insert(0, {"role": "system", "content": instr})
        return out

    def chat(self, messages: list[dict[str, Any]], *, tools: Sequence[dict[str, Any]]) -> ChatReply:
        text = self.llm.complete(self._render(messages, tools), temperature=0.0, max_tokens=self.max_tokens)
        obj = _first_json(text)
        if isinstance(obj, dict) and isinstance(obj.get("function"), str):
            args = obj.get("arguments", {})
            self._n += 1
            return ChatReply(
                content="",
                tool_calls=(ToolCall(id=f"call_{self._n}", name=obj["function"], arguments=json.dumps(args)),),
            )
        if isinstance(obj, dict) and isinstance(obj.get("reply"), str):
            return ChatReply(content=obj["reply"])
        return ChatReply(content=text.strip())


def _first_json(text: str) -> Any:
    """The first JSON object in ``text`` (tolerating prose or a code fence around it), or None."""
    start = text.find("{")
    dec = json.JSONDecoder()
    while start != -1:
        try:
            obj, _ = dec.raw_decode(text[start:])
            return obj
        except ValueError:
            start = text.find("{", start + 1)
    return None
