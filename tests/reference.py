"""Plain numpy references used as test oracles."""

from __future__ import annotations

import random

import numpy as np


def ref_scores(Q: np.ndarray, X: np.ndarray, metric: str) -> np.ndarray:
    """Exact (float64) scores; for l2 the squared distance."""
    Q = Q.astype(np.float64)
    X = X.astype(np.float64)
    S = Q @ X.T
    if metric == "ip":
        return S
    if metric == "cosine":
        qn = np.linalg.norm(Q, axis=1)[:, None]
        xn = np.linalg.norm(X, axis=1)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            C = S / (qn * xn)
        C[:, xn[0] == 0] = 0.0
        return C
    if metric == "l2":
        return np.maximum((Q * Q).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2 * S, 0.0)
    raise ValueError(metric)


def ref_topk(
    Q: np.ndarray,
    X: np.ndarray,
    k: int,
    metric: str,
    candidates: np.ndarray | None = None,
    tie_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k by the documented rule: best score first, ties -> smaller tie id.

    candidates: boolean mask over rows (or per-query masks, shape (b, n)).
    tie_ids: the id used for tie-breaking (defaults to the row index).
    Returns (scores, rows) padded with -1 and -inf/+inf.
    """
    S = ref_scores(Q, X, metric)
    n = X.shape[0]
    ids = np.arange(n) if tie_ids is None else tie_ids
    pad = np.inf if metric == "l2" else -np.inf
    out_s = np.full((Q.shape[0], k), pad)
    out_i = np.full((Q.shape[0], k), -1, dtype=np.int64)
    for q in range(Q.shape[0]):
        mask = np.ones(n, bool) if candidates is None else (candidates if candidates.ndim == 1 else candidates[q])
        rows = np.nonzero(mask)[0]
        key = S[q, rows] if metric == "l2" else -S[q, rows]
        order = np.lexsort((ids[rows], key))[:k]
        out_s[q, : len(order)] = S[q, rows[order]]
        out_i[q, : len(order)] = rows[order]
    return out_s, out_i


TOPICS = {
    "travel": "flight hotel airport passport beach museum trip train luggage map".split(),
    "food": "pasta recipe dinner bakery coffee soup garlic oven spices lunch".split(),
    "work": "office meeting deadline manager project report salary team client email".split(),
    "pets": "dog cat leash vet puppy kitten walk treats collar bowl".split(),
    "music": "piano guitar concert song band choir drums album violin lyrics".split(),
    "sport": "marathon gym yoga football tennis swim coach match bike race".split(),
}


def topic_sentences(n: int, seed: int) -> list[str]:
    """Structured text: each sentence mixes words of one topic (clusters, not i.i.d. noise)."""
    rng = random.Random(seed)
    names = list(TOPICS)
    out = []
    for i in range(n):
        words = TOPICS[names[rng.randrange(len(names))]]
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(5, 10))) + f" note {i % 97}")
    return out


def recall(got: list[int], want: list[int]) -> float:
    """Share of ``want`` found in ``got``."""
    return len(set(got) & set(want)) / max(1, len(want))
