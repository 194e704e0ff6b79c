"""How an agent process ends, so a supervisor knows what to do next: the exit codes of
``_exit_codes`` (``0`` completed · ``3`` halted, a person must act · ``4`` waiting for a
person · ``75`` try again later · others in the table), and the error explained on stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

from .._exceptions import (
    ArgumentDrift,
    ConfigurationError,
    EffectRefused,
    NeedsPerson,
    OnceLogError,
    ReplayDivergence,
    WaitingForPerson,
)
from .._exit_codes import EXIT_COMPLETED, EXIT_ERROR
from ..records._display import printable
from ..signals._drain import handle_sigterm
from . import _leases as leases
from . import _main as main

log = logging.getLogger("oncelog")

_FIELD_LABELS = {"run_id": "run", "step_id": "step", "key": "key"}


def explain(exc: OnceLogError) -> str:
    """``exc`` as a person reads it: its type and message, then where it happened, one
    field a line (the CLI and ``run_main`` print it)."""
    # Each line escaped on its own: an id or a reason from the ledger never starts a
    # line or drives the terminal (``display.printable``).
    lines = [printable(f"{type(exc).__name__}: {exc.message}")]
    lines += [printable(f"  {_FIELD_LABELS.get(k, k)}: {v}") for k, v in exc.fields().items()]
    return "\n".join(lines)


# Stops no decision in the ledger lets go on (the code must change): never waited for.
NOT_DECIDED = (ReplayDivergence, ArgumentDrift)


def exit_code_for(exc: BaseException | None) -> int:
    """The exit code a process should end with after ``exc`` (None: completed)."""
    if exc is None:
        return EXIT_COMPLETED
    if isinstance(exc, OnceLogError):
        return exc.exit_code
    return EXIT_ERROR


def run_main(
    agent: Callable[[], Any],
    *,
    drain_on_sigterm: bool = True,
    wait_for_person: float | timedelta | None = None,
) -> NoReturn:
    """Call ``agent`` and exit with the code for how it ended, explaining on stderr.

    SIGTERM (what Kubernetes sends on every eviction and rollout) drains: the step in
    progress finishes and is recorded, no new step starts, the run is queued again and
    the process exits with 75 (see ``handle_sigterm``); ``drain_on_sigterm=False`` leaves
    SIGTERM to Python's default, which kills the process mid-step.

    With ``wait_for_person`` (seconds, or a ``timedelta``), a run that stops for a person
    (exit 3 or 4) is not given up: the process waits up to that long for the decision
    (``oncelog resolve``, ``approve``, ``deny``, a raised budget, a cleared kill switch)
    and then calls ``agent`` again, which replays what is recorded and goes on. So does a
    run that failed on an ``EffectRefused`` (the provider refused, or the retry policy ran
    out): it waits for a person's ``oncelog retry`` or ``redrive``. Without a decision in
    time it exits with 3, 4 or 1; SIGTERM while it waits exits with 75. A
    ``ReplayDivergence`` or ``ArgumentDrift`` (the code must change) exits at once.

    A stop that ``agent``'s code caught counts as one it raised: ``agent`` returning, or
    calling ``sys.exit(0)``, after its run ended stopped for a person ends the process
    with that stop's code (or waits for its decision), never 0. Any other exit code the
    code chose stays its own, and so does the exit of an agent that ran several runs (a
    worker, a batch): each run's stop is recorded and announced all the same."""
    patience = _seconds(wait_for_person)
    main.RUNNING[0] = True
    if drain_on_sigterm and threading.current_thread() is threading.main_thread():
        handle_sigterm()
    while True:
        main.clear()
        stop: NeedsPerson | WaitingForPerson | EffectRefused | None
        try:
            agent()
            stop = main.swallowed()
        except (NeedsPerson, WaitingForPerson, EffectRefused) as exc:
            stop = exc
        except OnceLogError as exc:
            _exit_for(exc)
        except SystemExit as exc:
            # ``sys.exit(0)`` says the run completed: not if it stopped for a person. An
            # agent's own code other than 0 is its own say and stays.
            stop = main.swallowed() if exc.code is None or exc.code == 0 else None
            if stop is None:
                raise
        if stop is None:
            sys.exit(EXIT_COMPLETED)
        if patience is None or isinstance(stop, NOT_DECIDED) or not _decided(stop, patience):
            _exit_for(stop)


def _decided(stop: NeedsPerson | WaitingForPerson | EffectRefused, patience: float) -> bool:
    """Wait for a person's decision on the run ``stop`` stopped; False if none came in
    time. Draining while waiting, or losing the ledger, exits at once."""
    print(f"oncelog: {explain(stop)}", file=sys.stderr)
    print(f"oncelog: waiting up to {patience:g} s for a person's decision", file=sys.stderr)
    try:
        # False at once if this process never saw the run stop: nothing to watch.
        wait = stop.wait_for_decision
        waiter = leases.new_owner()
        try:
            decided = wait is not None and wait(patience, waiter)
        finally:
            leases.forget(waiter)
    except OnceLogError as exc:  # Draining, or the ledger out of reach: 75, try later
        _exit_for(exc)
    if not decided:
        print(f"oncelog: no decision on run {stop.run_id!r} in {patience:g} s", file=sys.stderr)
    return decided


def _exit_for(exc: OnceLogError) -> NoReturn:
    print(f"oncelog: {explain(exc)}", file=sys.stderr)
    sys.exit(exit_code_for(exc))


def _seconds(value: float | timedelta | None) -> float | None:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if seconds is not None and (isinstance(seconds, bool) or not seconds > 0):
        raise ConfigurationError(f"wait_for_person must be a positive duration, not {value!r}")
    return seconds
