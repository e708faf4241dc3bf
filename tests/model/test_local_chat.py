"""``lamina.LocalChat``: the ``LLM`` protocol on the packaged SmolLM2-135M-Instruct."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import lamina
from lamina.errors import InvalidInput
from lamina.llm.openai_chat import LLM, LLMError
from lamina.model.chat_template import CHATML, render_messages

CONVERSATION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


def _greedy_by_hand(model: Any, prompt: str, max_tokens: int) -> str:
    """Greedy decoding with ``Model.forward`` directly: prefill, then argmax one token at a time."""
    cache = model.new_cache()
    logits, _ = model.forward(model.tokenize(prompt), cache)
    out: list[int] = []
    for _ in range(max_tokens):
        tok = int(np.argmax(logits))
        if tok in model.eos_ids:
            break
        out.append(tok)
        logits, _ = model.forward([tok], cache)
    return str(model.detokenize(out))


def test_is_an_llm_and_exported() -> None:
    assert lamina.LocalChat is lamina.llm.local_chat.LocalChat
    assert isinstance(lamina.LocalChat(), LLM)
    assert "not loaded" in repr(lamina.LocalChat())


def test_one_user_message_equals_model_generate(model: Any) -> None:
    chat = lamina.LocalChat(model)
    q = "Name three primary colours."
    got = chat.complete([{"role": "user", "content": q}], max_tokens=20)
    want = model.generate(q, max_tokens=20)
    assert got == want.text and got.strip()
    assert "<|im_end|>" not in got


def test_conversation_renders_every_message_through_the_template(model: Any) -> None:
    expected = (
        "<|im_start|>system\nYou answer in one short sentence.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd of Italy?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert model.chat_messages_prompt(CONVERSATION) == expected
    # without a system message SmolLM2's template inserts its own
    no_sys = model.chat_messages_prompt(CONVERSATION[1:])
    assert no_sys.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert no_sys.endswith(expected[expected.index("<|im_start|>user") :])
    # one user message renders as the single-message path does
    assert model.chat_messages_prompt([{"role": "user", "content": "hi"}]) == model.chat_prompt("hi")


def test_conversation_greedy_equals_decoding_the_rendered_prompt(model: Any) -> None:
    got = lamina.LocalChat(model).complete(CONVERSATION, max_tokens=12)
    assert got == _greedy_by_hand(model, model.chat_messages_prompt(CONVERSATION), 12)
    assert got.strip()


def test_render_messages_chatml_and_errors() -> None:
    text = render_messages(None, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert text == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>assistant\n"
    assert render_messages(CHATML, [{"role": "user", "content": "a"}], add_generation_prompt=False).endswith(
        "<|im_end|>\n"
    )
    for bad in ([], [{"role": "tool", "content": "x"}], [{"role": "user"}], ["user"]):
        with pytest.raises(InvalidInput):
            render_messages(None, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="does not render"):
        render_messages("{% for %}", [{"role": "user", "content": "a"}])


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hello",
        {"role": "user", "content": "hi"},
        [["user", "hi"]],
        [{"role": "tool", "content": "hi"}],
        [{"role": "User", "content": "hi"}],
        [{"content": "hi"}],
        [{"role": "user"}],
        [{"role": "user", "content": 3}],
        [{"role": 1, "content": "hi"}],
        [{"role": "user", "content": "hi"}, None],
    ],
)
def test_bad_messages_raise(messages: Any) -> None:
    chat = lamina.LocalChat()  # validation happens before any load
    with pytest.raises(ValueError, match="messages"):
        chat.complete(messages)
    assert "not loaded" in repr(chat)


def test_bad_arguments_raise(model: Any) -> None:
    chat = lamina.LocalChat(model)
    ok = [{"role": "user", "content": "hi"}]
    for kw in ({"max_tokens": 0}, {"max_tokens": 2.5}, {"max_tokens": True}, {"temperature": -0.1}):
        with pytest.raises(ValueError):
            chat.complete(ok, **kw)
    with pytest.raises(ValueError, match="either"):
        lamina.LocalChat(model, path=model.path)
    with pytest.raises(ValueError, match="either"):
        lamina.LocalChat(model, threads=2)
    with pytest.raises(ValueError, match="stop"):
        lamina.LocalChat(model, stop=[""])


def test_prompt_longer_than_the_context_is_an_llm_error(model: Any) -> None:
    n_ctx = model.config.context_length
    content = "apple " * (n_ctx + 100)
    n_prompt = len(model.tokenize(model.chat_messages_prompt([{"role": "user", "content": content}])))
    assert n_prompt > n_ctx
    with pytest.raises(LLMError, match=rf"{n_prompt} tokens.*{n_ctx}"):
        lamina.LocalChat(model).complete([{"role": "user", "content": content}], max_tokens=4)


def test_stop_strings_and_seeded_sampling(model: Any) -> None:
    msgs = [{"role": "user", "content": "Count from one to ten in words, separated by commas."}]
    full = lamina.LocalChat(model).complete(msgs, max_tokens=24)
    assert len(full) > 8
    stop = full[len(full) // 2 : len(full) // 2 + 2]  # a piece of the greedy reply itself
    cut = lamina.LocalChat(model, stop=[stop]).complete(msgs, max_tokens=24)
    assert cut == full[: full.index(stop)]
    a = lamina.LocalChat(model, seed=7).complete(msgs, temperature=1.0, max_tokens=8)
    b = lamina.LocalChat(model, seed=7).complete(msgs, temperature=1.0, max_tokens=8)
    assert a == b


def test_lazy_load_happens_once_under_concurrency(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import lamina.model.loading as loading

    calls: list[tuple[Any, int]] = []

    def fake_load(path: Any = None, *, threads: int = 0, q8_decode: bool = True) -> Any:
        calls.append((path, threads))
        time.sleep(0.05)  # widen the race window
        return model

    monkeypatch.setattr(loading, "load", fake_load)
    chat = lamina.LocalChat(path=model.path, threads=2)
    msgs = [{"role": "user", "content": "Say hello."}]
    start = threading.Barrier(4)  # all four calls race for the first load

    def worker(_: int) -> str:
        start.wait()
        return chat.complete(msgs, max_tokens=6)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(worker, range(4)))  # re-raises a worker's exception
    assert calls == [(model.path, 2)]
    assert chat.model is model
    assert len(results) == 4 and len(set(results)) == 1
    assert results[0] == model.generate("Say hello.", max_tokens=6).text


def test_memory_end_session_runs_on_the_local_model(model: Any) -> None:
    """The whole consolidation loop on the 135M model. Its JSON is often invalid or off-schema
    (then the rule-based ψ / 𝒜 answer, by contract); what is guaranteed is that the session
    completes, a summary exists, every fact's subject is a speaker, and each LLM failure is
    counted. ``stop="\\n\\n"`` bounds the run: without it the small model repeats its JSON up to
    ``max_tokens`` (800 for facts)."""

    class Counting(lamina.LocalChat):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.prompts: list[str] = []

        def complete(self, messages: list[dict[str, str]], *, temperature: float = 0.0, max_tokens: int = 512) -> str:
            self.prompts.append(messages[-1]["content"])
            return super().complete(messages, temperature=temperature, max_tokens=max_tokens)

    llm = Counting(model, stop=["\n\n"])
    mem = lamina.Memory(None, embedder="hashing", llm=llm)
    turns = [
        ("Alice", "Hi, I just moved to Lisbon last month."),
        ("Bob", "Nice! What do you do there?"),
        ("Alice", "I work as a nurse at the city hospital."),
        ("Bob", "My dog Rex loves the beach there."),
        ("Alice", "I have a cat named Tom."),
    ]
    mem.add([{"speaker": s, "text": t} for s, t in turns], user_id="u", session_id="s1")
    report = mem.end_session(user_id="u", session_id="s1")
    assert report.segments >= 1
    stats = mem.stats(user_id="u")
    assert stats.kinds.get("summary") == 1
    assert stats.llm is not None and "LocalChat" in stats.llm
    assert any(p.startswith("Summarise") for p in llm.prompts)
    assert any(p.startswith("Extract durable") for p in llm.prompts)
    assert 0 <= stats.llm_fallbacks <= len(llm.prompts)
    ctx = mem.context("Where does Alice live?", user_id="u")
    facts = [it for it in ctx.items if it.kind == "fact"]
    assert all(f.subject in {"Alice", "Bob"} for f in facts)
    mem.close()
