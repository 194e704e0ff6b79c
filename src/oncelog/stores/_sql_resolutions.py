"""A person's decisions on a step in doubt, and their corrections: written in the
caller's transaction, holding the run's row, fencing any worker still running the step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._exceptions import AttemptMismatch, InvalidResolution, RunLeased
from ..records._records import Resolution, StepRecord
from ..records._transitions import CORRECT, MARK_UNKNOWN, RESOLVE, RESOLVED_STATE
from ..records._value import NamedTuple
from . import _sql_names as names
from . import _sql_queue as queue
from . import _sql_refusals as refusals
from . import _sql_stops as stops
from ._protocol import OwnerCheck
from ._rows import STEP_COLUMNS, step_record
from ._shared import resolved_json
from ._sql import NOW, Tx
from ._sql_guards import enters
from ._sql_tx import append, lock_run

_SELECT_STEP = f"SELECT {STEP_COLUMNS} FROM steps"


class Decision(NamedTuple):
    """What a person decided on a step, as ``resolve`` takes it (with ``correct`` or without).
    (A named tuple: a frozen dataclass costs the opening of a ledger its generated
    methods' compilation.)"""

    resolution: Resolution
    result_json: str | None
    by: str
    note: str | None
    force: bool
    owner_is_dead: OwnerCheck
    attempt: int | None  # the attempt the person saw; None: not checked


def resolve(tx: Tx, run_id: str, step_id: str, decision: Decision) -> StepRecord:
    """Settle a step in doubt; the run is queued again once no step of it is unknown."""
    step, overridden, row = _decide(tx, run_id, step_id, decision, _step_in_doubt)
    stops.lift(tx, run_id, step.seq, decision.by)
    if not tx.execute(
        f"SELECT 1 FROM steps WHERE run_id = ? AND state = {enters(MARK_UNKNOWN)}", (run_id,)
    ).fetchone():
        queue.requeue(tx, queue.AFTER_RESOLVE, run_id=run_id, by=decision.by)
    append(tx, run_id, step.seq, RESOLVE.event, _entry(decision, overridden))
    return step_record(row or ())


def correct(tx: Tx, run_id: str, step_id: str, decision: Decision) -> StepRecord:
    """Replace a person's resolution of the run's last step; the decision it replaces
    stays in the journal, in its own "resolved" record."""
    step, overridden, row = _decide(tx, run_id, step_id, decision, _step_resolved_last)
    append(tx, run_id, step.seq, CORRECT.event, _entry(decision, overridden))
    return step_record(row or ())


def _decide(
    tx: Tx,
    run_id: str,
    step_id: str,
    decision: Decision,
    find: Callable[[Tx, str, str], StepRecord],
) -> tuple[StepRecord, str | None, tuple[Any, ...] | None]:
    """The step ``find`` allows a decision on, the live owner a forced decision overrides,
    and the step's row as the decision leaves it."""
    if not lock_run(tx, run_id):
        raise names.unknown_run(tx, run_id)
    step = find(tx, run_id, step_id)
    _check_attempt(step, decision.attempt)
    overridden = live_holder(tx, step, decision.owner_is_dead, force=decision.force)
    return step, overridden, _decide_step(tx, step, decision.resolution, decision.result_json)


def _entry(decision: Decision, overridden: str | None) -> str:
    d = decision
    return resolved_json(d.resolution, d.by, d.note, d.result_json, overridden, d.attempt)


def _check_attempt(step: StepRecord, attempt: int | None) -> None:
    """Refuse a decision made on another attempt than the step's latest: the step was run
    again since the person looked, and what they found out is about an earlier send (as
    an approval is bound to the request it was given for)."""
    if attempt is None or attempt == step.attempts:
        return
    raise AttemptMismatch(
        f"the decision names attempt {attempt} of {step.step_id!r}, but the step has been "
        f"run again since: it is at attempt {step.attempts} now ({step.state.value}). Look "
        f"attempt {step.attempts} up at the provider (key {step.key}), then decide on it "
        f"(--attempt {step.attempts})",
        run_id=step.run_id, step_id=step.step_id, key=step.key,
    )  # fmt: skip


def _step_resolved_last(tx: Tx, run_id: str, step_id: str) -> StepRecord:
    """The step a correction may change: a person's resolution is the last thing that
    happened to it, and the run has no step after it (nothing acted on it yet)."""
    step = find_step(tx, run_id, step_id)
    last = tx.execute(
        "SELECT event FROM journal WHERE run_id = ? AND seq = ? ORDER BY id DESC LIMIT 1",
        (run_id, step.seq),
    ).fetchone()
    later = tx.execute(
        "SELECT 1 FROM steps WHERE run_id = ? AND seq > ? UNION ALL "
        "SELECT 1 FROM runs WHERE run_id = ? AND status = 'completed'",
        (run_id, step.seq, run_id),
    ).fetchone()
    if (
        last is None
        or last[0] not in (RESOLVE.event, CORRECT.event)
        or step.state not in CORRECT.sources
        or later is not None
    ):
        why = (
            "the run has moved past it (a later step exists, or it completed)"
            if later is not None
            else "its last record is not a person's resolution"
        )
        raise InvalidResolution(
            f"cannot correct {step_id!r}: {why}; only the last step of a run, as a person "
            "resolved it, can be corrected",
            run_id=run_id, step_id=step_id, key=step.key,
        )  # fmt: skip
    return step


def live_holder(tx: Tx, step: StepRecord, gone: OwnerCheck, *, force: bool) -> str | None:
    """The owner of a live lease on the step's run (by the store's clock), whose
    process may be running the step this instant: refused (``RunLeased``) unless
    ``force``; then it is the owner the decision overrides. None without one."""
    owner, live = tx.execute(
        f"SELECT owner, lease_expires_at > {NOW} FROM runs WHERE run_id = ?", (step.run_id,)
    ).fetchone()
    if owner is None or not live or gone(owner):
        return None
    if not force:
        raise RunLeased(
            f"a live process ({owner}) holds the run's lease and may be running "
            f"{step.step_id!r} now: a decision would replace its real outcome. Wait for "
            "it to end (or stop it), or force the decision (--force, force=True)",
            run_id=step.run_id, step_id=step.step_id, key=step.key,
        )  # fmt: skip
    return str(owner)


def find_step(tx: Tx, run_id: str, step_id: str) -> StepRecord:
    row = tx.execute(
        f"{_SELECT_STEP} WHERE run_id = ? AND step_id = ?", (run_id, step_id)
    ).fetchone()
    if row is None:
        raise refusals.unknown_step(tx, run_id, step_id)
    return step_record(row)


def _step_in_doubt(tx: Tx, run_id: str, step_id: str) -> StepRecord:
    step = find_step(tx, run_id, step_id)
    if step.state not in RESOLVE.sources:
        raise refusals.not_in_doubt(tx, step)
    return step


def _decide_step(
    tx: Tx, step: StepRecord, resolution: Resolution, result_json: str | None
) -> tuple[Any, ...] | None:
    """Write a person's decision on ``step``: the step row it leaves, as selected."""
    # A person's decision is a takeover: any worker still running the step is fenced.
    tx.execute(
        "UPDATE runs SET fencing_token = fencing_token + 1, owner = NULL, "
        "lease_expires_at = NULL WHERE run_id = ?",
        (step.run_id,),
    )
    row: tuple[Any, ...] | None = tx.execute(
        f"UPDATE steps SET state = ?, result = ?, finished_at = {NOW} "
        f"WHERE run_id = ? AND seq = ? RETURNING {STEP_COLUMNS}",
        (RESOLVED_STATE[resolution].value, result_json, step.run_id, step.seq),
    ).fetchone()
    return row
