"""lamina.text.timeref: relative time expressions resolved against the time they were said."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamina.text.timeref import annotate, date_intent, resolve

MON = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc).timestamp()  # a Monday
NEW_YEAR = dt.datetime(2024, 1, 1, 9, 0, tzinfo=dt.timezone.utc).timestamp()  # a Monday too


@pytest.mark.parametrize(
    ("text", "t", "labels"),
    [
        ("I painted that lake sunrise last year!", MON, ["2022"]),
        ("I went to a support group yesterday.", MON, ["2023-05-07"]),
        ("Yesterday and the day before yesterday", MON, ["2023-05-07", "2023-05-06"]),
        ("Last night was loud; tonight too.", MON, ["2023-05-07", "2023-05-08"]),
        ("We're going camping next month.", MON, ["2023-06"]),
        ("We moved last month", NEW_YEAR, ["2023-12"]),
        ("Next year I'll retire", NEW_YEAR, ["2025"]),
        ("I ran a race last Saturday", MON, ["2023-05-06"]),
        ("I'll call you next Monday", MON, ["2023-05-15"]),  # the first one after today
        ("this Friday then", MON, ["2023-05-12"]),
        ("Two weeks ago I met her", MON, ["week of 2023-04-24"]),
        ("last week", MON, ["week of 2023-05-01"]),
        ("last weekend was fun, this weekend we hike", MON, ["weekend of 2023-05-06", "weekend of 2023-05-13"]),
        ("a couple of years ago", MON, ["2021"]),
        ("3 months ago and in 10 days", MON, ["2023-02", "2023-05-18"]),
        ("five years from now", MON, ["2028"]),
    ],
)
def test_expressions_resolve_at_their_granularity(text: str, t: float, labels: list[str]) -> None:
    assert [r.label() for r in resolve(text, t)] == labels


@pytest.mark.parametrize(
    "text",
    ["I'm 32 years old", "a few weeks ago", "recently", "the other day", "on Friday we met", "My day was fine"],
)
def test_vague_or_ambiguous_expressions_are_left_alone(text: str) -> None:
    assert resolve(text, MON) == () and annotate(text, MON) == ""


def test_annotation_and_unknown_time() -> None:
    assert annotate("I painted it last year, last year!", MON) == " (last year = 2022)"
    assert annotate("yesterday, then last week", MON) == " (yesterday = 2023-05-07; last week = week of 2023-05-01)"
    assert resolve("yesterday", None) == () and resolve("yesterday", float("nan")) == ()
    assert resolve("999 years ago", dt.datetime(1, 6, 1, tzinfo=dt.timezone.utc).timestamp()) == ()  # (> 500: no)
    assert resolve("last year", dt.datetime(1, 6, 1, tzinfo=dt.timezone.utc).timestamp()) == ()  # before year 1


def test_date_intent() -> None:
    for q in ["When did she paint a sunrise?", "What year did they move?", "How long ago was the trip?",
              "which month is the wedding", "Since when has he played chess?"]:  # fmt: skip
        assert date_intent(q), q
    for q in ["What is her dog called?", "Where did they move?", "Why is he sad?", "How long is the river?"]:
        assert not date_intent(q), q


@given(st.text(max_size=200), st.floats(min_value=-6e10, max_value=2.5e11, allow_nan=False))
def test_any_text_at_any_time_resolves_without_error(text: str, t: float) -> None:
    for r in resolve(text, t):
        assert r.span.lower() in " ".join(text.lower().split()) and r.label()
