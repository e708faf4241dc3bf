"""Memory.list_items and Memory.activity: paged listings read from memory, checked against the
user's export (the same entries, filtered and ordered as asked) and against each other."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import pytest

from lamina.errors import InvalidInput, NotFoundError
from lamina.memory import Memory
from lamina.memory.dump.format import ItemEntry

NOW = 1_700_000_000.0


@pytest.fixture(scope="module")
def mem() -> Iterator[Memory]:
    m = Memory(None, embedder="hashing")
    for s in range(4):
        msgs = [
            {
                "speaker": "ana" if i % 2 else "bot",
                "text": f"session {s} turn {i}: {'I moved to Porto' if i == 3 else 'the garden needs water'}",
                "timestamp": NOW + s * 3 * 86400 + i * 60,
            }
            for i in range(12)
        ]
        m.add(msgs, user_id="ana", session_id=f"s{s}")
        m.end_session(user_id="ana", session_id=f"s{s}", now=NOW + s * 3 * 86400 + 3600)
    m.add([{"speaker": "bo", "text": "hello"}], user_id="bo", session_id="s0")
    yield m
    m.close()


def _key(e: ItemEntry) -> tuple[float, int]:
    return (e.timestamp if e.timestamp is not None else (e.created_at or 0.0), e.id)


def _plain(e: ItemEntry) -> dict[str, object]:
    d = asdict(e)
    d.pop("embedding")
    d.pop("strength")  # (the export writes the stored strength; the state may hold a newer one)
    return d


def test_pages_are_the_exports_entries_filtered_and_in_time_order(mem: Memory) -> None:
    every = sorted(mem.export_user(user_id="ana").items, key=_key)
    for layers, kinds, statuses in (
        (None, None, None),
        (["episodic"], None, ["active"]),
        (None, ["turn"], None),
        (["semantic", "history"], ["fact"], None),
    ):
        want = [
            e
            for e in every
            if (layers is None or e.layer in layers)
            and (kinds is None or e.kind in kinds)
            and (statuses is None or e.status in statuses)
        ]
        assert want, (layers, kinds, statuses)
        got = mem.list_items(user_id="ana", layers=layers, kinds=kinds, statuses=statuses, limit=None)
        assert got.total == len(want) and got.offset == 0
        assert [_plain(e) for e in got.items] == [_plain(e) for e in want]
        newest = mem.list_items(
            user_id="ana", layers=layers, kinds=kinds, statuses=statuses, limit=None, newest_first=True
        )
        assert [e.id for e in newest.items] == [e.id for e in reversed(want)]


def test_pages_cover_the_list_once_and_the_filter_is_a_substring(mem: Memory) -> None:
    whole = mem.list_items(user_id="ana", kinds=["turn"], limit=None, newest_first=True)
    assert whole.total == 48
    seen = []
    for off in range(0, 60, 7):
        p = mem.list_items(user_id="ana", kinds=["turn"], offset=off, limit=7, newest_first=True)
        assert p.total == 48 and p.offset == off and len(p.items) == max(0, min(7, 48 - off))
        seen += [e.id for e in p.items]
    assert seen == [e.id for e in whole.items]
    porto = mem.list_items(user_id="ana", kinds=["turn"], contains="PORTO", limit=None)
    assert porto.total == 4 and all("porto" in e.text.casefold() for e in porto.items)
    assert mem.list_items(user_id="ana", contains="no such words here").total == 0


def test_listing_counts_no_visit_and_reports_the_visits_contexts_count(mem: Memory) -> None:
    before = {e.id: e.access_count for e in mem.list_items(user_id="ana", limit=None).items}
    assert {e.id: e.access_count for e in mem.list_items(user_id="ana", limit=None).items} == before
    ctx = mem.context("where did ana move", user_id="ana", budget=64, now=NOW + 30 * 86400)
    after = {e.id: e.access_count for e in mem.list_items(user_id="ana", limit=None).items}
    assert all(after[it.id] == before[it.id] + 1 for it in ctx.items)


def test_activity_bins_every_timed_turn_with_its_visits(mem: Memory) -> None:
    turns = mem.list_items(user_id="ana", kinds=["turn"], limit=None).items
    act = mem.activity(user_id="ana", bins=40)
    assert sum(b.items for b in act.bins) == len(turns)
    assert sum(b.accesses for b in act.bins) == sum(e.access_count for e in turns)
    assert all(b.width >= 86400.0 for b in act.bins) and len(act.bins) <= 40
    assert act.bins[0].start == min(e.timestamp for e in turns if e.timestamp is not None)
    for b in act.bins:  # each turn in its bin
        inside = [e for e in turns if e.timestamp is not None and b.start <= e.timestamp < b.start + b.width]
        assert len(inside) == b.items or b is act.bins[-1]
    every = mem.list_items(user_id="ana", limit=None).items
    assert act.last_activity == max(t for e in every for t in (e.timestamp, e.last_access) if t is not None)
    assert len(mem.activity(user_id="ana", bins=2).bins) <= 2


def test_bad_arguments_and_unknown_users(mem: Memory) -> None:
    with pytest.raises(NotFoundError):
        mem.list_items(user_id="nobody")
    with pytest.raises(NotFoundError):
        mem.activity(user_id="nobody")
    with pytest.raises(InvalidInput, match="offset"):
        mem.list_items(user_id="ana", offset=-1)
    with pytest.raises(InvalidInput, match="limit"):
        mem.list_items(user_id="ana", limit=0)
    with pytest.raises(InvalidInput, match="kind"):
        mem.list_items(user_id="ana", kinds=["turns"])
    with pytest.raises(InvalidInput, match="layer"):
        mem.list_items(user_id="ana", layers=["attic"])
    with pytest.raises(InvalidInput, match="status"):
        mem.list_items(user_id="ana", statuses=["deleted"])
    with pytest.raises(TypeError, match="kinds"):
        mem.list_items(user_id="ana", kinds="turn")
    with pytest.raises(TypeError, match="contains"):
        mem.list_items(user_id="ana", contains=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="bins"):
        mem.activity(user_id="ana", bins=0)
