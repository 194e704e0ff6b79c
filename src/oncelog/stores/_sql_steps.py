"""A step's writes, the part of ``SQLStore`` (its base class) that records what runs do:
an intent (its checks, its row, its journal entry), an outcome, a model call's or a read's
one record, a probe's answer, a step in doubt marked ``unknown`` (the run
halted at it, ``_sql_stops``), a stop that wrote no step. Each public method is
one transaction (``_tx``, given by the store); a dialect may fold the general path's
statements into fewer (``_insert_checked``, ``_outcome``, ``record_step``) and fall back to
it when its write matches nothing."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from .._exceptions import LeaseLost, halted
from .._lazy import defer
from ..records import _transitions as transitions
from ..records._budgets import BudgetAlert
from ..records._records import StepState, StepType, SubjectClaim
from ..records._value import NamedTuple
from ..signals import _crashpoints as crashpoints
from . import _sql_controls as controls
from . import _sql_stops as stops
from ._protocol import Intent, Lease, NewStep, Outcome
from ._rows import journal_json, text
from ._shared import (
    duplicate_step,
    intent_json,
    outcome_json,
    recorded_json,
    step_changed,
)
from ._sql import NOW, Dialect, Tx
from ._sql_guards import enters, leaves
from ._sql_tx import append, fence

if TYPE_CHECKING:
    from . import _sql_approvals as approval_sql
    from . import _sql_subjects as subjects
else:  # only a step that needs an approval or claims a subject uses them (``_lazy``)
    defer(globals(), approval_sql="._sql_approvals", subjects="._sql_subjects")

# The rows' writes, guarded by the transition table (records/_transitions.py).
_INSERT_STEP = (
    "INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, state, "
    "attempts, started_at, cost, irreversible) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
    f"{enters(transitions.INTENT)}, 1, {NOW} - CAST(? AS DOUBLE PRECISION), ?, ?) "
    "RETURNING attempts, started_at"
)


def _restart_sql(again: transitions.Transition) -> str:
    """A later attempt of an effect (``RESTART``) or of a model call or a read
    (``RECORDED``, whose outcome ``_settle_step`` writes next)."""
    return (
        f"UPDATE steps SET state = {enters(transitions.RESTART)}, attempts = attempts + 1, "
        f"args_hash = ?, args = ?, started_at = {NOW} - CAST(? AS DOUBLE PRECISION), "
        "finished_at = NULL, result = NULL, error = NULL, "
        # SET reads the row as it was: the first attempt's start is kept at the second.
        "retry_at = NULL, first_started_at = COALESCE(first_started_at, started_at), "
        "reason = NULL, cost = cost + ? "
        # The state the caller decided on, which must be one the attempt may start from.
        f"WHERE run_id = ? AND seq = ? AND state = ? AND {leaves(again)} "
        "RETURNING attempts, started_at"
    )


_RESTART_STEP = {
    again: _restart_sql(again) for again in (transitions.RESTART, transitions.RECORDED)
}
_SETTLE = (
    "UPDATE steps SET state = ?, result = ?, error = ?, tokens_in = ?, tokens_out = ?, "
    f"cost = COALESCE(?, cost), finished_at = {NOW}, retry_at = ? "
    "WHERE run_id = ? AND seq = ? AND attempts = ? AND "
)
_SETTLE_STEP = {
    False: _SETTLE + leaves(transitions.OUTCOME),
    True: _SETTLE + leaves(transitions.PROBED),  # a probe's answer
}
_MARK_UNKNOWN = (
    # The first reason stays: a later recovery knows less than the error the call
    # raised, and the operator needs that one.
    f"UPDATE steps SET state = {enters(transitions.MARK_UNKNOWN)}, "
    "reason = COALESCE(reason, ?) "
    f"WHERE run_id = ? AND seq = ? AND {leaves(transitions.MARK_UNKNOWN)}"
)


class _Started(NamedTuple):
    """A step written ``in_flight`` by the general path, before its journal entry."""

    attempt: int
    at: float  # its row's ``started_at``, which the entry's time must be to the bit
    approval: int | None  # the approval it used, named in the entry
    warnings: tuple[BudgetAlert, ...]


class StepWrites:
    """A step's writes (a base of ``SQLStore``, which gives what is named here)."""

    dialect: Dialect
    _tx: Callable[..., AbstractContextManager[Tx]]  # one write transaction
    _reading: Callable[[], AbstractContextManager[Tx]]  # one read

    def _begin_step(
        self,
        tx: Tx,
        lease: Lease,
        step: NewStep,
        previous: StepState | None,
        reason: str | None = None,
    ) -> Intent:
        """Write the step as ``in_flight`` and journal its intent; return its attempt
        number. A kill switch is checked here, under the shared halts lock, so no effect
        starts after a halt was committed."""
        if (
            previous is None
            and not step.needs_approval
            and not lease.budgeted
            and (
                step.subject is None  # a subject's claim is the general path's
            )
        ):
            quick = self._insert_checked(tx, lease, step, reason)
            if quick is not None:
                return quick
        started = self._start_step(tx, lease, step, previous, check_halt=True)
        entry = intent_json(lease, step, started.attempt, reason, started.approval)
        append(tx, lease.run_id, step.seq, "intent", entry, at=started.at)
        return Intent(started.attempt, started.warnings)

    def _start_step(
        self, tx: Tx, lease: Lease, step: NewStep, previous: StepState | None, *, check_halt: bool
    ) -> _Started:
        """The general path of an intent without its journal entry: every check (the
        fence, the kill switch with ``check_halt``, the approval, the budgets), then the
        step's row written ``in_flight``. A model call or a read, recorded after it ran,
        was checked against the kill switch before it ran."""
        if check_halt:
            tx.lock_halts(exclusive=False)
        fence(tx, lease)
        halt = controls.active_halt(tx, lease.run_id, lease.agent) if check_halt else None
        if halt is not None:
            raise halted(halt, lease.run_id, step.step_id)
        approval = approval_sql.use_approval(tx, lease, step) if step.needs_approval else None
        warnings: list[BudgetAlert] = []
        if lease.budgeted:
            warnings += controls.check_budget(tx, lease.run_id, step, new=previous is None)
        if lease.agent is not None and step.type is StepType.EFFECT:
            warnings += controls.check_agent_budget(tx, lease, step, new=previous is None)
        if step.subject is not None:
            subjects.claim(tx, lease, step)
        if previous is None:
            try:
                started = tx.execute(
                    _INSERT_STEP,
                    (lease.run_id, step.seq, step.step_id, step.type.value, step.tool,
                     step.kind, step.key, step.args_hash, step.args_json, step.elapsed,
                     step.cost, int(step.irreversible)),
                ).fetchone()  # fmt: skip
            except self.dialect.unique_violation as exc:
                raise duplicate_step(lease, step) from exc
        else:
            # Without a look at the kill switch: a model call or a read, recorded after it ran.
            again = transitions.RESTART if check_halt else transitions.RECORDED
            started = self._restart_step(tx, lease, step, previous, again)
        attempt, at = started
        return _Started(attempt, at, approval, tuple(warnings))

    def _insert_checked(
        self, tx: Tx, lease: Lease, step: NewStep, reason: str | None
    ) -> Intent | None:
        """A new step with no approval or run budget, written with its checks folded into
        the insert, where a store can (SQLite): None to take the general path, which also
        says which check refused."""
        return None

    @staticmethod
    def _restart_step(
        tx: Tx, lease: Lease, step: NewStep, previous: StepState, again: transitions.Transition
    ) -> Any:
        """The step written ``in_flight`` again: its ``(attempts, started_at)``."""
        row = tx.execute(
            _RESTART_STEP[again],
            (
                step.args_hash,
                step.args_json,
                step.elapsed,
                step.cost,
                lease.run_id,
                step.seq,
                previous.value,
            ),
        ).fetchone()
        if row is None:
            raise LeaseLost(
                "the step changed under this worker (resolved or taken over)",
                run_id=lease.run_id, step_id=step.step_id, key=step.key,
            )  # fmt: skip
        return row

    def _end_step(
        self,
        tx: Tx,
        lease: Lease,
        seq: int,
        attempt: int,
        outcome: Outcome,
        *,
        probed: bool = False,
    ) -> None:
        """Record the outcome of the attempt in flight, or, ``probed``, a probe's answer
        for the attempt in doubt (``in_flight`` or already marked ``unknown``)."""
        self._settle_step(tx, lease, seq, attempt, outcome, probed=probed)
        append(
            tx, lease.run_id, seq, "probed" if probed else "outcome",
            outcome_json(outcome, attempt),
        )  # fmt: skip

    @staticmethod
    def _settle_step(
        tx: Tx, lease: Lease, seq: int, attempt: int, outcome: Outcome, *, probed: bool = False
    ) -> None:
        """The row's half of ``_end_step``: the outcome written, without its journal entry."""
        cursor = tx.execute(
            _SETTLE_STEP[probed],
            (outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
             outcome.tokens_out, outcome.cost, outcome.retry_at, lease.run_id, seq, attempt),
        )  # fmt: skip
        if cursor.rowcount != 1:
            raise step_changed(lease)

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        with self._tx() as tx:
            intent = self._begin_step(tx, lease, step, previous, reason)
            crashpoints.reach("before_intent_commit", step.step_id)
        return intent

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        with self._tx(durable=False) as tx:
            self._outcome(tx, lease, step.seq, attempt, outcome)
            crashpoints.reach("before_outcome_commit", step.step_id)

    def _outcome(self, tx: Tx, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        """Fence, then record the outcome of the attempt in flight (a store may do both in
        one statement)."""
        fence(tx, lease)
        self._end_step(tx, lease, seq, attempt, outcome)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        with self._tx(durable=False) as tx:
            self._record(tx, lease, step, previous, outcome)

    def _record(
        self, tx: Tx, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        """A step recorded after it ran, by the general path: the intent's checks and row,
        its outcome, and one journal entry for both (``recorded``), timed by its start."""
        started = self._start_step(tx, lease, step, previous, check_halt=False)
        self._settle_step(tx, lease, step.seq, started.attempt, outcome)
        entry = recorded_json(lease, step, started.attempt, outcome, started.approval)
        append(tx, lease.run_id, step.seq, "recorded", entry, at=started.at)

    def adopt_subject(
        self, lease: Lease, step: NewStep, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        with self._tx() as tx:
            started = self._start_step(tx, lease, step, previous, check_halt=True)
            subjects.still_done(tx, holder)
            reason = (
                f"the subject {holder.subject} was done by run {holder.run_id!r}, step "
                f"{holder.step_id!r} (position {holder.seq}): its result is recorded here, "
                "with no call"
            )
            entry = intent_json(lease, step, started.attempt, reason, started.approval)
            append(tx, lease.run_id, step.seq, "intent", entry, at=started.at)
            done = Outcome(StepState.DONE, holder.result_json, holder.error_json)
            self._end_step(tx, lease, step.seq, started.attempt, done)

    def subjects(self, run_id: str | None, limit: int) -> list[SubjectClaim]:
        with self._reading() as tx:
            return subjects.holders(tx, run_id, limit)

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        with self._tx() as tx:
            fence(tx, lease)
            self._end_step(tx, lease, seq, attempt, outcome, probed=True)

    def mark_unknown(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        with self._tx() as tx:
            fence(tx, lease)
            tx.execute(_MARK_UNKNOWN, (reason, lease.run_id, seq))
            stops.stop(tx, lease.run_id, seq, stop, reason)
            entry = journal_json(reason=text(reason), stop=stop)
            append(tx, lease.run_id, seq, "unknown", entry)

    def hold(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        with self._tx() as tx:
            fence(tx, lease)
            stops.hold(tx, lease.run_id, seq, stop, reason)

    def lift_stop(self, lease: Lease, seq: int) -> None:
        with self._tx() as tx:
            fence(tx, lease)
            stops.lift(tx, lease.run_id, seq, None)
