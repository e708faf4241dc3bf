"""lamina.memory.inputs: the checks of the caller's arguments."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from lamina import InvalidInput
from lamina.memory.inputs import check_count, check_id, check_layers, to_time


def test_to_time() -> None:
    assert to_time(None, "t") is None
    assert to_time(5, "t") == 5.0 and isinstance(to_time(5, "t"), float)
    assert to_time(np.float32(2.5), "t") == 2.5 and to_time(np.int64(3), "t") == 3.0
    utc = dt.datetime(2023, 5, 8, 12, 30, tzinfo=dt.timezone.utc)
    assert to_time(dt.datetime(2023, 5, 8, 12, 30), "t") == utc.timestamp()  # naive = UTC
    plus2 = dt.datetime(2023, 5, 8, 14, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert to_time(plus2, "t") == utc.timestamp()
    assert to_time("2023-05-08T12:30:00Z", "t") == to_time(" 2023-05-08 12:30 ", "t") == utc.timestamp()
    assert to_time("2023-05-08T14:30:00+02:00", "t") == utc.timestamp()
    with pytest.raises(InvalidInput, match="now.*ISO-8601"):
        to_time("yesterday", "now")
    with pytest.raises(InvalidInput, match="finite"):
        to_time(float("inf"), "t")
    with pytest.raises(TypeError, match="not bool"):
        to_time(True, "t")
    with pytest.raises(TypeError, match="list"):
        to_time([1], "t")  # type: ignore[arg-type]


def test_check_id_count_layers() -> None:
    assert check_id("u", "user_id") == "u"
    with pytest.raises(InvalidInput, match="user_id"):
        check_id(" \t", "user_id")
    with pytest.raises(TypeError, match="session_id must be a str"):
        check_id(3, "session_id")
    assert check_count(np.int32(7), "k") == 7 and isinstance(check_count(np.int32(7), "k"), int)
    with pytest.raises(InvalidInput, match="budget must be >= 1 token"):
        check_count(0, "budget", " (tokens)")
    with pytest.raises(TypeError):
        check_count(True, "k")
    with pytest.raises(TypeError):
        check_count(2.0, "k")
    assert check_layers(("archive", "history")) == ["archive", "history"]
    with pytest.raises(InvalidInput, match="attic"):
        check_layers(["working", "attic"])
    with pytest.raises(TypeError):
        check_layers("archive")
