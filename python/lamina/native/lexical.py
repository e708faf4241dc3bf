"""Lexical retrieval: a tokenizer and an incremental Okapi BM25 index (native), per namespace.

Scoring (k1 = 1.2, b = 0.75 by default; the same formula as the ``bm25`` baseline of
:mod:`lamina.eval`)::

    score(d, q) = sum over distinct terms t of q found in d of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * len(d) / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

N, avgdl and df are computed over the live documents of the query's namespace only (one
namespace per user layer: users never see each other's statistics). Only documents sharing a
term with the query are returned, so every score is > 0.

Ordering, ties and padding: best (highest) score first; equal scores are ordered by the smaller
key; :meth:`LexicalIndex.search_many` pads missing results with key ``-1`` and score ``-inf``
(:meth:`LexicalIndex.search` returns only real hits).

Terms cross into the native index as 64-bit FNV-1a hashes of their UTF-8 bytes
(:func:`term_hash`), computed in C++ without creating a Python object per term. Two different
terms collide with probability ~ n^2 / 2^65 for n distinct terms (negligible).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from .. import _core
from ..text._stem import porter_stem
from ._checks import check_k

__all__ = ["tokenize", "term_hash", "LexicalIndex", "STOP_WORDS"]

#: English function words dropped by :func:`tokenize` (compared before stemming). Includes the
#: pieces that splitting at apostrophes leaves ("don't" -> "don", "t") and chat fillers.
STOP_WORDS: frozenset[str] = frozenset(
    """
a an the and or but if of to in on at by for with from as is am are was were be been being
it its this that these those i me my myself we our ours you your yours he him his she her hers
they them their theirs do does did doing have has had having so just very really not no nor
there here what which who whom when where why how about into than then too also can will would
could should shall oh uh um hmm well yeah yes ok okay s t d m ll re ve don didn doesn isn wasn
aren weren haven hasn hadn couldn wouldn shouldn im ive dont youre thats
""".split()
)

_WORD = re.compile(r"[^\W_]+")  # runs of Unicode letters and digits (underscores separate)

TokensOrText = str | Sequence[str]
KeysArg = int | Iterable[int] | npt.ArrayLike
NamespaceArg = int | np.integer


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: lower-cased words, stop words dropped, Porter-stemmed.

    A word is a maximal run of Unicode letters and digits (apostrophes, underscores and all
    other characters separate words: ``"Caroline's"`` -> ``caroline``, ``s``). Words in
    :data:`STOP_WORDS` are dropped; the rest are stemmed with the Porter stemmer (NLTK's
    default mode, as the LoCoMo scorer uses).

    Examples
    --------
    >>> tokenize("She's been painting sunsets at the lake!")
    ['paint', 'sunset', 'lake']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return [porter_stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def term_hash(term: str) -> int:
    """The 64-bit FNV-1a hash of ``term``'s UTF-8 bytes: the term's identity in the index."""
    if not isinstance(term, str):
        raise TypeError(f"term must be a str, got {type(term).__name__}")
    return int(_core.lexical_term_hash(term))


def _as_keys(keys: KeysArg, name: str = "keys") -> npt.NDArray[np.int64]:
    if isinstance(keys, (bool, np.bool_)):
        raise TypeError(f"{name} must be integers, not bool")
    arr = np.asarray(keys)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _ns(namespace: NamespaceArg, name: str = "namespace") -> int:
    if isinstance(namespace, (bool, np.bool_)) or not isinstance(namespace, (int, np.integer)):
        raise TypeError(f"{name} must be an int in [0, 2**64), got {type(namespace).__name__}")
    v = int(namespace)
    if not 0 <= v < 2**64:
        raise ValueError(f"{name} must be in [0, 2**64), got {v}")
    return v


def _terms(item: object, what: str) -> Sequence[str]:
    # item: a TokensOrText from the caller, checked here (anything else raises TypeError)
    """A text is tokenized; a token list is taken as is (checked natively: str items only)."""
    if isinstance(item, str):
        return tokenize(item)
    if isinstance(item, (bytes, bytearray)) or not isinstance(item, Sequence):
        raise TypeError(f"{what} must be a str (text) or a sequence of str (tokens), got {type(item).__name__}")
    return item


class LexicalIndex:
    """Incremental Okapi BM25 index over documents with int64 keys, one namespace each.

    Documents are texts (tokenized with :func:`tokenize`) or ready token lists. Statistics are
    per namespace (see the module docs for the formula, ordering and padding). Removal is
    immediate for scoring and statistics; the storage of removed documents is reclaimed by an
    automatic compaction of a namespace once its removed documents outnumber its live ones.

    Thread safety: thread-safe. Many concurrent readers (``search``, ``search_many``,
    ``contains``, ``count``) or one writer (``add``, ``remove``, ``compact``) at a time, enforced
    by an internal reader/writer lock; the native work runs without the GIL. Tokenizing and
    hashing texts happens in the calling thread with the GIL held.

    Parameters
    ----------
    k1 : float
        Term-frequency saturation (>= 0).
    b : float
        Length normalisation in [0, 1].
    """

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        for name, v in (("k1", k1), ("b", b)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a float, got {type(v).__name__}")
        self._ix = _core.LexicalIndex(float(k1), float(b))

    @property
    def k1(self) -> float:
        return float(self._ix.k1)

    @property
    def b(self) -> float:
        return float(self._ix.b)

    def __len__(self) -> int:
        """Live documents in all namespaces."""
        return int(len(self._ix))

    def __repr__(self) -> str:
        return f"LexicalIndex(k1={self.k1}, b={self.b}, len={len(self)})"

    def count(self, namespace: NamespaceArg) -> int:
        """Live documents in ``namespace`` (0 for a namespace never used)."""
        return int(self._ix.count(_ns(namespace)))

    def stats(self, namespace: NamespaceArg) -> dict[str, int | float]:
        """``docs`` (N), ``avg_len`` (avgdl), ``terms`` (distinct live terms), ``postings``
        (stored, including removed documents not yet compacted) and ``dead_docs``."""
        return dict(self._ix.stats(_ns(namespace)))

    # -- writes --------------------------------------------------------------------------
    def add(
        self,
        keys: KeysArg,
        docs: Sequence[TokensOrText],
        namespace: NamespaceArg | Sequence[int] | npt.NDArray[np.uint64] = 0,
    ) -> None:
        """Add documents.

        Parameters
        ----------
        keys : int or sequence of int, shape (n,)
            New, distinct keys >= 0 (the caller's ids, e.g. memory item ids).
        docs : sequence of length n
            Each a text (``str``, tokenized with :func:`tokenize`) or a token list
            (``list[str]``, used as is). A document with no terms counts in N and avgdl but
            never matches.
        namespace : int, or sequence / ndarray of shape (n,) of ints in [0, 2**64)
            One namespace for all documents, or one per document.

        Raises
        ------
        TypeError
            A document is neither a str nor a sequence of str; non-integer keys.
        ValueError
            Mismatched lengths, a negative key, a key already present or repeated.
        """
        k = _as_keys(keys)
        if isinstance(docs, str) or not isinstance(docs, Sequence):
            raise TypeError(f"docs must be a sequence of texts or token lists (one per key), got {type(docs).__name__}")
        if len(docs) != len(k):
            raise ValueError(f"docs has {len(docs)} entries but keys has {len(k)}")
        ns = self._namespaces(namespace, len(k), "document")
        hashes, offsets = _core.lexical_hash_terms([_terms(d, f"docs[{i}]") for i, d in enumerate(docs)])
        self._ix.add(k, ns, hashes, offsets)

    def remove(self, keys: KeysArg, *, missing_ok: bool = False) -> int:
        """Remove documents by key; returns how many were removed.

        Raises
        ------
        IndexError
            A key is not in the index (unless ``missing_ok``); nothing is removed then.
        ValueError
            A key appears twice in ``keys``.
        """
        return int(self._ix.remove(_as_keys(keys), bool(missing_ok)))

    def compact(self) -> None:
        """Reclaim the storage of removed documents now (normally automatic)."""
        self._ix.compact()

    # -- reads ---------------------------------------------------------------------------
    def contains(self, keys: KeysArg) -> npt.NDArray[np.bool_]:
        """Whether each key names a live document, shape (n,)."""
        return self._ix.contains(_as_keys(keys))

    def search(
        self, query: TokensOrText, namespace: NamespaceArg = 0, k: int = 10
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-k documents of ``namespace`` for one query.

        Parameters
        ----------
        query : str (tokenized with :func:`tokenize`) or list of str (tokens)
        namespace : int in [0, 2**64)
        k : int >= 1

        Returns
        -------
        scores : ndarray, shape (k',), float32, descending, all > 0
        keys : ndarray, shape (k',), int64
            ``k' <= k`` is the number of documents sharing a term with the query (no padding).
        """
        k = check_k(k)
        ns = _ns(namespace)
        k_eff = max(1, min(k, self.count(ns)))
        hashes, offsets = _core.lexical_hash_terms([_terms(query, "query")])
        scores, keys = self._ix.search(hashes, offsets, ns, k_eff)
        hits = int(np.count_nonzero(keys[0] >= 0))
        return scores[0, :hits].copy(), keys[0, :hits].copy()

    def search_many(
        self,
        queries: Sequence[TokensOrText],
        namespaces: NamespaceArg | Sequence[int] | npt.NDArray[np.uint64] = 0,
        k: int = 10,
        *,
        threads: int = 0,
        allow: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-k for a batch of queries, each in its own namespace.

        Parameters
        ----------
        queries : sequence of length b of str or list of str
        namespaces : int (all queries) or sequence / ndarray of shape (b,) of ints in [0, 2**64)
        k : int >= 1
        threads : int
            Worker threads (0: default; the index uses one thread for small batches).
        allow : ndarray, shape (n,), int64, sorted ascending without repeats, optional
            Only these keys are candidates, for every query (read in place, not copied): a
            query returns ``min(k, matching allowed documents)`` results, as a search of an
            index holding only them would (BM25 statistics stay the namespace's).

        Returns
        -------
        scores : ndarray, shape (b, k), float32 (``-inf`` pads)
        keys : ndarray, shape (b, k), int64 (``-1`` pads)
        """
        k = check_k(k)
        if isinstance(queries, str) or not isinstance(queries, Sequence):
            raise TypeError(f"queries must be a sequence of texts or token lists, got {type(queries).__name__}")
        ns = self._namespaces(namespaces, len(queries), "query")
        hashes, offsets = _core.lexical_hash_terms([_terms(q, f"queries[{i}]") for i, q in enumerate(queries)])
        return self._ix.search(hashes, offsets, ns, k, int(threads), allow)

    @staticmethod
    def _namespaces(
        namespace: NamespaceArg | Sequence[int] | npt.NDArray[np.uint64], n: int, per: str
    ) -> int | npt.NDArray[np.uint64]:
        if isinstance(namespace, (bool, np.bool_)):
            raise TypeError("namespace must be an int or a sequence of ints, not bool")
        if isinstance(namespace, (int, np.integer)):
            return _ns(namespace)
        if isinstance(namespace, np.ndarray):
            if namespace.dtype.kind not in "iu":
                raise TypeError(f"namespaces must be integers, got dtype {namespace.dtype}")
            if namespace.dtype.kind == "i" and namespace.size and int(namespace.min()) < 0:
                raise ValueError("namespaces must be in [0, 2**64)")
            arr = np.ascontiguousarray(namespace, dtype=np.uint64)
        else:
            arr = np.array([_ns(v, "namespaces[i]") for v in namespace], dtype=np.uint64)
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ValueError(f"namespaces must be one int or one per {per} ({n}), got shape {arr.shape}")
        return arr
