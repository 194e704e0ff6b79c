"""What the engine adapters (Celery, DBOS, Temporal) share: how an oncelog stop maps to
an engine's three answers, what a person must do about it, and one ledger per process.

An engine retries what fails. oncelog's stops are of two sorts the engine must tell
apart: a person must act (exit 3 or 4), and an automatic retry would only meet the same
stop again, or worse, hide it; or nothing is wrong and the same work goes through later
(exit 75), which is exactly what an engine's retry with backoff is for.
"""

from __future__ import annotations

import copy
import enum
import os
import threading
from collections.abc import Callable

from oncelog import (
    EXIT_HALTED,
    EXIT_TRY_LATER,
    EXIT_WAITING,
    AmbiguousOutcome,
    ApprovalRequired,
    BudgetExceeded,
    BudgetPaused,
    EffectRefused,
    Ledger,
    OnceLogError,
    RunHalted,
    exit_code_for,
)
from oncelog.display import decide_text, oncelog_command


class Stop(enum.Enum):
    """What an engine should do with a task that ended with an oncelog error."""

    PERSON = "a person must act; never retry it automatically"
    LATER = "nothing is wrong; retry it later"
    OTHER = "neither: the engine's own policy for an error applies"


def stop_for(exc: BaseException) -> Stop:
    """Which of the engine's answers ``exc`` calls for, by its process exit code."""
    code = exit_code_for(exc)
    if code in (EXIT_HALTED, EXIT_WAITING):
        return Stop.PERSON
    if code == EXIT_TRY_LATER:
        return Stop.LATER
    return Stop.OTHER


def told(exc: OnceLogError) -> OnceLogError:
    """A copy of ``exc`` whose message ends with what a person must do about it, for the
    engine's record of the stopped task; its type and fields are kept, so it pickles."""
    copied = copy.copy(exc)
    copied.message = f"{exc.message}; a person must act: {_command_for(exc)}"
    copied.args = (copied.message,)
    return copied


def _command_for(exc: OnceLogError) -> str:
    if exc.run_id is None:  # no run to name: the placeholders the person fills in
        run, step = ["RUN_ID"], ["STEP_ID"]
    else:
        run, step = [exc.run_id], [exc.step_id or "STEP_ID"]
    if isinstance(exc, AmbiguousOutcome):
        ask = f"look the key {exc.key} up at the provider, then " if exc.key else ""
        return f"{ask}decide, one of: {decide_text(run[0], step[0], exc.attempt)}"
    if isinstance(exc, ApprovalRequired):
        approve = oncelog_command("approve", run + step, options="--by NAME")
        deny = oncelog_command("deny", run + step, options="--by NAME")
        return f"{approve} (or, to refuse it: {deny})"
    if isinstance(exc, RunHalted):  # its message names the switch and its ``resume``
        return "clear the kill switch with the oncelog resume above (oncelog halts lists them)"
    if isinstance(exc, (BudgetExceeded, BudgetPaused)):
        return oncelog_command("budgets", run, options="--set LIMIT=NEW_LIMIT --by NAME")
    if isinstance(exc, EffectRefused):  # refused, or out of retries: a fresh set, same key
        return oncelog_command("retry", run + step, options="--by NAME --why WHY")
    return oncelog_command("show", run)


class PerProcess:
    """A ledger opened on first use in each process: a worker pool that forks must not
    share the parent's database connections with its children."""

    def __init__(self, open_ledger: Callable[[], Ledger]) -> None:
        self._open = open_ledger
        self._ledger: Ledger | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def __call__(self) -> Ledger:
        with self._lock:
            if self._ledger is None or self._pid != os.getpid():
                self._ledger, self._pid = self._open(), os.getpid()
            return self._ledger
