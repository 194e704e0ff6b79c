"""Resuming a run: positions handed out in call order, recorded steps read in pages.

Replay re-executes the agent's code from the top. The n-th ledger call is position n;
if a step is recorded there it must be the same step, or the run halts with
``ReplayDivergence`` instead of guessing. Recorded steps are read a page of positions at
a time, so memory stays flat however long the journal grows, and only what replaying a
done step needs: the database joins each column of a page in one text (``ReplayPage``),
split and decoded here in C. A step in any other state is read again whole; a page whose
columns do not line up (a gap, a damaged text) is read again row by row, and only a row
at fault is left to its whole record."""

from __future__ import annotations

import gc
import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

from .._commands import oncelog_command
from .._exceptions import ReplayDivergence
from ..records._no_result import NO_RESULT
from ..records._records import ReplayPage, ReplayRow, StepRecord, StepType
from ..records._serialization import decode
from ..stores._protocol import Store

PAGE = 512

# A recorded step as replay compares it: (step id, type, tool, arguments, result), the type
# as stored, arguments and result decoded. A step that is not replayed from it (not done,
# done with an error, text that does not decode) has None or UNDECODED for arguments,
# which no call's arguments equal: the whole record decides it, with the messages of every
# other state.
Entry = tuple[str, str, str, Any, Any]
UNDECODED: Any = object()
MISS: Any = object()  # what replay hands back for a step it does not replay
_NAMES = "\x1f"


def _one(text: str) -> Any:
    try:
        return decode(text)
    except (ValueError, RecursionError):
        return UNDECODED


def _array(texts: str) -> Any:
    try:
        return json.loads("[" + texts + "]")
    except (ValueError, RecursionError):
        return None


def _decoded(page: ReplayPage, lo: int, hi: int) -> dict[int, Entry] | None:
    """The page's steps by position, split and decoded in C; None unless every position
    of the range is recorded and each column holds one value per step (a name holding
    the separator, or a text stored damaged, shifts or breaks its column)."""
    n = page.steps
    if n == 0:
        return {}
    if n != hi - lo:  # a position left unrecorded (a write that failed): rare
        return None
    columns = (
        page.step_ids.split(_NAMES), page.types.split(_NAMES), page.tools.split(_NAMES),
        _array(page.args), _array(page.results),
    )  # fmt: skip
    if any(type(column) is not list or len(column) != n for column in columns):
        return None
    return dict(zip(range(lo, hi), zip(*columns, strict=True), strict=True))


def _by_row(rows: list[ReplayRow], hi: int) -> dict[int, Entry]:
    """A page that does not decode whole, from its rows one at a time: only a text at
    fault leaves its step to the whole record, which names it."""
    page: dict[int, Entry] = {}
    for seq, step_id, type_, tool, done_ok, args_json, result_json in rows:
        if seq >= hi:
            break
        arguments = result = UNDECODED
        if done_ok:
            result = NO_RESULT if result_json is None else _one(result_json)
            if result is not UNDECODED:
                arguments = _one(args_json)
        page[seq] = (step_id, type_, tool, arguments, result)
    return page


def _page(store: Store, run_id: str, lo: int, hi: int) -> dict[int, Entry]:
    """The steps recorded at positions ``lo`` to ``hi`` (excluded), by position. The
    cyclic collector is paused: everything decoded lives as long as the page, so a
    collection while it is built frees nothing, and the burst of new objects set off
    collections of the older generations (measured: 3 % of a replayed step). Resumed as
    it was, so a program that turned it off keeps it off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        page = _decoded(store.replay_page(run_id, lo, hi), lo, hi)
        if page is None:
            page = _by_row(store.replay_rows(run_id, lo, hi - lo), hi)
        return page
    finally:
        if collecting:
            gc.enable()


class ReplayCursor:
    def __init__(self, store: Store, run_id: str, frontier: int) -> None:
        self._store = store
        self._run_id = run_id
        self.frontier = frontier  # positions at or past it were never recorded
        # The next position, handed out atomically (a C call under the GIL, no lock) so
        # that concurrent steps stay ordered: ``position()``.
        self.position: Callable[[], int] = itertools.count().__next__
        # One past the position taken last, set by the step that took it: exact when
        # steps are taken one at a time, a hint when they race (whether to encode the
        # arguments before taking a position).
        self.next = 0
        # The positions of the page read last, and its steps by position: a step finds
        # itself on the page without a store call or the lock. Replaced whole; the page
        # holds only positions of its range, each with the step recorded there.
        self.window = (0, 0)
        self.page: dict[int, Entry] = {}
        self._lock = threading.Lock()

    def row(self, seq: int) -> Entry | None:
        """What replay reads of the step recorded at ``seq`` (None: nothing recorded)."""
        if seq >= self.frontier:
            return None
        with self._lock:
            lo, hi = self.window
            if not lo <= seq < hi:
                lo, hi = seq, min(seq + PAGE, self.frontier)
                self.page = _page(self._store, self._run_id, lo, hi)
                self.window = (lo, hi)
            return self.page.get(seq)

    def recorded(self, seq: int) -> StepRecord | None:
        """The whole record at ``seq``: for every step but a done one replayed."""
        if self.row(seq) is None:
            return None
        found = self._store.steps(self._run_id, seq, 1)
        return found[0] if found and found[0].seq == seq else None

    def start_at(self, seq: int) -> None:
        """Hand out positions from ``seq`` on: those below it are not asked for again
        (``Run.skip_settled``). Only before the first position is taken."""
        self.position = itertools.count(seq).__next__
        self.next = seq

    def reread(self) -> None:
        """Forget the page read so far: a step on it was rewritten by this run."""
        with self._lock:
            self.window, self.page = (0, 0), {}

    def give_back(self, seq: int) -> None:
        """Hand ``seq`` out again if it was taken last and nothing is recorded there: a
        model call or a read taken there raised (which records nothing), so the call
        the agent makes next (its retry) takes that position, as it will on a replay
        where the first attempt does not fail. Without it the failure left a gap that a
        replay fills with the retry, and every later step is one position off. Called
        by the thread that takes the run's positions (a ``Run``'s, an ``AsyncRun``'s
        event loop), so no position is taken in between; a position another step took
        after ``seq`` (``gather``) leaves the gap as it was."""
        if self.next == seq + 1 and seq >= self.frontier:
            self.position = itertools.count(seq).__next__
            self.next = seq

    def advance_frontier(self, seq: int) -> None:
        """A live step was recorded at ``seq``."""
        with self._lock:
            self.frontier = max(self.frontier, seq + 1)

    def check_fully_replayed(self) -> None:
        """At a normal exit every recorded position must have been asked for again. (It
        takes a position to learn how many were taken: the run takes no step after it.)"""
        taken = self.position()
        if taken < self.frontier:
            missing = self.recorded(taken)
            name = missing.step_id if missing else f"position {taken}"
            raise ReplayDivergence(
                f"the run finished after {taken} steps, but the journal records "
                f"{self.frontier}; the code took another path than the recorded run",
                run_id=self._run_id,
                step_id=name,
            )


def divergence(
    record: StepRecord, step_id: str, tool: str, step_type: StepType
) -> ReplayDivergence:
    """The error for another step recorded at the position than the one the code asks."""
    return ReplayDivergence(
        f"position {record.seq} records {record.type.value} step {record.step_id!r} "
        f"({record.tool}); the code now asks for {step_type.value} step {step_id!r} "
        f"({tool}); the code must ask for the recorded steps in order (see: "
        f"{oncelog_command('show', [record.run_id])}), then restart the agent",
        run_id=record.run_id,
        step_id=step_id,
        key=record.key,
    )
