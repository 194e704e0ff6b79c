"""The gateway's links to its upstream MCP servers, each held open in a task of its own,
so that an upstream that goes away fails the calls made to it and never the gateway.

The ``mcp`` client runs a connection's requests in the task group of the connection: an
HTTP error in one of them (the upstream restarted, its port closed) ends that group and
cancels whichever task entered it. Entered by the gateway's own serving task, it took the
whole gateway down with it, and the call in flight was left in doubt though it was never
sent. Here a connection lives in a task that only holds it; when it breaks, the calls
waiting on it end with an error (in doubt), and the next call opens a new one. A stdio
upstream that exited closes its output without an error anyone sees: the end of that
stream lets its connection go, so the next call starts the child again rather than being
sent into the closed connection (and left in doubt).

A request whose connection to an HTTP upstream could not even be made (refused, timed
out connecting) was certainly not sent: it ends in ``UpstreamUnreachable``, which the
gateway's tools classify as not performed (``_mcp_gone``), so the call is made again when
a client asks again. Any other failure after a request left leaves its call in doubt.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CONNECTION_CLOSED

from ._gateway_config import Upstream
from ._mcp_gone import UpstreamUnreachable, watched

log = logging.getLogger("oncelog")

# A JSON-RPC error code in the range the specification leaves to implementations: the
# answer this module makes up for a request that never reached its upstream.
_UNREACHED = -32050
# The mcp package's own client's: a server may hold a response stream open for minutes.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class _AnswerUnreached(httpx2.AsyncBaseTransport):
    """An HTTP transport that answers a request it could not connect for with a JSON-RPC
    error, instead of raising into the ``mcp`` client's task group (which would end the
    connection of every other call in flight)."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:  # nothing was written
            error = {"code": _UNREACHED, "message": f"{type(exc).__name__}: {exc}"}
            return httpx2.Response(503, json={"jsonrpc": "2.0", "id": None, "error": error})

    async def aclose(self) -> None:
        await self._inner.aclose()


class UpstreamLink:
    """One upstream's connection, opened when first needed and again after it broke."""

    def __init__(self, upstream: Upstream, tasks: anyio.abc.TaskGroup) -> None:
        self.upstream = upstream
        self._tasks = tasks
        self._client: Client | None = None
        self._ended: anyio.Event | None = None  # set: the connection's task lets it go
        self._opening = anyio.Lock()

    async def list_tools(self) -> AsyncIterator[types.Tool]:
        """Every tool the upstream lists, page after page."""
        cursor: str | None = None
        while True:
            listed = await (await self._connected()).list_tools(cursor=cursor)
            for tool in listed.tools:
                yield tool
            cursor = listed.next_cursor
            if not cursor:
                return

    async def call_tool(
        self, tool: str, arguments: Any, meta: types.RequestParamsMeta
    ) -> types.CallToolResult:
        """The upstream's answer; ``UpstreamUnreachable`` when it was certainly not sent."""
        client = await self._connected()
        try:
            return await client.call_tool(tool, arguments, meta=meta)
        except MCPError as exc:
            if exc.code == _UNREACHED:
                raise self._unreachable(exc) from exc
            if exc.code == CONNECTION_CLOSED:  # this call is in doubt; the next reconnects
                self._let_go(client)
            raise

    def close(self) -> None:
        if self._client is not None:
            self._let_go(self._client)

    async def _connected(self) -> Client:
        async with self._opening:
            if self._client is None:
                self._ended = anyio.Event()
                try:
                    self._client = await self._tasks.start(self._hold, self._ended)
                except Exception as exc:  # the handshake never reached it: nothing was sent
                    raise self._unreachable(exc) from exc
            return self._client

    def _let_go(self, client: Client) -> None:
        if self._client is client and self._ended is not None:
            self._forget(self._ended)

    def _forget(self, ended: anyio.Event) -> None:
        """Let the connection ``ended`` names go, if it is still the link's: the next call
        opens another."""
        if self._ended is ended:
            self._client = None
        ended.set()

    def _child_gone(self, ended: anyio.Event) -> None:
        if not ended.is_set():  # not when the link let the connection go itself
            log.warning(
                "gateway: stdio upstream %r exited; the next call starts it again",
                self.upstream.name,
            )
        self._forget(ended)

    def _unreachable(self, exc: BaseException) -> UpstreamUnreachable:
        return UpstreamUnreachable(
            f"upstream {self.upstream.name!r} could not be reached ({exc}); nothing was sent"
        )

    async def _hold(self, ended: anyio.Event, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        opened: Client | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                gone = functools.partial(self._child_gone, ended)
                client = await _client(self.upstream, stack, gone)
                opened = await stack.enter_async_context(client)
                task_status.started(opened)
                await ended.wait()
        except Exception as exc:
            if opened is None:
                raise  # to the caller of start(): the connection was never made
            # Raised after started(), it would end the task group of every link.
            log.warning(
                "gateway: the connection to upstream %r broke (%s); the next call opens "
                "another", self.upstream.name, _first_leaf(exc),
            )  # fmt: skip
        finally:
            if opened is not None:
                self._let_go(opened)


async def _client(
    upstream: Upstream, stack: contextlib.AsyncExitStack, gone: Callable[[], None]
) -> Client:
    """The upstream's client, not yet entered; what it needs closed goes on ``stack``;
    ``gone`` is called when a stdio upstream's output ends (the child exited)."""
    if upstream.url is not None:
        # An HTTP client given to the mcp transport is the giver's to close.
        http = httpx2.AsyncClient(timeout=_TIMEOUT, transport=_AnswerUnreached())
        await stack.enter_async_context(http)
        return Client(streamable_http_client(upstream.url, http_client=http))
    command = upstream.command
    # A stdio upstream gets the gateway's environment, as if it were started directly.
    child = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(os.environ))
    return Client(watched(stdio_client(child), gone))


def _first_leaf(exc: BaseException) -> BaseException:
    """The first error inside an exception group (a task group's), or ``exc`` itself."""
    inner = getattr(exc, "exceptions", None)
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc
