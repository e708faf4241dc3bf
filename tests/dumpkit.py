"""Helpers of the export/import tests."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from lamina import Link, Note


def normalised(text: str) -> list[dict[str, Any]]:
    """The dump's lines without what an import changes (ids, the dump's own time)."""
    out = []
    ids: dict[int, int] = {}  # (ids are unique in a database: one map for every user)
    n = 0
    for line in text.splitlines():
        d = json.loads(line)
        if d["type"] == "header":
            d.pop("created_at")
        if d["type"] == "user":
            n = 0
        if d["type"] == "item":
            ids[d["id"]] = n
            n += 1
        out.append(d)
    for d in out:  # ids by position within the user (references included)
        if d["type"] == "item":
            d["id"] = ids[d["id"]]
            d["members"] = [ids[m] for m in d["members"]]
            for k in ("parent_id", "superseded_by"):
                if d[k] is not None and d[k] > 0:
                    d[k] = ids[d[k]]
        if d["type"] in ("revision", "note", "note_revision"):
            d["item_id"] = ids[d["item_id"]]
        if d["type"] == "note_revision" and d["cause"] is not None:
            d["cause"] = ids[d["cause"]]
        if d["type"] == "link":
            d["src"], d["dst"] = ids[d["src"]], ids[d["dst"]]
    return out


def mapped_note(n: Note | None, ids: dict[int, int]) -> Note | None:
    """A note as an import with the id map ``ids`` (old -> new) gives it: its turn and causes
    mapped (a cause deleted since, absent from ``ids``, is exported as None)."""
    if n is None:
        return None
    history = tuple(dataclasses.replace(h, cause=None if h.cause is None else ids.get(h.cause)) for h in n.history)
    return dataclasses.replace(n, item_id=ids[n.item_id], history=history)


def mapped_links(links: list[Link], ids: dict[int, int]) -> list[Link]:
    """Links as an import with the id map ``ids`` (old -> new) gives them."""
    return [dataclasses.replace(k, item_id=ids[k.item_id], other_id=ids[k.other_id]) for k in links]
