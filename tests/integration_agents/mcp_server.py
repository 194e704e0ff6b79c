"""An MCP server (the low-level ``Server`` of the ``mcp`` package, on stdio) whose tools
act on the world: each effect is appended to the effect log with the idempotency key the
proxy sends in ``_meta``.

    python -m tests.integration_agents.mcp_server --effects E [--delay SECONDS]
        [--annotations JSON] [--requests FILE] [--dedupe] [--input-schemas JSON]
        [--find-tool result|bare]

``--annotations`` gives tools their MCP annotations (``{"TOOL": {"readOnlyHint": true}}``);
``--requests`` appends each ``tools/call`` it receives (its name and ``_meta``) to FILE
before acting; ``--dedupe`` makes it a server that performs a key once and answers a
repeat with the first receipt; ``--input-schemas`` gives tools their input schemas
(``{"TOOL": {"type": "object", ...}}``) instead of one string field ``customer``;
``--find-tool`` lists one more tool, ``find_effect(key)``, which answers whether an effect
was made under that key, as a proxy's probe asks: ``{"found": ..., "result": ...}`` with
the call's own result (``result``), or ``{"found": ..., "receipt": ...}`` (``bare``).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from .effect_log import EffectLog

KEY_META = "io.oncelog/idempotency-key"
TOOLS = {
    "lookup": "Find a customer's account.",
    "send_email": "Send an email to a customer.",
    "delete_account": "Delete a customer's account.",
    "refund": "Refund a customer; answers with structured content.",
}
# The refund tool's output schema: its results carry structured content.
REFUND_OUTPUT = {
    "type": "object",
    "properties": {"refund_id": {"type": "string"}},
    "required": ["refund_id"],
}


def tool(
    name: str, description: str, annotations: dict[str, Any] | None,
    schema: dict[str, Any] | None = None,
) -> types.Tool:  # fmt: skip
    schema = schema or {"type": "object", "properties": {"customer": {"type": "string"}}}
    output = REFUND_OUTPUT if name == "refund" else None
    hints = None if annotations is None else types.ToolAnnotations.model_validate(annotations)
    return types.Tool(
        name=name, description=description, input_schema=schema, output_schema=output,
        annotations=hints,
    )  # fmt: skip


def answered(name: str, answer: dict[str, Any]) -> types.CallToolResult:
    """What a tool answers: its receipt as text, and a refund's id as structured content."""
    content: list[types.ContentBlock] = [types.TextContent(text=json.dumps(answer))]
    if name == "refund":
        structured = {"refund_id": answer["id"]}
        return types.CallToolResult(content=content, structured_content=structured)
    return types.CallToolResult(content=content)


def record(path: str | None, params: types.CallToolRequestParams) -> None:
    """The request as it reached the server, durably, before anything is done."""
    if path is not None:
        line = json.dumps({"tool": params.name, "meta": params.meta or {}})
        with open(path, "a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--effects", required=True)
    parser.add_argument("--delay", type=float, default=0.0)  # seconds before each effect
    parser.add_argument("--annotations", type=json.loads, default={})
    parser.add_argument("--requests", default=None)
    parser.add_argument("--dedupe", action="store_true")
    parser.add_argument("--input-schemas", type=json.loads, default={})
    parser.add_argument("--find-tool", choices=["result", "bare"], default=None)
    args = parser.parse_args()
    log = EffectLog(args.effects)

    def perform(key: str, name: str, arguments: Any) -> dict[str, Any]:
        done = log.made(key) if args.dedupe else None
        return dict(done["receipt"]) if done else log.perform(key, name, arguments)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = [
            tool(n, d, args.annotations.get(n), args.input_schemas.get(n)) for n, d in TOOLS.items()
        ]
        if args.find_tool is not None:
            key_only = {"type": "object", "properties": {"key": {"type": "string"}}}
            listed.append(tool("find_effect", "Find an effect by its key.", None, key_only))
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        record(args.requests, params)
        arguments = params.arguments or {}
        if params.name == "find_effect":
            return find(arguments.get("key"))
        if params.name == "lookup":
            answer: dict[str, Any] = {"customer": arguments.get("customer"), "plan": "pro"}
        else:
            key = str((params.meta or {}).get(KEY_META))
            await anyio.sleep(args.delay)
            answer = perform(key, params.name, arguments)
        return answered(params.name, answer)

    def find(key: Any) -> types.CallToolResult:
        done = log.made(key)
        found: dict[str, Any] = {"found": done is not None}
        if done is not None and args.find_tool == "result":
            own = answered(done["tool"], done["receipt"])
            found["result"] = own.model_dump(mode="json", by_alias=True, exclude_none=True)
        elif done is not None:
            found["receipt"] = done["receipt"]
        text: list[types.ContentBlock] = [types.TextContent(text=json.dumps(found))]
        return types.CallToolResult(content=text, structured_content=found)

    server: Server[Any] = Server("effects", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
