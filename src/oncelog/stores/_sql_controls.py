"""The SQL of the controls that live in the ledger: the list of approvals (requesting,
deciding and using one is in ``_sql_approvals``), the kill switch and budgets. Each
function runs inside a transaction its caller opened; those that decide for a run hold its
row lock first (see ``_sql_tx`` for the order of locks)."""

from __future__ import annotations

from .._exceptions import UnknownAgent, UnknownHalt, UnknownName
from ..records._budgets import AgentBudget, Budget, BudgetAlert, Usage
from ..records._records import Approval, ApprovalStatus, Halt, HaltScope
from . import _sql_names as names
from . import _sql_stops as stops
from ._protocol import BudgetDrift, Lease, NewStep
from ._rows import APPROVAL_COLUMNS, HALT_COLUMNS, approval_record, halt_record, journal_json
from ._rows import text as quoted
from ._shared import check_agent_budget as shared_check_agent_budget
from ._shared import check_run_budget, run_usage
from ._sql import NOW, TODAY, Tx
from ._sql_tx import append, lock_run

# -- approvals ----------------------------------------------------------------------------


def list_approvals(tx: Tx, status: ApprovalStatus | None, limit: int) -> list[Approval]:
    where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
    rows = tx.execute(
        f"SELECT {APPROVAL_COLUMNS} FROM approvals {where} ORDER BY id DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [approval_record(r) for r in rows]


# -- the kill switch ----------------------------------------------------------------------


# The switches that are on for a run; parameters: its agent ('' for none), its id.
HALT_ON = (
    "cleared_at IS NULL AND ((scope = 'global' AND target = '') "
    "OR (scope = 'agent' AND target = ?) OR (scope = 'run' AND target = ?))"
)


def active_halt(tx: Tx, run_id: str, agent: str | None) -> Halt | None:
    """The first switch that is on for this run: global, its agent's, or its own."""
    row = tx.execute(
        f"SELECT {HALT_COLUMNS} FROM halts WHERE {HALT_ON} ORDER BY id LIMIT 1",
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


def set_halt(tx: Tx, scope: HaltScope, target: str, reason: str, by: str, *, ahead: bool) -> Halt:
    # Exclusive: waits for the intents being written to commit, and holds new ones back
    # until this halt is committed, so each either saw it or committed before it.
    tx.lock_halts(exclusive=True)
    existing = _switch_on(tx, scope, target)
    if existing is not None:
        return existing  # already on: the first reason stands
    if not ahead:
        _check_seen(tx, scope, target)
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


def _check_seen(tx: Tx, scope: HaltScope, target: str) -> None:
    """Refuse a switch for a run or agent the ledger has never seen: a typo, or the wrong
    ledger, would otherwise stop nothing while saying it did (``ahead`` means it)."""
    error: UnknownName
    if scope is HaltScope.RUN and not lock_run(tx, target):
        error = names.unknown_run(tx, target)
    elif scope is HaltScope.AGENT and not names.has_agent(tx, target):
        error = UnknownAgent(
            f"no run of an agent named {target!r} is recorded"
            f"{names.did_you_mean(target, names.agents(tx))}"
        )
    else:
        return
    raise type(error)(
        f"{error}: nothing would be halted. Check the id (and --db), or set it ahead for "
        "one that has not started yet (--ahead, ahead=True)",
        run_id=error.run_id,
    )


def clear_halt(
    tx: Tx, scope: HaltScope, target: str, by: str, note: str | None, switch: int | None
) -> Halt:
    tx.lock_halts(exclusive=True)
    on = _switch_on(tx, scope, target)
    if on is not None and switch is not None and on.id != switch:
        # A link names the switch its notice told of: one set since is another decision.
        raise UnknownHalt(
            f"kill switch {switch} is off already; the one on now ({on.id}, set by "
            f"{on.set_by}: {on.reason}) was set after it, so it stays on: clear it by name "
            f"if that is meant"
        )
    if on is None:
        named = "" if scope is HaltScope.GLOBAL else f" for {target!r}"
        on_now = [h.target for h in list_halts(tx, True, 1000) if h.scope is scope]
        raise UnknownHalt(
            f"no {scope.value} kill switch is on{named}, so none was cleared"
            f"{names.did_you_mean(target, on_now) if named else ''}"
        )
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


# The budgets' running totals (0009_budget_totals.sql), each with what it counts: a run's
# steps, and an agent's effects today, refusals excepted.
_RUN_TOTALS = (
    ("used_steps", "COUNT(*)"),
    ("used_tokens", "COALESCE(SUM(tokens_in + tokens_out), 0)"),
    ("used_cost", "COALESCE(SUM(cost), 0)"),
    ("used_irreversible", "COALESCE(SUM(irreversible), 0)"),
)
_AGENT_TOTALS = (
    ("calls", "COUNT(*)"),
    ("cost", "COALESCE(SUM(steps.cost), 0)"),
    ("irreversible", "COALESCE(SUM(steps.irreversible), 0)"),
)


def _run_counted(total: str) -> str:
    """``total`` over the steps of the run of the row at hand."""
    return (
        f"(SELECT {total} FROM steps WHERE steps.run_id = runs.run_id AND steps.state != 'failed')"
    )


def _agent_counted(total: str, agent: str, since: str = TODAY) -> str:
    """``total`` over the effects of ``agent`` (a column or a placeholder) that started
    ``since`` (today's midnight) or later."""
    return (
        f"(SELECT {total} FROM steps JOIN runs ON runs.run_id = steps.run_id "
        f"WHERE runs.agent = {agent} AND steps.type = 'effect' AND steps.state != 'failed' "
        f"AND steps.started_at >= {since})"
    )


_RUN_RECOUNT = ", ".join(f"{column} = {_run_counted(total)}" for column, total in _RUN_TOTALS)
_RUN_COUNTED = (
    "SELECT " + ", ".join(_run_counted(total) for _, total in _RUN_TOTALS) + " FROM runs "
    "WHERE run_id = ?"
)
_AGENT_KEPT = f"SELECT calls, cost, irreversible FROM agent_usage WHERE agent = ? AND day = {TODAY}"


def budget_usage(tx: Tx, run_id: str) -> tuple[Budget | None, Usage]:
    """The run's budget and its usage: refused steps are not counted, steps in doubt are.
    A run with a budget has its totals kept on its row; one without is counted. The wall
    clock runs from the run's creation until it completes, not after."""
    run = tx.execute(
        "SELECT budget, CASE WHEN status = 'completed' THEN updated_at ELSE "
        f"{NOW} END - created_at, used_steps, used_tokens, used_cost, "
        "used_irreversible FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if run is None:
        raise names.unknown_run(tx, run_id)
    totals = run[2:] if run[0] is not None else tx.execute(_RUN_COUNTED, (run_id,)).fetchone()
    return run_usage(run[0], run[1], totals or ())


def check_budget(tx: Tx, run_id: str, step: NewStep, *, new: bool) -> list[BudgetAlert]:
    """Refuse a step that would take the run past its budget (the run's row is locked)."""
    budget, used = budget_usage(tx, run_id)
    return [] if budget is None else check_run_budget(budget, used, run_id, step, new=new)


def _wait_for_counting_writers(tx: Tx) -> None:
    """Before totals are counted afresh, wait for the intents in flight (they hold the
    halts lock shared until they commit): an intent that found no budget leaves its step
    uncounted (PostgreSQL's oncelog_intent), so a recount must see that step committed.
    A no-op on SQLite, whose single writer already waits."""
    tx.lock_halts(exclusive=True)


def set_budget(tx: Tx, run_id: str, budget: Budget | None, by: str) -> None:
    limits = None if budget is None else budget.to_json()
    _wait_for_counting_writers(tx)
    # The run's row locked by its own statement first, so the recount below takes its
    # snapshot after any outcome that held the row has committed.
    tx.execute(f"SELECT 1 FROM runs WHERE run_id = ?{tx.dialect.for_update}", (run_id,))
    # The totals are kept only while there is a budget: counted afresh on setting one.
    cursor = tx.execute(
        f"UPDATE runs SET budget = ?, {_RUN_RECOUNT} WHERE run_id = ?", (limits, run_id)
    )
    if cursor.rowcount != 1:
        raise names.unknown_run(tx, run_id)
    append(tx, run_id, None, "budget_set", journal_json(budget=limits, by=quoted(by)))
    stops.lift_budget_stops(tx, by, run_id=run_id)


def check_agent_budget(tx: Tx, lease: Lease, step: NewStep, *, new: bool) -> list[BudgetAlert]:
    """Refuse an effect that would take its agent past today's budget (UTC days, by the
    store's clock), counting the effects of all the agent's runs, refusals excepted, as
    kept on the agent's row for today. The budget's row stays locked until the commit, so
    the intents of one agent's runs are counted one after another, as SQLite's single
    writer counts them."""
    row = tx.execute(
        f"SELECT budget FROM agent_budgets WHERE agent = ?{tx.dialect.for_update}", (lease.agent,)
    ).fetchone()
    if lease.agent is None or row is None:
        return []
    totals = tx.execute(_AGENT_KEPT, (lease.agent,)).fetchone() or (0, 0.0, 0)
    budget = AgentBudget.from_json(row[0])
    return shared_check_agent_budget(budget, totals, lease, step, new=new)


def set_agent_budget(tx: Tx, agent: str, budget: AgentBudget | None, by: str) -> None:
    _wait_for_counting_writers(tx)
    # The runs' rows before the agent's (the lock order of ``_sql_tx``).
    stops.lift_budget_stops(tx, by, agent=agent)
    # Kept only while there is a budget: dropped with it, counted afresh on setting one.
    tx.execute("DELETE FROM agent_usage WHERE agent = ?", (agent,))
    if budget is None:
        tx.execute("DELETE FROM agent_budgets WHERE agent = ?", (agent,))
    else:
        tx.execute(
            "INSERT INTO agent_budgets (agent, budget, set_by, set_at) "
            f"VALUES (?, ?, ?, {NOW}) ON CONFLICT (agent) DO UPDATE SET "
            "budget = excluded.budget, set_by = excluded.set_by, set_at = excluded.set_at",
            (agent, budget.to_json(), by),
        )
        counted = ", ".join(
            _agent_counted(total, "agent_budgets.agent") for _, total in _AGENT_TOTALS
        )
        tx.execute(
            "INSERT INTO agent_usage (agent, day, calls, cost, irreversible) "
            f"SELECT agent, {TODAY}, {counted} FROM agent_budgets WHERE agent = ?",
            (agent,),
        )
    limits = None if budget is None else budget.to_json()
    append(tx, "", None, "agent_budget_set",
           journal_json(agent=quoted(agent), budget=limits, by=quoted(by)))  # fmt: skip


def budget_drift(tx: Tx, run_id: str | None) -> list[BudgetDrift]:
    """Where the kept totals disagree with the steps they count: each run with a budget
    (or only ``run_id``), and, for the whole ledger, today's row of each agent with one.
    Each kind is one statement, so kept and counted come from one snapshot."""
    kept = ", ".join(column for column, _ in _RUN_TOTALS)
    counted = ", ".join(_run_counted(total) for _, total in _RUN_TOTALS)
    where = " AND run_id = ?" if run_id is not None else ""
    rows = tx.execute(
        f"SELECT run_id, {kept}, {counted} FROM runs WHERE budget IS NOT NULL{where} "
        "ORDER BY run_id",
        () if run_id is None else (run_id,),
    ).fetchall()
    drift = [BudgetDrift("run", row[0], tuple(row[1:5]), tuple(row[5:])) for row in rows]
    if run_id is None:
        counted = ", ".join(_agent_counted(total, "b.agent") for _, total in _AGENT_TOTALS)
        rows = tx.execute(
            "SELECT b.agent, COALESCE(u.calls, 0), COALESCE(u.cost, 0), "
            f"COALESCE(u.irreversible, 0), {counted} FROM agent_budgets b "
            f"LEFT JOIN agent_usage u ON u.agent = b.agent AND u.day = {TODAY} ORDER BY b.agent"
        ).fetchall()
        drift += [BudgetDrift("agent", row[0], tuple(row[1:4]), tuple(row[4:])) for row in rows]
        drift += _days_to_come(tx)
    return [found for found in drift if not found.agrees]


def _days_to_come(tx: Tx) -> list[BudgetDrift]:
    """The rows of days to come of each agent with a budget: a budget reads one as today
    once its day comes, so it must hold what that day's effects so far count (an effect
    starts by the store's clock, so none yet). Past days' rows are read by nothing."""
    day_counted = ", ".join(
        f"{_agent_counted(total, 'u.agent', 'u.day')} - "
        f"{_agent_counted(total, 'u.agent', 'u.day + 86400')}"
        for _, total in _AGENT_TOTALS
    )
    rows = tx.execute(
        f"SELECT u.agent, u.day, u.calls, u.cost, u.irreversible, {day_counted} "
        f"FROM agent_usage u JOIN agent_budgets b ON b.agent = u.agent WHERE u.day > {TODAY} "
        "ORDER BY u.agent, u.day"
    ).fetchall()
    return [
        BudgetDrift("agent", row[0], tuple(row[2:5]), tuple(row[5:]), int(row[1])) for row in rows
    ]


def record_alert(tx: Tx, alert: BudgetAlert) -> bool:
    """``Store.record_alert``, in the caller's transaction."""
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
