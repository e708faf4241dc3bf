"""Export -> import round trips (lamina.memory.dump.jsonl, Memory.export_user / import_user): the imported
memory gives the same contexts, searches, facts and histories as the exported one, with its
vectors in the dump and without them (re-embedded); on a synthetic multi-session conversation
(always) and on the first LoCoMo conversation of the development split (needs the shared data).

The reference is the exported database as stored (reopened): an import rebuilds the state from
the rows it wrote, as an open does. (A live handle can differ from its own reopened store where
two items hold the same vector, a tree node and its most central child, or a note and its leaf:
the native score of equal vectors can differ in the last bit with their arena slots, which the
live handle placed in another order after evictions; the tie then breaks the other way.)"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dumpkit import normalised
from lamina import InvalidInput, Memory, MemoryConfig, NotFoundError
from lamina.cli.demo import generate
from lamina.memory.dump.format import TEXT_KINDS, DumpError
from lamina.memory.dump.jsonl import export_jsonl, import_jsonl, iter_export
from lamina.memory.dump.reader import read_dump

SHARED_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
# small capacities: the conversation evicts, promotes notes, supersedes facts and moves profiles
CONFIG = MemoryConfig(episodic_capacity=40, semantic_capacity=30, promote_threshold=2.0)


def _ingest_demo(mem: Memory) -> list[Any]:
    convs = generate(2, 8, 20, seed=3)
    for c in convs:
        for sid, msgs in c.sessions:
            mem.add(msgs, user_id=c.user_id, session_id=sid)
            mem.end_session(user_id=c.user_id, session_id=sid)
        last = c.sessions[-1][1][-1]["timestamp"]
        for q in c.questions[:6]:  # visits: heat and access statistics to carry over
            mem.context(q.text, user_id=c.user_id, budget=128, now=last + 60)
    c = convs[0]
    t = c.sessions[-1][1][-1]["timestamp"] + 3600
    mem.add(
        [
            {"speaker": "Kim", "text": "I adopted a grey kitten named Pixel.", "timestamp": t},
            {"speaker": "Kim", "text": "My sister moved to Lisbon.", "timestamp": t + 60},
        ],
        user_id=c.user_id,
        session_id="open-session",
    )  # (left open: working memory)
    hit = mem.search("Pixel kitten", user_id=c.user_id, k=1)[0]
    mem.update(hit.id, "I adopted a black kitten named Pixel.", user_id=c.user_id, timestamp=t + 120)
    doomed = mem.search("Lisbon sister", user_id=c.user_id, k=1, layers=["archive"])[0]
    mem.delete(doomed.id, user_id=c.user_id)
    mem.flush()
    return convs


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    path = tmp_path_factory.mktemp("src") / "a.db"
    with Memory(path, embedder="hashing", config=CONFIG) as mem:
        convs = _ingest_demo(mem)
    return path, convs


def _queries(convs: list[Any]) -> Iterator[tuple[str, str, float]]:
    for c in convs:
        now = c.sessions[-1][1][-1]["timestamp"] + 86400
        for q in c.questions:
            yield c.user_id, q.text, now
        yield c.user_id, "Pixel the kitten", now


def _ctx_key(ctx: Any) -> tuple[Any, ...]:
    return (
        [(it.text, it.layer, it.kind, it.speaker, it.timestamp, round(it.score, 6)) for it in ctx.items],
        ctx.render(),
        ctx.abstain,
        {k: round(v, 9) for k, v in ctx.gates.items()},
    )


def _same_contexts(a: Memory, b: Memory, queries: list[tuple[str, str, float]], budget: int = 200) -> None:
    """Same queries in lockstep (each context bumps the same access statistics on both sides)."""
    assert queries
    for uid, text, now in queries:
        x = a.context(text, user_id=uid, budget=budget, now=now)
        y = b.context(text, user_id=uid, budget=budget, now=now)
        assert _ctx_key(x) == _ctx_key(y), f"context differs for {uid}: {text!r}"
        assert [i.text for i in a.search(text, user_id=uid, k=8)] == [i.text for i in b.search(text, user_id=uid, k=8)]


def _export(mem: Memory, vectors: bool) -> str:
    buf = io.StringIO()
    export_jsonl(mem, buf, vectors=vectors)
    return buf.getvalue()


def _stats(mem: Memory, uid: str) -> dict[str, Any]:
    d = mem.stats(user_id=uid).to_dict()
    for k in ("path", "config", "ann_layers"):
        d.pop(k)
    return d


@pytest.mark.parametrize("vectors", [True, False], ids=["with-vectors", "re-embedded"])
def test_round_trip_gives_the_same_memory(source: tuple[Path, list[Any]], tmp_path: Path, vectors: bool) -> None:
    path, convs = source
    with Memory(path, embedder="hashing", config=CONFIG) as a:
        text = _export(a, vectors)
        users = a.users()
    dump = read_dump(io.StringIO(text))
    assert dump.header.vectors == ("all" if vectors else "derived")
    n_text = sum(1 for ud in dump.users for it in ud.items if it.kind in TEXT_KINDS)
    assert all(
        (it.embedding is None) == (not vectors and it.kind in TEXT_KINDS) for ud in dump.users for it in ud.items
    )
    kinds = {it.kind for ud in dump.users for it in ud.items}
    statuses = {it.status for ud in dump.users for it in ud.items}
    assert kinds == {"turn", "segment", "summary", "note", "fact", "profile"} and statuses == {"active", "evicted"}
    assert any(it.superseded_by for ud in dump.users for it in ud.items)  # supersession to remap
    assert any(ud.revisions for ud in dump.users)

    b = Memory(tmp_path / "b.db", embedder="hashing", config=CONFIG)
    reports = import_jsonl(b, io.StringIO(text))
    assert [r.user_id for r in reports] == users == b.users()
    assert sum(r.reembedded for r in reports) == (0 if vectors else n_text)
    assert sum(r.items for r in reports) == sum(len(ud.items) for ud in dump.users)
    with Memory(path, embedder="hashing", config=CONFIG) as a:
        for uid in users:
            assert _stats(a, uid) == _stats(b, uid)
            assert [f.text for f in a.facts(user_id=uid, current=False)] == [
                f.text for f in b.facts(user_id=uid, current=False)
            ]
        # every row, references remapped through the report's id map
        ids = {old: new for r in reports for old, new in r.ids.items()}
        for uid in users:
            for x in a.export_user(user_id=uid, vectors=True).items:
                y = b.get(ids[x.id], user_id=uid)
                ax = a.get(x.id, user_id=uid)
                assert (y.text, y.kind, y.layer, y.sources, y.timestamp, y.valid_to, y.access_count) == (
                    ax.text,
                    ax.kind,
                    ax.layer,
                    ax.sources,
                    ax.timestamp,
                    ax.valid_to,
                    ax.access_count,
                )
                assert y.strength == pytest.approx(ax.strength, rel=1e-12)
                assert y.superseded_by == (None if ax.superseded_by is None else ids[ax.superseded_by])
                assert [h.text for h in b.history(y.id)] == [h.text for h in a.history(x.id)]
        _same_contexts(a, b, list(_queries(convs)))
    # the imported memory survives its own reopen, and exports the same dump (ids aside)
    b.close()
    with Memory(tmp_path / "b.db", embedder="hashing", config=CONFIG) as b2, Memory(path, embedder="hashing") as a2:
        _same_contexts(a2, b2, list(_queries(convs))[:5])
        assert normalised(_export(b2, True)) == normalised(_export(a2, True))


def test_import_as_another_user_into_the_same_store(tmp_path: Path) -> None:
    mem = Memory(tmp_path / "m.db", embedder="hashing", config=CONFIG)
    convs = _ingest_demo(mem)
    uid = convs[0].user_id
    text = "".join(iter_export(mem, user_ids=[uid]))
    (rep,) = import_jsonl(mem, io.StringIO(text), user_map={uid: "copy"})
    assert rep.from_user_id == uid and rep.user_id == "copy" and not rep.replaced
    assert not set(rep.ids) & set(rep.ids.values())  # fresh ids
    mem.close()
    with Memory(tmp_path / "m.db", embedder="hashing", config=CONFIG) as m2:  # (both users as stored)
        now = convs[0].sessions[-1][1][-1]["timestamp"] + 86400
        for q in convs[0].questions[:10]:
            x = m2.context(q.text, user_id=uid, budget=150, now=now)
            y = m2.context(q.text, user_id="copy", budget=150, now=now)
            assert x.render() == y.render() and not y.abstain
            assert all(it.user_id == "copy" for it in y.items)
        # the copy is a user of its own: deleting it leaves the original whole
        n = m2.stats(user_id=uid).items
        m2.delete_user(user_id="copy")
        assert m2.stats(user_id=uid).items == n and m2.users() == sorted(c.user_id for c in convs)


def test_import_refuses_an_existing_user_unless_replace(tmp_path: Path) -> None:
    a = Memory(None, embedder="hashing")
    a.add([{"speaker": "Ann", "text": "I live in Oslo.", "timestamp": 1_700_000_000}], user_id="u", session_id="s")
    a.end_session(user_id="u", session_id="s")
    text = _export(a, False)
    b = Memory(tmp_path / "b.db", embedder="hashing")
    b.add(
        [{"speaker": "Bo", "text": "Something else entirely.", "timestamp": 1_700_000_000}], user_id="u", session_id="x"
    )
    before = b.stats(user_id="u").items
    with pytest.raises(InvalidInput, match=r"'u' exist already.*replace"):
        import_jsonl(b, io.StringIO(text))
    assert b.stats(user_id="u").items == before
    with pytest.raises(InvalidInput, match="already exists"):  # the method checks too
        b.import_user(read_dump(io.StringIO(text)).users[0], embedder=b.embedder.name)
    (rep,) = import_jsonl(b, io.StringIO(text), replace=True)
    assert rep.replaced
    assert [i.text for i in b.search("Oslo", user_id="u", k=5, layers=["archive"])] == ["I live in Oslo."]
    with pytest.raises(InvalidInput, match="several users"):
        import_jsonl(b, io.StringIO(_two_users()), user_map=lambda _u: "same", replace=True)


def _two_users() -> str:
    m = Memory(None, embedder="hashing")
    for u in ("p", "q"):
        m.add([{"speaker": "S", "text": f"hello from {u}", "timestamp": 1_700_000_000}], user_id=u, session_id="s")
    return _export(m, False)


def test_export_of_an_unknown_user_raises() -> None:
    m = Memory(None, embedder="hashing")
    with pytest.raises(NotFoundError, match="unknown user_id 'ghost'"):
        m.export_user(user_id="ghost")


def test_another_embedder_re_embeds_everything() -> None:
    a = Memory(None, embedder="hashing", config=CONFIG)
    convs = _ingest_demo(a)
    text = _export(a, True)
    b = Memory(None, embedder="hashing-256", config=CONFIG)
    reports = import_jsonl(b, io.StringIO(text))
    assert all(r.reembedded == r.items for r in reports)
    uid = convs[0].user_id
    assert b.stats(user_id=uid).items == a.stats(user_id=uid).items
    ctx = b.context("What does Kim's kitten look like?", user_id=uid, budget=100)
    assert not ctx.abstain and "Pixel" in ctx.render()


# ------------------------------------------------------------------ a bad stream writes nothing
def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in text.splitlines()]


def _join(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(d) + "\n" for d in lines)


@pytest.fixture(scope="module")
def small_dump() -> str:
    return _two_users()


def _first(lines: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, d in enumerate(lines) if d["type"] == kind)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ls: ls.__setitem__(0, {**ls[0], "version": 99}), r"line 1, field 'version': format version 99"),
        (lambda ls: ls.__setitem__(0, {**ls[0], "format": "x"}), r"line 1, field 'format': not a lamina export"),
        (lambda ls: ls.pop(), r"cut short"),
        (lambda ls: ls.pop(0), r"line 1, field 'type': the first line must be the header"),
        (lambda ls: ls[_first(ls, "item")].pop("text"), r"line \d+, field 'text': missing"),
        (lambda ls: ls[_first(ls, "item")].update(access_count="3"), r"field 'access_count': expected int"),
        (lambda ls: ls[_first(ls, "item")].update(layer="attic"), r"field 'layer': 'attic' is not one of"),
        (lambda ls: ls[_first(ls, "item")].update(members=[12345]), r"field 'members': item 12345 is not an item"),
        (lambda ls: ls[_first(ls, "item")].update(superseded_by=7), r"field 'superseded_by': item 7 is not"),
        (lambda ls: ls[_first(ls, "item")].update(embedding="AAAA"), r"field 'embedding': 3 bytes, expected"),
        (lambda ls: ls[_first(ls, "item")].update(user_id="q"), r"field 'user_id': 'q' is not the user of this block"),
        (lambda ls: ls[_first(ls, "item")].update(colour="red"), r"unknown field\(s\) 'colour'"),
        (lambda ls: ls.insert(2, {"type": "comment"}), r"line 3, field 'type': unknown line type 'comment'"),
        (lambda ls: ls[-1].update(items=1), r"field 'items': the end line counts 1 items, the dump holds 2"),
        (lambda ls: ls.append(ls[1]), r"after the end line"),
    ],
)
def test_a_bad_dump_names_line_and_field_and_writes_nothing(
    small_dump: str, tmp_path: Path, mutate: Any, message: str
) -> None:
    lines = _lines(small_dump)
    mutate(lines)
    b = Memory(tmp_path / "b.db", embedder="hashing")
    with pytest.raises(DumpError, match=message):
        import_jsonl(b, io.StringIO(_join(lines)))
    assert b.users() == [] and b.stats().items == 0
    b.close()


def test_lines_that_are_not_json_objects(small_dump: str) -> None:
    lines = small_dump.splitlines(keepends=True)
    with pytest.raises(DumpError, match=r"line 3: not valid JSON"):
        read_dump(lines[:2] + ["{oops\n"] + lines[2:])
    with pytest.raises(DumpError, match=r"line 2: expected a JSON object, got list"):
        read_dump(lines[:1] + ["[1, 2]\n"] + lines[1:])
    with pytest.raises(DumpError, match=r"line 1: the dump is empty"):
        read_dump([])
    assert len(read_dump(line.encode() for line in lines).users) == 2  # bytes lines (a binary file)


def test_a_failed_user_import_leaves_nothing_of_it(small_dump: str, tmp_path: Path, monkeypatch: Any) -> None:
    """One transaction per user: a failure while the second user is written rolls that user back
    (store and state), the first stays; a reopen agrees."""
    from lamina.memory.dump import user_transfer as transfer

    real = transfer.import_user
    calls = []

    def flaky(tx: Any, ud: Any, *args: Any) -> Any:
        calls.append(ud.user.user_id)
        out = real(tx, ud, *args)
        if len(calls) == 2:
            raise OSError("disk on fire")
        return out

    monkeypatch.setattr(transfer, "import_user", flaky)
    b = Memory(tmp_path / "b.db", embedder="hashing")
    with pytest.raises(OSError, match="disk on fire"):
        import_jsonl(b, io.StringIO(small_dump))
    assert b.users() == ["p"]
    with pytest.raises(NotFoundError):  # nothing of the failed user is left to read
        b.search("hello", user_id="q", k=3)
    b.close()
    with Memory(tmp_path / "b.db", embedder="hashing") as again:
        assert again.users() == ["p"] and again.stats().items == 1


# ------------------------------------------------------------------ LoCoMo (development split)
@pytest.mark.data
@pytest.mark.parametrize("vectors", [True, False], ids=["with-vectors", "re-embedded"])
def test_round_trip_on_the_first_locomo_conversation(tmp_path: Path, vectors: bool) -> None:
    from lamina.eval.locomo import load_locomo

    convs, _ = load_locomo(SHARED_DATA / "locomo", limit=1)
    conv = convs[0]
    uid = conv.sample_id
    a = Memory(tmp_path / "a.db", embedder="hashing")
    for s in conv.sessions:  # only the conversation turns (as the evaluation ingests them)
        if not s.turns:
            continue
        sid = f"session_{s.number}"
        msgs = [{"speaker": t.speaker, "text": t.text, "id": t.dia_id, "timestamp": t.timestamp} for t in s.turns]
        a.add(msgs, user_id=uid, session_id=sid)
        a.end_session(user_id=uid, session_id=sid, now=s.turns[-1].timestamp)
    text = _export(a, vectors)
    b = Memory(tmp_path / "b.db", embedder="hashing")
    (rep,) = import_jsonl(b, io.StringIO(text))
    assert rep.items > 419  # the turns and what consolidation made of them
    now = conv.sessions[-1].turns[-1].timestamp + 86400
    queries = [(uid, q.question, now) for q in conv.questions]
    # against the live handle that exported it (with the default capacities nothing is evicted
    # here, so no tie between equal vectors depends on where the live arena placed them) ...
    _same_contexts(a, b, queries, budget=1024)
    a.close()
    b.close()
    # ... and, both reopened, against the store it was exported from
    with Memory(tmp_path / "a.db", embedder="hashing") as a2, Memory(tmp_path / "b.db", embedder="hashing") as b2:
        _same_contexts(a2, b2, queries, budget=1024)


def test_a_dump_built_in_code_is_checked_before_the_write(small_dump: str) -> None:
    """Memory.import_user takes UserDump objects (an HTTP route builds them from a request):
    a dangling reference or a vector of another size is refused before anything is written."""
    import dataclasses

    dump = read_dump(io.StringIO(small_dump))
    ud = dump.users[0]
    m = Memory(None, embedder="hashing")
    bad_ref = dataclasses.replace(ud, items=[dataclasses.replace(ud.items[0], superseded_by=999)])
    with pytest.raises(DumpError, match=r"item \d+, field 'superseded_by': item 999 is not an item of user 'p'"):
        m.import_user(bad_ref, embedder=dump.header.embedder)
    short = dataclasses.replace(ud.items[0], embedding=np.ones(10, dtype=np.float32))
    bad_vec = dataclasses.replace(ud, items=[short, *ud.items[1:]])
    with pytest.raises(DumpError, match=r"field 'embedding': shape \(10,\), expected \(384,\)"):
        m.import_user(bad_vec, embedder=dump.header.embedder)
    stranger = dataclasses.replace(ud, items=[dataclasses.replace(it, user_id="q") for it in ud.items])
    with pytest.raises(DumpError, match=r"'q' in the dump of user 'p'"):
        m.import_user(stranger, embedder=dump.header.embedder)
    assert m.users() == []
    m.import_user(ud, embedder=dump.header.embedder, user_id="p2")
    assert m.users() == ["p2"]


# ------------------------------------------------------- values that would break the user later
@pytest.fixture(scope="module")
def consolidated_dump() -> str:
    """One user of three consolidated sessions: segments, a tree, facts (one superseded), notes."""
    m = Memory(None, embedder="hashing", config=CONFIG)
    c = generate(1, 3, 10, seed=3)[0]
    for sid, msgs in c.sessions:
        m.add(msgs, user_id=c.user_id, session_id=sid)
        m.end_session(user_id=c.user_id, session_id=sid)
    return _export(m, True)


def _item_of(ls: list[dict[str, Any]], pred: Any) -> dict[str, Any]:
    return next(d for d in ls if d["type"] == "item" and pred(d))


def _huge_vector(ls: list[dict[str, Any]]) -> None:
    import base64

    it = _item_of(ls, lambda d: True)
    it["embedding"] = base64.b64encode(np.full(ls[0]["dim"], 3e38, "<f4").tobytes()).decode()


def _self_member(ls: list[dict[str, Any]]) -> None:
    seg = _item_of(ls, lambda d: d["kind"] == "segment")
    seg["members"].append(seg["id"])


def _segment_member(ls: list[dict[str, Any]]) -> None:
    segs = [d for d in ls if d["type"] == "item" and d["kind"] == "segment"]
    segs[0]["members"].append(segs[1]["id"])


def _parent_cycle(ls: list[dict[str, Any]]) -> None:
    child = _item_of(ls, lambda d: d["kind"] == "segment" and d["parent_id"] not in (None, 0, -1))
    parent = _item_of(ls, lambda d: d["id"] == child["parent_id"])
    parent["parent_id"] = child["id"]


def _supersede_cycle(ls: list[dict[str, Any]]) -> None:
    old = _item_of(ls, lambda d: d["superseded_by"] is not None)
    new = _item_of(ls, lambda d: d["id"] == old["superseded_by"])
    new["superseded_by"] = old["id"]


def _supersede_self(ls: list[dict[str, Any]]) -> None:
    it = _item_of(ls, lambda d: d["kind"] == "fact")
    it["superseded_by"] = it["id"]


def _set(field: str, value: Any, pred: Any = lambda d: True) -> Any:
    return lambda ls: _item_of(ls, pred).update({field: value})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_huge_vector, r"line \d+, field 'embedding': its squared norm overflows"),
        (_set("depth", 2**70), r"line \d+, field 'depth': 1180591620717411303424 is outside the 64-bit"),
        (_set("depth", 2**40), r"line \d+, field 'depth': must be <= 10000"),
        (_set("access_count", 2**63), r"field 'access_count': .* outside the 64-bit integer range"),
        (_set("access_count", 2**62), r"field 'access_count': must be <= 1e\+15"),
        (_set("id", 2**63 + 5), r"field 'id': .* outside the 64-bit integer range"),
        (_set("members", [2**64], lambda d: d["kind"] == "segment"), r"field 'members': .* outside the 64-bit"),
        (_self_member, r"line \d+, field 'members': an item cannot be its own member"),
        (_segment_member, r"line \d+, field 'members': item \d+ is a segment; a segment's members are turns"),
        (_set("last_access", 1e300), r"line \d+, field 'last_access': 1e\+300 is outside the years 1-9999"),
        (_set("created_at", -1e300), r"field 'created_at': -1e\+300 is outside the years 1-9999"),
        (_set("timestamp", 2**1100), r"field 'timestamp': must be a finite number"),
        (_set("valid_from", 1e300, lambda d: d["kind"] == "fact"), r"field 'valid_from': .* outside the years"),
        (_set("interaction_len", 1e300), r"line \d+, field 'interaction_len': must be <= 1e\+15"),
        (_set("strength", 1e300), r"field 'strength': must be <= 1e\+15"),
        (_set("strength", -5.0), r"field 'strength': must be >= 0"),
        (_set("decay_mark", 10**6, lambda d: d["decay_mark"] is not None), r"field 'decay_mark': 1000000 is not a"),
        (_parent_cycle, r"line \d+, field 'parent_id': the items' parent_id links form a cycle"),
        (_supersede_cycle, r"line \d+, field 'superseded_by': the items' superseded_by links form a cycle"),
        (_supersede_self, r"line \d+, field 'superseded_by': an item cannot supersede itself"),
        (lambda ls: ls[_first(ls, "session")].update(ends=99), r"session 'S1', field 'ends': 99 consolidations"),
        (lambda ls: ls[_first(ls, "session")].update(started_at=1e300), r"field 'started_at': .* outside the years"),
        (lambda ls: ls[_first(ls, "user")].update(decays=2**64), r"field 'decays': .* outside the 64-bit"),
        (lambda ls: ls[0].update(dim=2**40), r"line 1, field 'dim': must be in 1..65536"),
    ],
)
def test_values_that_would_break_the_user_later_are_bad_dumps(
    consolidated_dump: str, mutate: Any, message: str
) -> None:
    lines = _lines(consolidated_dump)
    mutate(lines)
    b = Memory(None, embedder="hashing", config=CONFIG)
    with pytest.raises(DumpError, match=message):
        import_jsonl(b, io.StringIO(_join(lines)))
    assert b.users() == []


def test_the_consolidated_dump_imports_and_the_user_goes_on(consolidated_dump: str) -> None:
    b = Memory(None, embedder="hashing", config=CONFIG)
    (rep,) = import_jsonl(b, io.StringIO(consolidated_dump))
    uid = rep.user_id
    b.add([{"speaker": "Kim", "text": "One more thing."}], user_id=uid, session_id="S4")
    b.end_session(user_id=uid, session_id="S4")
    assert not b.context("thing", user_id=uid, budget=64).abstain


def test_export_reads_a_snapshot_without_holding_the_memory_lock(tmp_path: Path, monkeypatch: Any) -> None:
    """A database file: the user's rows are read through a second connection's snapshot, taken
    under the lock and read without it. Other calls (a write here) go on meanwhile, and the
    export does not see what they wrote."""
    import threading

    from lamina.memory.dump import user_transfer as mt

    mem = Memory(tmp_path / "m.db", embedder="hashing")
    mem.add([{"text": "before the export", "timestamp": 1_700_000_000}], user_id="u", session_id="s")
    real = mt.export_user
    seen: dict[str, Any] = {}

    def export_user(store: Any, user_id: str, *, vectors: bool) -> Any:
        def write() -> None:  # another thread's call: it needs the memory's lock
            mem.add([{"text": "written during the export", "timestamp": 1_700_000_060}], user_id="u", session_id="s")
            seen["wrote"] = True

        t = threading.Thread(target=write)
        t.start()
        t.join(10)
        seen["blocked"] = t.is_alive()
        return real(store, user_id, vectors=vectors)

    monkeypatch.setattr(mt, "export_user", export_user)
    ud = mem.export_user(user_id="u")
    monkeypatch.setattr(mt, "export_user", real)
    assert seen == {"wrote": True, "blocked": False}
    assert [it.text for it in ud.items] == ["before the export"]  # the snapshot of the call's start
    assert [it.text for it in mem.export_user(user_id="u").items] == ["before the export", "written during the export"]
    with pytest.raises(NotFoundError):
        mem.export_user(user_id="ghost")
    mem.close()
