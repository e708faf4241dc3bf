"""The embedder protocol every lamina embedder follows, and output checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "Embedder",
    "SpanEmbedder",
    "SpanVectors",
    "Span",
    "check_texts",
    "check_embeddings",
    "check_spans",
    "is_lexical",
]


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

    Optional: ``lexical`` (bool, True) on an embedder whose vectors are word features, carrying
    nothing of meaning beyond the words (the hashing embedder): the memory then weighs its
    lexical (BM25) ranking higher (``MemoryConfig.lexical_weight``; :func:`is_lexical`).
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


#: A character range ``[start, end)`` of a text.
Span = tuple[int, int]


@dataclass(frozen=True)
class SpanVectors:
    """A text's vector and the vectors of character spans of it, from one encoder pass.

    Attributes
    ----------
    whole : ndarray, shape (dim,), float32, unit norm — the text's vector (mean of all its
        token states, over every window of a text longer than the encoder's window)
    spans : ndarray, shape (m, dim), float32, unit-norm rows — span i's vector: the mean of the
        token states of the tokens that overlap ``spans[i]``, each token read in the context
        of the whole text (or of its window: "late chunking"); a span holding no token takes
        ``whole``
    """

    whole: npt.NDArray[np.float32]
    spans: npt.NDArray[np.float32]


@runtime_checkable
class SpanEmbedder(Embedder, Protocol):
    """An :class:`Embedder` that also embeds spans of a text in one pass over the text
    (:meth:`embed_spans`): a transformer encoder runs once over the text and pools its token
    states per span, instead of embedding each span as a text of its own.

    Thread safety: as :class:`Embedder` (concurrent calls allowed).
    """

    def embed_spans(self, texts: list[str], spans: list[list[Span]]) -> list[SpanVectors]:
        """One :class:`SpanVectors` per text: its vector and one vector per span of
        ``spans[i]`` (character ranges of ``texts[i]``, see :func:`check_spans`)."""
        ...


def check_spans(texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[list[Span]]:
    """Validate spans: one list per text, each span ``(start, end)`` ints with
    ``0 <= start < end <= len(text)`` (TypeError / ValueError naming the bad entry)."""
    if len(spans) != len(texts):
        raise ValueError(f"spans must hold one list per text: {len(spans)} lists for {len(texts)} texts")
    out: list[list[Span]] = []
    for i, (t, ss) in enumerate(zip(texts, spans)):
        row: list[Span] = []
        for j, sp in enumerate(ss):
            if (
                not isinstance(sp, tuple)
                or len(sp) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in sp)
            ):
                raise TypeError(f"spans[{i}][{j}] must be a (start, end) pair of ints, got {sp!r}")
            if not 0 <= sp[0] < sp[1] <= len(t):
                raise ValueError(f"spans[{i}][{j}] = {sp} is not a non-empty range of texts[{i}] (length {len(t)})")
            row.append((int(sp[0]), int(sp[1])))
        out.append(row)
    return out


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


def is_lexical(embedder: object) -> bool:
    """Whether an embedder says its vectors are word features (its ``lexical`` attribute is
    True: :class:`~lamina.embedders.Hashing`, and the wrappers of one that pass it on)."""
    return getattr(embedder, "lexical", False) is True
