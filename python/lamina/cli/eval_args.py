"""Argument helpers shared by the evaluation commands (``lamina eval locomo``, ``longmemeval``)."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

__all__ = ["budgets_arg", "default_cache", "json_safe"]


def budgets_arg(s: str) -> list[int]:
    """``--budgets``: comma-separated positive token budgets."""
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be comma-separated integers, got {s!r}") from None
    if not out or any(b < 1 for b in out):
        raise argparse.ArgumentTypeError(f"budgets must be positive, got {s!r}")
    return out


def default_cache() -> str:
    """``$LAMINA_CACHE_DIR/eval-vectors.sqlite`` (default ``~/.cache/lamina``)."""
    root = os.environ.get("LAMINA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lamina")
    return os.path.join(root, "eval-vectors.sqlite")


def json_safe(x: Any) -> Any:
    """``x`` with NaN / Inf floats as None (JSON has neither), containers converted throughout."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
