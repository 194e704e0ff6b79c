"""How long a step took at its provider, apart from how long it waited for a person or a
restart. A step's ``finished_at`` is when its outcome was recorded: by the process that
made the call (then ``finished_at - started_at`` is the call's own time), or later, by a
person's decision or a probe after a restart (then the call's own time is not known, and
the span is a wait, shown as one). The journal says which: the last of the step's
``intent``, ``outcome``, ``unknown``, ``probed`` and ``resolved`` records."""

from __future__ import annotations

from collections.abc import Iterable

from ._records import JournalEntry, StepRecord
from ._value import NamedTuple

_SETTLING = ("intent", "outcome", "unknown", "probed", "resolved")


class StepTiming(NamedTuple):
    """``call`` is the provider's time in seconds (None: not known, or not ended);
    ``waited`` the seconds from the attempt's start to the outcome recorded without the
    call (a decision, a probe's answer), and ``settled_by`` who recorded it then."""

    call: float | None
    waited: float | None = None
    settled_by: str | None = None

    def described(self) -> str:
        """``412 ms``; ``call not timed; resolved by alice 1h02m after it began``; or ``—``."""
        if self.call is not None:
            return f"{1000 * self.call:.0f} ms"
        if self.waited is None:
            return "—"
        return f"call not timed; {self.settled_by} {span(self.waited)} after it began"


def step_timings(
    steps: Iterable[StepRecord], journal: Iterable[JournalEntry]
) -> dict[int, StepTiming]:
    """Each step's timing, by position. A step whose records are not in ``journal`` (a
    page of it) is timed by its own columns, as if its process recorded its outcome."""
    last: dict[int, JournalEntry] = {}
    for entry in journal:
        if entry.seq is not None and entry.event in _SETTLING:
            last[entry.seq] = entry
    timings = {}
    for step in steps:
        if step.finished_at is None:
            timings[step.seq] = StepTiming(None)
            continue
        took = max(0.0, step.finished_at - step.started_at)
        settled = last.get(step.seq)
        if settled is not None and settled.event == "resolved":
            timings[step.seq] = StepTiming(None, took, f"resolved by {settled.data.get('by')}")
        elif settled is not None and settled.event == "probed":
            timings[step.seq] = StepTiming(None, took, "found by its probe")
        else:
            timings[step.seq] = StepTiming(took)
    return timings


def span(seconds: float) -> str:
    """``850 ms``, ``12.4 s``, ``3m05s``, ``1h02m``: a wait as a person reads it."""
    if seconds < 1:
        return f"{1000 * seconds:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
