"""An MCP server gone, for the two surfaces that call one (``oncelog gateway``,
``oncelog mcp-proxy``): a call that never reached it is not performed, and a stdio server's
exit is seen when it happens.

- ``UpstreamUnreachable``: the call was certainly not sent (no connection could be made,
  or the server had already exited). The tools of both surfaces classify it as not
  performed (``unsent_not_performed``): the step is recorded not done, and the same call
  asked again is sent then.
- ``watched``: a stdio child that exited closes its output, and the ``mcp`` client says
  nothing of it until a request is sent into the closed connection, which then fails as
  if the server had died with the request in flight (in doubt). ``watched`` wraps a client
  transport so that the end of its read stream calls a function at once: the gateway
  starts the child again for the next call; the proxy refuses its calls, unsent.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from mcp.client import Transport

from oncelog.failures import Failure

from ._mcp_kinds import Choice


class UpstreamUnreachable(Exception):
    """The call never reached the MCP server: certainly not sent."""


def unreached(exc: BaseException) -> Failure | None:
    """A tool's failure classification: a server that could not be reached did not
    perform the call; of anything else nothing is known (in doubt)."""
    return Failure.NOT_PERFORMED if isinstance(exc, UpstreamUnreachable) else None


def unsent_not_performed(choice: Choice) -> Choice:
    """The choice, its tool taking ``UpstreamUnreachable`` as not performed."""
    if choice.policy is None:
        return choice
    return dataclasses.replace(
        choice, policy=dataclasses.replace(choice.policy, failures=unreached)
    )


@contextlib.asynccontextmanager
async def watched(transport: Transport, gone: Callable[[], None]) -> AsyncIterator[tuple[Any, Any]]:
    """``transport`` whose read stream calls ``gone`` at its end."""
    async with transport as (read, write):
        yield EndWatched(read, gone), write


class EndWatched:
    """A read stream (the mcp package's ``ReadStream``) that calls ``gone`` when it ends."""

    def __init__(self, inner: Any, gone: Callable[[], None]) -> None:
        self._inner = inner
        self._gone = gone

    @property
    def last_context(self) -> Any:  # the sender's context, where the inner stream keeps it
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._gone()
            raise

    def __aiter__(self) -> EndWatched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError):
            self._gone()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> EndWatched:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        suppressed: bool | None = await self._inner.__aexit__(*exc)
        return suppressed
