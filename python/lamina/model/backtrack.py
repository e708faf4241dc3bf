"""Step-wise chain-of-thought generation with KV-cache rollback, and backtracking on it.

A chain of thought is written one step per line, each line opened by ``Thought n:`` (the
BIG-Bench Mistake format), as the assistant's reply to one question. :class:`ChainSession`
keeps the chain in one KV cache and remembers where every step ends, so going back to the end
of step k−1 is :meth:`lamina._core.KVCache.truncate` — no recompute of the prompt or of the
steps kept.

:func:`backtrack` is Tyen et al.'s correction given a mistake location (arXiv 2311.08516): the
chain is rolled back to the end of step k−1, step k is sampled ``candidates`` times at
temperature T (8 at T = 1 by default), candidates equal to the original step are filtered out,
the one of highest mean token log-probability is kept, and the chain is completed greedily
(T = 0). The candidates decode in one batch: each on its own clone of the rolled-back cache
(the step header fed once, before the clones), all of them advanced together by one
:meth:`Model.forward_batch` per token (the weights read once per token for every candidate
still going; a candidate leaves the batch when its step ends). Each candidate has its own
random stream (seeded from ``seed`` and its index), so the one-after-another path
(``batched=False``, also what the CUDA forward and Ms-PoE / channel-scaled models use) draws
the same candidates from the same logits.

Where the mistake is comes from outside (a localiser: :class:`lamina.reasoning.MistakeLocator`,
the exact checkers, a step check, or gold annotations); this module only needs the index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput
from .native import NativeCache
from .runtime import Model
from .sampling import Sampler

__all__ = [
    "STEP_HEADER",
    "INSTRUCTION",
    "Step",
    "Candidate",
    "ChainSession",
    "BacktrackResult",
    "backtrack",
    "correct_at",
    "chain_answer",
]

#: The opening of step n (1-based) in the assistant's reply. A step's line is the header, a
#: space and the text; generation starts right after the colon, so the space comes from the
#: model (" Let" is one token: a header ending in its own space token would be a tokenization
#: the forced steps never show, and the model answers it with a newline).
STEP_HEADER = "Thought {n}:"
#: Appended to the question in the user message.
INSTRUCTION = (
    "Think step by step. Write one thought per line, each line starting with 'Thought N:', "
    "and end with 'So the answer is ...'."
)
_ANSWER = re.compile(r"answer is[:\s]*(.+?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Step:
    """One generated step.

    Attributes
    ----------
    text : str
        The step without its ``Thought n:`` header and without the newline that ended it.
    tokens : list of int
        Generated token ids (the header excluded; the token holding the newline included).
    mean_logprob : float
        Mean log p(token) under the model (raw logits) over ``tokens``; 0.0 when empty.
    finished : bool
        The model ended its turn (end-of-sequence) instead of a newline.
    """

    text: str
    tokens: list[int]
    mean_logprob: float
    finished: bool


@dataclass(frozen=True)
class Candidate:
    """A resampled step k: its text, mean log-probability and whether it repeats the original."""

    text: str
    mean_logprob: float
    same_as_original: bool


def chain_answer(steps: Sequence[str]) -> str | None:
    """The answer a chain states: the text after the last "answer is" (a leading "=" or ":"
    and a trailing period dropped), or None when no step states one."""
    for s in reversed(steps):
        at = s.lower().rfind("answer is")
        if at >= 0:
            m = _ANSWER.search(s[at:].strip())
            if m:
                return m.group(1).strip().lstrip("=:").strip().rstrip(".").strip() or None
    return None


class ChainSession:
    """A chain of thought in one KV cache, step by step, with rollback to any step boundary.

    Parameters
    ----------
    model : Model
    question : str
        The question; the user message is the question and :data:`INSTRUCTION`.
    demonstration : (str, sequence of str), optional
        One solved example (question, steps) given before as a previous user/assistant turn.
    max_step_tokens : int
        A step ends at a newline, at the end of the turn, or after this many tokens.

    Attributes
    ----------
    steps : list of str
        The chain so far.
    cache : lamina._core.KVCache
        Holds the prompt and every step so far (each with its header and newline).

    Notes
    -----
    Not thread-safe (one cache, mutated by every call).
    """

    def __init__(
        self,
        model: Model,
        question: str,
        *,
        demonstration: tuple[str, Sequence[str]] | None = None,
        max_step_tokens: int = 96,
    ) -> None:
        if not isinstance(question, str) or not question.strip():
            raise InvalidInput("question must be non-empty text")
        if int(max_step_tokens) < 1:
            raise InvalidInput(f"max_step_tokens must be >= 1, got {max_step_tokens}")
        self.model = model
        self.max_step_tokens = int(max_step_tokens)
        messages: list[dict[str, str]] = []
        if demonstration is not None:
            dq, ds = demonstration
            messages.append({"role": "user", "content": f"{dq}\n\n{INSTRUCTION}"})
            messages.append({"role": "assistant", "content": "\n".join(_line(i, s) for i, s in enumerate(ds))})
        messages.append({"role": "user", "content": f"{question}\n\n{INSTRUCTION}"})
        ids = model.tokenize(model.chat_messages_prompt(messages))
        self.cache: NativeCache = model.new_cache()
        model.forward(ids, self.cache, logits="none")
        self.prompt_tokens = len(ids)
        self.steps: list[str] = []
        self._ends: list[int] = [int(self.cache.n_seen)]  # cache length at the end of step i-1

    def fork(self) -> ChainSession:
        """An independent copy (the cache cloned, the chain and its step boundaries copied)."""
        other = object.__new__(ChainSession)
        other.model, other.max_step_tokens, other.prompt_tokens = self.model, self.max_step_tokens, self.prompt_tokens
        other.cache = self.cache.clone()
        other.steps = list(self.steps)
        other._ends = list(self._ends)
        return other

    # ---- the chain -----------------------------------------------------------------------------
    def boundary(self, k: int) -> int:
        """Tokens in the cache at the end of step k−1 (k = 0: the end of the prompt)."""
        if not 0 <= k <= len(self.steps):
            raise InvalidInput(f"step index must be in [0, {len(self.steps)}], got {k}")
        return self._ends[k]

    def append(self, text: str) -> None:
        """Teacher-force a given step (header, text, newline) into the cache."""
        if "\n" in text:
            raise InvalidInput("a step is one line (no newline)")
        ids = self.model.tokenizer.encode(_line(len(self.steps), text) + "\n", add_bos=False)
        self._room(len(ids))
        self.model.forward(ids, self.cache, logits="none")
        self.steps.append(text)
        self._ends.append(int(self.cache.n_seen))

    def extend(self, steps: Sequence[str]) -> None:
        """Teacher-force several steps (one forward per step)."""
        for s in steps:
            self.append(s)

    def rollback(self, k: int) -> int:
        """Go back to the end of step k−1 (keep steps 0 … k−1): a truncation of the cache, no
        recompute. Returns the number of tokens dropped."""
        n = self.boundary(k)
        dropped = int(self.cache.n_seen) - n
        self.cache.truncate(n)
        del self.steps[k:]
        del self._ends[k + 1 :]
        return dropped

    # ---- generation ----------------------------------------------------------------------------
    def _room(self, n: int) -> None:
        if int(self.cache.n_seen) + n > self.model.config.context_length:
            raise InvalidInput(f"the chain would exceed the model's context of {self.model.config.context_length}")

    def _header_logits(self, cache: NativeCache) -> npt.NDArray[np.float32]:
        ids = self.model.tokenizer.encode(STEP_HEADER.format(n=len(self.steps) + 1), add_bos=False)
        self._room(len(ids) + self.max_step_tokens)
        out, _ = self.model.forward(ids, cache, logits="last")
        assert out is not None
        return out

    def _sample(self, cache: NativeCache, logits: npt.NDArray[np.float32], sampler: Sampler) -> tuple[Step, int]:
        """Sample one step on ``cache`` (its header already fed); returns the step and the
        token still to feed to close it (-1: none, the turn ended)."""
        draft = _Draft(self)
        while True:
            tok, lp = sampler.sample(logits)
            if draft.push(tok, lp):
                return draft.result()
            out, _ = self.model.forward([tok], cache, logits="last")
            assert out is not None
            logits = out

    def _sample_batch(
        self, caches: Sequence[NativeCache], logits: npt.NDArray[np.float32], samplers: Sequence[Sampler]
    ) -> list[tuple[Step, int]]:
        """:meth:`_sample` for every (cache, sampler) pair at once: each draws from its own
        logits, and the candidates not done yet advance together (one batched decode step)."""
        drafts = [_Draft(self) for _ in caches]
        rows = [logits] * len(caches)
        going = list(range(len(caches)))
        while going:
            feed: list[int] = []
            toks: list[int] = []
            for i in going:
                tok, lp = samplers[i].sample(rows[i])
                if not drafts[i].push(tok, lp):
                    feed.append(i)
                    toks.append(tok)
            if feed:
                out = self.model.forward_batch(toks, [caches[i] for i in feed])
                for j, i in enumerate(feed):
                    rows[i] = out[j]
            going = feed
        return [d.result() for d in drafts]

    def _commit(self, cache: NativeCache, step: Step, pending: int) -> None:
        if pending >= 0:
            self.model.forward([pending], cache, logits="none")
            if "\n" not in self.model.tokenizer.decode([pending]):  # cut at max_step_tokens
                self.model.forward(self.model.tokenizer.encode("\n", add_bos=False), cache, logits="none")
        self.cache = cache
        self.steps.append(step.text)
        self._ends.append(int(cache.n_seen))

    def generate_step(self, sampler: Sampler | None = None) -> Step:
        """Generate the next step (greedy by default) and add it to the chain."""
        s = sampler if sampler is not None else Sampler(temperature=0.0)
        step, pending = self._sample(self.cache, self._header_logits(self.cache), s)
        self._commit(self.cache, step, pending)
        return step

    def complete(self, *, max_steps: int = 24) -> bool:
        """Generate greedy steps until one states the answer, the model ends its turn, a step
        repeats the one before it (greedy decoding would loop), or the chain holds
        ``max_steps`` steps. Returns True when an answer was stated."""
        while len(self.steps) < max_steps:
            before = self.steps[-1] if self.steps else None
            step = self.generate_step()
            if chain_answer([step.text]) is not None:
                return True
            if step.finished or _norm(step.text) == _norm(before or "\0"):
                break
        return chain_answer(self.steps) is not None

    def resample(
        self,
        original: str,
        *,
        candidates: int = 8,
        temperature: float = 1.0,
        seed: int | None = None,
        batched: bool = True,
    ) -> tuple[list[Candidate], int | None]:
        """Sample the next step ``candidates`` times, drop those equal to ``original``, keep the
        one of highest mean log-probability and add it to the chain.

        Parameters
        ----------
        original : str
            The step being replaced.
        candidates : int
            How many to sample (>= 1), each on its own clone of the cache.
        temperature : float
        seed : int, optional
            Candidate i samples with its own generator, seeded from (seed, i).
        batched : bool
            Decode the candidates together (:meth:`Model.forward_batch`) where the model can
            (:attr:`Model.batched_decode`); False, or a model that cannot, samples them one
            after another. Both draw the same candidates from the same logits.

        Returns
        -------
        (list of Candidate, int or None)
            Every candidate, and the index of the one kept (None when all repeated the
            original: then ``original`` itself is added).
        """
        if int(candidates) < 1:
            raise InvalidInput(f"candidates must be >= 1, got {candidates}")
        n = int(candidates)
        seeds = [int(c.generate_state(1)[0]) for c in np.random.SeedSequence(seed).spawn(n)]
        samplers = [Sampler(temperature=float(temperature), seed=x) for x in seeds]
        base = self.cache
        logits = self._header_logits(base)  # the header once, shared by every candidate
        clones = [base.clone() for _ in range(n)]
        if batched and self.model.batched_decode:
            drawn = self._sample_batch(clones, logits, samplers)
        else:
            drawn = [self._sample(c, logits, sp) for c, sp in zip(clones, samplers, strict=True)]
        out: list[Candidate] = []
        best: tuple[float, int, NativeCache, Step, int] | None = None
        for i, (clone, (step, pending)) in enumerate(zip(clones, drawn, strict=True)):
            same = _norm(step.text) == _norm(original)
            out.append(Candidate(step.text, step.mean_logprob, same))
            if not same and step.text and (best is None or step.mean_logprob > best[0]):
                best = (step.mean_logprob, i, clone, step, pending)
        if best is None:
            base.truncate(self._ends[-1])
            self.append(original)
            return out, None
        _, i, clone, step, pending = best
        self._commit(clone, step, pending)
        return out, i


class _Draft:
    """A step being sampled: :meth:`push` takes each drawn token until the step ends (at a
    newline, the end of the turn, or ``max_step_tokens``)."""

    def __init__(self, session: ChainSession) -> None:
        self._decode = session.model.tokenizer.decode
        self._eos = session.model.eos_ids
        self._max = session.max_step_tokens
        self.tokens: list[int] = []
        self.lps: list[float] = []
        self._done: tuple[Step, int] | None = None

    def push(self, tok: int, lp: float) -> bool:
        """Add a drawn token; True when the step is complete (see :meth:`result`)."""
        if tok in self._eos:
            text = self._decode(self.tokens)
            mean = float(np.mean(self.lps)) if self.lps else 0.0
            self._done = Step(text.strip(), self.tokens, mean, True), -1
            return True
        self.tokens.append(tok)
        self.lps.append(lp)
        text = self._decode(self.tokens)
        if "\n" in text or len(self.tokens) == self._max:
            self._done = Step(text.split("\n", 1)[0].strip(), self.tokens, float(np.mean(self.lps)), False), tok
            return True
        return False

    def result(self) -> tuple[Step, int]:
        """The step and the token still to feed to close it (-1: none, the turn ended)."""
        assert self._done is not None
        return self._done


def _line(i: int, text: str) -> str:
    return STEP_HEADER.format(n=i + 1) + " " + text


def _norm(s: str) -> str:
    return " ".join(s.split()).lower()


@dataclass(frozen=True)
class BacktrackResult:
    """What :func:`backtrack` did to one chain.

    Attributes
    ----------
    mistake : int or None
        The step rolled back to (None: the chain was kept as it was).
    steps : list of str
        The chain after backtracking (the original when ``mistake`` is None).
    answer : str or None
        :func:`chain_answer` of ``steps``.
    candidates : list of Candidate
        The samples for step ``mistake`` (empty when none were drawn).
    chosen : int or None
        Index of the kept candidate (None: none drawn, or all repeated the original).
    rolled_back_tokens : int
        Cache entries per head dropped by the rollback (kept: everything before step k).
    """

    mistake: int | None
    steps: list[str]
    answer: str | None
    candidates: list[Candidate]
    chosen: int | None
    rolled_back_tokens: int


def backtrack(
    model: Model,
    question: str,
    steps: Sequence[str],
    mistake: int | None,
    *,
    candidates: int = 8,
    temperature: float = 1.0,
    seed: int | None = 0,
    demonstration: tuple[str, Sequence[str]] | None = None,
    max_step_tokens: int = 96,
    max_steps: int | None = None,
) -> BacktrackResult:
    """Correct a chain at a located mistake: roll back to the end of step k−1, resample step k,
    complete greedily.

    Parameters
    ----------
    model : Model
    question : str
    steps : sequence of str
        The chain (one line per step, no ``Thought n:`` headers).
    mistake : int or None
        0-based index k of the first wrong step (a localiser's answer); None keeps the chain.
    candidates, temperature, seed
        Samples for step k (8 at T = 1: Tyen et al.'s setting).
    demonstration : (str, sequence of str), optional
        A solved example shown first (see :class:`ChainSession`).
    max_step_tokens : int
    max_steps : int, optional
        Steps the completed chain may hold (default: the original's length + 4).

    Returns
    -------
    BacktrackResult

    Raises
    ------
    InvalidInput
        An empty question or chain, a step with a newline, or ``mistake`` outside the chain.
    """
    if isinstance(steps, str) or not steps or not all(isinstance(s, str) for s in steps):
        raise InvalidInput("steps must be a non-empty sequence of str")
    if mistake is None:
        return BacktrackResult(None, list(steps), chain_answer(steps), [], None, 0)
    if not 0 <= mistake < len(steps):
        raise InvalidInput(f"mistake must be a step index in [0, {len(steps)}), got {mistake}")
    session = ChainSession(model, question, demonstration=demonstration, max_step_tokens=max_step_tokens)
    session.extend(steps)  # the chain as written, as if the model had generated it
    return correct_at(session, mistake, candidates=candidates, temperature=temperature, seed=seed, max_steps=max_steps)


def correct_at(
    session: ChainSession,
    mistake: int,
    *,
    candidates: int = 8,
    temperature: float = 1.0,
    seed: int | None = 0,
    max_steps: int | None = None,
) -> BacktrackResult:
    """:func:`backtrack` on a chain already in ``session`` (which it changes): roll back to the
    end of step ``mistake`` − 1, resample that step, complete greedily.

    Raises
    ------
    InvalidInput
        ``mistake`` not a step of the session's chain.
    """
    steps = list(session.steps)
    if not 0 <= mistake < len(steps):
        raise InvalidInput(f"mistake must be a step index in [0, {len(steps)}), got {mistake}")
    dropped = session.rollback(mistake)
    cands, chosen = session.resample(steps[mistake], candidates=candidates, temperature=temperature, seed=seed)
    limit = len(steps) + 4 if max_steps is None else int(max_steps)
    if chain_answer(session.steps[-1:]) is None:
        session.complete(max_steps=limit)
    return BacktrackResult(mistake, list(session.steps), chain_answer(session.steps), cands, chosen, dropped)
