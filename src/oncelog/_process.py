"""Exit codes for agent processes, so a supervisor knows what to do next.

``0`` completed · ``3`` halted, a person must act · ``4`` waiting for approval ·
``75`` try again later (the run is leased elsewhere, or this worker is draining).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from ._drain import handle_sigterm
from ._exceptions import OnceLogError

log = logging.getLogger("oncelog")

EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_HALTED = 3
EXIT_WAITING = 4
EXIT_TRY_LATER = 75


def exit_code_for(exc: BaseException | None) -> int:
    """The exit code a process should end with after ``exc`` (None: completed)."""
    if exc is None:
        return EXIT_COMPLETED
    if isinstance(exc, OnceLogError):
        return exc.exit_code
    return EXIT_ERROR


def run_main(agent: Callable[[], Any], *, drain_on_sigterm: bool = False) -> NoReturn:
    """Call ``agent`` and exit with the code for how it ended, explaining on stderr.
    With ``drain_on_sigterm``, SIGTERM lets the step in progress finish and be recorded,
    then stops the run before its next step (exit 75; see ``handle_sigterm``)."""
    if drain_on_sigterm:
        handle_sigterm()
    try:
        agent()
    except OnceLogError as exc:
        print(f"oncelog: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(exit_code_for(exc))
    sys.exit(EXIT_COMPLETED)
