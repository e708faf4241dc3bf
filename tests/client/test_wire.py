"""The wire form (lamina.client.wire) round-trips every result exactly and fits the response schemas;
keys files and LAMINA_API_KEYS parse strictly; tenant namespaces cannot be forged."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lamina
from lamina import Memory
from lamina.client.wire import (
    WireError,
    context_from_json,
    context_to_json,
    delete_report_from_json,
    delete_report_to_json,
    item_from_json,
    item_to_json,
    links_from_json,
    links_to_json,
    note_from_json,
    note_to_json,
    session_report_from_json,
    session_report_to_json,
)
from lamina.memory.reports import DeleteReport, SessionReport
from lamina.memory.types import Context, MemoryItem
from lamina.serve import schemas as S
from lamina.serve.auth import KeyRing, hash_key
from lamina.serve.tenancy import SEP, owns, public_user_id, stored_user_id

T0 = 1_683_550_000.0


def test_round_trip_of_real_results() -> None:
    import json

    with Memory(None, embedder="hashing") as m:
        lines = ["My sister is called Ana.", "I adopted a cat named Pixel.", "We moved to Lisbon in May."]
        for j in range(3):
            m.add(
                [
                    {"speaker": "Alice", "text": f"{t} ({j})", "id": f"{j}:{i}", "timestamp": T0 + j * 86400 + i}
                    for i, t in enumerate(lines)
                ],
                user_id="u",
                session_id=f"s{j}",
            )
            rep = m.end_session(user_id="u", session_id=f"s{j}")
            assert session_report_from_json(json.loads(json.dumps(session_report_to_json(rep)))) == rep
        ctx = m.context("Where did we move? the cat?", user_id="u", budget=200)
        items = m.search("sister", user_id="u", k=20, layers=list(lamina.memory.types.LAYERS)) + m.facts(
            user_id="u", current=False
        )
    assert (
        not ctx.abstain and any(it.turns for it in ctx.items + items) and {it.kind for it in items} >= {"turn", "fact"}
    )
    wire = json.loads(json.dumps(context_to_json(ctx)))  # through real JSON text
    S.ContextOut.model_validate(wire)
    back = context_from_json(wire)
    assert back == ctx and back.render() == ctx.render() == wire["text"]
    for it in items:
        d = json.loads(json.dumps(item_to_json(it)))
        S.ItemOut.model_validate(d)
        assert set(d) == set(S.ItemOut.model_fields)
        assert item_from_json(d) == it
    assert item_to_json(items[0], user_id="public")["user_id"] == "public"
    rep2 = DeleteReport(deleted=2, ids=(3, 9))
    assert delete_report_from_json(json.loads(json.dumps(delete_report_to_json(rep2)))) == rep2
    assert set(SessionReport.__dataclass_fields__) == set(S.SessionReportOut.model_fields)
    assert set(Context.__dataclass_fields__) | {"text"} == set(S.ContextOut.model_fields)


def test_round_trip_of_notes_and_links() -> None:
    import json

    lines = ["I adopted a grey cat named Pixel last spring.", "Pixel, my grey cat, was adopted last spring."]
    with Memory(None, embedder="hashing") as m:
        a, b = m.add(
            [{"speaker": "Alice", "text": t, "timestamp": T0 + i} for i, t in enumerate(lines)],
            user_id="u",
            session_id="s",
        )
        note, links = m.note(a), m.links(a) + m.links(b)
    assert note is not None and note.history and len(links) == 2
    wire = json.loads(json.dumps(note_to_json(note)))
    S.NoteOut.model_validate(wire)
    assert note_from_json(wire) == note and note_from_json(json.loads(json.dumps(note_to_json(None)))) is None
    lw = json.loads(json.dumps(links_to_json(links)))
    S.LinksOut.model_validate(lw)
    assert links_from_json(lw) == links
    for bad in ({}, {"note": {"item_id": 1}}, {"note": []}):
        with pytest.raises(WireError):
            note_from_json(bad)
    for bad_links in (
        {},
        {"links": [{**lw["links"][0], "kind": "cousin"}]},
        {"links": [{**lw["links"][0], "newer": 1}]},
    ):
        with pytest.raises(WireError):
            links_from_json(bad_links)


def test_malformed_documents_raise_wire_error() -> None:
    good = item_to_json(MemoryItem(id=1, text="t", layer="working", kind="turn"))
    for bad in ([], {**good, "colour": 1}, {"id": 1}):
        with pytest.raises(WireError):
            item_from_json(bad)
    with pytest.raises(WireError):
        context_from_json({"items": []})
    with pytest.raises(WireError):
        session_report_from_json({"segments": 1})
    with pytest.raises(WireError):
        delete_report_from_json({"deleted": 1, "ids": None})


def test_key_ring(tmp_path: Path) -> None:
    f = tmp_path / "keys.toml"
    f.write_text(f'[tenants.acme]\nkeys = ["{hash_key("acme-key-0000000001")}", "{hash_key("acme-key-0000000002")}"]\n')
    ring = KeyRing.from_sources(
        f,
        env={"LAMINA_API_KEYS": "globex:globex-key-000000001-0123456789ab, initech:initech-key-0000001-0123456789abc"},
    )
    assert ring.tenants == ["acme", "globex", "initech"] and ring.enabled
    assert (
        ring.tenant_of("acme-key-0000000002") == "acme"
        and ring.tenant_of("globex-key-000000001-0123456789ab") == "globex"
    )
    assert ring.tenant_of("acme-key-000000000") is None and ring.tenant_of("") is None
    assert not KeyRing.from_sources(None, env={}).enabled
    bad_files = {
        "[tenants.acme]\nkeys = ['plain-text-key']\n": "not a key hash",
        "[tenants.acme]\nkeys = []\n": "non-empty list",
        "tenants = 3\n": "needs \\[tenants",
        "[tenants.'a b']\nkeys = ['sha256:" + "0" * 64 + "']\n": "tenant name",
        "[tenants.acme\n": "not valid TOML",
        "[tenants.acme]\nkeys = ['sha256:" + "g" * 64 + "']\n": "not hexadecimal",
    }
    for text, msg in bad_files.items():
        f.write_text(text)
        with pytest.raises(lamina.InvalidInput, match=msg):
            KeyRing.from_sources(f, env={})
    for env, msg in {
        "acme": "must be 'tenant:key'",
        "acme:short": "has 5 characters; a key needs at least 32",
        "acme:" + "k" * 31: "has 31 characters",
        "a b:0123456789abcdefgh0123456789abcdefgh": "tenant name",
        "x:0123456789abcdefgh0123456789abcdefgh,y:0123456789abcdefgh0123456789abcdefgh": "same key",
    }.items():
        with pytest.raises(lamina.InvalidInput, match=msg):
            KeyRing.from_sources(None, env={"LAMINA_API_KEYS": env})
    # a malformed entry may be a bare key: the message never shows it
    for env in (
        "acme-secret-key-0123456789",
        "acme:",
        "ok:0123456789abcdefgh0123456789abcdefgh,secret-key-without-colon-0123",
    ):
        with pytest.raises(lamina.InvalidInput, match="must be 'tenant:key'") as ei:
            KeyRing.from_sources(None, env={"LAMINA_API_KEYS": env})
        assert "secret" not in str(ei.value) and "acme" not in str(ei.value)


ids = st.text(min_size=1, max_size=12).filter(lambda s: s.strip() != "")


@given(st.sampled_from(["a", "b", "a.b", None]), st.sampled_from(["a", "b", "a.b", None]), ids)
def test_no_client_id_reaches_another_namespace(t1: str | None, t2: str | None, uid: str) -> None:
    """A stored id of tenant t1 is never owned by another tenant t2, whatever the caller's id."""
    try:
        stored = stored_user_id(t1, uid)
    except lamina.InvalidInput:
        # the separator, text not encodable as UTF-8, or a dot segment
        assert SEP in uid or not uid.isascii() or uid in (".", "..")
        return
    assert owns(t1, stored) and public_user_id(t1, stored) == uid
    if t2 != t1:
        assert not owns(t2, stored)


def test_responses_serialise_numpy_scalars() -> None:
    import json

    import numpy as np

    from lamina.serve.app import _dumps, _dumps_std

    d = {"gate": np.float32(0.25), "ids": [np.int64(7)], "x": 1.5}
    assert json.loads(_dumps(d)) == json.loads(_dumps_std(d)) == {"gate": 0.25, "ids": [7], "x": 1.5}
