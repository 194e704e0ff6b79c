"""Celery: one oncelog run per task, so a redelivered task does its effects once.

    from oncelog.integrations.celery import once_task

    @once_task(app, lambda: oncelog.open(LEDGER_URL))
    def charge_order(run: oncelog.Run, order_id: str, cents: int) -> dict:
        return run.effect("charge", charge, order_id=order_id, cents=cents)

The run is named by the task id, which a redelivery and ``self.retry`` keep (or by
``run_id=``, a function of the task's arguments). The task acknowledges its message only
after it ended (``acks_late``) and gives it back when its worker process dies
(``reject_on_worker_lost``): the redelivered task replays the recorded steps, and an
effect whose worker died mid-call is probed, or halts the run, instead of firing again.

How the task ends: the run completed → success, with the function's result. A person must
act (a halt, an effect in doubt, an approval or a budget) → the task fails with the
oncelog error, whose message names the run, the step and the command to run; it is never
retried automatically (not even by ``autoretry_for``). Nothing is wrong but it cannot go on
now (another worker holds the run, the ledger is out of reach) → ``self.retry`` with an
exponential backoff, as often as it takes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from oncelog import (
    ConfigurationError,
    EffectRefused,
    Ledger,
    NeedsPerson,
    OnceLogError,
    Run,
    UsageError,
    WaitingForPerson,
)

from ._common import missing_extra as _missing
from ._engines import PerProcess, Stop, stop_for, told

try:
    from celery import Celery, Task
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("celery", "Celery") from exc

__all__ = ["once_task"]

log = logging.getLogger("oncelog.integrations.celery")

P = ParamSpec("P")
R = TypeVar("R")

# Settings a task must keep: without them a dead worker's task is lost, not redelivered.
_REQUIRED = {"acks_late": True, "reject_on_worker_lost": True}


def once_task(
    app: Celery,
    ledger: Callable[[], Ledger],
    *,
    run_id: Callable[..., str] | None = None,
    agent: str | None = None,
    backoff: float = 1.0,
    backoff_max: float = 600.0,
    **options: Any,
) -> Callable[[Callable[Concatenate[Run, P], R]], Task[P, R]]:
    """A Celery task (``app.task``) whose body runs inside one oncelog run, handed to it
    as its first argument.

    ``ledger`` opens the ledger; it is called once in each worker process (a forked
    pool child opens its own). ``run_id(*args, **kwargs)`` names the run from the task's
    arguments (an order id); by default the task id names it. ``agent`` is the runs'
    kill-switch scope. A retry for later waits ``backoff * 2**retries`` seconds, at most
    ``backoff_max``. Other ``options`` go to ``app.task``."""
    for name, value in _REQUIRED.items():
        if options.setdefault(name, value) is not value:
            raise ConfigurationError(
                f"once_task needs {name}=True: without it a task whose worker died is lost"
            )
    if backoff < 0 or backoff_max < 0:
        raise ConfigurationError("backoff and backoff_max cannot be negative")
    # A refusal (or retries run out) replays at every attempt: only a person's retry moves it.
    person = (NeedsPerson, WaitingForPerson, EffectRefused)
    dont = (*tuple(options.pop("dont_autoretry_for", ())), *person)
    throws = (*tuple(options.pop("throws", ())), *person)
    options.setdefault("max_retries", None)  # a try-later goes through when it can
    open_ledger = PerProcess(ledger)

    def decorate(fn: Callable[Concatenate[Run, P], R]) -> Task[P, R]:
        @functools.wraps(fn)
        def body(task: Task[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
            name = task.request.id if run_id is None else run_id(*args, **kwargs)
            if name is None:
                raise UsageError(
                    f"task {task.name} was called, not sent: without run_id= it has no "
                    "task id to name its run by (send it with delay or apply_async)"
                )
            try:
                with open_ledger().run(name, agent=agent, origin="celery") as run:
                    return fn(run, *args, **kwargs)
            except OnceLogError as exc:
                stop = stop_for(exc)
                if stop is Stop.LATER:
                    delay = min(backoff * 2 ** (task.request.retries or 0), backoff_max)
                    log.info("run %s: %s; retried in %.1fs", name, exc, delay)
                    raise task.retry(exc=exc, countdown=delay) from exc
                if stop is Stop.PERSON:
                    stopped = told(exc)
                    log.warning("task %s: %s", task.request.id, stopped)
                    raise stopped from exc
                raise

        # Typed as Any: Celery's stubs cannot tell which overload free ``options`` choose.
        declare: Any = app.task
        task: Task[P, R] = declare(bind=True, dont_autoretry_for=dont, throws=throws, **options)(
            body
        )
        return task

    return decorate
