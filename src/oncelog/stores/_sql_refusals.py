"""The errors that refuse a person's request, read inside the request's transaction so
they say what is there instead: the steps a run has, who resolved a step and when."""

from __future__ import annotations

import json
import time

from .._exceptions import AlreadyResolved, UnknownStep
from ..records._records import StepRecord
from ._sql import Tx


def unknown_step(tx: Tx, run_id: str, step_id: str) -> UnknownStep:
    """No step ``step_id`` in the run: the error lists the steps it has, by position."""
    rows = tx.execute(
        "SELECT step_id FROM steps WHERE run_id = ? ORDER BY seq", (run_id,)
    ).fetchall()
    have = [row[0] for row in rows]
    listed = ", ".join(have) if have else "none recorded yet"
    return UnknownStep(
        f"run {run_id} has no step {step_id!r}; its steps: {listed}",
        run_id=run_id, step_id=step_id,
    )  # fmt: skip


def not_in_doubt(tx: Tx, step: StepRecord) -> AlreadyResolved:
    """``step`` is not in doubt: the error says who resolved it and when, if a person did,
    else what its recorded outcome is."""
    row = tx.execute(
        "SELECT data, at FROM journal WHERE run_id = ? AND seq = ? AND event = 'resolved' "
        "ORDER BY id DESC LIMIT 1",
        (step.run_id, step.seq),
    ).fetchone()
    if row is None:
        why = f"its outcome is recorded ({step.state.value})"
    else:
        decision = json.loads(row[0])
        when = utc(row[1])
        why = f"{decision.get('by')} resolved it {decision.get('resolution')} at {when}" + (
            f" ({decision['note']})" if decision.get("note") else ""
        )
    return AlreadyResolved(
        f"step {step.step_id!r} of run {step.run_id} is not in doubt: {why}; only an effect "
        "in doubt can be resolved",
        run_id=step.run_id, step_id=step.step_id, key=step.key,
    )  # fmt: skip


def utc(at: float | None) -> str:
    """A time of the store's clock as a person reads it, in UTC."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
