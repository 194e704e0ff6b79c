"""DBOS: an oncelog run inside a DBOS step (or workflow), so that DBOS's recovery, which
runs again a step whose process died before its output was checkpointed, finds the
effect recorded instead of performing it again.

    from oncelog.integrations import dbos as oncelog_dbos

    @DBOS.step(retries_allowed=True, should_retry=oncelog_dbos.should_retry)
    def charge_order(order_id: str, cents: int) -> dict:
        with oncelog_dbos.run(ledger) as run:
            return run.effect("charge", charge, order_id=order_id, cents=cents)

Inside a step the run is named ``<workflow id>/step-<n>``, ``n`` being DBOS's id of the
step (its position in the workflow, which DBOS's deterministic replay keeps); inside a
workflow's own code (outside any step) it is the workflow id, and the workflow's code,
which DBOS re-executes from the top, is replayed by oncelog too. ``name=`` replaces the
position by a name (``<workflow id>/<name>``).

A step whose effect may or may not have happened ends with the oncelog error, and
``should_retry`` tells DBOS not to retry it: the workflow ends in ERROR with the command a
person runs in its message. A try-later (another process holds the run) is retried.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from oncelog import Ledger, NoActiveRun, OnceLogError, Run

from ._common import missing_extra as _missing
from ._engines import Stop, stop_for, told

try:
    from dbos import DBOS
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("dbos", "DBOS") from exc

__all__ = ["run", "run_id", "should_retry"]


def run_id(name: str | None = None) -> str:
    """The oncelog run id of the DBOS step or workflow in progress."""
    workflow = DBOS.workflow_id
    if workflow is None:
        raise NoActiveRun("oncelog_dbos.run_id() is only known inside a DBOS workflow or step")
    step = DBOS.step_id
    if name is not None:
        return f"{workflow}/{name}"
    return workflow if step is None else f"{workflow}/step-{step}"


@contextmanager
def run(ledger: Ledger, *, name: str | None = None, agent: str | None = None) -> Iterator[Run]:
    """``ledger.run`` for the DBOS step or workflow in progress (see ``run_id``). A stop
    for a person is raised with the command that lets the run go on in its message."""
    try:
        with ledger.run(run_id(name), agent=agent, origin="dbos") as current:
            yield current
    except OnceLogError as exc:
        if stop_for(exc) is Stop.PERSON:
            raise told(exc) from exc
        raise


def should_retry(exc: BaseException) -> bool:
    """For ``@DBOS.step(retries_allowed=True, should_retry=...)``: retry what goes through
    later and the step's own errors, never a stop for a person or a settled refusal."""
    if isinstance(exc, OnceLogError):
        return stop_for(exc) is Stop.LATER
    return True
