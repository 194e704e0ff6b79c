"""The runs an MCP proxy session drives: each client tool call one effect, in call order.

A session keeps each run it touches open, so that its n-th call takes the n-th position,
as a restarted client calling its tools again from the top will ask for them. When a
call stops the run (an approval to wait for, a kill switch, an effect in doubt), the run
is closed with that reason, and the next call opens it again and first asks again for
the steps this session already recorded, which replay without calling the server.

Nothing here imports MCP: ``forward`` is whatever calls the upstream server.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from oncelog import (
    AmbiguousOutcome,
    ArgumentDrift,
    EffectAbandoned,
    EffectRefused,
    Ledger,
    OnceLogError,
    ReplayDivergence,
    ResultNotRecorded,
    Run,
    RunContext,
    RunStopped,
)

from ._common import Policy

# Errors raised with a record at the call's position: the call keeps its step id.
_RECORDED = (
    EffectRefused, AmbiguousOutcome, EffectAbandoned, ResultNotRecorded, ArgumentDrift,
    ReplayDivergence,
)  # fmt: skip

Forward = Callable[[str, Any, str], Coroutine[Any, Any, Any]]  # (tool, arguments, key) -> result


class SessionEnded(BaseException):
    """Closes a run when the client goes away: the run stays resumable, not completed,
    since only the client knows whether its work was done."""


@dataclass(frozen=True)
class _Asked:
    step_id: str
    tool: str
    arguments: Any
    policy: Policy


class ProxyRun:
    """One run as one proxy session sees it. Calls on it are made one at a time."""

    def __init__(self, ledger: Ledger, run_id: str, agent: str | None) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.agent = agent
        self.lock = anyio.Lock()
        self._asked: list[_Asked] = []  # steps this session recorded, in order
        self._counts: Counter[str] = Counter()
        self._entered: RunContext | None = None
        self._run: Run | None = None
        # The run is entered and left in one context, from whichever worker thread.
        self._context = contextvars.copy_context()

    async def call(self, tool: str, arguments: Any, policy: Policy, forward: Forward) -> Any:
        """The tool's result, recorded or live; an oncelog error when the run cannot go on."""
        async with self.lock:
            if self._run is None:
                await self._open(forward)
            self._counts[tool] += 1
            asked = _Asked(f"{tool}#{self._counts[tool]}", tool, arguments, policy)
            try:
                result = await self._step(asked, forward)
            except BaseException as exc:
                if isinstance(exc, _RECORDED) or not isinstance(exc, OnceLogError):
                    self._asked.append(asked)
                else:
                    self._counts[tool] -= 1  # asked again later, under the same step id
                if isinstance(exc, RunStopped):
                    await self._close(exc)
                raise
            self._asked.append(asked)
            return result

    async def end(self) -> None:
        async with self.lock:
            if self._run is not None:
                await self._close(SessionEnded("the MCP client ended its session"))

    async def _open(self, forward: Forward) -> None:
        entered = self.ledger.run(self.run_id, agent=self.agent, origin="mcp")
        self._run = await anyio.to_thread.run_sync(self._context.run, entered.__enter__)
        self._entered = entered
        for asked in self._asked:  # catch up: recorded steps replay without a call
            try:
                await self._step(asked, forward)
            except RunStopped as exc:
                await self._close(exc)
                raise
            except Exception:  # refused or failed before, and recorded as such
                continue

    async def _close(self, exc: BaseException) -> None:
        entered, self._entered, self._run = self._entered, None, None
        if entered is not None:
            await anyio.to_thread.run_sync(
                self._context.run, entered.__exit__, type(exc), exc, None
            )

    async def _step(self, asked: _Asked, forward: Forward) -> Any:
        run = self._run
        assert run is not None

        def perform(arguments: Any, *, idempotency_key: str) -> Any:
            # Called in the worker thread running the step: the server is called from the
            # event loop, and the outcome recorded once it answered.
            return anyio.from_thread.run(forward, asked.tool, arguments, idempotency_key)

        effect = asked.policy.tool(asked.tool, perform)
        return await anyio.to_thread.run_sync(
            lambda: run.effect(asked.step_id, effect, asked.arguments)
        )
