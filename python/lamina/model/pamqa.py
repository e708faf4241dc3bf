"""PAM-QA at inference: position-agnostic multi-step QA over numbered documents.

He et al.'s PAM-QA (arXiv 2311.09198, "Never Lost in the Middle") trains a reader to restate
the question, name the document that holds the answer, then answer from it. Without training,
the same format is a prompt mode:

* the question stands before **and** after the documents (whatever the gold position, the
  question is near it at one end), the documents numbered ``Document [1]`` … ``[n]``;
* step 1: the assistant's reply opens with ``The answer is in Document [`` and the model
  writes the number (parsed; a number outside 1 … n counts as none);
* step 2: the reply goes on with ``<k>]. Answer:`` — the parsed index written back in its
  canonical form — and the model writes the answer, conditioned on its own choice.

Both steps share one KV cache: step 1 runs on a clone of the prefilled prompt, step 2
continues the prompt with the canonical index (no second prefill of the documents).
:func:`pamqa_response` is the reply in the same format, for training data
(``lamina pamqa build``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidInput
from .runtime import Model

__all__ = [
    "INDEX_PREFIX",
    "PamqaAnswer",
    "pamqa_prompt",
    "pamqa_response",
    "parse_index",
    "answer_pamqa",
]

_HEAD = "Answer the question using the documents below. Only one document holds the answer."
_TAIL = "First give the number of the document that holds the answer, then the answer in a few words."
#: The opening of the reply: the model writes the document number after it.
INDEX_PREFIX = "The answer is in Document ["
_INT = re.compile(r"\d+")


def _check(question: str, documents: Sequence[str]) -> None:
    if not isinstance(question, str) or not question.strip():
        raise InvalidInput("question must be non-empty text")
    if isinstance(documents, str) or not documents or not all(isinstance(d, str) for d in documents):
        raise InvalidInput("documents must be a non-empty sequence of str")


def pamqa_prompt(question: str, documents: Sequence[str]) -> str:
    """The user message: the question, the numbered documents, the question again and the
    two-step instruction.

    Raises
    ------
    InvalidInput
        An empty question or no documents.
    """
    _check(question, documents)
    body = "\n\n".join(f"Document [{i + 1}] {d}" for i, d in enumerate(documents))
    return f"{_HEAD}\n\nQuestion: {question}\n\n{body}\n\nQuestion: {question}\n{_TAIL}"


def pamqa_response(index: int, answer: str) -> str:
    """The reply in PAM-QA's format: the 0-based ``index`` written 1-based, then the answer."""
    if index < 0:
        raise InvalidInput(f"index must be >= 0, got {index}")
    return f"{INDEX_PREFIX}{index + 1}]. Answer: {answer}"


def parse_index(text: str, n_documents: int) -> int | None:
    """The 0-based document index of the first number in ``text``; None when there is none or
    it is outside 1 … n_documents."""
    m = _INT.search(text)
    if m is None:
        return None
    k = int(m.group(0))
    return k - 1 if 1 <= k <= n_documents else None


@dataclass(frozen=True)
class PamqaAnswer:
    """The two steps of a PAM-QA reply.

    Attributes
    ----------
    index : int or None
        The document the model named (0-based), None when it named none of them.
    index_text : str
        What the model wrote after ``Document [`` (step 1, raw).
    answer : str
        Step 2's answer (first line, stripped).
    text : str
        The whole reply, as the model's context holds it.
    """

    index: int | None
    index_text: str
    answer: str
    text: str


def answer_pamqa(model: Model, question: str, documents: Sequence[str], *, max_tokens: int = 24) -> PamqaAnswer:
    """Answer ``question`` from ``documents`` in two steps (document index, then answer).

    Parameters
    ----------
    model : Model
    question : str
    documents : sequence of str
    max_tokens : int
        Budget of the answer (step 2).

    Returns
    -------
    PamqaAnswer

    Raises
    ------
    InvalidInput
        An empty question, no documents, max_tokens < 1, or a prompt beyond the context.
    """
    _check(question, documents)
    if int(max_tokens) < 1:
        raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
    ids = model.tokenize(model.chat_prompt(pamqa_prompt(question, documents)))
    ids += model.tokenizer.encode(INDEX_PREFIX, add_bos=False)
    cache = model.new_cache()
    pre = model.prefill(ids, cache)
    step1 = model.continue_from(cache.clone(), pre.logits, max_tokens=4, stop=["]"])
    index = parse_index(step1.text, len(documents))
    canon = f"{index + 1}]. Answer:" if index is not None else f"{step1.text.strip() or '?'}]. Answer:"
    step2 = model.continue_from(
        cache, pre.logits, suffix=model.tokenizer.encode(canon, add_bos=False), max_tokens=int(max_tokens), stop=["\n"]
    )
    answer = step2.text.strip()
    return PamqaAnswer(index, step1.text, answer, f"{INDEX_PREFIX}{canon} {answer}")
