"""Metric definitions of docs/design.md §4 and the official LoCoMo answer scoring.

Retrieval level (no reader involved):

* :func:`count_tokens` — tokens are whitespace-separated words.
* :func:`evidence_recall` — share of gold evidence turns whose raw text is in the context.
* :func:`answer_token_recall` — share of the normalised gold answer tokens present in the context.
* :func:`context_usage` — context tokens / tokens of the full history.
* :func:`false_memory` — one adversarial (category 5) question: the context did not abstain and
  its top-scored item carries at least half of the distractor's normalised tokens in a part
  attributed to a speaker other than the one the question names.
* :func:`retention` — recall after all periods / recall right after period 1.
* :func:`percentile` — latency percentiles.

Reader level (official LoCoMo rules, ``snap-research/locomo`` ``task_eval/evaluation.py``):

* :func:`normalize_answer`, :func:`answer_tokens` (normalised, Porter-stemmed),
* :func:`f1_score` (token F1 on multisets), :func:`f1_multi` (category 1: comma parts),
* :func:`bleu1` (brevity penalty × clipped unigram precision on lowercased word tokens),
* :func:`score_answer` — the per-category rule (category 3 gold cut at ``;``, category 5
  "not mentioned" / "no information available").
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from .stem import porter_stem

__all__ = [
    "CATEGORY_NAMES",
    "count_tokens",
    "normalize_text",
    "normalize_answer",
    "answer_tokens",
    "evidence_recall",
    "answer_token_recall",
    "context_usage",
    "distractor_coverage",
    "false_memory",
    "retention",
    "percentile",
    "wilson_interval",
    "bootstrap_interval",
    "f1_score",
    "f1_multi",
    "bleu1",
    "score_answer",
    "porter_stem",
]

#: Official LoCoMo category integers -> names (never the relabelled third-party names).
CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def count_tokens(text: str) -> int:
    """Whitespace-separated words of ``text`` (the token unit of every budget and usage)."""
    return len(text.split())


def normalize_text(text: str) -> str:
    """Collapse all whitespace runs to one space and strip (for raw-text containment)."""
    return " ".join(text.split())


def normalize_answer(s: str) -> str:
    """Official LoCoMo normalisation: drop commas, lowercase, drop punctuation, drop the words
    a / an / the / and, collapse spaces."""
    s = str(s).replace(",", "")
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_tokens(s: str) -> list[str]:
    """Normalised, Porter-stemmed tokens of ``s`` (the official F1 tokens)."""
    return [porter_stem(w) for w in normalize_answer(s).split()]


# ---- retrieval metrics -------------------------------------------------------------------------


def evidence_recall(evidence_texts: Sequence[str], context_text: str) -> float:
    """Share of evidence turns whose raw text occurs in the rendered context.

    Parameters
    ----------
    evidence_texts : raw texts of the question's gold evidence turns (as ingested)
    context_text : the rendered context

    Returns
    -------
    float in [0, 1]; NaN when there is no evidence (such questions are left out of means).
    """
    if not evidence_texts:
        return math.nan
    ctx = normalize_text(context_text)
    return sum(1 for t in evidence_texts if normalize_text(t) in ctx) / len(evidence_texts)


def answer_token_recall(answer: str, context_text: str) -> float:
    """Share of the normalised (stemmed) gold answer tokens present among the context's tokens.

    Tokens are counted with multiplicity on the answer side ("New York, New York" needs
    "new" and "york" once each in the context). NaN for an answer with no tokens.
    """
    ans = answer_tokens(answer)
    if not ans:
        return math.nan
    ctx = set(answer_tokens(context_text))
    return sum(1 for w in ans if w in ctx) / len(ans)


def context_usage(context_tokens: int, history_tokens: int) -> float:
    """Context tokens / tokens of the full history up to the question (0 for an empty history)."""
    if history_tokens < 0 or context_tokens < 0:
        raise ValueError("token counts must be >= 0")
    return 0.0 if history_tokens == 0 else context_tokens / history_tokens


def distractor_coverage(distractor: str, text: str) -> float:
    """Share of the distractor's distinct normalised tokens present in ``text``."""
    d = set(answer_tokens(distractor))
    if not d:
        return 0.0
    t = set(answer_tokens(text))
    return len(d & t) / len(d)


def false_memory(
    abstain: bool, top_parts: Sequence[tuple[str | None, str]], distractor: str, named_speaker: str | None
) -> bool:
    """Did this adversarial question get a false memory at the top of its context?

    Parameters
    ----------
    abstain : the context abstained (nothing returned)
    top_parts : (speaker, text) parts of the top-scored item: one part for a raw turn, one per
        turn for a segment, ``(None, text)`` for text attributed to nobody (a summary or note)
    distractor : the adversarial answer (true of the other speaker)
    named_speaker : the speaker the question names (not None; callers leave questions naming no
        speaker or both speakers out of the rate)

    Returns
    -------
    True when the context did not abstain and some part not attributed to ``named_speaker``
    holds at least half of the distractor's normalised tokens.
    """
    if abstain or not top_parts:
        return False
    for sp, text in top_parts:
        if sp == named_speaker:
            continue
        if distractor_coverage(distractor, text) >= 0.5:
            return True
    return False


def retention(recall_after_first: float, recall_after_all: float) -> float:
    """Retention = recall after all periods / recall right after period 1 (NaN if the latter is 0)."""
    if not recall_after_first or math.isnan(recall_after_first):
        return math.nan
    return recall_after_all / recall_after_first


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); NaN if empty."""
    xs = sorted(values)
    if not xs:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def wilson_interval(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval (95 % by default) of a rate ``p`` observed over ``n`` questions.

    For a mean of per-question scores in [0, 1] (evidence recall is fractional when a question
    has several evidence turns) this treats the mean as a proportion of ``n`` trials: a close,
    slightly conservative approximation. NaN bounds when ``n`` is 0 or ``p`` is NaN."""
    if n <= 0 or math.isnan(p):
        return (math.nan, math.nan)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_interval(
    xs: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``xs`` (per-question scores, or per-question
    differences of two conditions on the same questions for a paired interval).

    Parameters
    ----------
    xs : sequence of float
        The observations (NaN not allowed).
    resamples : int
        Bootstrap resamples (with replacement, ``len(xs)`` each).
    level : float
        Coverage, in (0, 1).
    seed : int
        Seed of the resampling (the interval is deterministic for a given seed).

    Returns
    -------
    (low, high) : tuple of float
        NaN bounds when ``xs`` is empty.

    Raises
    ------
    ValueError
        ``resamples`` < 1, ``level`` outside (0, 1), or a NaN in ``xs``.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    a = np.asarray(list(xs), dtype=np.float64)
    if a.size == 0:
        return (math.nan, math.nan)
    if np.isnan(a).any():
        raise ValueError("bootstrap_interval: NaN among the observations")
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return (float(lo), float(hi))


# ---- reader metrics (official rules) -------------------------------------------------------------


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 between normalised, stemmed multisets of tokens."""
    p, g = answer_tokens(prediction), answer_tokens(gold)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, gold: str) -> float:
    """Category 1: split both on commas; per gold part the best F1 over prediction parts; mean."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


_WORD = re.compile(r"\w+|[^\w\s]")


def bleu1(prediction: str, gold: str) -> float:
    """BLEU-1: brevity penalty × clipped unigram precision on lowercased word tokens
    (words and punctuation marks, as ``nltk.word_tokenize`` splits them)."""
    p = _WORD.findall(str(prediction).lower())
    r = _WORD.findall(str(gold).lower())
    if not p or not r:
        return 0.0
    clipped = sum((Counter(p) & Counter(r)).values())
    precision = clipped / len(p)
    bp = 1.0 if len(p) > len(r) else math.exp(1.0 - len(r) / len(p))
    return bp * precision


def score_answer(prediction: str, gold: str | None, category: int) -> dict[str, float]:
    """Official per-category scoring of one reader answer.

    Returns ``{"f1": ..., "bleu1": ...}``. Category 5 scores 1 when the prediction contains
    "not mentioned" or "no information available" (both metrics), else 0. Category 3 gold is
    cut at the first ``;``; category 1 uses :func:`f1_multi`.
    """
    if category == 5:
        low = str(prediction).lower()
        s = 1.0 if ("not mentioned" in low or "no information available" in low) else 0.0
        return {"f1": s, "bleu1": s}
    if gold is None:
        raise ValueError(f"category {category} needs a gold answer")
    g = str(gold)
    if category == 3:
        g = g.split(";")[0].strip()
    f1 = f1_multi(prediction, g) if category == 1 else f1_score(prediction, g)
    return {"f1": f1, "bleu1": bleu1(prediction, g)}
