"""Text generation on the native runtime: prefill, optional KV press, then decode.

Two press modes (kvpress's): with a ``question`` the context is prefilled and compressed alone
and the question appended afterwards (query-agnostic); without one the press sees the whole
prompt, whose last tokens form the observation window (query-aware).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import _core
from ..errors import InvalidInput
from ..kv import KVMethod
from .press import ACCUMULATED, apply_press, observation_window
from .sampling import Sampler

__all__ = ["Generation", "PromptParts", "run_generation"]


@dataclass(frozen=True)
class Generation:
    """The result of :meth:`lamina.model.Model.generate`.

    Attributes
    ----------
    text : str
        The generated text (stop string and end-of-sequence token excluded).
    tokens : list of int
        The generated token ids (the end-of-sequence token excluded).
    logprobs : list of float
        log p(token) under the model (softmax of the raw logits, not of the temperature-scaled
        ones), one per entry of ``tokens``.
    kv_bytes : int
        Bytes of KV storage the cache held at the end (keys, values and positions; after
        compression this is what remained allocated, not a mask).
    prompt_tokens : int
        Tokens of the rendered prompt (context and question).
    finish_reason : str
        ``"eos"`` (the model ended its turn), ``"stop"`` (a stop string) or ``"length"``
        (``max_tokens`` reached).
    kept_fraction : float
        Entries kept over entries seen at the end (1.0 without a press).
    """

    text: str
    tokens: list[int]
    logprobs: list[float]
    kv_bytes: int
    prompt_tokens: int
    finish_reason: str
    kept_fraction: float


@dataclass(frozen=True)
class PromptParts:
    """Token ids of the prompt: ``context`` is prefilled (and compressed) first, ``suffix``
    (the question and the assistant header; may be empty) after the press."""

    context: list[int]
    suffix: list[int]


def run_generation(
    native: _core.LlamaModel,
    cache: _core.KVCache,
    parts: PromptParts,
    *,
    decode: Callable[[Sequence[int]], str],
    eos_ids: frozenset[int],
    max_tokens: int,
    sampler: Sampler,
    press: KVMethod | None,
    compression: float,
    stop: Sequence[str],
    on_text: Callable[[str], None] | None,
    context_length: int,
    threads: int,
    q8_decode: bool = True,
) -> Generation:
    """Generate into an empty ``cache`` (see :meth:`lamina.model.Model.generate`)."""
    n_prompt = len(parts.context) + len(parts.suffix)
    if n_prompt + max_tokens > context_length:
        raise InvalidInput(
            f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds the model's context of {context_length}"
        )
    ctx = np.asarray(parts.context, dtype=np.int32)
    pressing = press is not None and compression > 0.0
    window = observation_window(press, len(ctx), compression) if pressing and press is not None else 0
    accumulate = pressing and press is not None and press.name in ACCUMULATED
    logits, attention, accumulated = native.forward(ctx, cache, "last", threads, window, q8_decode, accumulate)
    if pressing and press is not None:
        apply_press(cache, accumulated if accumulate else attention, press, compression, threads=threads)
    if parts.suffix:
        logits, _, _ = native.forward(np.asarray(parts.suffix, dtype=np.int32), cache, "last", threads, 0, q8_decode)
    assert logits is not None
    tokens: list[int] = []
    logprobs: list[float] = []
    text = ""
    finish = "length"
    emitted = 0
    for _ in range(max_tokens):
        tok, lp = sampler.sample(logits)
        if tok in eos_ids:
            finish = "eos"
            break
        tokens.append(tok)
        logprobs.append(lp)
        text = decode(tokens)
        hit = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        if hit >= 0:
            text = text[:hit]
            finish = "stop"
            break
        if on_text is not None:
            # hold back what could still be the start of a stop string (and partial UTF-8)
            hold = max((len(s) - 1 for s in stop), default=0)
            safe = len(text) - hold
            if text.endswith("\ufffd"):
                safe = min(safe, len(text) - 1)
            if safe > emitted:
                on_text(text[emitted:safe])
                emitted = safe
        if len(tokens) == max_tokens:
            break
        logits, _, _ = native.forward(np.asarray([tok], dtype=np.int32), cache, "last", threads, 0, q8_decode)
        assert logits is not None
    if on_text is not None and len(text) > emitted:
        on_text(text[emitted:])
    kept = int(cache.lengths().sum())
    seen = cache.n_seen * cache.n_layers * cache.n_kv_heads
    return Generation(
        text=text,
        tokens=tokens,
        logprobs=logprobs,
        kv_bytes=int(cache.nbytes),
        prompt_tokens=n_prompt,
        finish_reason=finish,
        kept_fraction=kept / seen if seen else 1.0,
    )
