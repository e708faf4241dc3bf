"""Position handling of the runtime: Ms-PoE's settings and the copy-head probe.

Ms-PoE (Zhang et al. 2024, "Found in the Middle: How Language Models Use Long Contexts Better
via Plug-and-Play Positional Encoding") rotates each attention head at position p / r_h
instead of p, with ratios r_i = ratio_min + (ratio_max - ratio_min) · i / H spread over the
heads; heads are ranked by the outlier share of the prompt's last attention row (the most
position-aware head gets the smallest ratio). The native forward does the scoring, the
assignment and the rotation (``cpp/lamina/model.hpp``, "Position scaling"; on CUDA
``cuda/model.hpp``, the window variant included); this
module holds the validated settings (:class:`MsPoE`) and finds the copy heads — previous-token
and induction heads, which need an offset of exactly 1 between neighbours — from their
attention on a probe of random tokens repeated twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput

__all__ = [
    "POSITIONS",
    "ORDERS",
    "MsPoE",
    "probe_ids",
    "copy_head_scores",
    "select_copy_heads",
]

#: Values of ``lamina.model.load(position=...)``.
POSITIONS = ("rope", "ms-poe")
#: How the ranked heads take their ratios: "rank" (rank k gets r_k, the paper's rule),
#: "gather" (head g gets r_{order[g]}: the released code indexes its ratio table with the
#: permutation itself) and "normal" (the fixed order of the released code, no ranking).
ORDERS = ("rank", "gather", "normal")

HeadSet = frozenset[tuple[int, int]]


@dataclass(frozen=True)
class MsPoE:
    """Ms-PoE settings (``lamina.model.load(position="ms-poe", ms_poe=MsPoE(...))``).

    Parameters
    ----------
    order : {"rank", "gather", "normal"}
        See :data:`ORDERS`. With grouped-query attention a KV head and its group of query
        heads share one ratio: the groups are ranked by their heads' mean outlier share and
        take r_i = ratio_min + (ratio_max - ratio_min) · i / n_kv_heads.
    ratio_min, ratio_max : float
        The ratio range (the paper's 1.2 and 1.8); 0 < ratio_min <= ratio_max. Both 1 gives
        the plain model's logits exactly.
    first_layer : int
        Layers first_layer … L−1 are rescaled (the released code starts at 2).
    window : int
        0: every distance δ is compressed to δ / r. >0: distances below ``window`` stay exact
        and δ >= window becomes window + (δ − window) / r (local offsets of 1 kept).
    copy_heads : bool or frozenset of (layer, query head)
        Query heads kept at ratio 1: True finds the previous-token and induction heads from
        their attention on a probe (:func:`copy_head_scores`, scores above
        ``copy_threshold``); a set names them.
    copy_threshold : float
        Attention share in (0, 1) from which a head counts as a copy head.

    Raises
    ------
    InvalidInput
        A value out of range (the message names the field).
    TypeError
        A field of the wrong type.

    Notes
    -----
    Immutable, hence thread-safe.
    """

    order: str = "rank"
    ratio_min: float = 1.2
    ratio_max: float = 1.8
    first_layer: int = 2
    window: int = 0
    copy_heads: bool | HeadSet = False
    copy_threshold: float = 0.4

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise InvalidInput(f"order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        for name in ("ratio_min", "ratio_max", "copy_threshold"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a float, got {type(v).__name__}")
            if not np.isfinite(v):
                raise InvalidInput(f"{name} must be finite, got {v}")
        if not 0.0 < self.ratio_min <= self.ratio_max:
            raise InvalidInput(f"need 0 < ratio_min <= ratio_max, got {self.ratio_min}, {self.ratio_max}")
        if not 0.0 < self.copy_threshold < 1.0:
            raise InvalidInput(f"copy_threshold must be in (0, 1), got {self.copy_threshold}")
        for name in ("first_layer", "window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v < 0:
                raise InvalidInput(f"{name} must be >= 0, got {v}")
        ch = self.copy_heads
        if not isinstance(ch, bool):
            if not isinstance(ch, frozenset):
                raise TypeError(f"copy_heads must be a bool or a frozenset of (layer, head), got {type(ch).__name__}")
            for pair in ch:
                if not (
                    isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, int) and x >= 0 for x in pair)
                ):
                    raise InvalidInput(f"copy_heads entries must be (layer, head) pairs of ints >= 0, got {pair!r}")

    def ratios(self, n_kv_heads: int) -> list[float]:
        """The ratios r_i, i < n_kv_heads, in float32 as the native forward computes them."""
        lo, hi = np.float32(self.ratio_min), np.float32(self.ratio_max)
        return [float(lo + (hi - lo) * np.float32(i) / np.float32(n_kv_heads)) for i in range(n_kv_heads)]

    def native(self, n_layers: int, n_heads: int, copy_heads: HeadSet) -> dict[str, Any]:
        """The settings dict ``lamina._core.LlamaModel(position=...)`` takes.

        Raises
        ------
        InvalidInput
            first_layer beyond the model's layers, or a copy head outside (n_layers, n_heads).
        """
        if self.first_layer > n_layers:
            raise InvalidInput(f"first_layer {self.first_layer} exceeds the model's {n_layers} layers")
        plain = None
        if copy_heads:
            plain = np.zeros((n_layers, n_heads), dtype=np.uint8)
            for layer, head in copy_heads:
                if layer >= n_layers or head >= n_heads:
                    raise InvalidInput(f"copy head ({layer}, {head}) is outside ({n_layers} layers, {n_heads} heads)")
                plain[layer, head] = 1
        return {
            "first_layer": self.first_layer,
            "ratio_min": float(self.ratio_min),
            "ratio_max": float(self.ratio_max),
            "order": self.order,
            "window": self.window,
            "plain_heads": plain,
        }


def probe_ids(vocab_size: int, *, half: int = 64, seed: int = 0, skip: int = 256) -> npt.NDArray[np.int32]:
    """Random token ids (from ``skip`` on: no control tokens) repeated twice: shape (2·half,).

    A previous-token head attends from t to t − 1; an induction head, in the second copy,
    to the token after the earlier occurrence of the current one (t − half + 1).
    """
    if half < 2 or vocab_size <= skip + half:
        raise InvalidInput(f"probe needs half >= 2 and a vocabulary above {skip + half}, got {half}, {vocab_size}")
    rng = np.random.default_rng(seed)
    first = rng.choice(np.arange(skip, vocab_size), size=half, replace=False)
    return np.concatenate([first, first]).astype(np.int32)


def copy_head_scores(
    attention: npt.NDArray[np.float32], half: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Previous-token and induction scores of every head on a :func:`probe_ids` sequence.

    Parameters
    ----------
    attention : ndarray, float32, shape (L, H, T, T)
        Softmax rows of every query (T = 2·half).
    half : int

    Returns
    -------
    (previous, induction) : ndarray, float64, shape (L, H) each
        Mean attention of query t on t − 1 (t >= 1), and of the second copy's queries
        (t in [half, 2·half − 1)) on t − half + 1.
    """
    a = np.asarray(attention)
    if a.ndim != 4 or a.shape[2] != a.shape[3] or a.shape[2] != 2 * half:
        raise InvalidInput(f"attention must be (L, H, {2 * half}, {2 * half}), got {a.shape}")
    t = np.arange(1, 2 * half)
    previous = a[:, :, t, t - 1].astype(np.float64).mean(-1)
    s = np.arange(half, 2 * half - 1)
    induction = a[:, :, s, s - half + 1].astype(np.float64).mean(-1)
    return previous, induction


def select_copy_heads(
    previous: npt.NDArray[np.float64], induction: npt.NDArray[np.float64], threshold: float
) -> HeadSet:
    """The (layer, head) pairs whose previous-token or induction score exceeds ``threshold``."""
    hit = (np.asarray(previous) > threshold) | (np.asarray(induction) > threshold)
    return frozenset((int(layer), int(head)) for layer, head in zip(*np.nonzero(hit)))
