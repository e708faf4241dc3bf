"""OpenAI-compatible client against a local stub server; JSON validation and fallbacks."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from lamina import Memory, MemoryConfig, OpenAIChat
from lamina.llm.extract import Turn
from lamina.llm.openai_chat import LLMError, LLMFactExtractor, LLMSummarizer

REPLIES: list[Any] = []  # queue of (status, body) the stub returns in order
SEEN: list[dict[str, Any]] = []


class _Stub(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", "0"))
        SEEN.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(self.rfile.read(n))}
        )
        status, body = REPLIES.pop(0) if REPLIES else (500, "no reply queued")
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = HTTPServer(("127.0.0.1", 0), _Stub)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _chat(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


TURNS = [
    Turn("D1:1", "Alice", "I moved to Lisbon last month.", 1.7e9),
    Turn("D1:2", "Bob", "Cool, I drive a Volvo.", 1.7e9),
]


def test_client_roundtrip_and_errors(server: str) -> None:
    c = OpenAIChat(base_url=server, model="stub-model", api_key="k123", timeout=5)
    REPLIES[:] = [(200, _chat("hello"))]
    SEEN.clear()
    assert c.complete([{"role": "user", "content": "hi"}]) == "hello"
    assert SEEN[0]["path"] == "/v1/chat/completions" and SEEN[0]["auth"] == "Bearer k123"
    assert SEEN[0]["body"]["model"] == "stub-model"
    REPLIES[:] = [(503, "busy")]
    with pytest.raises(LLMError, match="503"):
        c.complete([{"role": "user", "content": "hi"}])
    REPLIES[:] = [(200, "not json")]
    with pytest.raises(LLMError):
        c.complete([{"role": "user", "content": "hi"}])
    REPLIES[:] = [(200, {"choices": []})]
    with pytest.raises(LLMError):
        c.complete([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError):
        OpenAIChat(base_url=server, model="")


def test_env_configuration(monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    monkeypatch.setenv("LAMINA_LLM_BASE_URL", server)
    monkeypatch.setenv("LAMINA_LLM_MODEL", "env-model")
    c = OpenAIChat()
    assert c.base_url == server and c.model == "env-model"


def test_valid_json_is_used(server: str) -> None:
    c = OpenAIChat(base_url=server, model="m")
    REPLIES[:] = [
        (200, _chat('```json\n{"summary": "Alice moved to Lisbon; Bob drives a Volvo."}\n```')),
        (
            200,
            _chat(
                json.dumps({"facts": [{"subject": "Alice", "predicate": "lives in", "object": "Lisbon", "turn": 0}]})
            ),
        ),
    ]
    assert LLMSummarizer(c).summarize(TURNS, 20) == "Alice moved to Lisbon; Bob drives a Volvo."
    facts = LLMFactExtractor(c).extract(TURNS)
    assert [(f.subject, f.predicate, f.object, f.sources) for f in facts] == [
        ("Alice", "lives_in", "Lisbon", ("D1:1",))
    ]


@pytest.mark.parametrize(
    "bad",
    [
        (200, _chat("I think the summary is...")),  # not JSON
        (200, _chat('{"facts": [{"subject": "Carol", "predicate": "x", "object": "y", "turn": 0}]}')),  # not a speaker
        (200, _chat('{"facts": [{"subject": "Alice", "predicate": "x", "object": "y", "turn": 7}]}')),  # bad provenance
        (200, _chat('{"facts": "none"}')),
        (500, "server error"),
    ],
)
def test_bad_replies_fall_back_and_log(server: str, bad: Any, caplog: pytest.LogCaptureFixture) -> None:
    c = OpenAIChat(base_url=server, model="m", timeout=5)
    REPLIES[:] = [bad, bad]
    with caplog.at_level(logging.WARNING, logger="lamina"):
        ex = LLMFactExtractor(c)
        facts = ex.extract(TURNS)
        s = LLMSummarizer(c).summarize(TURNS, 30)
    # the rule extractor's answer, not the reply's
    assert {(f.subject, f.predicate, f.object) for f in facts} == {
        ("Alice", "lives_in", "Lisbon"),
        ("Bob", "drives", "Volvo"),
    }
    assert "Alice" in s and ex.failures == 1
    assert sum("falls back" in r.message or "using the" in r.message for r in caplog.records) == 2


def test_memory_with_llm_survives_a_dead_server(caplog: pytest.LogCaptureFixture) -> None:
    dead = OpenAIChat(base_url="http://127.0.0.1:9/v1", model="m", timeout=0.5)  # discard port: refused
    with caplog.at_level(logging.WARNING, logger="lamina"):
        m = Memory(embedder="hashing", llm=dead, config=MemoryConfig(working_capacity=2))
        m.add(
            [
                {"speaker": "Alice", "text": "I moved to Lisbon last month."},
                {"speaker": "Bob", "text": "Nice."},
                {"speaker": "Alice", "text": "Yes!"},
            ],
            user_id="u",
            session_id="s",
            timestamp=1.7e9,
        )
        m.end_session(user_id="u", session_id="s")
    assert [f.object for f in m.facts(user_id="u") if f.kind == "fact"] == ["Lisbon"]
    st = m.stats()
    # every ψ and 𝒜 call fell back, and each fallback was logged once: ψ of the two leaves (the
    # overflow's two turns, then the last one) and of the session, 𝒜 of the two batches
    logged = sum("falls back" in r.message or "using the" in r.message for r in caplog.records)
    assert st.kinds == {"turn": 3, "segment": 2, "fact": 1, "profile": 1, "summary": 1}
    assert st.llm_fallbacks == logged == 5
    assert st.llm == repr(dead) and "OpenAIChat" in st.llm
    m.close()
