"""Relative time expressions resolved against the time a text was said.

"I painted that last year", said on 8 May 2023, is about 2022; a memory that shows only the
turn's own date leaves that arithmetic to the reader (and to retrieval, which cannot do it).
:func:`resolve` finds the relative expressions of a text (``yesterday``, ``today``, ``tomorrow``,
``last night``, ``last / this / next week | weekend | month | year``, ``last / this / next
<weekday>``, ``N days | weeks | months | years ago``, ``in N ...`` and ``N ... from now``) and
turns each into an absolute date at its own granularity; :func:`annotate` writes them as a
suffix that :class:`lamina.MemoryItem` shows after a turn's text. :func:`date_intent` tells
whether a question asks for a time ("when ...", "what year ...", "how long ago ...").

Rules are plain English calendar arithmetic in UTC (the event times lamina stores), weeks
starting on Monday; vague expressions ("recently", "a few weeks ago", "the other day") and
bare weekday names (past or future depends on the verb) are left alone. Pure functions of the
text and the time: nothing here reads a dataset.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

from ._memo import quiet_lru_cache

__all__ = ["TimeRef", "resolve", "annotate", "date_intent", "mentions_time"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "a couple of": 2,
}
_NUM = r"(?P<n>\d{1,3}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_PATTERNS = [
    ("day", re.compile(r"\b(?P<w>the day before yesterday|day before yesterday)\b", re.I)),
    ("day", re.compile(r"\b(?P<w>yesterday|today|tonight|tomorrow|last night)\b", re.I)),
    (
        "rel",
        re.compile(
            r"\b(?P<rel>last|this past|this|next|the past|the previous|previous)\s+(?P<unit>week|weekend|month|year)\b",
            re.I,
        ),
    ),
    ("wday", re.compile(r"\b(?P<rel>last|this past|this|next)\s+(?P<wd>" + "|".join(_WEEKDAYS) + r")\b", re.I)),
    ("ago", re.compile(r"\b" + _NUM + r"\s+" + _UNIT + r"\s+ago\b", re.I)),
    ("ahead", re.compile(r"\bin\s+" + _NUM + r"\s+" + _UNIT + r"\b", re.I)),
    ("ahead", re.compile(r"\b" + _NUM + r"\s+" + _UNIT + r"\s+from now\b", re.I)),
]
# a cheap test before the patterns (most turns have no time word at all)
_ANY = re.compile(r"day|tonight|night|week|month|year|ago|from now|" + "|".join(_WEEKDAYS), re.I)
# absolute mentions of a time: month names ("may" and "march" only beside a day number: they are
# also a verb), years of the last two centuries, weekday names
_ABSOLUTE = re.compile(
    r"\b(?:january|february|april|june|july|august|september|october|november|december)\b"
    r"|\b(?:march|may)\s+\d{1,2}(?:st|nd|rd|th)?\b|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:march|may)\b"
    r"|\b(?:19|20)\d{2}s?\b|\b(?:" + "|".join(_WEEKDAYS) + r")s?\b",
    re.I,
)
_INTENT = re.compile(
    r"\bwhen\b|\bwhat (?:year|month|day|date|time|week)\b|\bwhich (?:year|month|day|date|week)\b"
    r"|\bhow long ago\b|\bsince when\b|\bhow long (?:has|have|had|did|was|were)\b|\bwhat dates?\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class TimeRef:
    """One resolved expression.

    Attributes
    ----------
    span : str
        The expression as written (``"last year"``).
    start : datetime.date
        First day it covers.
    granularity : str
        ``day``, ``week`` (Monday-based), ``weekend`` (its Saturday), ``month`` or ``year``.
    """

    span: str
    start: _dt.date
    granularity: str

    def label(self) -> str:
        """The absolute date at its granularity: ``2022``, ``2023-04``, ``week of 2023-05-01``."""
        d = self.start
        if self.granularity == "year":
            return f"{d.year}"
        if self.granularity == "month":
            return f"{d.year}-{d.month:02d}"
        if self.granularity == "week":
            return f"week of {d.isoformat()}"
        if self.granularity == "weekend":
            return f"weekend of {d.isoformat()}"
        return d.isoformat()


def _shift_months(d: _dt.date, k: int) -> _dt.date:
    m = d.year * 12 + (d.month - 1) + k
    return _dt.date(m // 12, m % 12 + 1, 1)


def _unit_ref(d: _dt.date, unit: str, k: int) -> tuple[_dt.date, str]:
    """The ``unit`` ``k`` units from ``d`` (negative: before), at that unit's granularity."""
    if unit == "day":
        return d + _dt.timedelta(days=k), "day"
    if unit == "week":
        w = d - _dt.timedelta(days=d.weekday()) + _dt.timedelta(weeks=k)
        return w, "week"
    if unit == "weekend":
        sat = d - _dt.timedelta(days=d.weekday()) + _dt.timedelta(days=5, weeks=k)
        return sat, "weekend"
    if unit == "month":
        return _shift_months(d, k), "month"
    return _dt.date(d.year + k, 1, 1), "year"


def _number(s: str) -> int | None:
    s = " ".join(s.lower().split())
    if s.isdigit():
        return int(s)
    return _NUMBERS.get(s)


def _one(kind: str, m: re.Match[str], d: _dt.date) -> tuple[_dt.date, str] | None:
    if kind == "day":
        w = " ".join(m.group("w").lower().split())
        off = {"yesterday": -1, "last night": -1, "today": 0, "tonight": 0, "tomorrow": 1}.get(w, -2)
        return d + _dt.timedelta(days=off), "day"
    if kind == "rel":
        rel = " ".join(m.group("rel").lower().split())
        k = 0 if rel == "this" else (1 if rel == "next" else -1)
        return _unit_ref(d, m.group("unit").lower(), k)
    if kind == "wday":
        rel = " ".join(m.group("rel").lower().split())
        wd = _WEEKDAYS.index(m.group("wd").lower())
        if rel == "this":  # the one of this (Monday-based) week
            return d - _dt.timedelta(days=d.weekday() - wd), "day"
        if rel == "next":  # the first one after today
            return d + _dt.timedelta(days=(wd - d.weekday() - 1) % 7 + 1), "day"
        return d - _dt.timedelta(days=(d.weekday() - wd - 1) % 7 + 1), "day"  # the last one before today
    n = _number(m.group("n"))
    if n is None or n > 500:
        return None
    unit = m.group("unit").lower()
    k = -n if kind == "ago" else n
    if unit == "week":  # N weeks from a day is a day, shown as its week
        return _unit_ref(d + _dt.timedelta(weeks=k), "week", 0)
    return _unit_ref(d, unit, k)


@quiet_lru_cache(maxsize=262_144)
def _resolve(text: str, day: int) -> tuple[TimeRef, ...]:
    if not _ANY.search(text):
        return ()
    d = _dt.date.fromordinal(day)
    taken: list[tuple[int, int]] = []
    out: list[tuple[int, TimeRef]] = []
    for kind, pat in _PATTERNS:
        for m in pat.finditer(text):
            a, b = m.span()
            if any(a < y and x < b for x, y in taken):  # (inside a longer expression already read)
                continue
            try:
                got = _one(kind, m, d)
            except (ValueError, OverflowError):  # outside the calendar
                got = None
            if got is None:
                continue
            taken.append((a, b))
            out.append((a, TimeRef(" ".join(m.group(0).split()), got[0], got[1])))
    return tuple(r for _, r in sorted(out, key=lambda x: x[0]))


def resolve(text: str, t: float | None) -> tuple[TimeRef, ...]:
    """The relative time expressions of ``text`` said at ``t`` (seconds since the epoch, UTC),
    resolved, in text order; empty when ``t`` is None or the text has none."""
    day = _day(t)
    return () if day is None else _resolve(text, day)


@quiet_lru_cache(maxsize=262_144)
def _day(t: float | None) -> int | None:
    """The UTC day ordinal of ``t`` (None: no time, or outside the calendar). Cached: the read
    path asks it of the same turns' timestamps again and again."""
    if t is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).date().toordinal()
    except (OverflowError, ValueError, OSError):
        return None


def annotate(text: str, t: float | None) -> str:
    """The suffix a rendering puts after ``text``: ``" (last year = 2022; yesterday =
    2023-05-07)"``, or ``""`` when nothing resolves."""
    refs = resolve(text, t)
    if not refs:
        return ""
    seen: dict[str, str] = {}
    for r in refs:
        seen.setdefault(r.span.lower(), f"{r.span} = {r.label()}")
    return " (" + "; ".join(seen.values()) + ")"


def date_intent(query: str) -> bool:
    """Whether ``query`` asks for a time (``when``, ``what year``, ``how long ago`` ...)."""
    return bool(_INTENT.search(query))


def mentions_time(text: str, t: float | None) -> bool:
    """Whether ``text`` says when something happened: a relative expression that resolves at
    ``t``, a month or weekday name, or a year."""
    return _mentions(text, _day(t))


@quiet_lru_cache(maxsize=262_144)
def _mentions(text: str, day: int | None) -> bool:
    return bool(_ABSOLUTE.search(text)) or (day is not None and bool(_resolve(text, day)))
