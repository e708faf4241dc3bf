"""The transformer-encoder forward shared by lamina's torch-free sentence embedders.

:class:`SentenceEncoder` holds what BERT-family sentence models have in common — the
tokenizer (``tokenizers``), the per-layer weights, the batched forward pass (fused Q/K/V,
post-LayerNorm blocks, exact erf GELU), mean pooling over real tokens and L2 normalisation.
A model module (:mod:`.minilm`, :mod:`.mpnet`) loads its checkpoint's tensors into
:class:`Layer` tuples and supplies the two parts that differ between architectures: the input
embeddings (:meth:`SentenceEncoder._embed_ids`) and an optional additive attention bias
(:meth:`SentenceEncoder._attention_bias`, MPNet's relative position buckets).

Speed comes from batching: texts are sorted by length and cut into batches so that padding is
small, every projection is one float32 matrix product over all tokens of the batch, attention
is one batched matmul per layer with an additive padding mask, and the element-wise work
(GELU, LayerNorm, softmax) runs in place on the whole batch. There is no per-token Python loop.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from .. import _core
from .embedder import Span, SpanVectors, check_spans

__all__ = [
    "Layer",
    "ModelFolder",
    "SentenceEncoder",
    "find_model_dir",
    "load_tokenizer",
    "make_layer",
    "make_layers",
]

F32 = npt.NDArray[np.float32]
_SCORE_FLOOR = np.float32(-80.0)


class Layer(NamedTuple):
    """One post-LayerNorm encoder block; matrices stored (in, out) so that ``x @ W`` is a
    row-major GEMM. ``wqkv`` is Q, K and V fused: shape (hidden, 3 * hidden)."""

    wqkv: F32
    bqkv: F32
    wo: F32
    bo: F32
    ln1_w: F32
    ln1_b: F32
    w1: F32
    b1: F32
    w2: F32
    b2: F32
    ln2_w: F32
    ln2_b: F32


def make_layer(
    get: Callable[[str], F32], q: str, k: str, v: str, o: str, ln1: str, up: str, down: str, ln2: str
) -> Layer:
    """Build a :class:`Layer` from torch ``Linear``/``LayerNorm`` tensor name prefixes.

    ``get(name)`` returns a float32 tensor; torch ``Linear`` stores weights (out, in), so they
    are transposed here.
    """

    def t(name: str) -> F32:
        return np.ascontiguousarray(get(name + ".weight").T)

    return Layer(
        np.ascontiguousarray(np.concatenate([t(n) for n in (q, k, v)], axis=1)),
        np.concatenate([get(n + ".bias") for n in (q, k, v)]),
        t(o),
        get(o + ".bias"),
        get(ln1 + ".weight"),
        get(ln1 + ".bias"),
        t(up),
        get(up + ".bias"),
        t(down),
        get(down + ".bias"),
        get(ln2 + ".weight"),
        get(ln2 + ".bias"),
    )


def make_layers(
    get: Callable[[str], F32], prefix: str, n_layers: int, *, qkvo: tuple[str, str, str, str], attention_norm: str
) -> list[Layer]:
    """The encoder's ``n_layers`` layers (:func:`make_layer`); layer ``i``'s tensors are named
    ``f"{prefix}{i}.{name}"``: the attention's q, k, v and output projections (``qkvo``) and its
    LayerNorm (``attention_norm``) as the checkpoint names them, the feed-forward's
    ``intermediate.dense``, ``output.dense`` and ``output.LayerNorm`` as BERT and MPNet both do."""
    layers = []
    for i in range(n_layers):
        p = f"{prefix}{i}."
        q, k, v, o = (p + name for name in qkvo)
        layers.append(
            make_layer(
                get,
                q,
                k,
                v,
                o,
                p + attention_norm,
                p + "intermediate.dense",
                p + "output.dense",
                p + "output.LayerNorm",
            )
        )
    return layers


def load_tokenizer(path: Path, max_length: int) -> object:
    """A ``tokenizers.Tokenizer`` truncating at ``max_length`` with padding off.

    The ``tokenizer.json`` files of sentence-transformers checkpoints ship with truncation at
    128 and fixed padding: both differ from sentence-transformers' behaviour (truncate at
    ``max_seq_length``, no padding). A ``.gz`` file is read decompressed.
    """
    from tokenizers import Tokenizer

    if path.suffix == ".gz":
        tok = Tokenizer.from_str(gzip.decompress(path.read_bytes()).decode("utf-8"))
    else:
        tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def _check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list; ``TypeError`` for a bare string or a non-string element."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of strings, not a single string: wrap it in [ ]")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
    return out


@dataclass(frozen=True)
class ModelFolder:
    """Where a sentence model's files are: ``what`` names the model in messages (``"MiniLM"``),
    ``find()`` is the folder used when none is given (or None), ``complete(folder)`` whether a
    folder holds every file the model needs, ``missing_help()`` how to install them."""

    what: str
    find: Callable[[], Path | None]
    complete: Callable[[Path], bool]
    missing_help: Callable[[], str]


def find_model_dir(*, env: str, package: str, sub: str, complete: Callable[[Path], bool]) -> Path | None:
    """A model's folder, or ``None``: the folder ``$env`` names when set (``None`` when it is
    not ``complete``), else the ``sub`` folder of the installed ``package`` (found without
    importing it, so its own declared dependencies need not be installed)."""
    named = os.environ.get(env)
    if named:
        d = Path(named)
        return d if complete(d) else None
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            d = Path(loc) / sub
            if complete(d):
                return d
    return None


class SentenceEncoder(ABC):
    """Base of the torch-free sentence embedders: batching, encoder forward, pooling.

    Parameters
    ----------
    model_dir : str or Path, optional
        Folder with ``config.json``, ``tokenizer.json`` and ``model.safetensors`` (a Hugging
        Face checkpoint of the subclass's architecture). Default: the folder its ``find()`` names.
    max_length : int, optional
        Tokens per text, special tokens included (default: the model's ``max_seq_length``).
        Longer texts are truncated.
    batch_size : int
        Most texts per forward pass (default 64).
    max_batch_tokens : int
        Most padded tokens per forward pass (default 4096): texts are sorted by length and
        batched so that long texts go together in smaller batches.

    A subclass names its :class:`ModelFolder` (``_folder``) and implements :meth:`_load`, which
    calls :meth:`_set_max_length` (setting ``max_length`` and the tokenizer), sets ``_layers``
    (list of :class:`Layer`), ``_hidden``, ``_heads`` and ``_eps``, and :meth:`_embed_ids`;
    :meth:`_attention_bias` defaults to none.
    """

    _folder: ClassVar[ModelFolder]

    _tok: object
    model_dir: Path
    _layers: list[Layer]
    _hidden: int
    _heads: int
    _eps: float
    max_length: int
    batch_size: int
    max_batch_tokens: int

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_length: int | None = None,
        batch_size: int = 64,
        max_batch_tokens: int = 4096,
    ) -> None:
        self._load(self._open_folder(model_dir, batch_size=batch_size, max_batch_tokens=max_batch_tokens), max_length)

    @abstractmethod
    def _load(self, load_file: Callable[[str], dict[str, npt.NDArray[np.generic]]], max_length: int | None) -> None:
        """Read ``config.json`` and the weights of ``model_dir`` (``load_file``:
        ``safetensors.numpy.load_file``) and set the tokenizer for ``max_length``."""

    def _open_folder(
        self, model_dir: str | Path | None, *, batch_size: int, max_batch_tokens: int
    ) -> Callable[[str], dict[str, npt.NDArray[np.generic]]]:
        """Check the libraries, resolve the model folder (``_folder.find()`` when none is given)
        and the batch sizes; sets ``model_dir``, ``batch_size`` and ``max_batch_tokens``;
        returns ``safetensors.numpy.load_file``."""
        what, find, complete, missing_help = (
            self._folder.what,
            self._folder.find,
            self._folder.complete,
            self._folder.missing_help,
        )
        try:
            import tokenizers  # noqa: F401
            from safetensors.numpy import load_file
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"{what} needs the `tokenizers` and `safetensors` packages: "
                "pip install 'lamina[minilm]' (or pip install tokenizers safetensors)"
            ) from e
        if model_dir is None:
            found = find()
            if found is None:
                raise FileNotFoundError(missing_help())
            model_dir = found
        d = Path(model_dir)
        if not d.is_dir() or not complete(d):
            raise FileNotFoundError(f"{d} is not a {what} model folder: {missing_help()}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be a positive int, got {max_batch_tokens!r}")
        self.model_dir = d
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        result: Callable[[str], dict[str, npt.NDArray[np.generic]]] = load_file
        return result

    def _read_config(self, model_type: str, *, label: str, untyped_ok: bool = False) -> dict[str, Any]:
        """The folder's ``config.json``, checked to describe a ``model_type`` model with GELU
        activations (``untyped_ok``: a file without ``model_type`` counts as one; ``label`` names
        the kind in the error); sets ``_hidden`` and ``_heads``."""
        d = self.model_dir
        cfg: dict[str, Any] = json.loads((d / "config.json").read_text())
        kind = cfg.get("model_type", model_type if untyped_ok else None)
        if kind != model_type or cfg.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{d}/config.json is not {label} model with GELU activations")
        self._hidden = int(cfg["hidden_size"])
        self._heads = int(cfg["num_attention_heads"])
        return cfg

    def _set_max_length(
        self, max_length: int | None, max_pos: int, *, model_max: int | None = None, tokenizer: Path | None = None
    ) -> None:
        """``max_length`` (default: ``model_max``, else the folder's ``sentence_bert_config.json``
        ``max_seq_length``, else ``max_pos``), checked against ``max_pos``; loads the tokenizer
        (``tokenizer``, default the folder's ``tokenizer.json``) truncating there."""
        st_cfg = self.model_dir / "sentence_bert_config.json"
        if model_max is None:
            model_max = (
                int(json.loads(st_cfg.read_text()).get("max_seq_length", max_pos)) if st_cfg.is_file() else max_pos
            )
        if max_length is None:
            max_length = min(model_max, max_pos)
        if not isinstance(max_length, int) or not 2 <= max_length <= max_pos:
            raise ValueError(f"max_length must be an int in [2, {max_pos}], got {max_length!r}")
        self.max_length = max_length
        self._tok = load_tokenizer(tokenizer or self.model_dir / "tokenizer.json", max_length)

    @staticmethod
    def _has_libraries() -> bool:
        """Whether ``tokenizers`` and ``safetensors`` are importable (without importing them)."""
        return (
            importlib.util.find_spec("tokenizers") is not None and importlib.util.find_spec("safetensors") is not None
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_dir={str(self.model_dir)!r}, dim={self.dim}, max_length={self.max_length})"

    @property
    def dim(self) -> int:
        """Embedding width."""
        return self._hidden

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, with the model's special tokens, truncated to ``max_length``."""
        texts = _check_texts(texts)
        return [e.ids for e in self._tok.encode_batch(texts)]  # type: ignore[attr-defined]

    def embed(self, texts: Sequence[str]) -> F32:
        """Embed texts.

        Parameters
        ----------
        texts : sequence of str, length n

        Returns
        -------
        ndarray, shape (n, dim), float32, C-contiguous; each row has unit L2 norm.
        """
        texts = _check_texts(texts)
        n = len(texts)
        out = np.empty((n, self._hidden), dtype=np.float32)
        if n == 0:
            return out
        ids = self.tokenize(texts)
        for sel in self._length_batches([len(x) for x in ids]):
            out[sel] = self._forward([ids[i] for i in sel])
        return out

    def _length_batches(self, lengths: Sequence[int]) -> list[npt.NDArray[np.int64]]:
        """Indices of id lists in batches of similar length: at most ``batch_size`` lists and at
        most ``max_batch_tokens`` padded positions, so one long text never pads a whole batch
        of short ones."""
        n = len(lengths)
        lens = np.asarray(lengths, dtype=np.int64)
        order = np.argsort(lens, kind="stable")
        out: list[npt.NDArray[np.int64]] = []
        start = 0
        while start < n:
            stop = start + 1
            while (
                stop < n
                and stop - start < self.batch_size
                and (stop - start + 1) * lens[order[stop]] <= self.max_batch_tokens
            ):
                stop += 1
            out.append(order[start:stop])
            start = stop
        return out

    def embed_spans(self, texts: list[str], spans: list[list[Span]]) -> list[SpanVectors]:
        """Embed each text once and pool its token states over character spans ("late chunking").

        A text is tokenized without truncation and encoded in windows of at most
        ``max_length`` positions (its special tokens included); a text longer than one window
        is cut between spans where it can (inside a span only when one span is longer than a
        window). A token belongs to every span its characters overlap.

        Parameters
        ----------
        texts : list of str, length n
        spans : list of n lists of (start, end) character ranges (``0 <= start < end <= len``)

        Returns
        -------
        list of n :class:`SpanVectors`: ``whole`` (dim,), the mean of every token state of the
        text (equal to :meth:`embed` of a text within one window); ``spans`` (m_i, dim), the
        mean of the states of each span's tokens; all rows unit norm.
        """
        texts = _check_texts(texts)
        spans = check_spans(texts, spans)
        if not texts:
            return []
        pre, post = self._specials()
        room = self.max_length - len(pre) - len(post)
        encs = self._tok_full().encode_batch(texts, add_special_tokens=False)  # type: ignore[attr-defined]
        windows: list[list[int]] = []
        plan: list[tuple[list[tuple[int, int, int]], npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        for enc, ss in zip(encs, spans):
            tok_ids = list(enc.ids)
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            # token range [a, b) of each span: tokens whose characters overlap it
            a = np.searchsorted(offs[:, 1], [sp[0] for sp in ss], side="right").astype(np.int64)
            b = np.searchsorted(offs[:, 0], [sp[1] for sp in ss], side="left").astype(np.int64)
            cuts = _window_cuts(len(tok_ids), room, a)
            wins = []
            for lo, hi in zip(cuts[:-1], cuts[1:]):
                wins.append((len(windows), lo, hi))
                windows.append(pre + tok_ids[lo:hi] + post)
            plan.append((wins, a, b))
        states: list[F32] = [np.empty((0, self._hidden), np.float32)] * len(windows)
        for sel in self._length_batches([len(w) for w in windows]):
            x3, _ = self._token_states([windows[i] for i in sel])
            for row, i in enumerate(sel):
                states[i] = x3[row, : len(windows[i])]
        out: list[SpanVectors] = []
        npre = len(pre)
        for (wins, a, b), ss in zip(plan, spans):
            whole_sum = np.zeros(self._hidden, np.float64)
            count = 0
            n_tok = wins[-1][2] if wins else 0
            tok = np.zeros((n_tok, self._hidden), np.float32)  # each content token's state
            for w, lo, hi in wins:
                st = states[w]
                whole_sum += st.sum(axis=0, dtype=np.float64)
                count += len(st)
                tok[lo:hi] = st[npre : npre + hi - lo]
            whole = (whole_sum / max(count, 1)).astype(np.float32)
            whole /= np.float32(np.linalg.norm(whole))
            V = np.empty((len(ss), self._hidden), np.float32)
            for j in range(len(ss)):
                if b[j] > a[j]:
                    v = tok[a[j] : b[j]].mean(axis=0)
                    nv = np.linalg.norm(v)
                    V[j] = v / nv if nv > 0 else whole
                else:
                    V[j] = whole
            out.append(SpanVectors(whole=whole, spans=V))
        return out

    def _specials(self) -> tuple[list[int], list[int]]:
        """The special token ids the tokenizer puts before and after a text (BERT: [CLS], [SEP])."""
        both = list(self._tok.encode("", add_special_tokens=True).ids)  # type: ignore[attr-defined]
        return both[:1], both[1:]

    def _tok_full(self) -> object:
        """The tokenizer without truncation (late chunking reads a long text in windows)."""
        t = getattr(self, "_tok_untruncated", None)
        if t is None:
            from tokenizers import Tokenizer

            t = Tokenizer.from_str(self._tok.to_str())  # type: ignore[attr-defined]
            t.no_truncation()
            t.no_padding()
            self._tok_untruncated = t
        return t

    @abstractmethod
    def _embed_ids(self, ids: npt.NDArray[np.int64]) -> F32:
        """Input embeddings after their LayerNorm: ids (b, T) -> (b * T, hidden)."""

    def _attention_bias(self, T: int) -> F32 | None:
        """Additive attention bias (heads, T, T) shared by every layer, or ``None``."""
        return None

    def _forward(self, batch: list[list[int]]) -> F32:
        """Encode one batch of id lists -> (b, hidden) unit-norm float32: mean pooling over real
        tokens, then L2 normalisation."""
        x3, mask = self._token_states(batch)
        pooled: F32 = np.einsum("bth,bt->bh", x3, mask) / mask.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled.astype(np.float32, copy=False)

    def _token_states(self, batch: list[list[int]]) -> tuple[F32, F32]:
        """The last layer's token states of one batch of id lists: (b, T, hidden) and the
        real-token mask (b, T) (T the longest list; padded positions masked out)."""
        b = len(batch)
        T = max(len(x) for x in batch)
        H, nh = self._hidden, self._heads
        hd = H // nh
        ids = np.zeros((b, T), dtype=np.int64)
        mask = np.zeros((b, T), dtype=np.float32)
        for i, row_ids in enumerate(batch):
            ids[i, : len(row_ids)] = row_ids
            mask[i, : len(row_ids)] = 1.0
        x = self._embed_ids(ids)

        # Additive key mask, as transformers does (finfo.min for padded keys), and the model's
        # position bias when it has one (heads, T, T): both broadcast into the scores per layer.
        neg: F32 = ((1.0 - mask) * np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
        bias = self._attention_bias(T)
        scale = np.float32(1.0 / np.sqrt(hd))
        ff = np.empty((b * T, self._layers[0].w1.shape[1]), dtype=np.float32)
        for L in self._layers:
            qkv = x @ L.wqkv
            qkv += L.bqkv
            qkv = qkv.reshape(b, T, 3, nh, hd).transpose(2, 0, 3, 1, 4)  # (3, b, nh, T, hd)
            q, k, v = qkv[0], qkv[1], qkv[2]
            q *= scale
            sc = q @ k.transpose(0, 1, 3, 2)  # (b, nh, T, T)
            if bias is not None:
                sc += bias
            sc += neg
            sc -= sc.max(axis=-1, keepdims=True)
            # exp(< -80) would give float32 denormals, which make every later multiply (and
            # the BLAS product with V) take microcode assists, ~100x slower. Their weight is
            # below 2e-35 against the row maximum's 1: clamping changes no output bit.
            np.maximum(sc, _SCORE_FLOOR, out=sc)
            np.exp(sc, out=sc)
            sc /= sc.sum(axis=-1, keepdims=True)
            ctx = np.ascontiguousarray((sc @ v).transpose(0, 2, 1, 3)).reshape(b * T, H)
            a = ctx @ L.wo
            a += L.bo
            _core.add_layer_norm_(a, x, L.ln1_w, L.ln1_b, self._eps)  # a <- LN(a + x)
            np.matmul(a, L.w1, out=ff)
            _core.bias_gelu_(ff, L.b1)  # ff <- GELU(ff + b1), exact erf form
            x = ff @ L.w2
            x += L.b2
            _core.add_layer_norm_(x, a, L.ln2_w, L.ln2_b, self._eps)  # x <- LN(x + a)

        return x.reshape(b, T, H), mask


def _window_cuts(n: int, room: int, span_starts: npt.NDArray[np.int64]) -> list[int]:
    """Token positions cutting ``n`` tokens into windows of at most ``room`` tokens, each cut at
    the last span start that fits (inside a span only when none does): [0, ..., n]."""
    cuts = [0]
    starts = np.unique(span_starts)
    while n - cuts[-1] > room:
        lo, hi = cuts[-1], cuts[-1] + room
        k = int(np.searchsorted(starts, hi, side="right")) - 1
        cuts.append(int(starts[k]) if k >= 0 and starts[k] > lo else hi)
    cuts.append(n)
    return cuts  # [0, 0] for no tokens: one window of the special tokens alone
