"""Lost-in-the-middle suites for ``lamina eval position``: the gold item at each position.

Four suites, generated from a seed, each prompt sized to a target number of tokens of the
model under test (``count``: text -> tokens):

* ``uuid``: a JSON object of UUID keys and values (Liu et al. 2023's key-value retrieval);
  the value of the key at the gold index.
* ``numeric``: the same with 8-digit keys and values.
* ``passkey``: a 5-digit pass key in repeated filler, at the gold depth.
* ``locomo``: multi-document QA over LoCoMo development conversations: documents are runs
  of consecutive turns (speaker: text, under the session's date); the gold document holds
  every evidence turn of a ``qa`` question whose evidence lies in one session, the
  distractors come from the other conversations (none can hold the answer). Only turns
  become documents; ``qa`` supplies the question and the gold answer.

For one (suite, length, sample) the items are the same at every position — only the gold
moves (the queried key, the pass key's depth, the gold document's slot) — so a difference
between positions is the position's. Scoring: every gold answer string in the output
(case-insensitive) for the retrieval suites; for ``locomo`` every normalised, stemmed gold
answer token (LoCoMo's official tokens). Accuracies carry Wilson 95 % intervals.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .locomo import Conversation
from .scoring import answer_token_recall, wilson_interval

__all__ = [
    "SUITES",
    "PositionSample",
    "PositionCell",
    "gold_index",
    "make_sample",
    "make_suite",
    "locomo_questions",
    "score_output",
    "summarize",
]

SUITES: tuple[str, ...] = ("uuid", "numeric", "passkey", "locomo")

_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_KV_HEAD = "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"
_PASSKEY_HEAD = (
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it.\n\n"
)
_DOC_HEAD = "Answer the question using the documents below (excerpts of conversations).\n\n"


@dataclass(frozen=True)
class PositionSample:
    """One prompt.

    Attributes
    ----------
    suite : str
    length : int
        Target prompt length in tokens.
    position : float
        Gold position as a fraction of the items, in [0, 1] (0: first, 1: last).
    index : int
        The sample's number within its (suite, length): the same items at every position.
    gold : int
        Index of the gold item among ``n_items`` (key, filler sentence or document).
    n_items : int
    tokens : int
        The prompt's measured length (``count(prompt)``).
    prompt : str
        Instruction, items and question: one user message.
    answer_prefix : str
        The start of the assistant's reply (the model continues it).
    answers : tuple of str
        Gold strings.
    max_tokens : int
        Generation budget that fits the answer.
    question : str
        ``locomo``: the question alone (the PAM-QA mode re-renders the prompt from it).
    documents : tuple of str
        ``locomo``: the documents in prompt order (the gold at ``gold``); empty otherwise.
    """

    suite: str
    length: int
    position: float
    index: int
    gold: int
    n_items: int
    tokens: int
    prompt: str
    answer_prefix: str
    answers: tuple[str, ...]
    max_tokens: int
    question: str = ""
    documents: tuple[str, ...] = ()


def gold_index(position: float, n_items: int) -> int:
    """The item index of a position fraction: round(position · (n_items − 1))."""
    if not 0.0 <= position <= 1.0:
        raise ValueError(f"position must be in [0, 1], got {position}")
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    return int(round(position * (n_items - 1)))


# ---- builders: (items of a sample, n) -> (prompt, answer_prefix, answers, max_tokens) ---------


def _kv_items(rng: random.Random, n: int, numeric: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(out) < n:
        if numeric:
            k, v = str(rng.randrange(10**7, 10**8)), str(rng.randrange(10**7, 10**8))
        else:
            k, v = (
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            )
        if k not in seen:
            seen.add(k)
            out.append((k, v))
    return out


def _kv_prompt(items: list[tuple[str, str]], gold: int) -> tuple[str, str, tuple[str, ...], int]:
    body = json.dumps(dict(items), indent=1)
    key, value = items[gold]
    q = f'Key: "{key}"\nWhat is the value associated with this key?'
    return f"{_KV_HEAD}{body}\n\n{q}", f'The value associated with "{key}" is "', (value,), 40


def _passkey_prompt(key: str, n: int, gold: int) -> tuple[str, str, tuple[str, ...], int]:
    parts = [_FILLER] * n
    parts.insert(gold, f"The pass key is {key}. Remember it. {key} is the pass key. ")
    return f"{_PASSKEY_HEAD}{''.join(parts)}\n\nWhat is the pass key?", "The pass key is", (key,), 10


@dataclass(frozen=True)
class _Question:
    conversation: int
    question: str
    answer: str
    session: int
    turns: tuple[int, int]  # [first, last] turn indices (0-based) of the evidence in the session


def locomo_questions(convs: Sequence[Conversation], *, max_answer_words: int = 6) -> list[_Question]:
    """``qa`` questions whose evidence lies in one session (categories 1–4, a short answer)."""
    out: list[_Question] = []
    for ci, c in enumerate(convs):
        sessions = {s.number: s for s in c.sessions}
        for q in c.questions:
            if q.category == 5 or q.answer is None or not q.evidence:
                continue
            answer = str(q.answer).strip()
            if not answer or len(answer.split()) > max_answer_words:
                continue
            places: list[tuple[int, int]] = []
            for e in q.evidence:
                for s in sessions.values():
                    hit = [i for i, t in enumerate(s.turns) if t.dia_id == e]
                    if hit:
                        places.append((s.number, hit[0]))
            if len(places) != len(q.evidence) or len({p[0] for p in places}) != 1:
                continue
            idx = [p[1] for p in places]
            out.append(_Question(ci, q.question, answer, places[0][0], (min(idx), max(idx))))
    return out


def _turn_block(c: Conversation, session: int, start: int, n_turns: int) -> str:
    s = next(x for x in c.sessions if x.number == session)
    from datetime import datetime, timezone

    date = datetime.fromtimestamp(s.timestamp, tz=timezone.utc).strftime("%d %B %Y")
    lines = [f"{t.speaker}: {t.text}" for t in s.turns[start : start + n_turns]]
    return f"(conversation of {date})\n" + "\n".join(lines)


def _locomo_docs(
    convs: Sequence[Conversation], q: _Question, rng: random.Random, n_docs: int, turns: int
) -> tuple[str, list[str]]:
    """(gold document, n_docs − 1 distractor documents from the other conversations)."""
    c = convs[q.conversation]
    s = next(x for x in c.sessions if x.number == q.session)
    span = q.turns[1] - q.turns[0] + 1
    width = max(turns, span)
    lo = max(0, min(q.turns[0] - (width - span) // 2, len(s.turns) - width))
    gold = _turn_block(c, q.session, lo, width)
    pool = [(ci, x.number, len(x.turns)) for ci, cc in enumerate(convs) if ci != q.conversation for x in cc.sessions]
    docs: list[str] = []
    for _ in range(n_docs - 1):
        ci, number, n = pool[rng.randrange(len(pool))]
        start = rng.randrange(max(1, n - turns + 1))
        docs.append(_turn_block(convs[ci], number, start, turns))
    return gold, docs


def _locomo_prompt(gold_doc: str, docs: list[str], gold: int, question: str) -> str:
    ordered = docs[:gold] + [gold_doc] + docs[gold:]
    body = "\n\n".join(f"Document [{i + 1}] {d}" for i, d in enumerate(ordered))
    return f"{_DOC_HEAD}{body}\n\nQuestion: {question}\nAnswer in a few words."


# ---- sizing ---------------------------------------------------------------------------------


def _fit(build: Callable[[int], str], count: Callable[[str], int], target: int, lo: int) -> int:
    """The item count n >= lo whose prompt is closest to ``target`` tokens (lengths grow
    with n: a secant step, then single steps)."""
    a, b = lo, lo + 4
    ca, cb = count(build(a)), count(build(b))
    per = max(1e-9, (cb - ca) / (b - a))
    n = max(lo, int(round(a + (target - ca) / per)))
    c = count(build(n))
    while n > lo and c > target:
        c2 = count(build(n - 1))
        if abs(c2 - target) > abs(c - target):
            break
        n, c = n - 1, c2
    while c < target:
        c2 = count(build(n + 1))
        if abs(c2 - target) >= abs(c - target):
            break
        n, c = n + 1, c2
    return n


def make_sample(
    suite: str,
    length: int,
    position: float,
    index: int,
    *,
    count: Callable[[str], int],
    seed: int = 0,
    conversations: Sequence[Conversation] = (),
    doc_turns: int = 6,
) -> PositionSample:
    """One prompt of ``suite`` at ``length`` tokens with the gold at ``position``.

    Parameters
    ----------
    suite : {"uuid", "numeric", "passkey", "locomo"}
    length : int
        Target tokens (>= 64).
    position : float in [0, 1]
    index : int
        Sample number: the same items at every position.
    count : callable
        Tokens of a prompt text (the model's tokenizer).
    seed : int
    conversations : sequence of Conversation
        LoCoMo conversations (``locomo`` only; at least two).
    doc_turns : int
        Turns per ``locomo`` document.

    Raises
    ------
    ValueError
        An unknown suite, a length below 64, a position outside [0, 1], or ``locomo`` without
        two conversations with a usable question.
    """
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    if length < 64:
        raise ValueError(f"length must be >= 64 tokens, got {length}")
    gold_index(position, 1)  # checks the range
    rng_seed = f"{seed}:{suite}:{length}:{index}"
    if suite in ("uuid", "numeric"):
        items = _kv_items(random.Random(rng_seed), 4096, suite == "numeric")

        def build(n: int) -> str:
            return _kv_prompt(items[:n], 0)[0]

        n = _fit(build, count, length, 2)
        g = gold_index(position, n)
        prompt, prefix, answers, mt = _kv_prompt(items[:n], g)
    elif suite == "passkey":
        key = str(random.Random(rng_seed).randrange(10**4, 10**5))
        n = _fit(lambda k: _passkey_prompt(key, k, 0)[0], count, length, 1)
        g = gold_index(position, n + 1)  # the needle goes before sentence g (n + 1 slots)
        prompt, prefix, answers, mt = _passkey_prompt(key, n, g)
        n += 1
    else:
        qs = locomo_questions(conversations)
        if len(conversations) < 2 or not qs:
            raise ValueError("the locomo suite needs at least two LoCoMo conversations with single-session questions")
        rng = random.Random(rng_seed)
        q = qs[rng.randrange(len(qs))]
        gold_doc, pool = _locomo_docs(conversations, q, rng, 256, doc_turns)
        n = _fit(lambda k: _locomo_prompt(gold_doc, pool[: k - 1], 0, q.question), count, length, 2)
        g = gold_index(position, n)
        prompt = _locomo_prompt(gold_doc, pool[: n - 1], g, q.question)
        prefix, answers, mt = "", (q.answer,), 24
        docs = tuple(pool[:g]) + (gold_doc,) + tuple(pool[g : n - 1])
        return PositionSample(
            suite, length, float(position), index, g, n, count(prompt), prompt, prefix, answers, mt, q.question, docs
        )
    return PositionSample(suite, length, float(position), index, g, n, count(prompt), prompt, prefix, answers, mt)


def make_suite(
    suites: Sequence[str],
    lengths: Sequence[int],
    positions: Sequence[float],
    samples: int,
    *,
    count: Callable[[str], int],
    seed: int = 0,
    conversations: Sequence[Conversation] = (),
) -> list[PositionSample]:
    """Every (suite, length, sample, position) prompt, in that order (deterministic by seed)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not positions:
        raise ValueError("positions must not be empty")
    return [
        make_sample(s, n, p, i, count=count, seed=seed, conversations=conversations)
        for s in suites
        for n in lengths
        for i in range(samples)
        for p in positions
    ]


def score_output(suite: str, text: str, answers: Sequence[str]) -> bool:
    """True when the output holds the answer: every gold string (case-insensitive), or for
    ``locomo`` every normalised, stemmed gold token."""
    if suite == "locomo":
        return all(answer_token_recall(a, text) == 1.0 for a in answers)
    low = text.lower()
    return all(a.lower() in low for a in answers)


@dataclass(frozen=True)
class PositionCell:
    """Accuracy of one (method, suite, length, position) with its Wilson 95 % interval."""

    method: str
    suite: str
    length: int
    position: float
    n: int
    correct: int
    accuracy: float
    low: float
    high: float
    mean_tokens: float


def summarize(records: Sequence[dict[str, Any]]) -> list[PositionCell]:
    """Cells of ``records`` (dicts with method, suite, length, position, correct, tokens)."""
    groups: dict[tuple[str, str, int, float], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["method"], r["suite"], int(r["length"]), float(r["position"])), []).append(r)
    cells = []
    for (m, s, n, p), rs in groups.items():
        k = sum(1 for r in rs if r["correct"])
        acc = k / len(rs)
        lo, hi = wilson_interval(acc, len(rs))
        cells.append(PositionCell(m, s, n, p, len(rs), k, acc, lo, hi, sum(r["tokens"] for r in rs) / len(rs)))
    return cells
