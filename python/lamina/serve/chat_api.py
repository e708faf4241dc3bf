"""An OpenAI-compatible chat endpoint on lamina's local model (``lamina model serve``).

``POST /v1/chat/completions`` and ``GET /v1/models`` in the OpenAI wire format, answered by
:class:`lamina.LocalChat` (the packaged SmolLM2-135M-Instruct unless ``--model PATH``), so any
OpenAI-compatible client — :class:`lamina.OpenAIChat` for summaries and facts, the agent side's
:class:`lamina.agent.OpenAIToolChat`, other frameworks — can run against a model on this
machine with no network. Requests with ``tools`` are answered through
:class:`lamina.agent.PromptedToolChat` (the tool list in the system message; a reply that
parses as a call comes back as ``tool_calls``): a small model has no native function calling.
One request at a time reaches the model (its forward already uses every worker thread); the
others wait. Not implemented: streaming (``stream: true`` is refused with 400), ``n > 1``,
log-probs.
"""

from __future__ import annotations

import hmac
import threading
import time
import uuid
from typing import Any, Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..agent.tool_chat import PromptedToolChat
from ..llm.local_chat import LocalChat
from ..llm.openai_chat import LLMError

__all__ = ["create_chat_app"]


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Req(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[_Msg] = Field(min_length=1)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1, le=32_768)
    max_completion_tokens: int | None = Field(None, ge=1, le=32_768)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    stream: bool = False
    n: int = Field(1, ge=1, le=1)


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


def create_chat_app(chat: LocalChat, *, model_name: str, api_key: str | None = None) -> FastAPI:
    """The endpoint's FastAPI app.

    Parameters
    ----------
    chat : lamina.LocalChat
        The model (loaded on the first request unless it already is).
    model_name : str
        The id ``/v1/models`` lists and every response names (requests may name any model:
        there is one).
    api_key : str, optional
        When given, requests must carry ``Authorization: Bearer <api_key>`` (401 otherwise).
    """
    app = FastAPI(title="lamina local chat", version="1", docs_url="/docs")
    lock = threading.Lock()

    def _auth(request: Request) -> None:
        if api_key is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {api_key}".encode()):
            raise HTTPException(401, "missing or wrong API key (Authorization: Bearer ...)")

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, e: HTTPException) -> JSONResponse:  # the OpenAI error shape
        return JSONResponse({"error": {"message": str(e.detail), "type": "invalid_request_error"}}, e.status_code)

    @app.get("/v1/models")
    def models(request: Request) -> dict[str, Any]:
        _auth(request)
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "lamina"}]}

    @app.post("/v1/chat/completions")
    def completions(req: _Req, request: Request) -> dict[str, Any]:
        _auth(request)
        if req.stream:
            raise HTTPException(400, "stream=true is not supported by this endpoint")
        max_tokens = req.max_completion_tokens or req.max_tokens or 256
        with lock:
            try:
                if req.tools:
                    reply = PromptedToolChat(chat, max_tokens=max_tokens).chat(
                        [m.model_dump(exclude_none=True) | {"content": _text(m.content)} for m in req.messages],
                        tools=req.tools,
                    )
                    content, calls = reply.content, reply.tool_calls
                else:
                    msgs = [
                        {"role": "system" if m.role == "developer" else ("user" if m.role == "tool" else m.role),
                         "content": _text(m.content)}
                        for m in req.messages
                    ]  # fmt: skip
                    content, calls = chat.complete(msgs, temperature=req.temperature, max_tokens=max_tokens), ()
            except (ValueError, LLMError) as e:
                raise HTTPException(400, str(e)) from None
        message: dict[str, Any] = {"role": "assistant", "content": (content or None) if calls else content}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        }

    return app
