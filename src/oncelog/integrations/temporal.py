"""Temporal: an oncelog run inside an activity, so that a retried activity (its worker
died, its completion was lost, it timed out) does its effect once.

    from oncelog.integrations import temporal as oncelog_temporal

    @activity.defn
    def charge_order(order_id: str, cents: int) -> dict:
        with oncelog_temporal.run(ledger) as run:
            return run.effect("charge", charge, order_id=order_id, cents=cents)

    @activity.defn
    async def charge_order_async(order_id: str, cents: int) -> dict:
        async with oncelog_temporal.async_run(ledger) as run:
            return await run.effect("charge", charge, order_id=order_id, cents=cents)

The run is named ``<workflow id>/<activity id>``: Temporal gives every attempt of an
activity the same ids (a standalone activity, without a workflow, is named by its activity
id alone); ``name=`` replaces the activity id, for a workflow that schedules the activity
again after a person decided. An attempt after a done effect returns its recorded result;
after an effect whose worker died mid-call, the tool's probe asks the provider, or the
run halts.

How the activity ends: a stop for a person (an effect in doubt, a halt, an approval, a
budget), and any other oncelog error that no retry can change (a refusal the provider
gave, a mistake in the code), raise a non-retryable ``ApplicationError`` whose type is the
oncelog error's name and whose message holds the command a person runs. A try-later (another
worker holds the run, the ledger is out of reach) raises a retryable one, so the activity's
retry policy takes it up again. The activity's own exceptions are left to that policy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from oncelog import AsyncRun, Ledger, OnceLogError, Run

from ._common import missing_extra as _missing
from ._engines import Stop, stop_for, told

try:
    from temporalio import activity
    from temporalio.exceptions import ApplicationError
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("temporal", "Temporal") from exc

__all__ = ["application_error", "async_run", "run", "run_id"]


def run_id(name: str | None = None) -> str:
    """The oncelog run id of the activity in progress (the same for all its attempts);
    with ``name``, of every activity of the workflow that gives that name."""
    info = activity.info()  # raises outside an activity
    own = info.activity_id if name is None else name
    return own if not info.workflow_id else f"{info.workflow_id}/{own}"


def application_error(exc: OnceLogError) -> ApplicationError:
    """The ``ApplicationError`` an activity ends with after ``exc``: retryable only for a
    try-later."""
    stop = stop_for(exc)
    if stop is Stop.LATER:
        return ApplicationError(str(exc), type=type(exc).__name__)
    message = str(told(exc) if stop is Stop.PERSON else exc)
    return ApplicationError(message, type=type(exc).__name__, non_retryable=True)


@contextmanager
def run(ledger: Ledger, *, name: str | None = None, agent: str | None = None) -> Iterator[Run]:
    """``ledger.run`` for the activity in progress (see ``run_id``); oncelog errors leave
    it as ``application_error`` says."""
    try:
        with ledger.run(run_id(name), agent=agent, origin="temporal") as current:
            yield current
    except OnceLogError as exc:
        raise application_error(exc) from exc


@asynccontextmanager
async def async_run(
    ledger: Ledger, *, name: str | None = None, agent: str | None = None
) -> AsyncIterator[AsyncRun]:
    """``run`` for an ``async def`` activity."""
    try:
        async with ledger.run(run_id(name), agent=agent, origin="temporal") as current:
            yield current
    except OnceLogError as exc:
        raise application_error(exc) from exc
