"""The exit codes of oncelog's processes: an agent under ``run_main``, a worker, and every
``oncelog`` command. One table, so a supervisor or a script reads the same number the same
way wherever it came from; docs/cli.md prints it and a test holds the two equal."""

from __future__ import annotations

EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_HALTED = 3
EXIT_WAITING = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_PRUNED = 7
EXIT_TRY_LATER = 75  # EX_TEMPFAIL of sysexits.h, which supervisors already know

EXIT_CODES: dict[int, str] = {
    EXIT_COMPLETED: "success: the run completed, the command did what it was asked",
    EXIT_ERROR: "an error the message explains (the ledger could not be used, a problem found)",
    EXIT_USAGE: "a usage error: a bad argument or option, or no ledger at `--db`; fix the call",
    EXIT_HALTED: "halted: a person must act, and nothing but a person moves the run (an "
    "effect in doubt, a kill switch, another run's effect in doubt that blocks it, an effect "
    "refused or out of retries); do not restart it before the decision, the message names "
    "the command",
    EXIT_WAITING: "waiting for a person's decision (an approval, a higher budget)",
    EXIT_NOT_FOUND: "not found: no such run, step, pending approval or kill switch",
    EXIT_CONFLICT: "conflict: the request disagrees with what is recorded (already resolved, "
    "not in doubt, other input)",
    EXIT_PRUNED: "pruned: the run ended and `oncelog prune` removed it; it is not run again "
    "(`oncelog show RUN` names its archive)",
    EXIT_TRY_LATER: "try again later: the ledger cannot be reached or written now, or a live "
    "process holds the run, or a worker is draining",
}
