"""PAM-QA at inference on the packaged model: the prompt (question before and after the
numbered documents), index parsing, and the two-step answer."""

from __future__ import annotations

from typing import Any

import pytest

from lamina.errors import InvalidInput
from lamina.model.pamqa import INDEX_PREFIX, answer_pamqa, pamqa_prompt, pamqa_response, parse_index

DOCS = [
    "The bakery on Elm Street opens at seven and sells rye bread.",
    "Lena's cat is called Pepper and she is three years old.",
    "The train to Lyon leaves from platform nine every morning.",
]
QUESTION = "What is the name of Lena's cat?"


def test_prompt_repeats_the_question_around_numbered_documents() -> None:
    p = pamqa_prompt(QUESTION, DOCS)
    assert p.count(f"Question: {QUESTION}") == 2
    first, last = p.index(QUESTION), p.rindex(QUESTION)
    for i, d in enumerate(DOCS):
        at = p.index(f"Document [{i + 1}] {d}")
        assert first < at < last
    assert pamqa_response(1, "Pepper") == "The answer is in Document [2]. Answer: Pepper"


def test_parse_index() -> None:
    assert parse_index("2", 3) == 1 and parse_index(" 3]. x", 3) == 2
    assert parse_index("4", 3) is None and parse_index("0", 3) is None and parse_index("none", 3) is None


def test_bad_input() -> None:
    with pytest.raises(InvalidInput, match="question"):
        pamqa_prompt(" ", DOCS)
    with pytest.raises(InvalidInput, match="documents"):
        pamqa_prompt(QUESTION, [])
    with pytest.raises(InvalidInput, match="documents"):
        pamqa_prompt(QUESTION, "one string")
    with pytest.raises(InvalidInput, match="index"):
        pamqa_response(-1, "x")


def test_two_steps_on_the_model(model: Any) -> None:
    a = answer_pamqa(model, QUESTION, DOCS, max_tokens=12)
    assert a.text.startswith(INDEX_PREFIX)
    assert a.index is None or 0 <= a.index < len(DOCS)
    if a.index is not None:  # step 2 is conditioned on the canonical index
        assert a.text.startswith(f"{INDEX_PREFIX}{a.index + 1}]. Answer:")
        assert a.index == parse_index(a.index_text, len(DOCS))
    assert "\n" not in a.answer and a.text.endswith(a.answer)
    again = answer_pamqa(model, QUESTION, DOCS, max_tokens=12)
    assert again == a  # greedy
    with pytest.raises(InvalidInput, match="max_tokens"):
        answer_pamqa(model, QUESTION, DOCS, max_tokens=0)
