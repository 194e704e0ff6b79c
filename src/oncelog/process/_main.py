"""Whether this process runs its agent under ``run_main``, which sets it: a run started
then logs which ledger it uses; and the stops for a person its runs ended on, which
``run_main`` ends the process with even where the agent's code swallowed them. Apart from
``_process`` so that a run need not import it (nor the ``logging`` it imports)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._exceptions import EffectRefused, NeedsPerson, WaitingForPerson

    Stop = NeedsPerson | WaitingForPerson | EffectRefused

RUNNING = [False]

# The stop each run of this call of the agent ended on, by run id (the runs that ended
# otherwise are not in it), and every run that ended; ``run_main`` empties both before
# each call.
STOPS: dict[str, Stop] = {}
ENDED: set[str] = set()


def ended(run_id: str, stop: Stop | None) -> None:
    """The run ``run_id`` ended on ``stop``, or None: not stopped for a person."""
    ENDED.add(run_id)
    if stop is None:
        STOPS.pop(run_id, None)
    else:
        STOPS[run_id] = stop


def swallowed() -> Stop | None:
    """The stop the agent's one run ended on, if it ran one. A process that ran several
    (a worker, a batch) reports for itself: each run's stop is recorded and announced,
    and its own exit code must not tell a supervisor to leave the other runs alone."""
    return next(iter(STOPS.values()), None) if len(ENDED) == 1 else None


def clear() -> None:
    """Before a call of the agent."""
    STOPS.clear()
    ENDED.clear()
