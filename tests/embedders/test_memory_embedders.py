"""The native hashing embedder and the embedder resolver."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina import _core
from lamina.embedders import Embedder, Hashing, get_embedder


def _fnv1a64(b: bytes) -> int:
    h = 1469598103934665603
    for c in b:
        h ^= c
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


@given(st.binary(max_size=64))
def test_fnv1a_matches_reference(b: bytes) -> None:
    assert _core.HashingEmbedder.fnv1a64(b) == _fnv1a64(b)


@given(st.lists(st.text(min_size=1, max_size=80).filter(lambda s: s.strip()), min_size=1, max_size=8))
def test_unit_norm_and_shape(texts: list[str]) -> None:
    e = Hashing(dim=64)
    x = e.embed(texts)
    assert x.shape == (len(texts), 64) and x.dtype == np.float32 and x.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    # batch result equals one-by-one (no cross-talk between threads)
    for i, t in enumerate(texts):
        np.testing.assert_array_equal(e.embed([t])[0], x[i])


def test_case_and_apostrophes_and_similarity() -> None:
    e = Hashing()
    a, b, c, d = e.embed(["I moved to PARIS", "i moved to paris", "I don't know", "I dont know"])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, d)
    x = e.embed(["I moved to Paris last spring", "she lives in Paris now", "my dog is called Max"])
    s = x @ x.T
    assert s[0, 1] > s[0, 2]


def test_deterministic_across_processes() -> None:
    """Same bytes in a fresh interpreter (no per-process hash seeds)."""
    code = (
        "import hashlib,sys; from lamina.embedders import Hashing; "
        "x=Hashing().embed(['Caroline went to the LGBTQ support group', 'héllo wörld 42']); "
        "sys.stdout.write(hashlib.sha256(x.tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": os.environ.get("PATH", ""), "PYTHONPATH": ":".join(sys.path)},
    )
    x = Hashing().embed(["Caroline went to the LGBTQ support group", "héllo wörld 42"])
    assert out.stdout == hashlib.sha256(x.tobytes()).hexdigest()


def test_punctuation_only_text_embeds() -> None:
    x = Hashing().embed(["?!", "..."])
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)


def test_bad_input() -> None:
    e = Hashing()
    with pytest.raises(ValueError, match="empty"):
        e.embed(["ok", "  "])
    with pytest.raises(TypeError):
        e.embed("just a string")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        e.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        Hashing(dim=4)
    with pytest.raises(TypeError):
        Hashing(dim=3.5)  # type: ignore[arg-type]
    assert e.embed([]).shape == (0, 384)


def test_get_embedder() -> None:
    assert isinstance(get_embedder("hashing"), Hashing)
    assert get_embedder("hashing-128").dim == 128
    auto = get_embedder("auto")
    assert isinstance(auto, Embedder) and auto.name
    h = Hashing(dim=32)
    assert get_embedder(h) is h
    with pytest.raises(ValueError):
        get_embedder("word2vec")
    with pytest.raises(TypeError):
        get_embedder(42)  # type: ignore[arg-type]
