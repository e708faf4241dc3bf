"""Checks of the caller's arguments: identifiers, texts, event times, budgets, ``k``, layer names.

Each check returns the value in the form the memory loop uses, or raises ``TypeError`` (wrong
type) / :class:`lamina.InvalidInput` (a value it cannot accept) naming the argument.

Bounds: an event time must lie in the years 1–9999 UTC (:data:`MIN_TIME` .. :data:`MAX_TIME`,
what ``datetime.fromtimestamp(t, tz=timezone.utc)`` and so the rendered ``[date time]`` can
show); a text (identifiers included) must be encodable as UTF-8 (no lone surrogates), as the
database and the native core store it.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput
from .types import LAYERS

__all__ = [
    "query_vector",
    "query_matrix",
    "TimeLike",
    "MIN_TIME",
    "MAX_TIME",
    "to_time",
    "check_id",
    "check_text",
    "check_count",
    "MAX_BUDGET",
    "MAX_K",
    "check_layers",
    "wall_clock",
]

#: An event time: seconds since the Unix epoch, a ``datetime`` (naive means UTC) or an ISO-8601
#: string; None where the argument is optional.
TimeLike = float | int | _dt.datetime | str | None

_UTC = _dt.timezone.utc
#: The earliest and latest event times accepted (seconds since the epoch): 0001-01-01 00:00:00
#: and 9999-12-31 23:59:59 UTC.
MIN_TIME = _dt.datetime(1, 1, 1, tzinfo=_UTC).timestamp()
MAX_TIME = _dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_UTC).timestamp()


#: The largest context budget (tokens) :meth:`lamina.Memory.context` takes.
MAX_BUDGET = 10_000_000
#: The largest ``k`` :meth:`lamina.Memory.search` takes.
MAX_K = 100_000


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
        try:
            v = float(t)
        except OverflowError:  # an int beyond any float
            return _in_range(math.inf, t, what)
        if not math.isfinite(v):
            raise InvalidInput(f"{what} must be finite, got {t}")
        return _in_range(v, t, what)
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_UTC)
        return _in_range(t.timestamp(), t, what)
    if isinstance(t, str):
        try:
            d = _dt.datetime.fromisoformat(t.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInput(f"{what} {t!r} is not an ISO-8601 time (e.g. '2023-05-08T13:56:00')") from None
        return _in_range((d if d.tzinfo is not None else d.replace(tzinfo=_UTC)).timestamp(), t, what)
    raise TypeError(f"{what} must be seconds since the epoch, a datetime or an ISO-8601 string, got {type(t).__name__}")


def _in_range(v: float, given: object, what: str) -> float:
    if not MIN_TIME <= v <= MAX_TIME:
        raise InvalidInput(
            f"{what} {given!r} is outside the years 1-9999 UTC (seconds since the epoch in "
            f"[{MIN_TIME:.0f}, {MAX_TIME:.0f}])"
        )
    return v


def _utf8(v: str, what: str) -> str:
    """``v`` itself, once it is known to be encodable as UTF-8 (no lone surrogates)."""
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInput(
                f"{what} is not valid Unicode text: {v[e.start : e.end]!r} at index {e.start} "
                "cannot be encoded as UTF-8 (a lone surrogate)"
            ) from None
    return v


def check_id(v: object, what: str) -> str:
    """A non-empty string identifier (``user_id``, ``session_id``), encodable as UTF-8, and
    neither ``.`` nor ``..`` (an id must be usable as a URL path segment, which those are not:
    HTTP clients resolve them as dot segments)."""
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, got {type(v).__name__}")
    if not v.strip():
        raise InvalidInput(f"{what} must be a non-empty string")
    if v in (".", ".."):
        raise InvalidInput(f"{what} must not be {v!r} (it cannot be a URL path segment)")
    return _utf8(v, what)


def check_text(v: object, what: str) -> str:
    """A str encodable as UTF-8 (a text, speaker, domain, subject, query; emptiness is the
    caller's to check)."""
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, got {type(v).__name__}")
    return _utf8(v, what)


def check_count(v: object, what: str, unit: str = "", maximum: int | None = None) -> int:
    """A positive int (``budget`` in tokens, ``k``), at most ``maximum`` when given."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an int{unit}, got {type(v).__name__}")
    if v <= 0:
        raise InvalidInput(f"{what} must be >= 1{' token' if unit else ''}, got {v}")
    if maximum is not None and v > maximum:
        raise InvalidInput(f"{what} must be <= {maximum:,}{' tokens' if unit else ''}, got {v}")
    return int(v)


def check_layers(layers: Sequence[str]) -> list[str]:
    """A list of layer names of :data:`lamina.memory.types.LAYERS`."""
    if isinstance(layers, str):
        raise TypeError("layers must be a list of layer names, e.g. ['archive']")
    names = list(layers)
    for L in names:
        if L not in LAYERS:
            raise InvalidInput(f"unknown layer {L!r}; expected some of {list(LAYERS)}")
    return names


def query_vector(
    embed: Callable[[list[str]], npt.NDArray[np.float32]],
    dim: int,
    query: str,
    query_embedding: npt.NDArray[np.float32] | None,
) -> npt.NDArray[np.float32]:
    """The query as one row, shape (1, dim): embedded, or the caller's checked vector."""
    check_text(query, "query")
    if not query.strip():
        raise InvalidInput("query is empty")
    if query_embedding is None:
        return embed([query])
    q = query_embedding
    if not isinstance(q, np.ndarray) or q.dtype != np.float32:
        raise TypeError("query_embedding must be a float32 numpy array of shape (dim,)")
    if q.shape != (dim,):
        raise InvalidInput(f"query_embedding must have shape ({dim},), got {q.shape}")
    if not np.isfinite(q).all() or not np.any(q):
        raise InvalidInput("query_embedding must be finite and non-zero")
    return np.ascontiguousarray(q.reshape(1, -1))


def query_matrix(
    embed: Callable[[list[str]], npt.NDArray[np.float32]],
    dim: int,
    queries: Sequence[str],
    query_embeddings: npt.NDArray[np.float32] | None,
) -> npt.NDArray[np.float32]:
    """Checked query texts (:func:`lamina.memory.read.batch.pairs`) as rows, shape (len(queries), dim):
    embedded in one call, or the caller's vectors, checked."""
    n = len(queries)
    if query_embeddings is None:
        return embed(list(queries)) if n else np.empty((0, dim), dtype=np.float32)
    Q = query_embeddings
    if not isinstance(Q, np.ndarray) or Q.dtype != np.float32:
        raise TypeError("query_embeddings must be a float32 numpy array of shape (len(queries), dim)")
    if Q.shape != (n, dim):
        raise InvalidInput(f"query_embeddings must have shape ({n}, {dim}) (one row per query), got {Q.shape}")
    bad = ~(np.isfinite(Q).all(axis=1) & np.any(Q, axis=1))
    if bad.any():
        raise InvalidInput(f"query_embeddings[{int(np.argmax(bad))}] must be finite and non-zero")
    return np.ascontiguousarray(Q)
