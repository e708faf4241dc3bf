"""The item fields are defined once, by :class:`lamina.MemoryItem` (the public item) and
``ITEM_COLUMNS`` (the stored row): the HTTP and MCP schemas, the JSON wire form and the dump's
item lines list exactly those fields."""

from __future__ import annotations

from dataclasses import fields

from lamina.client.wire import item_to_json
from lamina.memory.dump import format as dump_format
from lamina.memory.dump.entries import ItemEntry
from lamina.memory.state.records import ITEM_FIELDS, Record
from lamina.memory.store.protocol import ITEM_COLUMNS
from lamina.memory.types import MemoryItem
from lamina.serve import mcp_server, schemas

PUBLIC = [f.name for f in fields(MemoryItem)]


def test_http_item_schema_is_the_public_item() -> None:
    assert list(schemas.item_fields()) == PUBLIC
    assert list(schemas.ItemOut.model_fields) == PUBLIC
    js = schemas.ItemOut.model_json_schema()
    assert list(js["properties"]) == PUBLIC
    assert js["required"] == PUBLIC


def test_mcp_item_schema_is_a_selection_of_the_public_item() -> None:
    assert set(mcp_server.ITEM_FIELDS) <= set(PUBLIC)
    assert list(mcp_server.ItemOut.model_fields) == list(mcp_server.ITEM_FIELDS)
    assert list(mcp_server.ItemOut.model_json_schema()["properties"]) == list(mcp_server.ITEM_FIELDS)


def test_wire_item_is_the_public_item() -> None:
    assert list(item_to_json(MemoryItem(id=1, text="t", layer="archive", kind="turn"))) == PUBLIC


def test_stored_fields_are_the_store_columns() -> None:
    # the dump's item line: every column but the store's own sequence number
    entry = [f.name for f in fields(ItemEntry)]
    assert sorted(entry) == sorted(c for c in ITEM_COLUMNS if c != "seq")
    assert list(dump_format._ITEM) == entry
    # the in-memory record: every column but the embedding, and two caches
    assert sorted(f.name for f in fields(Record)) == sorted([*ITEM_FIELDS, "nt", "tk"])
    # the public item shows stored columns, and the score and turns of a read
    assert set(PUBLIC) - set(ITEM_COLUMNS) == {"score", "turns"}
