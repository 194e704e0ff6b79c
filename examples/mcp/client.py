"""An MCP client that knows nothing of oncelog: it starts ``oncelog mcp-proxy`` in front of
server.py, as it would start the server itself, and calls ``send_email``.

    pip install '.[mcp]'
    python examples/mcp/client.py ticket-4711
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).parent


async def main(ticket: str) -> None:
    server = [sys.executable, str(HERE / "server.py")]
    options = ["--config", str(HERE / "tools.json"), "--run-id", ticket]
    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "oncelog", "mcp-proxy", *options, "--", *server],
        env=dict(os.environ),
    )
    async with stdio_client(proxy) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool(
            "send_email", {"to": "ada@example.com", "body": "Refunded."}
        )
        print(result.content)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "ticket-4711")
