"""The console's read model: plain functions of a ``Ledger`` returning what each page
shows. Nothing here writes, and nothing here knows about HTTP."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from oncelog import (
    AgentBudget,
    Approval,
    ApprovalStatus,
    Budget,
    Halt,
    HaltScope,
    JournalEntry,
    Ledger,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    SubjectClaim,
)
from oncelog.display import argument_changes, evidence_urls, exact_json, step_timings

LISTED = 200  # runs on the runs and budgets pages; recent decisions on the others
HISTORY = 30
SEARCHED = 5000  # the most recent runs a filter by agent or text looks through
SUBJECTS = 10_000  # the latest claims looked through for a step's subject
# The intent of a step that took another run's result on its subject records why in
# these words (``StepWrites.adopt_subject``); matched whole against the claims as they
# are, so a link names a run and step the store wrote, never one parsed out of text.
TAKEN = "the subject "
IN_FLIGHT_REASON = (
    "started, with no outcome recorded: its process may still be running it, or died "
    "before recording what happened"
)


ORPHANED_REASON = (
    "started, with no outcome recorded, and its run's lease has expired or the process that "
    "held it is gone: nobody is running it. It may or may not have happened"
)


@dataclass(frozen=True)
class Doubt:
    """An effect in doubt, with what a person needs to decide it."""

    step: StepRecord
    run: RunRecord
    reason: str  # the recorded reason, with the probe's answer when there was a probe
    state: str = "unknown"  # unknown, orphaned (nobody runs it) or in_flight
    age: float = 0.0  # seconds since its intent, by the store's clock
    lease_owner: str | None = None  # the run's lease owner, or the last one: pid on host
    subject: str | None = None  # the subject it holds: no other run acts on it meanwhile


@dataclass(frozen=True)
class StepSubject:
    """What one step of a run says about its subject: the claim it holds (``held``), or,
    for a step that took another run's result, that run's claim (``done_by``), or only
    the journal's words (``said``) once that claim has moved to another step since."""

    held: SubjectClaim | None = None
    done_by: SubjectClaim | None = None
    said: str = ""


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
        "refused": refused_runs(ledger),
        "size": ledger.size(),  # what retention (oncelog prune) keeps in check
        "retention": sorted(ledger.retention().items()),
    }


# The states of a step a person may give a fresh set of attempts (``Ledger.retry``).
RETRYABLE = (StepState.FAILED, StepState.NOT_DONE)


def refused_runs(ledger: Ledger) -> list[tuple[RunRecord, StepRecord]]:
    """Runs that ended on an effect that did not happen (refused, or its retry policy ran
    out), with that step: nothing moves them on but a person's retry."""
    found = []
    for run in ledger.runs(RunStatus.FAILED, limit=LISTED):
        steps = ledger.steps(run.run_id)
        if steps and steps[-1].state in RETRYABLE:
            found.append((run, steps[-1]))
    return found


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
    journal = list(ledger.iter_journal(run_id))
    steps = ledger.steps(run_id)
    retryable = run.status is RunStatus.FAILED and steps and steps[-1].state in RETRYABLE
    return {
        "run": run,
        "steps": steps,
        "timings": step_timings(steps, journal),
        "waiter": ledger.waiting_in_place(run_id),
        "retryable": steps[-1] if retryable else None,
        "journal": journal,
        "halts": covering,
        "budget": budget,
        "subjects": step_subjects(ledger, run_id, journal),
        "evidence": evidence_urls(journal),  # step id -> where it is looked up
    }


def step_subjects(
    ledger: Ledger, run_id: str, journal: list[JournalEntry]
) -> dict[int, StepSubject]:
    """Each step's subject, by position: the claims the run's steps hold, and for each step
    that took another's result, the claim whose words its intent recorded (a claim the
    step holds itself comes first)."""
    found = {c.seq: StepSubject(held=c) for c in ledger.subjects(run_id, limit=SUBJECTS)}
    taken = {
        e.seq: str(e.data["reason"]) for e in journal
        if e.event == "intent" and e.seq is not None and "subject" not in e.data
        and str(e.data.get("reason") or "").startswith(TAKEN)
    }  # fmt: skip
    if taken:
        doers = {taken_from(c): c for c in ledger.subjects(limit=SUBJECTS)}
        for seq, said in taken.items():
            found.setdefault(seq, StepSubject(done_by=doers.get(said), said=said))
    return found


def taken_from(claim: SubjectClaim) -> str:
    return (
        f"{TAKEN}{claim.subject} was done by run {claim.run_id!r}, step {claim.step_id!r} "
        f"(position {claim.seq}): its result is recorded here, with no call"
    )


def covers(halt: Halt, run: RunRecord) -> bool:
    if halt.scope is HaltScope.GLOBAL:
        return True
    if halt.scope is HaltScope.AGENT:
        return halt.target == run.agent
    return halt.target == run.run_id


def approvals(ledger: Ledger) -> dict[str, Any]:
    """The requests waiting, each with its call by parameter name for a person to edit
    (None: its tool's calls cannot be edited), and the ones decided, an edit's with what
    it changed of what was asked."""
    decided = [a for a in ledger.approvals(None, limit=HISTORY) if a.status.value != "pending"]
    pending = ledger.approvals(ApprovalStatus.PENDING)
    editable = {a.id: ledger.editable_arguments(a) for a in pending}
    return {
        "pending": pending,
        "decided": decided,
        "editable": {k: None if v is None else exact_json(v) for k, v in editable.items()},
        "changes": approval_changes(ledger, decided),
    }


def approval_changes(ledger: Ledger, shown: list[Approval]) -> dict[int, list[str]]:
    """What a person's edit changed, for each of ``shown`` an edit replaced or made."""
    steps = {(a.run_id, a.step_id) for a in shown if a.status is ApprovalStatus.EDITED}
    changes: dict[int, list[str]] = {}
    for step in sorted(steps):
        for edit in ledger.approval_edits(*step):
            lines = argument_changes(json.loads(edit.args_json), json.loads(edit.edited_args_json))
            changes[edit.request] = changes[edit.edited_request] = [
                f"request {edit.request} asked, request {edit.edited_request} approved by "
                f"{edit.by}", *lines,
            ]  # fmt: skip
    return changes


def doubts(ledger: Ledger) -> dict[str, Any]:
    found = []
    in_doubt = ledger.effects_in_doubt()
    claims = {(c.run_id, c.seq): c.subject for c in ledger.subjects(limit=SUBJECTS)}
    for d in in_doubt:
        step = d.step
        reason = _doubt_reason(step, d.orphaned)
        run = ledger.get_run(step.run_id)
        subject = claims.get((step.run_id, step.seq))
        owner = None if d.lease_owner is None else d.holder  # pid 41 on host-a
        found.append(Doubt(step, run, reason, d.state, d.age, owner, subject))
    runs = {d.step.run_id for d in in_doubt}
    evidence = {r: evidence_urls(ledger.iter_journal(r)) for r in runs}  # by run, step id
    return {"doubts": found, "evidence": evidence}


def subjects_and_holds(ledger: Ledger) -> dict[str, Any]:
    """The latest subject claims, and every resource held or held last."""
    return {"claims": ledger.subjects(limit=LISTED), "holds": ledger.holds(limit=LISTED)}


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
