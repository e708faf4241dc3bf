"""The embedder protocol every lamina embedder follows, and output checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "check_texts", "check_embeddings"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors.

    Attributes
    ----------
    dim : int
        Output dimension.
    name : str
        A short, stable description (shown by ``Memory.stats()`` and stored in the database so
        that a database is never reopened with a different embedder by accident).

    Methods
    -------
    embed(texts) -> ndarray, shape (len(texts), dim), float32, C-contiguous, rows of unit L2 norm.

    Thread safety: implementations must allow concurrent ``embed`` calls (lamina embeds outside
    its own lock).
    """

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts``.

        Returns
        -------
        ndarray, shape (len(texts), dim), float32
            One row per text (unit L2 norm for the bundled embedders).
        """
        ...


def check_texts(texts: Sequence[str], what: str = "texts") -> list[str]:
    """Validate a list of non-empty strings (TypeError / ValueError naming the bad entry)."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{what} must be a list of str, not a single {type(texts).__name__}; wrap it in a list")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] must be a str, got {type(t).__name__}")
        if not t.strip():
            raise ValueError(f"{what}[{i}] is empty or whitespace; every text needs content")
    return out


def check_embeddings(x: object, n: int, dim: int, who: str) -> npt.NDArray[np.float32]:
    """Check an embedder's output: (n, dim) float32 C-contiguous, finite, unit-norm rows."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{who}.embed returned {type(x).__name__}, expected a numpy.ndarray")
    if x.dtype != np.float32:
        raise TypeError(f"{who}.embed returned dtype {x.dtype}, expected float32")
    if x.shape != (n, dim):
        raise ValueError(f"{who}.embed returned shape {x.shape}, expected {(n, dim)}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{who}.embed returned a non-contiguous array; return np.ascontiguousarray(...)")
    if n and not np.isfinite(x).all():
        raise ValueError(f"{who}.embed returned NaN or Inf")
    if n:
        norms = np.linalg.norm(x, axis=1)
        if not np.allclose(norms, 1.0, atol=1e-3):
            raise ValueError(
                f"{who}.embed must return unit-norm rows (got norms in [{norms.min():.3g}, {norms.max():.3g}])"
            )
    return x
