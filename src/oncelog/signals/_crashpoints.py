"""Named crash points at the commit boundaries, armed only from outside the process.

``ONCELOG_CRASH_AT=after_intent_commit`` kills the process with SIGKILL the first time
execution reaches that point; ``after_intent_commit:3`` the third time;
``after_intent_commit@email`` the first time for step ``email``. The points are the
boundaries of effects only (model calls and reads never reach them), and a worker's
claim of a batch of runs (``after_claim_commit``), and a run's stop for a person recorded
but not yet announced (``after_stop_commit``). The variables are read
once, when oncelog is imported; unset, a point costs one comparison.

The same points pause a process instead, for a test that must act while another process
stands at a commit boundary (as a debug trigger does): ``ONCELOG_PAUSE_AT`` names the point
as ``ONCELOG_CRASH_AT`` does, and ``ONCELOG_PAUSE_FDS=<reached>,<release>`` two file
descriptors the process inherited. Reaching the point, it writes ``<pid> <point>`` and a
newline to ``reached``, then waits until ``release`` reaches its end (the test closes its
end of the pipe) and goes on.
"""

from __future__ import annotations

import os

ENV_VAR = "ONCELOG_CRASH_AT"
PAUSE_VAR = "ONCELOG_PAUSE_AT"
PAUSE_FDS_VAR = "ONCELOG_PAUSE_FDS"

POINTS = (
    "before_intent_commit",  # the intent transaction is written but not committed
    "after_intent_commit",  # the intent is durable; the tool has not been called
    "after_call",  # the tool answered; its outcome is not yet committed
    "before_outcome_commit",  # the outcome transaction is written but not committed
    "after_outcome_commit",  # the outcome is committed (durable with the next fsync)
)
# A worker's point, not an effect's (so not among the public ``CRASH_POINTS``): a batch
# of runs is claimed (``oncelog worker --concurrency``) and none of them started yet.
WORKER_POINTS = ("after_claim_commit",)
# A run's point, not an effect's: a stop for a person is recorded and not yet announced.
STOP_POINTS = ("after_stop_commit",)

Armed = tuple[str, str | None, int]  # the point, its step (None: any), which hit
_hits: dict[str, int] = {}
_pause_hits: dict[str, int] = {}


def _parse(spec: str | None, var: str = ENV_VAR) -> Armed | None:
    if not spec:
        return None
    name, _, count = spec.partition(":")
    name, _, step = name.partition("@")
    if name not in POINTS + WORKER_POINTS + STOP_POINTS:
        known = POINTS + WORKER_POINTS + STOP_POINTS
        raise ValueError(f"{var} names unknown crash point {name!r}; known: {known}")
    return name, step or None, int(count or 1)


def _pause_fds(spec: str | None) -> tuple[int, int]:
    reached, _, release = (spec or "").partition(",")
    if not (reached.isdigit() and release.isdigit()):
        raise ValueError(f"{PAUSE_VAR} needs {PAUSE_FDS_VAR}=<reached fd>,<release fd>")
    return int(reached), int(release)


# Read once, when oncelog is imported: crash points are armed for a whole process by the
# one that starts it, and every effect passes five of them.
_armed = _parse(os.environ.get(ENV_VAR))
_pause = _parse(os.environ.get(PAUSE_VAR), PAUSE_VAR)
_fds = _pause_fds(os.environ.get(PAUSE_FDS_VAR)) if _pause is not None else None
# Whether any point is armed: the engine's hot path reads it before calling ``reach``.
ARMED = _armed is not None or _pause is not None


def _counted(armed: Armed | None, hits: dict[str, int], point: str, step_id: str) -> bool:
    """Whether this visit of ``point`` is the one ``armed`` names."""
    if armed is None:
        return False
    name, step, count = armed
    if name != point or (step is not None and step != step_id):
        return False
    hits[point] = hits.get(point, 0) + 1
    return hits[point] == count


def reach(point: str, step_id: str) -> None:
    """Pause here until released, then die here without cleanup, as the environment armed
    this point (either or both)."""
    if not ARMED:
        return
    if _counted(_pause, _pause_hits, point, step_id) and _fds is not None:
        _wait_for_release(point, *_fds)
    if _counted(_armed, _hits, point, step_id):
        import signal  # here: the module builds three enums, which every open would pay

        os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_release(point: str, reached: int, release: int) -> None:
    os.write(reached, f"{os.getpid()} {point}\n".encode())
    os.close(reached)
    while os.read(release, 1):  # a byte is not a release: only the end of the pipe is
        pass
    os.close(release)
