"""The built-in feature-hashing embedder (native, no model files, no network)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import _core
from .embedder import check_texts

__all__ = ["Hashing"]


class Hashing:
    """Signed feature hashing of words, word bigrams and character n-grams (native C++).

    Features: lower-cased word unigrams (common English stop words down-weighted), adjacent word
    bigrams, and character n-grams (``ngram_min``..``ngram_max``) of each padded word; each is
    hashed with 64-bit FNV-1a + murmur3 ``fmix64`` into one of ``dim`` buckets with a sign bit;
    the vector is L2-normalised. The output is bit-identical across runs, thread counts and
    machines (no ``std::hash``, no random seeds).

    Thread safety: thread-safe (immutable); ``embed`` releases the GIL and runs in parallel
    over texts.

    Parameters
    ----------
    dim : int
        Output dimension (>= 8), 384 by default.
    ngram_min, ngram_max : int
        Character n-gram range (1 <= min <= max <= 8).
    """

    #: its vectors are word features (see :func:`lamina.embedders.embedder.is_lexical`)
    lexical = True

    def __init__(self, dim: int = 384, ngram_min: int = 3, ngram_max: int = 4) -> None:
        for nm, v in (("dim", dim), ("ngram_min", ngram_min), ("ngram_max", ngram_max)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{nm} must be an int, got {type(v).__name__}")
        self._e = _core.HashingEmbedder(int(dim), int(ngram_min), int(ngram_max))

    @property
    def dim(self) -> int:
        """Output dimension."""
        return int(self._e.dim)

    @property
    def name(self) -> str:
        """Stable description, e.g. ``hashing-384-3-4``."""
        return f"hashing-{self.dim}-{self._e.ngram_min}-{self._e.ngram_max}"

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Embed texts.

        Parameters
        ----------
        texts : list of str
            Non-empty strings.

        Returns
        -------
        ndarray, shape (len(texts), dim), float32, rows of unit L2 norm.

        Raises
        ------
        TypeError
            ``texts`` is not a list of str.
        ValueError
            A text is empty or whitespace only.
        """
        ts = check_texts(texts)
        if not ts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._e.embed(ts)

    def __repr__(self) -> str:
        return f"Hashing(dim={self.dim})"
