"""A deterministic RULER-style long-context suite for ``lamina eval kv``.

Six tasks after RULER (Hsieh et al., arXiv 2404.06654), generated from a seed, each prompt
sized to a target number of tokens of the model under test:

* ``passkey``: a 5-digit pass key hidden in repeated filler ("The grass is green. ...").
* ``niah_single``: one "special magic number" for a key, in varied filler sentences.
* ``niah_multikey``: the same, among 3 distractor needles with other keys.
* ``niah_multivalue``: 4 magic numbers for one key; all must be returned.
* ``variable_tracking``: a chain ``VAR A = 12345. ... VAR B = VAR A. ...``; every variable
  holding the value must be named.
* ``kv_uuid``: a JSON object of UUID keys and values; the value of one key.

Score (RULER's ``string_match_all``): the fraction of the reference strings found in the
output, case-insensitive; 1 or 0 for single-answer tasks.

The filler is built from fixed word lists here, so nothing is downloaded; the needles land
at seeded depths in [0.05, 0.95] of the haystack.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["TASKS", "KVSample", "make_sample", "make_suite", "score_output"]

TASKS: tuple[str, ...] = (
    "passkey",
    "niah_single",
    "niah_multikey",
    "niah_multivalue",
    "variable_tracking",
    "kv_uuid",
)

_NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_ADJ = "quiet old bright small distant heavy gentle busy narrow ancient sunny hidden wooden silver".split()
_NOUN = "river garden teacher market window village engine letter harbor forest lantern bridge orchard".split()
_VERB = "watched crossed painted followed repaired described visited carried noticed opened".split()
_PLACE = "the hill|the station|the old mill|the square|the coast|the library|the valley|the farm".split("|")
_KEYS = (
    "amber-falcon calm-otter lucky-meadow brave-comet silent-harbor swift-maple frozen-ember "
    "golden-tide hollow-pine velvet-storm bold-lynx misty-garnet"
).split()


@dataclass(frozen=True)
class KVSample:
    """One prompt of the suite.

    Attributes
    ----------
    task : str
    length : int
        Target prompt length in tokens (context and question).
    seed : int
    context : str
        The instruction and the haystack (prefilled and compressed alone when query-agnostic).
    question : str
        Asked after the context.
    answers : tuple of str
        Reference strings; the score is the fraction found in the output.
    max_tokens : int
        Generation budget that fits every answer.
    answer_prefix : str
        The start of the assistant's reply, fed after the chat template's assistant header
        (RULER's answer prefix: the model continues it with the answer instead of first
        restating the question).
    """

    task: str
    length: int
    seed: int
    context: str
    question: str
    answers: tuple[str, ...]
    max_tokens: int
    answer_prefix: str = ""


def _sentence(rng: random.Random) -> str:
    return (
        f"The {rng.choice(_ADJ)} {rng.choice(_NOUN)} {rng.choice(_VERB)} the "
        f"{rng.choice(_ADJ)} {rng.choice(_NOUN)} near {rng.choice(_PLACE)}. "
    )


def _number(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


def _insert(fill: list[str], needles: Sequence[str], rng: random.Random) -> str:
    """The filler sentences with each needle at a seeded depth (needles keep their order)."""
    out = list(fill)
    depths = sorted(rng.uniform(0.05, 0.95) for _ in needles)
    for i, (d, n) in enumerate(zip(depths, needles, strict=True)):
        out.insert(min(len(out), int(d * len(fill)) + i), n + " ")
    return "".join(out)


def _build(task: str, n_fill: int, seed: int) -> tuple[str, str, tuple[str, ...], int, str]:
    """(context, question, answers, max_tokens, answer_prefix) with ``n_fill`` filler units."""
    rng = random.Random(f"{task}:{seed}")
    if task == "passkey":
        key = _number(rng, 5)
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        ctx = _insert([_NOISE] * n_fill, [needle], rng)
        head = "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it.\n\n"
        return head + ctx, "What is the pass key?", (key,), 10, "The pass key is"
    if task == "variable_tracking":
        value = _number(rng, 5)
        names: list[str] = []
        while len(names) < 8:  # five-letter names (RULER's): no chance match in the output's prose
            n = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
            if n not in names:
                names.append(n)
        hops = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, 5)]
        decoys = [f"VAR {names[5 + i]} = {_number(rng, 5)}." for i in range(3)]
        order = hops[:]
        for d in decoys:
            order.insert(rng.randrange(len(order) + 1), d)
        ctx = _insert([_NOISE] * n_fill, order, rng)
        head = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
        q = f"Find all variables that are assigned the value {value} in the text above."
        pre = (
            f"According to the chain(s) of variable assignment in the text above, 5 variables are assigned "
            f"the value {value}, they are:"
        )
        return head + ctx, q, tuple(names[:5]), 30, pre
    if task == "kv_uuid":
        pairs = []
        ur = random.Random(f"uuid:{task}:{seed}")
        for _ in range(max(2, n_fill)):
            k = str(uuid.UUID(int=ur.getrandbits(128), version=4))
            v = str(uuid.UUID(int=ur.getrandbits(128), version=4))
            pairs.append((k, v))
        target = pairs[rng.randrange(len(pairs))]
        body = "{\n" + ",\n".join(f' "{k}": "{v}"' for k, v in pairs) + "\n}"
        head = "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"
        q = f'What is the value associated with the key "{target[0]}"?'
        return head + body, q, (target[1],), 40, "The value associated with the specified key is:"
    fill = [_sentence(rng) for _ in range(n_fill)]
    keys = rng.sample(_KEYS, 4)
    head = "Some special magic numbers are hidden within the following text. Make sure to memorize them.\n\n"
    if task == "niah_single":
        v = _number(rng, 7)
        ctx = _insert(fill, [f"One of the special magic numbers for {keys[0]} is: {v}."], rng)
        q = f"What is the special magic number for {keys[0]} mentioned in the provided text?"
        return head + ctx, q, (v,), 14, f"The special magic number for {keys[0]} mentioned in the provided text is"
    if task == "niah_multikey":
        vals = [_number(rng, 7) for _ in keys]
        needles = [f"One of the special magic numbers for {k} is: {v}." for k, v in zip(keys, vals, strict=True)]
        rng.shuffle(needles)
        ctx = _insert(fill, needles, rng)
        q = f"What is the special magic number for {keys[0]} mentioned in the provided text?"
        pre = f"The special magic number for {keys[0]} mentioned in the provided text is"
        return head + ctx, q, (vals[0],), 14, pre
    if task == "niah_multivalue":
        vals = [_number(rng, 7) for _ in range(4)]
        ctx = _insert(fill, [f"One of the special magic numbers for {keys[0]} is: {v}." for v in vals], rng)
        q = f"What are all the special magic numbers for {keys[0]} mentioned in the provided text?"
        pre = f"The special magic numbers for {keys[0]} mentioned in the provided text are:"
        return head + ctx, q, tuple(vals), 48, pre
    raise ValueError(f"unknown task {task!r}; valid: {', '.join(TASKS)}")


def make_sample(task: str, *, length: int, seed: int, count_tokens: Callable[[str], int]) -> KVSample:
    """One prompt of ``task`` whose context + question is about ``length`` tokens.

    Parameters
    ----------
    task : str
        One of :data:`TASKS`.
    length : int
        Target tokens (>= 128), counted by ``count_tokens`` on context + question.
    seed : int
    count_tokens : callable
        Token count of a text under the model's tokenizer.

    Returns
    -------
    KVSample
        Its context + question is at most ``length`` tokens (within one filler unit of it).

    Raises
    ------
    ValueError
        Unknown task or a length below 128.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; valid: {', '.join(TASKS)}")
    if int(length) < 128:
        raise ValueError(f"length must be >= 128 tokens, got {length}")
    n = 8
    for _ in range(6):  # grow the filler proportionally until the prompt reaches the target
        ctx, q, ans, mt, pre = _build(task, n, seed)
        t = count_tokens(ctx + "\n\n" + q + "\n" + pre)
        if t >= length:
            break
        n = max(n + 1, int(n * length / max(t, 1) * 1.02))
    # then shrink by single units until it fits
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ctx, q, ans, mt, pre = _build(task, mid, seed)
        if count_tokens(ctx + "\n\n" + q + "\n" + pre) <= length:
            lo = mid
        else:
            hi = mid - 1
    ctx, q, ans, mt, pre = _build(task, lo, seed)
    return KVSample(
        task=task,
        length=int(length),
        seed=int(seed),
        context=ctx,
        question=q,
        answers=ans,
        max_tokens=mt,
        answer_prefix=pre,
    )


def make_suite(
    *,
    tasks: Sequence[str],
    lengths: Sequence[int],
    samples: int,
    seed: int,
    count_tokens: Callable[[str], int],
) -> list[KVSample]:
    """Every task × length × sample (sample i uses seed ``seed + i``), in that order."""
    return [
        make_sample(t, length=n, seed=seed + i, count_tokens=count_tokens)
        for n in lengths
        for t in tasks
        for i in range(samples)
    ]


def score_output(output: str, answers: Sequence[str]) -> float:
    """Fraction of ``answers`` found in ``output`` (case-insensitive; RULER string_match_all)."""
    if not answers:
        raise ValueError("answers must be non-empty")
    o = output.lower()
    return sum(1.0 for a in answers if a.lower() in o) / len(answers)
