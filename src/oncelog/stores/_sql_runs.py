"""Creating a run and taking one over, in the caller's transaction holding the run's
row: the steps of ``SQLStore.acquire`` that are not the lease itself."""

from __future__ import annotations

from .._exceptions import RunLeased
from ..records._budgets import Budget
from ..records._records import RunRecord
from . import _sql_tombstones as tombstones
from ._protocol import OwnerCheck
from ._rows import journal_json, text
from ._shared import plan_replaced_json
from ._sql import NOW, Tx
from ._sql_tx import append


def create(
    tx: Tx,
    run_id: str,
    plan_json: str | None,
    agent: str | None,
    budget: Budget | None,
) -> bool:
    """Insert the run: True; False if another worker created it first (its insert
    committed while this one waited). ``RunPruned`` if a prune removed a run of its id."""
    budget_json = None if budget is None else budget.to_json()
    created = tx.execute(
        "INSERT INTO runs (run_id, status, plan, agent, budget, created_at, updated_at) "
        f"VALUES (?, 'running', ?, ?, ?, {NOW}, {NOW}) "
        f"ON CONFLICT (run_id) DO NOTHING RETURNING created_at, {tombstones.IS_PRUNED}",
        (run_id, plan_json, agent, budget_json, run_id),
    ).fetchone()
    if created is None:
        return False
    if created[1]:  # a prune removed a run of this id: its effects are not run again
        raise tombstones.refusal(tx, run_id)
    entry = journal_json(plan=plan_json, agent=text(agent), budget=budget_json)
    append(tx, run_id, None, "run_created", entry, at=created[0])
    return True


def check_holder(tx: Tx, current: RunRecord, gone: OwnerCheck) -> None:
    """Refuse to take a run whose holder is alive and whose lease runs."""
    holder = current.owner
    if holder is None or gone(holder):
        return
    row = tx.execute(
        f"SELECT lease_expires_at < {NOW} FROM runs WHERE run_id = ?", (current.run_id,)
    ).fetchone()
    if row is None or not row[0]:
        raise RunLeased(f"run is owned by live worker {holder}", run_id=current.run_id)


def replace_plan(tx: Tx, current: RunRecord, plan_json: str | None, replace: bool) -> None:
    """Store the run's new plan (``PlanMismatch`` unless it had none or ``replace``)."""
    entry = plan_replaced_json(current, plan_json, replace)
    tx.execute("UPDATE runs SET plan = ? WHERE run_id = ?", (plan_json, current.run_id))
    append(tx, current.run_id, None, "plan_replaced", entry)
