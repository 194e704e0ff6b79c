"""The SQL of the controls that live in the ledger: the list of approvals (requesting,
deciding and using one is in ``_sql_approvals``), the kill switch and budgets. Each
function runs inside a transaction its caller opened; those that decide for a run hold its
row lock first (see ``_sql_tx`` for the order of locks)."""

from __future__ import annotations

from .._budgets import AgentBudget, Budget, BudgetAlert, Usage
from .._exceptions import UnknownHalt, UnknownRun
from .._records import Approval, ApprovalStatus, Halt, HaltScope
from ._protocol import Lease, NewStep
from ._rows import APPROVAL_COLUMNS, HALT_COLUMNS, approval_record, halt_record, journal_json
from ._rows import text as quoted
from ._shared import check_agent_budget as shared_check_agent_budget
from ._shared import check_run_budget, run_usage
from ._sql import NOW, TODAY, Tx
from ._sql_tx import append

# -- approvals ----------------------------------------------------------------------------


def list_approvals(tx: Tx, status: ApprovalStatus | None, limit: int) -> list[Approval]:
    where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
    rows = tx.execute(
        f"SELECT {APPROVAL_COLUMNS} FROM approvals {where} ORDER BY id DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [approval_record(r) for r in rows]


# -- the kill switch ----------------------------------------------------------------------


def active_halt(tx: Tx, run_id: str, agent: str | None) -> Halt | None:
    """The first switch that is on for this run: global, its agent's, or its own."""
    row = tx.execute(
        f"SELECT {HALT_COLUMNS} FROM halts WHERE cleared_at IS NULL AND ("
        "(scope = 'global' AND target = '') OR (scope = 'agent' AND target = ?) "
        "OR (scope = 'run' AND target = ?)) ORDER BY id LIMIT 1",
        (agent if agent is not None else "", run_id),
    ).fetchone()
    return None if row is None else halt_record(row)


def _switch_on(tx: Tx, scope: HaltScope, target: str) -> Halt | None:
    row = tx.execute(
        f"SELECT {HALT_COLUMNS} FROM halts WHERE scope = ? AND target = ? AND cleared_at IS NULL",
        (scope.value, target),
    ).fetchone()
    return None if row is None else halt_record(row)


def _journal_run(scope: HaltScope, target: str) -> str:
    """Run switches are journalled with their run; agent and global ones under ''."""
    return target if scope is HaltScope.RUN else ""


def set_halt(tx: Tx, scope: HaltScope, target: str, reason: str, by: str) -> Halt:
    # Exclusive: waits for the intents being written to commit, and holds new ones back
    # until this halt is committed, so each either saw it or committed before it.
    tx.lock_halts(exclusive=True)
    existing = _switch_on(tx, scope, target)
    if existing is not None:
        return existing  # already on: the first reason stands
    row = tx.execute(
        "INSERT INTO halts (scope, target, reason, set_by, set_at) "
        f"VALUES (?, ?, ?, ?, {NOW}) RETURNING {HALT_COLUMNS}",
        (scope.value, target, reason, by),
    ).fetchone()
    append(
        tx, _journal_run(scope, target), None, "halt_set",
        journal_json(scope=quoted(scope.value), target=quoted(target), reason=quoted(reason),
                     by=quoted(by)),
    )  # fmt: skip
    return halt_record(row or ())


def clear_halt(tx: Tx, scope: HaltScope, target: str, by: str, note: str | None) -> Halt:
    tx.lock_halts(exclusive=True)
    on = _switch_on(tx, scope, target)
    if on is None:
        named = "" if scope is HaltScope.GLOBAL else f" for {target!r}"
        raise UnknownHalt(f"no {scope.value} kill switch is on{named}")
    row = tx.execute(
        f"UPDATE halts SET cleared_by = ?, cleared_at = {NOW}, note = ? WHERE id = ? "
        f"RETURNING {HALT_COLUMNS}",
        (by, note, on.id),
    ).fetchone()
    append(
        tx, _journal_run(scope, target), None, "halt_cleared",
        journal_json(scope=quoted(scope.value), target=quoted(target), by=quoted(by),
                     note=quoted(note)),
    )  # fmt: skip
    return halt_record(row or ())


def list_halts(tx: Tx, active_only: bool, limit: int) -> list[Halt]:
    where = "WHERE cleared_at IS NULL" if active_only else ""
    rows = tx.execute(
        f"SELECT {HALT_COLUMNS} FROM halts {where} ORDER BY id DESC LIMIT ?", (limit,)
    ).fetchall()
    return [halt_record(r) for r in rows]


# -- budgets ------------------------------------------------------------------------------


def budget_usage(tx: Tx, run_id: str) -> tuple[Budget | None, Usage]:
    """The run's budget and its usage: refused steps are not counted, steps in doubt are."""
    run = tx.execute(
        f"SELECT budget, {NOW} - created_at FROM runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    if run is None:
        raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
    totals = tx.execute(
        "SELECT COUNT(*), COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(cost), 0), "
        "COALESCE(SUM(irreversible), 0) FROM steps WHERE run_id = ? AND state != 'failed'",
        (run_id,),
    ).fetchone()
    return run_usage(run[0], run[1], totals or ())


def check_budget(tx: Tx, run_id: str, step: NewStep, *, new: bool) -> list[BudgetAlert]:
    """Refuse a step that would take the run past its budget (the run's row is locked)."""
    budget, used = budget_usage(tx, run_id)
    return [] if budget is None else check_run_budget(budget, used, run_id, step, new=new)


def set_budget(tx: Tx, run_id: str, budget: Budget | None, by: str) -> None:
    limits = None if budget is None else budget.to_json()
    cursor = tx.execute("UPDATE runs SET budget = ? WHERE run_id = ?", (limits, run_id))
    if cursor.rowcount != 1:
        raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
    append(tx, run_id, None, "budget_set", journal_json(budget=limits, by=quoted(by)))


def check_agent_budget(tx: Tx, lease: Lease, step: NewStep, *, new: bool) -> list[BudgetAlert]:
    """Refuse an effect that would take its agent past today's budget (UTC days, by the
    store's clock), counting the effects of all the agent's runs, refusals excepted. The
    budget's row stays locked until the commit, so the intents of one agent's runs are
    counted one after another, as SQLite's single writer counts them."""
    row = tx.execute(
        f"SELECT budget FROM agent_budgets WHERE agent = ?{tx.dialect.for_update}", (lease.agent,)
    ).fetchone()
    if lease.agent is None or row is None:
        return []
    totals = tx.execute(
        "SELECT COUNT(*), COALESCE(SUM(steps.cost), 0), COALESCE(SUM(steps.irreversible), 0) "
        "FROM steps JOIN runs ON runs.run_id = steps.run_id WHERE runs.agent = ? "
        f"AND steps.type = 'effect' AND steps.state != 'failed' AND steps.started_at >= {TODAY}",
        (lease.agent,),
    ).fetchone()
    budget = AgentBudget.from_json(row[0])
    return shared_check_agent_budget(budget, totals or (), lease, step, new=new)


def set_agent_budget(tx: Tx, agent: str, budget: AgentBudget | None, by: str) -> None:
    if budget is None:
        tx.execute("DELETE FROM agent_budgets WHERE agent = ?", (agent,))
    else:
        tx.execute(
            "INSERT INTO agent_budgets (agent, budget, set_by, set_at) "
            f"VALUES (?, ?, ?, {NOW}) ON CONFLICT (agent) DO UPDATE SET "
            "budget = excluded.budget, set_by = excluded.set_by, set_at = excluded.set_at",
            (agent, budget.to_json(), by),
        )
    limits = None if budget is None else budget.to_json()
    append(tx, "", None, "agent_budget_set",
           journal_json(agent=quoted(agent), budget=limits, by=quoted(by)))  # fmt: skip


def record_alert(tx: Tx, alert: BudgetAlert) -> bool:
    """Journal ``alert`` unless the same one (kind, scope, target, limit) is journalled
    since its budget was last set (and, for an agent, today); True if it is new. The
    journal's lock is taken before looking, so two processes cannot both find it new."""
    journal_run = alert.target if alert.scope == "run" else ""
    set_event = "budget_set" if alert.scope == "run" else "agent_budget_set"
    since = "" if alert.scope == "run" else f" AND at >= {TODAY}"
    tx.lock_journal(journal_run)
    field = tx.dialect.json_text
    seen = tx.execute(
        "SELECT 1 FROM journal WHERE run_id = ? AND event = 'budget_alert' "
        f"AND {field('data', 'kind')} = ? AND {field('data', 'target')} = ? "
        f"AND {field('data', 'limit')} = ? AND id > COALESCE((SELECT MAX(id) FROM journal "
        "WHERE run_id = ? AND event = ? "
        f"AND {field('data', 'agent')} IS NOT DISTINCT FROM CAST(? AS TEXT)), 0){since}",
        (journal_run, alert.kind, alert.target, alert.limit, journal_run, set_event,
         None if alert.scope == "run" else alert.target),
    ).fetchone()  # fmt: skip
    if seen is not None:
        return False
    append(tx, journal_run, None, "budget_alert", alert.to_json())
    return True
