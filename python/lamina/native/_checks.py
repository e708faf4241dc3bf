"""Checks of the integer arguments the native wrappers pass to ``lamina._core`` (which takes
only C++ integers): one place for their TypeError / ValueError messages."""

from __future__ import annotations

import numpy as np

__all__ = ["check_int", "check_k", "check_threads"]


def check_int(x: object, name: str, lo: int, hi: int | None = None, *, note: str = "") -> int:
    """``x`` as a Python int in ``[lo, hi]`` (no upper bound when ``hi`` is None).

    Raises
    ------
    TypeError
        ``x`` is not an int (a bool is not one; numpy integers are).
    ValueError
        ``x`` is out of range; the message names ``name``, the range, ``note`` and ``x``.
    """
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    if x < lo or (hi is not None and x > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {rng}{note}, got {x}")
    return int(x)


def check_k(k: object) -> int:
    """``k`` of a top-k search: an int >= 1."""
    return check_int(k, "k", 1)


def check_threads(threads: object) -> int:
    """``threads``: worker threads, an int >= 0 (0: lamina's default)."""
    return check_int(threads, "threads", 0, note=" (0: default)")
