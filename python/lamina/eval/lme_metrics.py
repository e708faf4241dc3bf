"""LongMemEval's own retrieval metrics (``src/retrieval/eval_utils.py`` of the benchmark).

For a ranking of units (sessions or turns) and the set of relevant units of a question:

* :func:`recall_any_at_k` — 1 when at least one relevant unit is among the first ``k``;
* :func:`recall_all_at_k` — 1 when every relevant unit is among the first ``k``;
* :func:`ndcg_at_k` — binary-relevance NDCG with the benchmark's DCG, ``rel_1 + Σ_{i≥2}
  rel_i / log2(i)`` (positions 1 and 2 weigh alike), normalised by the ideal ranking's DCG;
* :func:`first_occurrence` — a ranking of turns turned into a ranking of their sessions (a
  session ranks where its best turn ranks), as the benchmark scores turn retrievers at session
  granularity.

Rankings may repeat a unit (a session shown twice in a haystack has one id): only the first
occurrence counts. A ranking shorter than ``k`` simply retrieves fewer units.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

__all__ = ["KS", "dcg", "ndcg_at_k", "recall_any_at_k", "recall_all_at_k", "first_occurrence", "retrieval_scores"]

#: The cut-offs reported (the benchmark's k = 5 and 10).
KS: tuple[int, ...] = (5, 10)

_H = TypeVar("_H", bound=Hashable)


def first_occurrence(ranked: Iterable[_H]) -> list[_H]:
    """The units of ``ranked`` in order, each at its first occurrence."""
    return list(dict.fromkeys(ranked))


def dcg(relevances: Sequence[float], k: int) -> float:
    """The benchmark's DCG of the first ``k`` relevances: ``r_1 + Σ_{i=2..k} r_i / log2(i)``."""
    r = list(relevances)[:k]
    if not r:
        return 0.0
    return float(r[0] + sum(x / math.log2(i) for i, x in enumerate(r[1:], start=2)))


def _check(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def recall_any_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """1.0 when some relevant unit is among the first ``k`` distinct units of ``ranked``, else 0.0;
    NaN when nothing is relevant."""
    _check(k)
    rel = set(relevant)
    if not rel:
        return math.nan
    top = set(first_occurrence(ranked)[:k])
    return float(bool(rel & top))


def recall_all_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """1.0 when every relevant unit is among the first ``k`` distinct units of ``ranked``, else
    0.0; NaN when nothing is relevant."""
    _check(k)
    rel = set(relevant)
    if not rel:
        return math.nan
    top = set(first_occurrence(ranked)[:k])
    return float(rel <= top)


def ndcg_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """NDCG@k with binary relevance and the benchmark's DCG (see module docs); NaN when nothing
    is relevant.

    The ideal ranking puts all ``len(relevant)`` relevant units first (every relevant unit is in
    the corpus: a unit a system never ranks counts as ranked below ``k``).
    """
    _check(k)
    rel = set(relevant)
    if not rel:
        return math.nan
    got = [1.0 if u in rel else 0.0 for u in first_occurrence(ranked)[:k]]
    ideal = dcg([1.0] * min(len(rel), k), k)
    return dcg(got, k) / ideal


def retrieval_scores(
    ranked: Sequence[Hashable], relevant: Iterable[Hashable], ks: Sequence[int] = KS
) -> dict[str, float] | None:
    """``{"recall_any@k", "recall_all@k", "ndcg@k"}`` for each ``k`` of ``ks``; None when nothing
    is relevant (the question is left out at this granularity)."""
    rel = set(relevant)
    if not rel:
        return None
    out: dict[str, float] = {}
    for k in ks:
        out[f"recall_any@{k}"] = recall_any_at_k(ranked, rel, k)
        out[f"recall_all@{k}"] = recall_all_at_k(ranked, rel, k)
        out[f"ndcg@{k}"] = ndcg_at_k(ranked, rel, k)
    return out
