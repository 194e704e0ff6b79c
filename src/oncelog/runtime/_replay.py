"""Resuming a run: positions handed out in call order, recorded steps read in pages.

Replay re-executes the agent's code from the top. The n-th ledger call is position n;
if a step is recorded there it must be the same step, or the run halts with
``ReplayDivergence`` instead of guessing. Recorded steps are read a page at a time, so
memory stays flat however long the journal grows, and only the columns that replaying a
done step needs (``ReplayRow``); a step in any other state is read again whole.
"""

from __future__ import annotations

import shlex
import threading

from .._exceptions import ReplayDivergence
from ..records._records import ReplayRow, StepRecord, StepType
from ..stores._protocol import Store

PAGE = 512


class ReplayCursor:
    def __init__(self, store: Store, run_id: str, frontier: int) -> None:
        self._store = store
        self._run_id = run_id
        self.frontier = frontier  # positions at or past it were never recorded
        self._next = 0
        # The page read last, as (lo, hi, rows by position): replaced whole, so a step
        # finds it on the page without taking the lock.
        self._window: tuple[int, int, dict[int, ReplayRow]] = (0, 0, {})
        self._lock = threading.Lock()

    def position(self) -> int:
        """The next position, handed out synchronously so concurrent steps stay ordered."""
        with self._lock:
            seq = self._next
            self._next += 1
            return seq

    def replaying(self) -> bool:
        """Whether the next position may hold a recorded step."""
        return self._next < self.frontier

    def on_page(self, seq: int) -> ReplayRow | None:
        """The row at ``seq`` if the page read last holds it: no store call, no lock."""
        lo, hi, page = self._window
        return page.get(seq) if lo <= seq < hi else None

    def row(self, seq: int) -> ReplayRow | None:
        """What replay reads of the step recorded at ``seq`` (None: nothing recorded)."""
        if seq >= self.frontier:
            return None
        with self._lock:
            lo, hi, page = self._window
            if not lo <= seq < hi:
                rows = self._store.replay_rows(self._run_id, seq, PAGE)
                hi = rows[-1][0] + 1 if len(rows) == PAGE else self.frontier
                page = {r[0]: r for r in rows}
                self._window = (seq, hi, page)
            return page.get(seq)

    def recorded(self, seq: int) -> StepRecord | None:
        """The whole record at ``seq``: for every step but a done one replayed."""
        if self.row(seq) is None:
            return None
        found = self._store.steps(self._run_id, seq, 1)
        return found[0] if found and found[0].seq == seq else None

    def reread(self) -> None:
        """Forget the page read so far: a step on it was rewritten by this run."""
        with self._lock:
            self._window = (0, 0, {})

    def advance_frontier(self, seq: int) -> None:
        """A live step was recorded at ``seq``."""
        with self._lock:
            self.frontier = max(self.frontier, seq + 1)

    def check_fully_replayed(self) -> None:
        """At a normal exit every recorded position must have been asked for again."""
        if self._next < self.frontier:
            missing = self.recorded(self._next)
            name = missing.step_id if missing else f"position {self._next}"
            raise ReplayDivergence(
                f"the run finished after {self._next} steps, but the journal records "
                f"{self.frontier}; the code took another path than the recorded run",
                run_id=self._run_id,
                step_id=name,
            )


def check_same_step(record: StepRecord, step_id: str, tool: str, step_type: StepType) -> None:
    if record.step_id != step_id or record.tool != tool or record.type is not step_type:
        raise ReplayDivergence(
            f"position {record.seq} records {record.type.value} step {record.step_id!r} "
            f"({record.tool}); the code now asks for {step_type.value} step {step_id!r} "
            f"({tool}); the code must ask for the recorded steps in order (see: oncelog show "
            f"{shlex.quote(record.run_id)}), then restart the agent",
            run_id=record.run_id,
            step_id=step_id,
            key=record.key,
        )
