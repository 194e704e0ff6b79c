"""An MCP server of the tests' own that counts what it performs: each performed call
appends one JSON line (tool, key, arguments, pid) to the count file and fsyncs it before
answering, so a test counts effects at the upstream, never from the ledger.

    python -m tests.support.mcp_counting_upstream --http PORT --count-file F
    python -m tests.support.mcp_counting_upstream --stdio --count-file F
        [--requests FILE] [--dedupe] [--delay SECONDS]

Tools: ``refund(order_id: int, amount: int)`` (a payment), ``send_email(to, body)``,
``lookup(customer)`` (annotated read-only), ``delete_account(customer)`` (annotated
destructive) and ``find_effect(key)`` (read-only: whether a call under that key was
performed, as a gateway's probe asks: ``{"found": ..., "receipt": ...}``; without a
``key`` it answers an error). The key is the ``_meta["io.oncelog/idempotency-key"]``
the gateway sends.
``--requests`` appends every ``tools/call`` received (tool, key, arguments) before acting;
``--dedupe`` makes it a provider that performs a key once and answers a repeat with the
first receipt (as Stripe does within its window); ``--delay`` waits before performing.
Over HTTP it prints ``mcp_counting_upstream listening on http://127.0.0.1:PORT/mcp`` when
it accepts connections.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

KEY_META = "io.oncelog/idempotency-key"
_OBJECT = "object"
SCHEMAS: dict[str, dict[str, Any]] = {
    "refund": {
        "type": _OBJECT,
        "properties": {"order_id": {"type": "integer"}, "amount": {"type": "integer"}},
        "required": ["order_id", "amount"],
    },
    "send_email": {
        "type": _OBJECT,
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to"],
    },
    "lookup": {"type": _OBJECT, "properties": {"customer": {"type": "string"}}},
    "delete_account": {"type": _OBJECT, "properties": {"customer": {"type": "string"}}},
    "find_effect": {"type": _OBJECT, "properties": {"key": {"type": "string"}}},
}
HINTS: dict[str, types.ToolAnnotations] = {
    "refund": types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    "send_email": types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    "lookup": types.ToolAnnotations(read_only_hint=True),
    "delete_account": types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    "find_effect": types.ToolAnnotations(read_only_hint=True),
}


def _tool(name: str, schema: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=name, description=f"{name} (counted)", input_schema=schema, annotations=HINTS[name]
    )


class Counter:
    """The count file: one line per performed call, appended under a lock and fsynced."""

    def __init__(self, path: str, dedupe: bool) -> None:
        self.path = Path(path)
        self.dedupe = dedupe

    def perform(self, tool: str, key: str, arguments: Any) -> dict[str, Any]:
        receipt = {"id": f"fx_{key[-12:]}", "tool": tool}
        with self.path.open("a+") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # several upstream processes may share a file
            out.seek(0)
            done = _receipt(out.read(), key) if self.dedupe else None
            if done is not None:
                return done
            line = {"tool": tool, "key": key, "arguments": arguments, "receipt": receipt,
                    "pid": os.getpid()}  # fmt: skip
            out.write(json.dumps(line) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return receipt

    def find(self, key: str) -> dict[str, Any] | None:
        """The receipt of the call performed under ``key``, if one was."""
        return _receipt(self.path.read_text(), key) if self.path.exists() else None


def _receipt(lines: str, key: str) -> dict[str, Any] | None:
    """The receipt of the first call the count file's ``lines`` hold under ``key``."""
    for text in lines.splitlines():
        done = json.loads(text)
        if done["key"] == key:
            return dict(done["receipt"])
    return None


def append(path: str | None, entry: dict[str, Any]) -> None:
    if path is not None:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")
            out.flush()
            os.fsync(out.fileno())


def server(counter: Counter, requests: str | None, delay: float) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = [_tool(name, schema) for name, schema in SCHEMAS.items()]
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        key = str((params.meta or {}).get(KEY_META, ""))
        append(requests, {"tool": params.name, "key": key, "arguments": arguments})
        if params.name not in SCHEMAS:
            return types.CallToolResult(
                content=[types.TextContent(text=f"no tool {params.name}")], is_error=True
            )
        if params.name == "find_effect":
            if not isinstance(arguments.get("key"), str):
                return types.CallToolResult(
                    content=[types.TextContent(text="find_effect needs a key")], is_error=True
                )
            receipt = counter.find(arguments["key"])
            found = {"found": receipt is not None, "receipt": receipt}
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(found))], structured_content=found
            )
        if params.name == "lookup":
            answer: dict[str, Any] = {"customer": arguments.get("customer"), "plan": "pro"}
        else:
            await anyio.sleep(delay)
            answer = counter.perform(params.name, key, arguments)
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])

    return Server("counting-upstream", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_http(app_server: Server[Any], port: int) -> None:
    import uvicorn

    app = app_server.streamable_http_app(stateless_http=True, json_response=True)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    http = uvicorn.Server(config)

    async def announce() -> None:
        while not http.started:
            await anyio.sleep(0.02)
        print(f"mcp_counting_upstream listening on http://127.0.0.1:{port}/mcp", flush=True)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(announce)
        await http.serve()
        tasks.cancel_scope.cancel()


async def serve_stdio(app_server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await app_server.run(read, write, app_server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--http", type=int, metavar="PORT")
    how.add_argument("--stdio", action="store_true")
    parser.add_argument("--count-file", required=True)
    parser.add_argument("--requests", default=None)
    parser.add_argument("--dedupe", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    app_server = server(Counter(args.count_file, args.dedupe), args.requests, args.delay)
    if args.stdio:
        anyio.run(serve_stdio, app_server)
    else:
        anyio.run(serve_http, app_server, args.http)


if __name__ == "__main__":
    main()
