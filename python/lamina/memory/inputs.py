"""Checks of the caller's arguments: identifiers, event times, budgets, ``k``, layer names.

Each check returns the value in the form the memory loop uses, or raises ``TypeError`` (wrong
type) / :class:`lamina.InvalidInput` (a value it cannot accept) naming the argument.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Sequence

import numpy as np

from ..errors import InvalidInput
from ..items import LAYERS

__all__ = ["TimeLike", "to_time", "check_id", "check_count", "check_layers", "wall_clock"]

#: An event time: seconds since the Unix epoch, a ``datetime`` (naive means UTC) or an ISO-8601
#: string; None where the argument is optional.
TimeLike = float | int | _dt.datetime | str | None


def wall_clock() -> float:
    """Seconds since the epoch, now (used only where the caller gives no event time)."""
    return time.time()


def to_time(t: TimeLike, what: str) -> float | None:
    """Seconds since the epoch of ``t`` (None stays None)."""
    if t is None:
        return None
    if isinstance(t, bool):
        raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, not bool")
    if isinstance(t, (int, float, np.integer, np.floating)):
        v = float(t)
        if not math.isfinite(v):
            raise InvalidInput(f"{what} must be finite, got {t}")
        return v
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return t.timestamp()
    if isinstance(t, str):
        try:
            return to_time(_dt.datetime.fromisoformat(t.strip().replace("Z", "+00:00")), what)
        except ValueError:
            raise InvalidInput(f"{what} {t!r} is not an ISO-8601 time (e.g. '2023-05-08T13:56:00')") from None
    raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, got {type(t).__name__}")


def check_id(v: object, what: str) -> str:
    """A non-empty string identifier (``user_id``, ``session_id``)."""
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, got {type(v).__name__}")
    if not v.strip():
        raise InvalidInput(f"{what} must be a non-empty string")
    return v


def check_count(v: object, what: str, unit: str = "") -> int:
    """A positive int (``budget`` in tokens, ``k``)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int{unit}, got {type(v).__name__}")
    if v <= 0:
        raise InvalidInput(f"{what} must be >= 1{' token' if unit else ''}, got {v}")
    return int(v)


def check_layers(layers: Sequence[str]) -> list[str]:
    """A list of layer names of :data:`lamina.items.LAYERS`."""
    if isinstance(layers, str):
        raise TypeError("layers must be a list of layer names, e.g. ['archive']")
    names = list(layers)
    for L in names:
        if L not in LAYERS:
            raise InvalidInput(f"unknown layer {L!r}; expected some of {list(LAYERS)}")
    return names
