"""The store as one run's steps use it: each method is the store's, with the same
arguments, watched.

Once an access cannot reach the disk (``StoreUnavailable``), the run takes no further
step: the failed step has used its position, and a retry in the same process would record
it one position later, under another key. A new process replays from what the ledger
durably holds. A write refused because another worker took the run over (``LeaseLost``) is
told to the observers as a fencing rejection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exceptions import LeaseLost, StoreUnavailable
from ..observe import _observe as observe
from ..records._records import Approval, ApprovalHistory, Halt, StepRecord, StepState, SubjectClaim
from ..stores._protocol import Intent, KeyTimes, Lease, NewStep, Outcome, Store
from ._calls import Surroundings
from ._replay import Entry, ReplayCursor

if TYPE_CHECKING:
    from ..records._budgets import Budget, Usage


class RunStore:
    """One run's store (and its replay cursor's reads), method by method."""

    def __init__(
        self, store: Store, cursor: ReplayCursor, run_id: str, surroundings: Surroundings
    ) -> None:
        self._store = store
        self._cursor = cursor
        self._run_id = run_id
        self._surroundings = surroundings
        self.broken: StoreUnavailable | None = None  # the failure that ended the run's steps

    def _refused(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"an earlier ledger operation of this run failed ({self.broken}); "
            "restart the run to continue from what was recorded",
            run_id=self._run_id,
        )

    def _failed(self, exc: StoreUnavailable | LeaseLost) -> None:
        if isinstance(exc, StoreUnavailable):
            self.broken = exc
            self._cursor.reread()  # replay's hot path, which reads the page, replays no more
        else:
            observe.fencing_rejected(self._surroundings.observers, self._run_id)

    # Each method below is the store's (or the cursor's), each of the same shape: the call
    # inline, not through a helper, since a live step makes two or three of them.

    # -- reads ---------------------------------------------------------------------------

    def row(self, seq: int) -> Entry | None:
        """``ReplayCursor.row``: what replay reads of the step at ``seq`` (reads its page)."""
        if self.broken is not None:
            raise self._refused()
        try:
            return self._cursor.row(seq)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def recorded(self, seq: int) -> StepRecord | None:
        """``ReplayCursor.recorded``: the whole record at ``seq``."""
        if self.broken is not None:
            raise self._refused()
        try:
            return self._cursor.recorded(seq)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.steps(run_id, from_seq, limit)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def first_unsettled(self, run_id: str, before: int) -> int:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.first_unsettled(run_id, before)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def key_times(self, run_id: str, seq: int) -> KeyTimes | None:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.key_times(run_id, seq)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.active_halt(run_id, agent)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.budget_usage(run_id)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    # -- writes --------------------------------------------------------------------------

    def request_approval(self, lease: Lease, step: NewStep, shape: str | None) -> Approval:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.request_approval(lease, step, shape)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def approval_history(self, run_id: str, step_id: str) -> ApprovalHistory:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.approval_history(run_id, step_id)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        if self.broken is not None:
            raise self._refused()
        try:
            return self._store.write_intent(lease, step, previous, reason)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.write_outcome(lease, step, attempt, outcome)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.record_step(lease, step, previous, outcome)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def adopt_subject(
        self, lease: Lease, step: NewStep, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.adopt_subject(lease, step, previous, holder)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.settle(lease, seq, attempt, outcome)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def mark_unknown(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.mark_unknown(lease, seq, reason, stop)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def hold(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.hold(lease, seq, reason, stop)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise

    def lift_stop(self, lease: Lease, seq: int) -> None:
        if self.broken is not None:
            raise self._refused()
        try:
            self._store.lift_stop(lease, seq)
        except (StoreUnavailable, LeaseLost) as exc:
            self._failed(exc)
            raise
