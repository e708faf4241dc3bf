"""Text generation on the native runtime: prefill, optional KV press, then decode.

Two press modes (kvpress's): with a ``question`` the context is prefilled and compressed alone
and the question appended afterwards (query-agnostic); without one the press sees the whole
prompt, whose last tokens form the observation window (query-aware).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput
from ..kv import KVMethod
from .native import NativeCache, NativeModel
from .press import CACHE_SCORED, apply_press, prefill_for_press, press_to_budget
from .sampling import Sampler

__all__ = [
    "Decoding",
    "Generation",
    "PromptParts",
    "KVBudget",
    "Prefill",
    "check_limits",
    "run_generation",
    "continue_generation",
]


@dataclass(frozen=True, eq=False)
class Prefill:
    """What :meth:`lamina.model.Model.prefill` returns.

    Attributes
    ----------
    logits : ndarray, float32, shape (vocab_size,)
        Logits of the last token.
    attention : ndarray, float32, shape (L, H, w, S), or None
        Softmax rows of the last w queries over the S entries held after the call.
    accumulated : ndarray, float32, shape (L, H, S), or None
        Every query's softmax row summed per entry.
    """

    logits: npt.NDArray[np.float32]
    attention: npt.NDArray[np.float32] | None
    accumulated: npt.NDArray[np.float32] | None


@dataclass(frozen=True)
class KVBudget:
    """A fixed KV budget kept while the cache grows.

    Attributes
    ----------
    tokens : int
        Entries held per (layer, KV head) at most, after every press.
    prefill_chunk : int or None
        Prefill the context in chunks of this many tokens, pressing after each chunk that
        takes a head past ``tokens`` (None: one prefill, then one press).
    press_every : int
        During decoding, when a head would pass ``tokens`` it is pressed down to
        ``tokens - press_every`` (at least half of ``tokens``), so a press runs about every
        ``press_every`` generated tokens.
    """

    tokens: int
    prefill_chunk: int | None = None
    press_every: int = 32


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
    peak_kv_bytes : int
        The most bytes the cache held after any forward of this generation (prefill chunks,
        the question, every decoded token), before the press that followed it; with a fixed
        ``kv_budget`` this is what the budget bounds.
    """

    text: str
    tokens: list[int]
    logprobs: list[float]
    kv_bytes: int
    prompt_tokens: int
    finish_reason: str
    kept_fraction: float
    peak_kv_bytes: int = 0


@dataclass(frozen=True)
class PromptParts:
    """Token ids of the prompt: ``context`` is prefilled (and compressed) first, ``suffix``
    (the question and the assistant header; may be empty) after the press."""

    context: list[int]
    suffix: list[int]


@dataclass(frozen=True)
class Decoding:
    """How a generation draws tokens and turns them into text.

    Attributes
    ----------
    decode : callable
        Token ids -> text (the model's tokenizer).
    eos_ids : frozenset of int
        Tokens that end the reply.
    max_tokens : int
        Budget of generated tokens (>= 1).
    sampler : Sampler
    stop : sequence of str
        The reply ends before the first of these strings.
    on_text : callable or None
        Streaming: called with each new piece of text.
    threads : int
        Worker threads of the forward (0: lamina's default).
    q8_decode : bool
        Decode steps with int8-quantised activations.
    """

    decode: Callable[[Sequence[int]], str]
    eos_ids: frozenset[int]
    max_tokens: int
    sampler: Sampler
    stop: Sequence[str]
    on_text: Callable[[str], None] | None
    threads: int
    q8_decode: bool = True


def check_limits(max_tokens: int, stop: str | Sequence[str]) -> list[str]:
    """The stop strings of a generation (one string becomes a list of one), checked with its
    token budget.

    Raises
    ------
    InvalidInput
        ``max_tokens`` < 1 or an empty stop string.
    """
    if int(max_tokens) < 1:
        raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
    stops = [stop] if isinstance(stop, str) else list(stop)
    if any(not s for s in stops):
        raise InvalidInput("stop strings must be non-empty")
    return stops


def run_generation(
    native: NativeModel,
    cache: NativeCache,
    parts: PromptParts,
    dec: Decoding,
    *,
    press: KVMethod | None,
    compression: float,
    context_length: int,
    budget: KVBudget | None = None,
    instruction: Sequence[int] = (),
) -> Generation:
    """Generate into an empty ``cache`` (see :meth:`lamina.model.Model.generate`);
    ``instruction``: the token ids of the reconstruction instruction (KVzip's pass)."""
    if budget is not None:
        return _run_budgeted(
            native,
            cache,
            parts,
            dec,
            press=press,
            budget=budget,
            context_length=context_length,
            instruction=instruction,
        )
    n_prompt = _prompt_tokens(parts, dec.max_tokens, context_length)
    threads, q8_decode = dec.threads, dec.q8_decode
    ctx = np.asarray(parts.context, dtype=np.int32)
    logits, scores = prefill_for_press(
        native,
        cache,
        ctx,
        press,
        compression,
        instruction=instruction,
        context_length=context_length,
        threads=threads,
        q8_decode=q8_decode,
    )
    peak = int(cache.nbytes)
    if press is not None and compression > 0.0:
        apply_press(cache, scores, press, compression, threads=threads)
    if parts.suffix:
        last, _, _ = native.forward(np.asarray(parts.suffix, dtype=np.int32), cache, "last", threads, 0, q8_decode)
        assert last is not None
        logits = last
        peak = max(peak, int(cache.nbytes))
    return _decode(native, cache, logits, dec, n_prompt=n_prompt, before_step=None, peak=peak)


def continue_generation(
    native: NativeModel, cache: NativeCache, logits: npt.NDArray[np.float32], dec: Decoding, *, n_prompt: int
) -> Generation:
    """Decode from ``cache`` whose last token produced ``logits`` (no press)."""
    return _decode(native, cache, logits, dec, n_prompt=n_prompt, before_step=None, peak=int(cache.nbytes))


def _prompt_tokens(parts: PromptParts, max_tokens: int, context_length: int) -> int:
    """Tokens of the prompt; raises InvalidInput when they and ``max_tokens`` pass the context."""
    n_prompt = len(parts.context) + len(parts.suffix)
    if n_prompt + max_tokens > context_length:
        raise InvalidInput(
            f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds the model's context of {context_length}"
        )
    return n_prompt


def _decode(
    native: NativeModel,
    cache: NativeCache,
    logits: npt.NDArray[np.float32],
    dec: Decoding,
    *,
    n_prompt: int,
    before_step: Callable[[], None] | None,
    peak: int,
) -> Generation:
    decode, eos_ids, max_tokens, sampler = dec.decode, dec.eos_ids, dec.max_tokens, dec.sampler
    stop, on_text, threads, q8_decode = dec.stop, dec.on_text, dec.threads, dec.q8_decode
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
        if before_step is not None:
            before_step()
        nxt, _, _ = native.forward(np.asarray([tok], dtype=np.int32), cache, "last", threads, 0, q8_decode)
        assert nxt is not None
        logits = nxt
        peak = max(peak, int(cache.nbytes))
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
        peak_kv_bytes=max(peak, int(cache.nbytes)),
    )


def _run_budgeted(
    native: NativeModel,
    cache: NativeCache,
    parts: PromptParts,
    dec: Decoding,
    *,
    press: KVMethod | None,
    budget: KVBudget,
    context_length: int,
    instruction: Sequence[int] = (),
) -> Generation:
    """Generation under a fixed KV budget: chunked prefill (press after each chunk), press
    after the context, then decoding that re-presses before a head passes the budget."""
    if press is None:
        raise InvalidInput("kv_budget needs a press (the method that chooses what stays)")
    b = int(budget.tokens)
    if b < 1:
        raise InvalidInput(f"kv_budget must be >= 1 token per KV head, got {budget.tokens}")
    every = int(budget.press_every)
    if every < 1:
        raise InvalidInput(f"press_every must be >= 1, got {budget.press_every}")
    chunk = budget.prefill_chunk
    if chunk is not None and int(chunk) < 1:
        raise InvalidInput(f"prefill_chunk must be >= 1, got {chunk}")
    max_tokens, threads, q8_decode = dec.max_tokens, dec.threads, dec.q8_decode
    n_prompt = _prompt_tokens(parts, max_tokens, context_length)
    cache_scored = press.name in CACHE_SCORED
    ctx = np.asarray(parts.context, dtype=np.int32)
    if cache_scored:
        step = len(ctx) if chunk is None else int(chunk)
        logits = None
        peak = 0
        for start in range(0, len(ctx), step):
            last = start + step >= len(ctx)
            logits, _, _ = native.forward(
                ctx[start : start + step], cache, "last" if last else "none", threads, 0, q8_decode
            )
            peak = max(peak, int(cache.nbytes))
            press_to_budget(cache, press, b)
        if parts.suffix:
            press_to_budget(cache, press, max(b - len(parts.suffix), 1))
    else:
        # an attention-scored method presses once, after the context, leaving room for the
        # question and every generated token, so the cache never passes the budget
        if chunk is not None:
            raise InvalidInput(
                f"chunked prefill needs a method that scores from the cache alone "
                f"({', '.join(sorted(CACHE_SCORED))}); {press.name!r} reads the prefill attention of one pass"
            )
        room = b - len(parts.suffix) - max_tokens
        S = len(ctx)
        if room < 1:
            raise InvalidInput(
                f"kv_budget {b} leaves no room for the question ({len(parts.suffix)} tokens) and max_tokens "
                f"({max_tokens}) with {press.name!r}; raise it or use a cache-scored method "
                f"({', '.join(sorted(CACHE_SCORED))})"
            )
        pressing = room < S
        logits, scores = prefill_for_press(
            native,
            cache,
            ctx,
            press,
            1.0 - room / S if pressing else 0.0,
            instruction=instruction,
            context_length=context_length,
            threads=threads,
            q8_decode=q8_decode,
        )
        peak = int(cache.nbytes)
        if pressing:
            apply_press(cache, scores, press, room, threads=threads)
    # room for the budget allocated once: the question and decoding then never reallocate,
    # so the bytes held stay at the budget (the native growth step would overshoot it)
    cache.reserve(b)
    if parts.suffix:
        logits, _, _ = native.forward(np.asarray(parts.suffix, dtype=np.int32), cache, "last", threads, 0, q8_decode)
        peak = max(peak, int(cache.nbytes))
    assert logits is not None
    low = max(b - every, (b + 1) // 2)

    def before_step() -> None:
        if cache_scored and press is not None and int(cache.lengths().max()) >= b:
            press_to_budget(cache, press, low)
            cache.reserve(b)

    return _decode(native, cache, logits, dec, n_prompt=n_prompt, before_step=before_step, peak=peak)
