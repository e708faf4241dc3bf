"""Generation on the packaged model: greedy and seeded sampling, stop strings, the token budget,
streaming, and a lamina.kv press applied to the real cache (memory actually freed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lamina.kv
import lamina.model as lm

CONTEXT = (
    "Maria keeps her spare house key under the blue flower pot next to the garage door. "
    "Her neighbour Tom waters the garden on Tuesdays and Fridays while she travels. "
) * 6


def test_greedy_answer_is_coherent(model: Any) -> None:
    g = model.generate("What is the capital of France? Answer in one short sentence.", max_tokens=24)
    assert isinstance(g, lm.Generation)
    assert "Paris" in g.text
    assert g.finish_reason == "eos" and len(g.tokens) == len(g.logprobs) <= 24
    assert all(lp <= 0.0 for lp in g.logprobs)
    assert model.detokenize(g.tokens) == g.text
    assert g.kept_fraction == 1.0 and g.kv_bytes > 0


def test_sampling_is_seeded(model: Any) -> None:
    kw: dict[str, Any] = dict(max_tokens=12, temperature=1.0, top_p=0.95)
    a = model.generate("Tell me a word.", seed=7, **kw)
    b = model.generate("Tell me a word.", seed=7, **kw)
    assert a.tokens == b.tokens
    outs = {tuple(model.generate("Tell me a word.", seed=s, **kw).tokens) for s in range(4)}
    assert len(outs) > 1


def test_max_tokens_and_stop_strings(model: Any) -> None:
    g = model.generate("Count from 1 to 20, separated by commas.", max_tokens=5)
    assert g.finish_reason == "length" and len(g.tokens) == 5
    s = model.generate("Count from 1 to 20, separated by commas.", max_tokens=60, stop=["5"])
    assert s.finish_reason == "stop" and "5" not in s.text and s.text


def test_streaming_pieces_make_the_text(model: Any) -> None:
    pieces: list[str] = []
    g = model.generate("Name three colours.", max_tokens=20, on_text=pieces.append)
    assert "".join(pieces) == g.text and len(pieces) > 1


@pytest.mark.parametrize("press", ["snapkv", "streaming", "adakv", "h2o"])
def test_press_frees_memory_query_agnostic(model: Any, press: str) -> None:
    full = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=3)
    half = model.generate(CONTEXT, question="Where is the spare key?", max_tokens=3, press=press, compression=0.5)
    assert half.prompt_tokens == full.prompt_tokens
    # the context is compressed before the question is appended: about half the entries stay
    assert 0.45 < half.kept_fraction < 0.6
    assert half.kv_bytes < 0.7 * full.kv_bytes


def test_press_instance_query_aware(model: Any) -> None:
    g = model.generate(CONTEXT + "\nWhere is the spare key?", max_tokens=16, press=lamina.kv.SnapKV(), compression=0.25)
    assert 0.7 < g.kept_fraction < 0.85
    assert g.text


def test_generate_bad_arguments(model: Any) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        model.generate("hi", max_tokens=0)
    with pytest.raises(ValueError, match="compression"):
        model.generate("hi", compression=1.0, press="snapkv")
    with pytest.raises(ValueError, match="temperature"):
        model.generate("hi", temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        model.generate("hi", top_p=0.0, temperature=1.0)
    with pytest.raises(ValueError, match="unknown KV method"):
        model.generate("hi", press="nope", compression=0.5)
    with pytest.raises(ValueError, match="non-empty"):
        model.generate("   ")
    with pytest.raises(ValueError, match="non-empty"):
        model.generate("context", question="")
    with pytest.raises(ValueError, match="stop strings"):
        model.generate("hi", stop=[""])
    with pytest.raises(ValueError, match="context"):
        model.generate("hi", max_tokens=model.config.context_length)


def test_sampler_top_p_keeps_the_nucleus() -> None:
    logits = np.log(np.array([0.6, 0.3, 0.05, 0.05], dtype=np.float32))
    s = lm.Sampler(temperature=1.0, top_p=0.8, seed=0)
    seen = {s.sample(logits)[0] for _ in range(200)}
    assert seen == {0, 1}
