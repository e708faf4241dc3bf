"""The memory tools' schemas in the OpenAI function-calling format (MemGPT's self-editing memory)."""

from __future__ import annotations

from typing import Any

__all__ = ["TOOL_SCHEMAS", "tool_schemas"]


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required, "additionalProperties": False},
        },
    }


_HEART = {
    "request_heartbeat": {
        "type": "boolean",
        "description": "true to get control back after this call (chain another step)",
    }
}
_PAGE = {"page": {"type": "integer", "minimum": 0, "description": "0-based result page"}}
_BLOCK = {"type": "string", "enum": ["persona", "human"], "description": "core-memory block"}

TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _fn(
        "core_memory_append",
        "Append a line to a core-memory block (always in context; size-bounded).",
        {"block": _BLOCK, "content": {"type": "string"}, **_HEART},
        ["block", "content"],
    ),
    _fn(
        "core_memory_replace",
        "Replace exact text in a core-memory block (empty new_content deletes it).",
        {"block": _BLOCK, "old_content": {"type": "string"}, "new_content": {"type": "string"}, **_HEART},
        ["block", "old_content", "new_content"],
    ),
    _fn(
        "archival_memory_insert",
        "Store a passage in long-term archival memory.",
        {"content": {"type": "string"}, **_HEART},
        ["content"],
    ),
    _fn(
        "archival_memory_search",
        "Semantic search of archival memory, paged.",
        {"query": {"type": "string"}, **_PAGE, **_HEART},
        ["query"],
    ),
    _fn(
        "conversation_search",
        "Search every past message (also those evicted from context) by text, optionally within "
        "a date range (ISO dates, inclusive), paged.",
        {
            "query": {"type": "string"},
            "start_date": {"type": "string", "description": "YYYY-MM-DD"},
            "end_date": {"type": "string", "description": "YYYY-MM-DD"},
            **_PAGE,
            **_HEART,
        },
        ["query"],
    ),
)


def tool_schemas() -> list[dict[str, Any]]:
    """A fresh copy of :data:`TOOL_SCHEMAS` (callers may append their own tools)."""
    import copy

    return copy.deepcopy(list(TOOL_SCHEMAS))
