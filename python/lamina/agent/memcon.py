"""MemCon: memory operations as a controlled process (a contextual bandit over memory actions).

Actions ``Retrieve(θ)`` (θ: a token budget), ``Re-Retrieve``, ``Consolidate``, ``Forget``,
``NoOp`` and ``PlanInject`` are chosen per state φ(s) by the UCB rule

    U(φ, a) = Q(φ, a) + c · sqrt(ln N(φ) / N_a(φ))      (untried actions first)

and, when an episode of steps (φ_j, a_j), j = 0 .. |ep|-1 ends with reward r, updated by the
tabular reverse-discounted rule with a constant step (α = 0.15 tracks a drifting backend):

    Q(φ_j, a_j) ← Q(φ_j, a_j) + α · (γ^(|ep|-j-1) · r − Q(φ_j, a_j)).

Plan templates: a successful trajectory's text with instance entities replaced by category
placeholders (numbers, dates, capitalised names), cached with their success counts for
``PlanInject``.
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Action", "MemCon", "PlanLibrary", "generalise", "default_actions"]


@dataclass(frozen=True)
class Action:
    """A memory action: ``kind`` (retrieve, re_retrieve, consolidate, forget, noop, plan_inject)
    and, for ``retrieve``, the budget ``theta`` in tokens."""

    kind: str
    theta: int | None = None

    KINDS: ClassVar[tuple[str, ...]] = ("retrieve", "re_retrieve", "consolidate", "forget", "noop", "plan_inject")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; kinds: {', '.join(self.KINDS)}")
        if (self.kind == "retrieve") != (self.theta is not None):
            raise ValueError("theta (a budget) is given for retrieve actions, and only for them")
        if self.theta is not None and self.theta < 1:
            raise ValueError(f"theta must be a positive budget, got {self.theta}")

    @property
    def name(self) -> str:
        return f"retrieve@{self.theta}" if self.kind == "retrieve" else self.kind


def default_actions(thetas: Sequence[int] = (256, 512, 1024)) -> list[Action]:
    """Retrieve(θ) for each θ, then the five other actions."""
    return [Action("retrieve", t) for t in thetas] + [Action(k) for k in Action.KINDS[1:]]


class MemCon:
    """The UCB contextual bandit with reverse-discounted tabular Q.

    Parameters
    ----------
    n_actions : int
    c : float
        Exploration weight (in reward units).
    alpha : float
        Constant step size of the Q update (0.15).
    gamma : float
        Discount applied backwards from the episode's end.
    seed : int
        Tie-breaking among equal upper bounds.
    """

    def __init__(
        self, n_actions: int, *, c: float = 0.3, alpha: float = 0.15, gamma: float = 0.9, seed: int = 0
    ) -> None:
        if not isinstance(n_actions, int) or n_actions < 1:
            raise ValueError(f"n_actions must be a positive int, got {n_actions!r}")
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if c < 0:
            raise ValueError(f"c must be >= 0, got {c}")
        self.n_actions, self.c, self.alpha, self.gamma = n_actions, float(c), float(alpha), float(gamma)
        self.q: dict[Hashable, list[float]] = defaultdict(lambda: [0.0] * n_actions)
        self.n: dict[Hashable, list[int]] = defaultdict(lambda: [0] * n_actions)
        self._rng = random.Random(seed)

    def select(self, phi: Hashable) -> int:
        """The action index with the largest upper bound in state ``phi`` (an untried one first)."""
        counts = self.n[phi]
        untried = [a for a, k in enumerate(counts) if k == 0]
        if untried:
            return self._rng.choice(untried)
        q, log_n = self.q[phi], math.log(sum(counts))
        u = [q[a] + self.c * math.sqrt(log_n / counts[a]) for a in range(self.n_actions)]
        best = max(u)
        return self._rng.choice([a for a, v in enumerate(u) if v >= best - 1e-12])

    def greedy(self, phi: Hashable) -> int:
        """The action with the largest Q in ``phi`` (no exploration)."""
        q = self.q[phi]
        return max(range(self.n_actions), key=lambda a: q[a])

    def update(self, episode: Sequence[tuple[Hashable, int]], reward: float) -> None:
        """Credit an ended episode's steps ``(phi_j, a_j)`` with its reward (reverse-discounted)."""
        L = len(episode)
        for j, (phi, a) in enumerate(episode):
            if not 0 <= a < self.n_actions:
                raise ValueError(f"action index {a} out of range 0..{self.n_actions - 1}")
            target = self.gamma ** (L - j - 1) * reward
            self.q[phi][a] += self.alpha * (target - self.q[phi][a])
            self.n[phi][a] += 1


_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?(?:,?\s+\d{4})?)\b",
    re.IGNORECASE,
)
_NUM = re.compile(r"\b\d+(?:[.,]\d+)?\b")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")


def generalise(text: str) -> str:
    """Replace instance entities by category placeholders: dates → ``[date]``, numbers →
    ``[number]``, capitalised names not starting a sentence → ``[entity]`` ("shelf 3" →
    "shelf [number]")."""
    s = _DATE.sub("[date]", text)
    s = _NUM.sub("[number]", s)
    return _NAME.sub("[entity]", s)


class PlanLibrary:
    """Cached plan templates (generalised successful trajectories) with success counts."""

    def __init__(self, *, max_templates: int = 32) -> None:
        self.max_templates = max_templates
        self.wins: dict[str, int] = {}

    def record(self, trajectory: str, *, success: bool) -> str:
        """Generalise ``trajectory``; count it when it succeeded. Returns the template."""
        t = generalise(trajectory)
        if success:
            self.wins[t] = self.wins.get(t, 0) + 1
            if len(self.wins) > self.max_templates:
                del self.wins[min(self.wins, key=lambda k: self.wins[k])]
        return t

    def best(self) -> str | None:
        """The most successful template (None when there is none)."""
        return max(self.wins, key=lambda k: self.wins[k]) if self.wins else None
