"""Named crash points at the commit boundaries, armed only from outside the process.

``ONCELOG_CRASH_AT=after_intent_commit`` kills the process with SIGKILL the first time
execution reaches that point; ``after_intent_commit:3`` the third time;
``after_intent_commit@email`` the first time for step ``email``. The points are the
boundaries of effects only; model calls and reads never reach them. The variable is read
once, when oncelog is imported; unset, a point costs one comparison.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "ONCELOG_CRASH_AT"

POINTS = (
    "before_intent_commit",  # the intent transaction is written but not committed
    "after_intent_commit",  # the intent is durable; the tool has not been called
    "after_call",  # the tool answered; its outcome is not yet committed
    "before_outcome_commit",  # the outcome transaction is written but not committed
    "after_outcome_commit",  # the outcome is committed (durable with the next fsync)
)

_hits: dict[str, int] = {}


def _parse(spec: str | None) -> tuple[str, str | None, int] | None:
    if not spec:
        return None
    name, _, count = spec.partition(":")
    name, _, step = name.partition("@")
    if name not in POINTS:
        raise ValueError(f"{ENV_VAR} names unknown crash point {name!r}; known: {POINTS}")
    return name, step or None, int(count or 1)


# Read once, when oncelog is imported: crash points are armed for a whole process by the
# one that starts it, and every effect passes five of them.
_armed = _parse(os.environ.get(ENV_VAR))
# Whether any point is armed: the engine's hot path reads it before calling ``reach``.
ARMED = _armed is not None


def reach(point: str, step_id: str) -> None:
    """Die here, without cleanup, if the environment armed this point."""
    if _armed is None:
        return
    name, step, count = _armed
    if name != point or (step is not None and step != step_id):
        return
    _hits[point] = _hits.get(point, 0) + 1
    if _hits[point] == count:
        os.kill(os.getpid(), signal.SIGKILL)
