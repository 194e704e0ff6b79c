"""One batch: C clients at once, each its own MCP client (the ``mcp`` package, protocol
2026-07-28 over Streamable HTTP), each making its calls one after another. The same code,
tool and payload go to the upstream directly and through the gateway; only the URL and
the token differ. Wall time of the batch, each call's latency, and the CPU each process
spent (this one, the upstream, the gateway)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from itertools import count
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

PAYLOAD = {"to": "ada@example.com", "body": "Your refund of 12.50 EUR is on its way."}
_runs = count()


@dataclass(frozen=True)
class Batch:
    calls: int
    wall_s: float
    latencies_s: list[float]
    cpu_s: dict[str, float]  # process name: CPU seconds during the batch

    @property
    def per_s(self) -> float:
        return self.calls / self.wall_s


async def _open(stack: AsyncExitStack, url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0))
    await stack.enter_async_context(http)
    client = Client(streamable_http_client(url, http_client=http), mode="2026-07-28")
    return await stack.enter_async_context(client)


async def _warm(client: Client) -> None:
    """One call outside the measurement: a client's first call also fetches the tool
    listing (to check results against output schemas)."""
    meta: Any = {"io.oncelog/run-id": f"bench-{next(_runs)}", "io.oncelog/call-id": "warm-up"}
    await client.call_tool("send_email", PAYLOAD, meta=meta)


async def _calls(client: Client, calls: int, per_run: int, latencies: list[float]) -> None:
    """``calls`` calls, a new run every ``per_run`` of them (an agent's task)."""
    for n in range(calls):
        if n % per_run == 0:
            run = f"bench-{next(_runs)}"
        meta: Any = {"io.oncelog/run-id": run, "io.oncelog/call-id": f"call-{n}"}
        started = time.perf_counter()
        result = await client.call_tool("send_email", PAYLOAD, meta=meta)
        latencies.append(time.perf_counter() - started)
        if result.is_error:
            raise RuntimeError(f"the call failed: {result.content}")


def batch(
    url: str,
    token: str | None,
    clients: int,
    calls: int,
    per_run: int,
    cpu: dict[str, Callable[[], float]],
) -> Batch:
    """``clients`` clients making ``calls`` calls each against ``url``, ``per_run`` calls to
    a run; ``cpu`` reads each process's CPU seconds so far. The clients are opened (and
    closed) outside the measured time: what is measured is calls."""

    async def measured() -> Batch:
        latencies: list[float] = []
        async with AsyncExitStack() as stack:
            opened = [await _open(stack, url, token) for _ in range(clients)]
            await asyncio.gather(*(_warm(client) for client in opened))
            before = {name: read() for name, read in cpu.items()}
            started = time.perf_counter()
            await asyncio.gather(*(_calls(client, calls, per_run, latencies) for client in opened))
            wall = time.perf_counter() - started
            spent = {name: read() - before[name] for name, read in cpu.items()}
        return Batch(clients * calls, wall, latencies, spent)

    return asyncio.run(measured())
