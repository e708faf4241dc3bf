"""lamina.embedders.TextCache: each distinct text embedded once, copies out, LRU, clear."""

from __future__ import annotations

import numpy as np
import pytest

from lamina.embedders import TextCache, get_embedder


def test_each_distinct_text_is_embedded_once_and_results_are_copies() -> None:
    inner = get_embedder("hashing")
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return inner.embed(texts)

    c = TextCache(embed, inner.dim, max_texts=3)
    x = c(["a b", "c d", "a b"])
    assert calls == [["a b", "c d"]] and x.shape == (3, inner.dim)
    np.testing.assert_array_equal(x, inner.embed(["a b", "c d", "a b"]))
    x[:] = 0  # the caller's array is its own
    np.testing.assert_array_equal(c(["a b"]), inner.embed(["a b"]))
    assert calls == [["a b", "c d"]] and c.embedded == 2 and c.served == 2
    c(["e f", "g h"])  # capacity 3: the least recently used ("c d") goes
    assert len(c) == 3
    c(["c d"])
    assert calls[-1] == ["c d"]
    c.clear()
    assert len(c) == 0
    c(["a b"])
    assert calls[-1] == ["a b"]


def test_disabled_and_bad_capacity() -> None:
    inner = get_embedder("hashing")
    c = TextCache(inner.embed, inner.dim, max_texts=0)
    c(["x y"])
    c(["x y"])
    assert c.embedded == 2 and len(c) == 0
    with pytest.raises(ValueError, match="max_texts"):
        TextCache(inner.embed, inner.dim, max_texts=-1)
