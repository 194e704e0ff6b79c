"""A run's sticky stop, in the caller's transaction: the step that needed a person,
recorded on the run's row (``stop_seq``, ``stop``) so that no later position of the run
starts, in this process or the next, until a person decides or a later start gets past
that step. Each change is journalled with the run, for ``verify``."""

from __future__ import annotations

from ._rows import journal_json, text
from ._sql import NOW, Tx
from ._sql_tx import append


def stop(tx: Tx, run_id: str, seq: int, stop_json: str, reason: str) -> None:
    """Halt the run at ``seq``; the step's own write and its journal entry are the
    caller's (an ``unknown`` entry carries ``stop_json`` itself)."""
    tx.execute(
        f"UPDATE runs SET status = 'halted', reason = ?, stop_seq = ?, stop = ?, "
        f"updated_at = {NOW} WHERE run_id = ?",
        (reason, seq, stop_json, run_id),
    )


def hold(tx: Tx, run_id: str, seq: int, stop_json: str, reason: str) -> None:
    """Halt the run at ``seq`` for a stop that wrote no step (drift, a budget stop)."""
    stop(tx, run_id, seq, stop_json, reason)
    append(tx, run_id, seq, "run_stopped", journal_json(reason=text(reason), stop=stop_json))


def lift_budget_stops(tx: Tx, by: str, *, run_id: str | None = None, agent: str = "") -> None:
    """Clear the budget stops of ``run_id``, or of every run of ``agent``, in the
    transaction of a person's new budget: the stopped step is then decided afresh."""
    where, named = ("run_id = ?", run_id) if run_id is not None else ("agent = ?", agent)
    kind = tx.dialect.json_field("stop", "kind")
    for found, seq in tx.execute(
        f"SELECT run_id, stop_seq FROM runs WHERE {where} AND {kind} = 'BudgetExceeded' "
        f"ORDER BY run_id{tx.dialect.for_update}",
        (named,),
    ).fetchall():
        lift(tx, found, seq, by)


def lift(tx: Tx, run_id: str, seq: int, by: str | None) -> None:
    """Clear the run's stop if it is the one at ``seq``: ``by`` the person whose decision
    settles that step, or None when a later start of the run got past it."""
    if tx.execute(
        "UPDATE runs SET stop_seq = NULL, stop = NULL WHERE run_id = ? AND stop_seq = ? "
        "RETURNING run_id",
        (run_id, seq),
    ).fetchone():
        append(tx, run_id, seq, "stop_lifted", journal_json(by=text(by)))
