"""A GGUF file's tensors handed to the native runtime, still in their stored encodings.

The arrays passed to ``lamina._core.LlamaModel`` are views of the memory-mapped file (raw GGML
blocks for Q4_0/Q4_1/Q8_0, float16/float32 rows otherwise), kept alive by the native model
object. The native model repacks the block-quantised matrices once into its own interleaved
copy (the same bytes, rearranged for integer SIMD dot products); the file's pages it read to
do so are then handed back to the OS (``MADV_DONTNEED`` on the read-only mapping: the few
still used — norms, float matrices — fault back in from the file), so the weights are resident
once, not twice.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from .. import _core
from .gguf_file import GGUFModelFile, GGUFTensor

__all__ = ["native_model", "cuda_model", "weight_bytes"]

_VIEW: dict[str, Any] = {"F32": np.float32, "F16": np.float16}


def _view(t: GGUFTensor) -> np.ndarray[Any, Any]:
    # a view with numpy's canonical dtype object (the bindings check dtypes by identity)
    return t.data.view(_VIEW.get(t.type, np.uint8))


def native_model(
    f: GGUFModelFile, position: dict[str, Any] | None = None, *, q8_prefill: bool = True
) -> _core.LlamaModel:
    """The native model over the file's tensors (zero-copy).

    Parameters
    ----------
    f : GGUFModelFile
    position : dict, optional
        Ms-PoE settings (:meth:`lamina.model.position.MsPoE.native`); None: plain RoPE.
    q8_prefill : bool
        int8 activations on the prefill (``LlamaModel.q8_prefill``).

    Returns
    -------
    lamina._core.LlamaModel

    Raises
    ------
    ValueError
        A tensor is missing or has a shape the configuration does not expect.
    """
    config = _config(f)
    tensors = {name: (t.type, _view(t)) for name, t in f.tensors.items()}
    native = _core.LlamaModel(config, tensors, position)
    native.q8_prefill = bool(q8_prefill)
    _release_pages(f)
    return native


def cuda_model(f: GGUFModelFile, position: dict[str, Any] | None = None) -> _core.CudaLlamaModel:
    """The CUDA model of the file (CUDA builds): every matrix dequantised to fp16 on the host
    and uploaded to the current device; the file's pages are released afterwards (the device
    holds the only copy the forward reads).

    Raises
    ------
    ValueError
        A tensor is missing or has a shape the configuration does not expect.
    """
    tensors = {name: (t.type, _view(t)) for name, t in f.tensors.items()}
    native = _core.CudaLlamaModel(_config(f), tensors, position)
    _release_pages(f)
    return native


def _config(f: GGUFModelFile) -> dict[str, int | float]:
    c = f.config
    return {
        "n_layers": c.n_layers,
        "d_model": c.d_model,
        "d_ff": c.d_ff,
        "n_heads": c.n_heads,
        "n_kv_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab_size,
        "rope_base": c.rope_base,
        "rms_eps": c.rms_eps,
    }


def _release_pages(f: GGUFModelFile) -> None:
    """Drop the file's resident pages from this process (see the module docstring)."""
    maps: dict[int, mmap.mmap] = {}
    for t in f.tensors.values():
        b: Any = t.data
        while b is not None and not isinstance(b, mmap.mmap):
            b = getattr(b, "base", None)
        if b is not None:
            maps[id(b)] = b
    for m in maps.values():
        if hasattr(m, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # advice only: a failure costs memory, not results
                pass


def weight_bytes(f: GGUFModelFile) -> int:
    """Bytes of all tensors as stored (what the runtime reads per token, output included)."""
    return int(sum(t.data.nbytes for t in f.tensors.values()))
