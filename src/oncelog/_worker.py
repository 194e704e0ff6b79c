"""Workers: processes that claim submitted runs and resume them with the agent's code.

Start as many as you like, on as many machines as share the store: a run is held by one
worker at a time (its lease), a worker that dies loses its runs to the others (at once on
its own host, after the lease TTL elsewhere), and a worker asked to stop (SIGTERM) drains:
it finishes recording the step in progress, starts nothing new, queues the run again and
exits with 75.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ._exceptions import ConfigurationError, Draining, OnceLogError, StoreUnavailable
from ._exit_codes import EXIT_COMPLETED, EXIT_TRY_LATER
from ._ledger import Ledger
from .runtime._run import RunContext
from .signals import _drain as drain

log = logging.getLogger("oncelog")

MAX_BACKOFF = 30.0  # seconds between tries while the ledger cannot be reached
# handler(run, input): a Run for a plain function, an AsyncRun for a coroutine function.
Handler = Callable[[Any, Any], Any]


class Worker:
    """Claims runnable runs (submitted with ``ledger.submit``) and runs each with the
    handler for its agent: one callable for every agent, or a mapping from agent name
    (``None`` for runs without an agent) to handler."""

    def __init__(
        self, ledger: Ledger, handlers: Handler | Mapping[str | None, Handler], *, poll: float = 1.0
    ) -> None:
        if poll <= 0:
            raise ConfigurationError("poll must be positive")
        self.ledger = ledger
        self.poll = poll
        if callable(handlers):
            self._any: Handler | None = handlers
            self._handlers: Mapping[str | None, Handler] = {}
        else:
            self._any, self._handlers = None, dict(handlers)
            if not self._handlers:
                raise ConfigurationError("a worker needs at least one handler")

    def run(self, *, until_idle: bool = False, max_runs: int | None = None) -> int:
        """Work until drained (returns 75), or until no run is left (``until_idle``) or
        ``max_runs`` are done (returns 0). Call from the main thread to drain on SIGTERM."""
        if threading.current_thread() is threading.main_thread():
            drain.handle_sigterm()
        done, backoff = 0, self.poll
        while not drain.draining() and (max_runs is None or done < max_runs):
            try:
                claimed = self.run_one()
            except StoreUnavailable as exc:
                # The ledger is out of reach (a restart, a partition): wait and claim again.
                # The run this worker held, if any, is claimable again once it is back.
                log.warning("cannot reach the ledger (%s); trying again in %.1f s", exc, backoff)
                if drain.wait_for_drain(backoff):
                    break
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = self.poll
            if claimed is not None:
                done += 1
            elif until_idle or drain.wait_for_drain(self.poll):
                break
        return EXIT_TRY_LATER if drain.draining() else EXIT_COMPLETED

    def run_one(self) -> str | None:
        """Claim one runnable run and run it to its end here; its id, or None if there
        was none. How it ended is in the ledger (and the log); it is not raised. Raises
        ``StoreUnavailable`` only if the claim itself could not reach the ledger."""
        agents = None if self._any is not None else tuple(self._handlers)
        context = self.ledger.claim(agents)
        if context is None:
            return None
        run_id = context.run_id
        try:
            self._run(context)
        except Draining:
            log.info("run %s queued again: this worker is draining", run_id)
        except OnceLogError as exc:
            log.warning("run %s stopped: %s: %s", run_id, type(exc).__name__, exc)
        except Exception:
            log.exception("run %s failed", run_id)
        else:
            log.info("run %s completed", run_id)
        return run_id

    def _run(self, context: RunContext) -> None:
        record = context.claimed_record
        handler = self._any or self._handlers[record.agent]
        if inspect.iscoroutinefunction(handler):

            async def run_async() -> None:
                async with context as run:
                    await handler(run, record.input)

            import asyncio  # only for async handlers; see _run._in_thread

            asyncio.run(run_async())
            return
        with context as run:
            handler(run, record.input)
