"""The tool dispatcher: validates a call's arguments against its schema and runs it.

Every failure (unknown tool, bad JSON, missing / unexpected / mistyped argument, a core block
over its limit, text not found) comes back as a :class:`ToolResult` with ``ok=False`` and a
message the model can act on; the dispatcher never raises for the model's mistakes.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .tool_schemas import TOOL_SCHEMAS

if TYPE_CHECKING:
    from .context import VirtualContext

__all__ = ["ToolResult", "dispatch", "PAGE_SIZE"]

PAGE_SIZE = 5
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,)}
_SCHEMA = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}


@dataclass(frozen=True)
class ToolResult:
    """A tool's outcome: ``ok``, the ``content`` returned to the model, and whether it asked for
    a heartbeat (control back after the call)."""

    name: str
    ok: bool
    content: str
    heartbeat: bool = False


def _validate(name: str, raw: str | dict[str, Any]) -> dict[str, Any]:
    if name not in _SCHEMA:
        raise ValueError(f"unknown tool {name!r}; available: {', '.join(sorted(_SCHEMA))}")
    if isinstance(raw, str):
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments are not valid JSON ({e.msg})") from None
    else:
        args = raw
    if not isinstance(args, dict):
        raise ValueError("arguments must be a JSON object")
    sch = _SCHEMA[name]
    props: dict[str, Any] = sch["properties"]
    missing = [k for k in sch["required"] if k not in args]
    if missing:
        raise ValueError(f"missing required argument(s): {', '.join(missing)}")
    extra = [k for k in args if k not in props]
    if extra:
        raise ValueError(f"unexpected argument(s): {', '.join(extra)}")
    for k, v in args.items():
        p = props[k]
        ok = isinstance(v, _TYPES[p["type"]]) and not (p["type"] == "integer" and isinstance(v, bool))
        if not ok:
            raise ValueError(f"argument {k!r} must be a {p['type']}, got {type(v).__name__}")
        if "enum" in p and v not in p["enum"]:
            raise ValueError(f"argument {k!r} must be one of {p['enum']}, got {v!r}")
        if p["type"] == "integer" and v < p.get("minimum", v):
            raise ValueError(f"argument {k!r} must be >= {p['minimum']}, got {v}")
    return args


def _date(s: str, name: str, end: bool) -> float:
    try:
        d = _dt.date.fromisoformat(s)
    except ValueError:
        raise ValueError(f"argument {name!r} must be an ISO date YYYY-MM-DD, got {s!r}") from None
    t = _dt.datetime(d.year, d.month, d.day, tzinfo=_dt.timezone.utc)
    return (t + _dt.timedelta(days=1)).timestamp() - 1e-3 if end else t.timestamp()


def _page(hits: list[str], page: int) -> str:
    n = len(hits)
    pages = max(1, -(-n // PAGE_SIZE))
    body = hits[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
    head = f"page {page} of {pages} ({n} results)"
    return head + ("\n" + "\n".join(body) if body else "\nno results on this page")


def _run(vc: VirtualContext, name: str, a: dict[str, Any]) -> str:
    if name == "core_memory_append":
        vc.core.append(a["block"], a["content"])
        return f"appended to {a['block']} ({len(vc.core.get(a['block']))}/{vc.core.limit} chars)"
    if name == "core_memory_replace":
        vc.core.replace(a["block"], a["old_content"], a["new_content"])
        return f"replaced in {a['block']}"
    if name == "archival_memory_insert":
        iid = vc.archival_insert(a["content"])
        return f"stored as archival item {iid}"
    if name == "archival_memory_search":
        return _page(vc.archival_search(a["query"]), a.get("page", 0))
    if name == "conversation_search":
        lo = _date(a["start_date"], "start_date", False) if "start_date" in a else None
        hi = _date(a["end_date"], "end_date", True) if "end_date" in a else None
        return _page(vc.conversation_search(a["query"], start=lo, end=hi), a.get("page", 0))
    raise AssertionError(name)  # pragma: no cover — _validate knows every name


def dispatch(vc: VirtualContext, name: str, arguments: str | dict[str, Any]) -> ToolResult:
    """Validate and run one tool call on ``vc``; errors become ``ok=False`` results."""
    heartbeat = False
    try:
        args = _validate(name, arguments)
        heartbeat = bool(args.pop("request_heartbeat", False))
        return ToolResult(name=name, ok=True, content=_run(vc, name, args), heartbeat=heartbeat)
    except ValueError as e:
        return ToolResult(name=name, ok=False, content=f"error: {name}: {e}", heartbeat=True)
