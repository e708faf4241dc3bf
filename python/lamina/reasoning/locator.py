"""Locating the first wrong step of a chain of thought (BIG-Bench Mistake format).

:class:`MistakeLocator` combines two localisers: the exact checkers of
:mod:`lamina.reasoning.checkers` (a step they find wrong is the answer), and for chains they
cannot settle a supervised step classifier — logistic regression on features that do not name
any task: position in the chain, length, numeric content, numbers not seen before, word overlap
with the question and the previous step, and the checkers' verdicts. When a checker reads
some step of a chain and none finds a step wrong, the chain is judged correct; the classifier
decides only chains no checker can read. It is trained on steps up
to and including each chain's first mistake (later steps carry no label), classes balanced,
and a decision rule — the first step over a threshold, or the most likely step if over one —
is chosen on the training files, every file weighted equally.

Training data: JSONL lines with ``input`` (question), ``steps`` (list of str) and
``mistake_index`` (0-based int or null).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .checkers import RIGHT, WRONG, first_wrong, step_verdicts

__all__ = ["Chain", "MistakeLocator", "read_chains", "step_features"]

_NUM = re.compile(r"-?\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z]+")
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Chain:
    """One annotated chain: ``mistake`` is the 0-based first wrong step, None when correct."""

    question: str
    steps: tuple[str, ...]
    mistake: int | None


def read_chains(path: str | os.PathLike[str]) -> list[Chain]:
    """The chains of a BIG-Bench Mistake JSONL file (ValueError naming a bad line)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                steps = tuple(str(s) for s in d["steps"])
                m = d["mistake_index"]
                if m is not None and not (isinstance(m, int) and 0 <= m < len(steps)):
                    raise ValueError(f"mistake_index {m!r} outside the {len(steps)} steps")
                out.append(Chain(str(d["input"]), steps, m))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}:{n}: not a BIG-Bench Mistake line ({e})") from e
    return out


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def step_features(question: str, steps: Sequence[str], verdicts: Sequence[int] | None = None) -> F64:
    """Features of every step, shape (len(steps), 14) float64 (column 0 is the bias);
    ``verdicts``: the checkers' (:func:`~lamina.reasoning.checkers.step_verdicts`) if known."""
    n = len(steps)
    if verdicts is None:
        verdicts = step_verdicts(question, steps)
    seen = set(_NUM.findall(question))
    qw = set(_WORD.findall(question.lower()))
    prev: set[str] = set()
    rows = []
    for i, s in enumerate(steps):
        verdict = verdicts[i]
        nums = _NUM.findall(s)
        new = [x for x in nums if x not in seen]
        seen.update(nums)
        w = set(_WORD.findall(s.lower()))
        rows.append(
            [
                1.0,
                i / max(n - 1, 1),
                min(i, 30) / 30.0,
                1.0 / n,
                float(i == n - 1),
                float(i == 0),
                float(np.log1p(len(s)) / 8.0),
                sum(c.isdigit() for c in s) / max(len(s), 1),
                len(new) / max(len(nums), 1),
                float(bool(new)),
                _jaccard(w, qw),
                _jaccard(w, prev),
                float(verdict == WRONG),
                float(verdict == RIGHT),
            ]
        )
        prev = w
    return np.asarray(rows, dtype=np.float64).reshape(n, 14)


class MistakeLocator:
    """Checkers first, then a trained step classifier. Build with :meth:`train` or :meth:`load`."""

    def __init__(self, weights: F64, mean: F64, scale: F64, rule: str, threshold: float) -> None:
        if rule not in ("first", "argmax"):
            raise ValueError(f"rule must be 'first' or 'argmax', got {rule!r}")
        self.weights, self.mean, self.scale = weights, mean, scale
        self.rule, self.threshold = rule, float(threshold)

    # -- training ---------------------------------------------------------------------
    @classmethod
    def train(cls, paths: Sequence[str | os.PathLike[str]], *, l2: float = 1e-2) -> MistakeLocator:
        """Fit on the chains of ``paths`` (JSONL, one file per task; each file weighs the same
        when the decision rule is chosen)."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        groups = [read_chains(p) for p in paths]
        if not any(groups):
            raise ValueError("no chains to train on")
        return cls.fit(groups, l2=l2)

    @classmethod
    def fit(cls, groups: Sequence[Sequence[Chain]], *, l2: float = 1e-2) -> MistakeLocator:
        """Fit on groups of chains (one group per task)."""
        X: list[F64] = []
        y: list[float] = []
        for c in (c for g in groups for c in g):
            F = step_features(c.question, c.steps)
            upto = len(c.steps) if c.mistake is None else c.mistake + 1
            X.append(F[:upto])
            y.extend(1.0 if i == c.mistake else 0.0 for i in range(upto))
        A, t = np.concatenate(X), np.asarray(y)
        mean, scale = A[:, 1:].mean(0), A[:, 1:].std(0) + 1e-6
        Z = A.copy()
        Z[:, 1:] = (A[:, 1:] - mean) / scale
        sw = np.where(t > 0, (1 - t).sum() / max(t.sum(), 1.0), 1.0)
        w = np.zeros(Z.shape[1])
        for _ in range(50):  # Newton steps on the weighted, L2-regularised log-loss
            p = 1.0 / (1.0 + np.exp(-(Z @ w)))
            g = Z.T @ ((p - t) * sw) / len(t) + l2 * w
            H = (Z * (p * (1 - p) * sw)[:, None]).T @ Z / len(t) + l2 * np.eye(len(w))
            step = np.linalg.solve(H, g)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        loc = cls(w, mean, scale, "first", 0.5)
        probs = [[loc.step_probabilities(c.question, c.steps) for c in g] for g in groups]
        best = (-1.0, "first", 0.5)
        for rule in ("first", "argmax"):
            for tau in np.linspace(0.0, 0.95, 20):
                accs = [
                    np.mean([_decide(p, rule, float(tau)) == c.mistake for p, c in zip(pg, g)])
                    for pg, g in zip(probs, groups)
                    if g
                ]
                score = float(np.mean(accs))
                if score > best[0] + 1e-12:
                    best = (score, rule, float(tau))
        loc.rule, loc.threshold = best[1], best[2]
        return loc

    # -- use --------------------------------------------------------------------------
    def step_probabilities(self, question: str, steps: Sequence[str], verdicts: Sequence[int] | None = None) -> F64:
        """The classifier's probability that each step is the first mistake, shape (len(steps),)."""
        F = step_features(question, steps, verdicts)
        Z = F.copy()
        Z[:, 1:] = (F[:, 1:] - self.mean) / self.scale
        return np.asarray(1.0 / (1.0 + np.exp(-(Z @ self.weights))), dtype=np.float64)

    def classify(self, question: str, steps: Sequence[str]) -> int | None:
        """The trained classifier's answer alone (no checkers): its decision rule over
        :meth:`step_probabilities`."""
        return _decide(self.step_probabilities(question, steps), self.rule, self.threshold)

    def locate(self, question: str, steps: Sequence[str]) -> int | None:
        """0-based index of the first wrong step, or None for a chain judged correct."""
        if not isinstance(question, str) or isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
            raise TypeError("question must be a str and steps a sequence of str")
        if not steps:
            raise ValueError("steps is empty")
        verdicts = step_verdicts(question, steps)
        if WRONG in verdicts:
            return first_wrong(verdicts)
        if RIGHT in verdicts:
            return None  # the checkers read this chain and found nothing wrong
        return _decide(self.step_probabilities(question, steps, verdicts), self.rule, self.threshold)

    # -- persistence ------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the locator as JSON."""
        d = {
            "format": "lamina.mistake-locator/1",
            "weights": self.weights.tolist(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "rule": self.rule,
            "threshold": self.threshold,
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(d, f)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MistakeLocator:
        """Read a locator written by :meth:`save` (ValueError for another file)."""
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        if not isinstance(d, dict) or d.get("format") != "lamina.mistake-locator/1":
            raise ValueError(f"{path} is not a lamina mistake-locator file")
        arr = {k: np.asarray(d[k], dtype=np.float64) for k in ("weights", "mean", "scale")}
        if arr["weights"].shape != (14,) or arr["mean"].shape != (13,) or arr["scale"].shape != (13,):
            raise ValueError(f"{path}: weights of the wrong shape for this version")
        return cls(arr["weights"], arr["mean"], arr["scale"], str(d["rule"]), float(d["threshold"]))


def _decide(p: F64, rule: str, tau: float) -> int | None:
    if rule == "first":
        hit = np.flatnonzero(p > tau)
        return int(hit[0]) if hit.size else None
    return int(np.argmax(p)) if p.max() > tau else None
