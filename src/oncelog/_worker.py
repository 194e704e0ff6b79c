"""Workers: processes that claim submitted runs and resume them with the agent's code.

Start as many as you like, on as many machines as share the store: a run is held by one
worker at a time (its lease), a worker that dies loses its runs to the others (at once on
its own host, after the lease TTL elsewhere), and a worker asked to stop (SIGTERM) drains:
it finishes recording the step in progress, starts nothing new, queues the run again and
exits with 75. With ``concurrency`` above 1 a worker holds up to that many runs at once
(``_fleet``), claiming as many as it has free slots in one transaction, each with its own
lease, heartbeat and fencing token; a drain drains them all, and gives back at once the
runs it claimed and had not started.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._exceptions import ConfigurationError, Draining, OnceLogError, StoreUnavailable
from ._exit_codes import EXIT_COMPLETED, EXIT_TRY_LATER
from ._ledger import Ledger
from .process._fleet import Fleet
from .runtime._run import RunContext
from .signals import _crashpoints as crashpoints
from .signals import _drain as drain

log = logging.getLogger("oncelog")

MAX_BACKOFF = 30.0  # seconds between tries while the ledger cannot be reached
# The most runs one claim takes in one transaction: it holds SQLite's one writer (and, on
# PostgreSQL, a connection) while it takes each run's lease, so a thousand free slots are
# filled by a few claims that each leave the running runs' writes room between them.
CLAIM_BATCH = 100
# handler(run, input): a Run for a plain function, an AsyncRun for a coroutine function.
Handler = Callable[[Any, Any], Any]


class Worker:
    """Claims runnable runs (submitted with ``ledger.submit``) and runs each with the
    handler for its agent: one callable for every agent, or a mapping from agent name
    (``None`` for runs without an agent) to handler.

    ``concurrency`` runs at once in this process: coroutine-function handlers as tasks on
    one event loop, plain ones each in a thread; 1 (the default) runs one at a time in the
    calling thread."""

    def __init__(
        self,
        ledger: Ledger,
        handlers: Handler | Mapping[str | None, Handler],
        *,
        poll: float = 1.0,
        concurrency: int = 1,
    ) -> None:
        if poll <= 0:
            raise ConfigurationError("poll must be positive")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(
                f"concurrency must be a whole number from 1, not {concurrency!r}"
            )
        self.ledger = ledger
        self.poll = poll
        self.concurrency = concurrency
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
        if self.concurrency > 1:
            return self._run_many(until_idle, max_runs)
        done, backoff = 0, self.poll
        while not drain.draining() and (max_runs is None or done < max_runs):
            try:
                claimed = self.run_one()
            except StoreUnavailable as exc:
                # The run this worker held, if any, is claimable again once it is back.
                if _unreachable(exc, backoff):
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
        context = self._claim()
        if context is None:
            return None
        record = context.claimed_record
        handler = self._handler(context)
        with _reported(context.run_id):
            if inspect.iscoroutinefunction(handler):
                import asyncio  # only for async handlers; see _run._in_thread

                asyncio.run(_run_async(context, handler))
            else:
                with context as run:
                    handler(run, record.input)
        return context.run_id

    def _run_many(self, until_idle: bool, max_runs: int | None) -> int:
        """``run`` with up to ``concurrency`` runs at once: claims as many runs as slots are
        free in one transaction (at most ``CLAIM_BATCH``); once draining (or done),
        claims nothing more and waits for every run it holds. It wakes when a run ends
        (a slot to fill) and, with nothing to claim, polls the queue."""
        claimed, backoff = 0, self.poll
        with Fleet(self.concurrency) as fleet:
            while (max_runs is None or claimed < max_runs) and fleet.wait_for_room():
                wanted = min(fleet.room, CLAIM_BATCH)
                if max_runs is not None:
                    wanted = min(wanted, max_runs - claimed)
                try:
                    contexts = self.ledger.claim_many(self._agents(), wanted)
                except StoreUnavailable as exc:
                    if _unreachable(exc, backoff):
                        break
                    backoff = min(backoff * 2, MAX_BACKOFF)
                    continue
                backoff = self.poll
                claimed += len(contexts)
                self._start_all(fleet, contexts)
                if len(contexts) == wanted:
                    continue  # the queue may hold more: fill the slots left, if any
                if until_idle and not contexts and fleet.in_flight == 0:
                    break
                # A run that ends may leave another to claim (or a slot to fill).
                fleet.wait_for_change(self.poll)
        return EXIT_TRY_LATER if drain.draining() else EXIT_COMPLETED

    def _start_all(self, fleet: Fleet, contexts: list[RunContext]) -> None:
        """Start each claimed run in a slot; once draining, give back the rest at once.
        (A run started as the drain begins stops at its first step, queued again.)"""
        if contexts:
            crashpoints.reach("after_claim_commit", "")
        for context in contexts:
            if drain.draining():
                self.ledger.release_claim(context)
            else:
                self._start(fleet, context)

    def _start(self, fleet: Fleet, context: RunContext) -> None:
        handler = self._handler(context)
        if inspect.iscoroutinefunction(handler):

            async def job_async() -> None:
                with _reported(context.run_id):
                    await _run_async(context, handler)

            fleet.start_async(job_async)
            return

        def job() -> None:
            with _reported(context.run_id), context as run:
                handler(run, context.claimed_record.input)

        fleet.start(job)

    def _agents(self) -> tuple[str | None, ...] | None:
        return None if self._any is not None else tuple(self._handlers)

    def _claim(self) -> RunContext | None:
        return self.ledger.claim(self._agents())

    def _handler(self, context: RunContext) -> Handler:
        return self._any or self._handlers[context.claimed_record.agent]


async def _run_async(context: RunContext, handler: Handler) -> None:
    async with context as run:
        await handler(run, context.claimed_record.input)


def _unreachable(exc: StoreUnavailable, backoff: float) -> bool:
    """The ledger is out of reach (a restart, a partition): wait ``backoff`` seconds before
    claiming again; True if the process starts draining meanwhile."""
    log.warning("cannot reach the ledger (%s); trying again in %.1f s", exc, backoff)
    return drain.wait_for_drain(backoff)


@contextmanager
def _reported(run_id: str) -> Iterator[None]:
    """Log how a run ended; raise nothing of it (it is in the ledger)."""
    try:
        yield
    except Draining:
        log.info("run %s queued again: this worker is draining", run_id)
    except OnceLogError as exc:
        log.warning("run %s stopped: %s: %s", run_id, type(exc).__name__, exc)
    except Exception:
        log.exception("run %s failed", run_id)
    else:
        log.info("run %s completed", run_id)
