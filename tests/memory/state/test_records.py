"""lamina.memory.state.records: namespaces, the record's row, the text helpers and their caches."""

from __future__ import annotations

import numpy as np

from lamina.memory.state.records import (
    ITEM_FIELDS,
    NsCode,
    Record,
    namespace,
    norm_key,
    record_namespace,
    text_key,
    turn_tokens,
    unit,
)
from lamina.memory.store.protocol import ITEM_COLUMNS
from lamina.memory.types import LAYERS


def _rec(**kw: object) -> Record:
    base: dict[str, object] = dict(id=7, user_id="u", layer="episodic", kind="segment", text="t", seq=7)
    base.update(kw)
    return Record(**base)  # type: ignore[arg-type]


def test_namespaces() -> None:
    assert [int(c) for c in NsCode][:5] == [
        LAYERS[L] for L in ("working", "episodic", "semantic", "archive", "history")
    ]
    assert namespace(5, NsCode.TURN_VIEW) == (5 << 3) | 5
    assert record_namespace(2, _rec()) == namespace(2, NsCode.LEAF)  # episodic leaves apart from summaries
    assert record_namespace(2, _rec(kind="summary")) == namespace(2, NsCode.EPISODIC)
    assert record_namespace(2, _rec(kind="segment", layer="archive")) == namespace(2, NsCode.ARCHIVE)
    assert record_namespace(2, _rec(kind="fact", layer="history")) == namespace(2, NsCode.HISTORY)


def test_row_has_every_column() -> None:
    r = _rec(sources=("a",), members=[1])
    row = r.row(np.ones(3, dtype=np.float64))
    assert set(row) == set(ITEM_COLUMNS) == set(ITEM_FIELDS) | {"embedding"}
    assert row["embedding"] == np.ones(3, dtype=np.float32).tobytes()


def test_text_helpers() -> None:
    assert norm_key("  New\tYORK  city ") == "new york city"
    x = unit(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert x.dtype == np.float32 and x.flags.c_contiguous
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)  # a zero row stays zero
    r = _rec(kind="turn", layer="archive", text="Hello   World", speaker="Ann", session_id="s", timestamp=0.0)
    assert text_key(r) == "hello world"
    assert turn_tokens(r) == (3, ("s", "1970-01-01"))  # "Ann: Hello   World"
    r.text, r.timestamp = "one two three four", 86_400.0  # the caches are keyed by what they depend on
    assert text_key(r) == "one two three four" and turn_tokens(r) == (5, ("s", "1970-01-02"))
    assert turn_tokens(_rec(kind="turn", text="no speaker here", timestamp=None)) == (3, (None, "?"))
