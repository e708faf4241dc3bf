"""Choosing the next token from logits: greedy, temperature and nucleus (top-p) sampling."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput

__all__ = ["Sampler", "log_softmax"]


def log_softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """log softmax of a logit vector, in float64.

    Parameters
    ----------
    logits : ndarray, shape (V,)

    Returns
    -------
    ndarray, float64, shape (V,)
    """
    z = logits.astype(np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())  # type: ignore[no-any-return]


@dataclass
class Sampler:
    """Next-token choice.

    Parameters
    ----------
    temperature : float
        0 picks the most likely token (greedy; ties go to the smallest id); T > 0 samples from
        softmax(logits / T).
    top_p : float
        Nucleus sampling: sample among the most likely tokens whose probabilities (at T) sum
        to at least ``top_p`` (1.0: all tokens).
    seed : int, optional
        Seed of the random generator (numpy PCG64); None: fresh entropy.

    Notes
    -----
    Not thread-safe (holds a random generator).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.temperature) and self.temperature >= 0.0):
            raise InvalidInput(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidInput(f"top_p must be in (0, 1], got {self.top_p}")
        self._rng = np.random.default_rng(self.seed)

    def sample(self, logits: npt.NDArray[np.float32]) -> tuple[int, float]:
        """One token and its log-probability under the model (softmax of the raw logits).

        Parameters
        ----------
        logits : ndarray, float32, shape (V,)

        Returns
        -------
        (int, float)
        """
        lp = log_softmax(logits)
        if self.temperature == 0.0:
            tok = int(np.argmax(logits))
            return tok, float(lp[tok])
        z = lp / self.temperature
        p = np.exp(z - z.max())
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        if self.top_p < 1.0:
            c = np.cumsum(p[order])
            n = int(np.searchsorted(c, self.top_p)) + 1
            order = order[:n]
        q = p[order] / p[order].sum()
        tok = int(order[int(self._rng.choice(len(order), p=q))])
        return tok, float(lp[tok])
