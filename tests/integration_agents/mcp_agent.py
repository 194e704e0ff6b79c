"""An MCP client agent that knows nothing of oncelog: it starts ``oncelog mcp-proxy`` in
front of the effects server and calls three tools in order, as an agent restarted from
the top would call them again.

    python -m tests.integration_agents.mcp_agent --ledger L --effects E --config C --run R

Prints one JSON line per call (the text the tool answered, and whether it was an error);
exits 4 when a tool answered with an error, 0 when all three succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.launch import PYTHON

CALLS = [
    ("lookup", {"customer": "cus_ada"}),
    ("send_email", {"customer": "cus_ada"}),
    ("delete_account", {"customer": "cus_ada"}),
]


async def work(args: argparse.Namespace) -> int:
    server = [
        PYTHON,
        "-m",
        "tests.integration_agents.mcp_server",
        "--effects",
        args.effects,
    ]
    proxy = StdioServerParameters(
        command=PYTHON,
        args=["-m", "oncelog", "mcp-proxy", "--db", args.ledger, "--config", args.config,
              "--run-id", args.run, "--", *server],
        env=dict(os.environ),
    )  # fmt: skip
    async with stdio_client(proxy) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == [name for name, _ in CALLS]
        for name, arguments in CALLS:
            result = await session.call_tool(name, arguments)
            text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
            print(json.dumps({"tool": name, "error": result.is_error, "text": text}), flush=True)
            if result.is_error:
                return 4
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--effects", "--config", "--run"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    sys.exit(anyio.run(work, args))


if __name__ == "__main__":
    main()
