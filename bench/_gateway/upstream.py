"""The benchmark's upstream MCP server: one tool, ``send_email``, that does nothing but
answer, so that what a call through the gateway adds is not hidden behind the tool's own
work. Streamable HTTP, stateless, JSON responses (as the gateway serves).

    python bench/_gateway/upstream.py PORT
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-upstream")


@server.tool()
def send_email(to: str, body: str) -> str:
    """Send an email (here: answer at once)."""
    return f"sent to {to}"


if __name__ == "__main__":
    server.run(
        "streamable-http", host="127.0.0.1", port=int(sys.argv[1]),
        stateless_http=True, json_response=True,
    )  # fmt: skip
