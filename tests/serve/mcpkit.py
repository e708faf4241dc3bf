"""Calling a tool through the official MCP SDK's client in the MCP tests: its structured result,
or the text of the error it answers (import after ``pytest.importorskip("mcp")``)."""

from __future__ import annotations

from typing import Any

from mcp import Client


async def call_tool(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """``tool(**args)``'s structured result; the test fails when the tool answers an error."""
    r = await client.call_tool(tool, args)
    assert not r.is_error, (tool, r.content)
    assert isinstance(r.structured_content, dict)
    return r.structured_content


async def tool_error(client: Client, tool: str, **args: Any) -> str:
    """The error text ``tool(**args)`` answers; the test fails when the tool succeeds."""
    r = await client.call_tool(tool, args)
    assert r.is_error, (tool, r.structured_content)
    text = " ".join(getattr(c, "text", "") for c in r.content)
    assert text.startswith(f"Error executing tool {tool}: ")
    return text
