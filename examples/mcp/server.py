"""An MCP server (stdio) with one tool that acts on the world: ``send_email`` appends to
outbox.jsonl, with the idempotency key the oncelog proxy sends in ``_meta``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

SEND_EMAIL = types.Tool(
    name="send_email",
    description="Send an email to a customer.",
    input_schema={
        "type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    },
    # Adds, never destroys; twice is two emails. A proxy whose config trusts this server
    # ("trust_annotations": true) reads it as a create; tools.json names it anyway.
    annotations=types.ToolAnnotations(destructive_hint=False, idempotent_hint=False),
)


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[SEND_EMAIL])


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    key = (params.meta or {}).get("io.oncelog/idempotency-key")
    with Path("outbox.jsonl").open("a") as out:
        out.write(json.dumps({"key": key, **(params.arguments or {})}) + "\n")
    return types.CallToolResult(content=[types.TextContent(text="sent")])


async def main() -> None:
    server: Server[Any] = Server("mailer", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
