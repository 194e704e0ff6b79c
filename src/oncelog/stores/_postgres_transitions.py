"""An intent, an outcome and a step recorded after it ran on PostgreSQL in one round trip
each: a call of a server-side function (``migrations/postgres/functions.sql``, its guards
filled in from the transition table; first written by migration 13, flat by 15, with fewer
statements by 16; ``oncelog_recorded`` by 21; each told where to look for the chain's head
by 22) in autocommit, which does what ``SQLStore``'s transaction does, with the same
locks in the same order.

The functions do the common case: a new step's intent without an approval or a run budget,
an outcome, and a new step recorded after it ran (a model call or a read, whose kill
switch was looked at before it ran: recorded without a second look, as
``SQLStore.record_step`` does, its row written as it ended and journalled as one
``recorded`` record). The rest, and whatever
the function finds needs the store's Python logic (SQLSTATE ``OL000``: a halt that is on,
an agent with a daily budget, a time whose text is not Python's, no record of the run from
the hint for its chain's head), takes the transaction
of ``SQLStore``, which decides and raises as it always did. The errors the functions
raise themselves are the store's own.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from .._exceptions import LeaseLost
from ..records._chain import canonical_head
from ._protocol import Lease, NewStep, Outcome
from ._shared import (
    duplicate_step,
    intent_json,
    lease_needs_extending,
    outcome_json,
    recorded_json,
)

LONG_WAY = "OL000"  # the transaction of SQLStore decides
_FENCED = "OL001"
_NOT_IN_FLIGHT = "OL003"

# Each function's last argument is where the server starts looking for the run's chain head
# (0022): the id of a journal record of the run, the one the previous call appended; each
# returns the id of the one it appended. The store adds it after the parameters below.
INTENT = f"SELECT oncelog_intent({', '.join(['%s'] * 20)})"
OUTCOME = f"SELECT oncelog_outcome({', '.join(['%s'] * 17)})"
# Added to a call whose commit may ride on the next flushed one: one statement still (a
# prepared one cannot be two); the setting is its transaction's, in force at the call's
# own commit (in autocommit), and gone after it.
UNFLUSHED = ", set_config('synchronous_commit', 'off', true)"
RECORD = f"SELECT oncelog_recorded({', '.join(['%s'] * 26)})"


class LongWay(Exception):
    """The function left this transition to the transaction of ``SQLStore``."""


def takes_function(lease: Lease, step: NewStep, previous: object) -> bool:
    """Whether the intent of ``step`` may be the function's: a new step, with no approval
    to use up and no run budget to check."""
    return (
        previous is None and not step.needs_approval and not lease.budgeted
        and step.subject is None  # a subject's claim is SQLStore's transaction
    )  # fmt: skip


def _lease(lease: Lease) -> tuple[object, ...]:
    return (lease.run_id, lease.owner, lease.token, lease.ttl)


def intent_params(lease: Lease, step: NewStep, reason: str | None) -> tuple[object, ...]:
    """An effect's intent: the kill switch is checked (``p_check_halt``)."""
    return (
        *_lease(lease), lease.agent, step.seq, step.step_id, step.type.value, step.tool,
        step.kind, step.key, step.args_hash, step.args_json, step.elapsed, step.cost,
        int(step.irreversible), intent_json(lease, step, 1, reason),
        canonical_head(lease.run_id, step.seq, "intent"), True,
    )  # fmt: skip


def outcome_params(
    lease: Lease, step: NewStep, attempt: int, outcome: Outcome
) -> tuple[object, ...]:
    return (
        *_lease(lease), step.seq, step.step_id, attempt, outcome.state.value,
        outcome.result_json, outcome.error_json, outcome.tokens_in, outcome.tokens_out,
        outcome.cost, outcome.retry_at, outcome_json(outcome, attempt),
        canonical_head(lease.run_id, step.seq, "outcome"),
    )  # fmt: skip


def record_params(lease: Lease, step: NewStep, outcome: Outcome) -> tuple[object, ...]:
    """A model call or a read: its kill switch was looked at before it ran (the runtime
    does), so it is recorded without a second look, as ``SQLStore.record_step`` does."""
    return (
        *_lease(lease), lease.agent, step.seq, step.step_id, step.type.value, step.tool,
        step.kind, step.key, step.args_hash, step.args_json, step.elapsed, step.cost,
        int(step.irreversible), outcome.state.value, outcome.result_json, outcome.error_json,
        outcome.tokens_in, outcome.tokens_out, outcome.cost, outcome.retry_at,
        recorded_json(lease, step, 1, outcome),
        canonical_head(lease.run_id, step.seq, "recorded"),
    )  # fmt: skip


def refusal(lease: Lease, step: NewStep | None) -> Callable[[psycopg.Error], Exception | None]:
    """What an error raised by the functions means: the exception ``SQLStore`` raises for
    the same refusal, ``LongWay``, or None (not the store's: the server failed)."""

    def meaning(exc: psycopg.Error) -> Exception | None:
        code = exc.sqlstate
        if code == LONG_WAY:
            return LongWay()
        if code == _FENCED:
            try:  # the fencing check's own refusal, as the row it found would give it
                lease_needs_extending(None, lease)
            except LeaseLost as lost:
                return lost
        if code == _NOT_IN_FLIGHT:
            return LeaseLost(
                "the step was resolved or retried by someone else while this worker ran it",
                run_id=lease.run_id,
            )
        if step is not None and isinstance(exc, psycopg.errors.UniqueViolation):
            return duplicate_step(lease, step)
        return None

    return meaning
