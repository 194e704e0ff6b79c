"""The console's read model: plain functions of a ``Ledger`` returning what each page
shows. Nothing here writes, and nothing here knows about HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncelog import (
    AgentBudget,
    ApprovalStatus,
    Budget,
    Halt,
    HaltScope,
    Ledger,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
)

LISTED = 200  # runs on the runs and budgets pages; recent decisions on the others
HISTORY = 30
SEARCHED = 5000  # the most recent runs a filter by agent or text looks through
IN_FLIGHT_REASON = (
    "started, with no outcome recorded: its process may still be running it, or died "
    "before recording what happened"
)


ORPHANED_REASON = (
    "started, with no outcome recorded, and its run's lease has expired: nobody is running "
    "it. It may or may not have happened"
)


@dataclass(frozen=True)
class Doubt:
    """An effect in doubt, with what a person needs to decide it."""

    step: StepRecord
    run: RunRecord
    reason: str  # the recorded reason, with the probe's answer when there was a probe
    state: str = "unknown"  # unknown, orphaned (nobody runs it) or in_flight
    age: float = 0.0  # seconds since its intent, by the store's clock
    lease_owner: str | None = None  # the run's lease owner, or the last one


@dataclass(frozen=True)
class Limit:
    name: str
    allowed: float | None  # None: no limit
    used: float | None  # None: not counted by the ledger (an agent's day, for now)


@dataclass(frozen=True)
class BudgetRow:
    """A run's or an agent's budget, with its limits in order."""

    target: str
    budget: Budget | AgentBudget
    limits: tuple[Limit, ...]
    note: str = ""


def overview(ledger: Ledger) -> dict[str, Any]:
    return {
        "approvals": ledger.approvals(),
        "doubts": ledger.in_doubt(),
        "halts": ledger.halts(),
        "stopped": ledger.runs(RunStatus.HALTED, limit=LISTED)
        + ledger.runs(RunStatus.WAITING, limit=LISTED),
        "released": [(r, ledger.what_next(r.run_id)) for r in ledger.released_runs()],
    }


def runs(
    ledger: Ledger, status: RunStatus | None, agent: str = "", text: str = ""
) -> dict[str, Any]:
    """Runs, newest first, of one status, of one agent, and with ``text`` in their id or
    their reason (any case); empty: any."""
    needle = text.casefold()
    found = [
        r for r in ledger.runs(status, limit=SEARCHED)
        if (not agent or r.agent == agent)
        and (not needle or needle in r.run_id.casefold() or needle in (r.reason or "").casefold())
    ][:LISTED]  # fmt: skip
    return {
        "runs": found, "status": status, "statuses": RunStatus, "agent": agent, "text": text,
    }  # fmt: skip


def timeline(ledger: Ledger, run_id: str) -> dict[str, Any]:
    run = ledger.get_run(run_id)
    covering = [h for h in ledger.halts() if covers(h, run)]
    budget = None if run.budget is None else run_budget(ledger, run)
    return {
        "run": run,
        "steps": ledger.steps(run_id),
        "journal": list(ledger.iter_journal(run_id)),
        "halts": covering,
        "budget": budget,
    }


def covers(halt: Halt, run: RunRecord) -> bool:
    if halt.scope is HaltScope.GLOBAL:
        return True
    if halt.scope is HaltScope.AGENT:
        return halt.target == run.agent
    return halt.target == run.run_id


def approvals(ledger: Ledger) -> dict[str, Any]:
    decided = [a for a in ledger.approvals(None, limit=HISTORY) if a.status.value != "pending"]
    return {"pending": ledger.approvals(ApprovalStatus.PENDING), "decided": decided}


def doubts(ledger: Ledger) -> dict[str, Any]:
    found = []
    for d in ledger.effects_in_doubt():
        step = d.step
        reason = _doubt_reason(step, d.orphaned)
        run = ledger.get_run(step.run_id)
        found.append(Doubt(step, run, reason, d.state, d.age, d.lease_owner))
    return {"doubts": found}


def _doubt_reason(step: StepRecord, orphaned: bool) -> str:
    if step.state is StepState.IN_FLIGHT:
        return ORPHANED_REASON if orphaned else IN_FLIGHT_REASON
    return step.reason or "(no reason was recorded)"


def halts(ledger: Ledger) -> dict[str, Any]:
    history = [h for h in ledger.halts(active_only=False, limit=HISTORY) if not h.active]
    return {"on": ledger.halts(), "history": history, "scopes": HaltScope}


def budgets(ledger: Ledger) -> dict[str, Any]:
    budgeted = [r for r in ledger.runs(limit=LISTED) if r.budget is not None]
    return {
        "runs": [run_budget(ledger, r) for r in budgeted],
        "agents": agent_budgets(ledger),
        "run_limits": list(Budget().limits()),
        "agent_limits": list(AgentBudget().limits()),
    }


def run_budget(ledger: Ledger, run: RunRecord) -> BudgetRow:
    budget, used = ledger.budget_usage(run.run_id)
    budget = budget or Budget()
    limits = tuple(
        Limit(name, allowed, getattr(used, name)) for name, allowed in budget.limits().items()
    )
    return BudgetRow(run.run_id, budget, limits)


def agent_budgets(ledger: Ledger) -> list[BudgetRow]:
    """Each agent's daily budget as it stands, with who set it."""
    rows = []
    for setting in ledger.agent_budgets():
        limits = setting.budget.limits().items()
        unmeasured = tuple(Limit(name, allowed, None) for name, allowed in limits)
        rows.append(
            BudgetRow(setting.agent, setting.budget, unmeasured, f"set by {setting.set_by}")
        )
    return rows
