"""What happens next for a run, in words a person acts on: who takes it on by itself, or
the commands, arguments filled in, that move it. The CLI prints it after every decision
and under ``oncelog show``; the console shows it in its banner (``Ledger.what_next``). It
only reads, through the ledger's public reads (``Reads``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

from ._commands import oncelog_command, option, quoted
from ._exceptions import decide_commands, resolve_command
from .process import _leases as leases
from .records._records import (
    Approval,
    Halt,
    JournalEntry,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    owner_shown,
)
from .records._transitions import IN_DOUBT, RETRY
from .records._value import NamedTuple


class Reads(Protocol):
    """What this module reads of a ``Ledger``."""

    def get_run(self, run_id: str) -> RunRecord: ...
    def runs(self, status: RunStatus, *, limit: int) -> list[RunRecord]: ...
    def steps(self, run_id: str) -> list[StepRecord]: ...
    def approvals(self, status: str, *, limit: int) -> list[Approval]: ...
    def halts(self, *, limit: int) -> list[Halt]: ...
    def iter_journal(self, run_id: str | None = None) -> Iterator[JournalEntry]: ...


class Waiter(NamedTuple):
    """A process that waits in place for a person's decision on a run
    (``run_main(wait_for_person=...)``): its lease owner identity, and until when it waits
    (wall clock, its host's)."""

    owner: str
    until: float

    def described(self) -> str:
        until = time.strftime("%H:%M:%S UTC", time.gmtime(self.until))
        return f"{owner_shown(self.owner)}, until {until}"


def waiting_in_place(ledger: Reads, run_id: str) -> Waiter | None:
    """The process waiting in place for a decision on ``run_id``, if one does: the last
    ``waiting_for_person`` record since a process last took the run, whose wait has not
    run out and whose process is not certainly gone."""
    last = None
    for entry in ledger.iter_journal(run_id):
        if entry.event == "waiting_for_person":
            last = entry
        elif entry.event == "lease_acquired":  # the run was taken up since
            last = None
    if last is None:
        return None
    waiter = Waiter(str(last.data.get("owner")), float(last.data.get("until") or 0))
    if waiter.until <= time.time() or leases.is_dead(waiter.owner):
        return None
    return waiter


LISTED = 1000  # released runs shown; more than any person works through at once
_FIX_THE_CODE = ("ReplayDivergence", "ArgumentDrift")


def what_next(ledger: Reads, run_id: str) -> list[str]:
    """Lines saying what happens next for ``run_id``: the first says what the run does, any
    others are commands a person runs."""
    run = ledger.get_run(run_id)
    q = quoted(run_id)
    if run.status is RunStatus.COMPLETED:
        return ["the run is completed: nothing is left to do"]
    held = run.status in (RunStatus.RUNNING, RunStatus.WAITING)
    if held and run.owner is not None and not leases.is_dead(run.owner):
        holder = owner_shown(run.owner)
        return [
            f"the process that holds the run ({holder}) goes on by itself; if it is gone, "
            f"restart the agent with run id {q}"
        ]
    waiter = None if run.owner is not None else waiting_in_place(ledger, run_id)
    if run.status is RunStatus.FAILED:
        return _failed(ledger, run, waiter)
    # A queued run has nothing left to decide but a kill switch that still covers it.
    commands = _switches(ledger, run) if run.status is RunStatus.QUEUED else _commands(ledger, run)
    if waiter is not None:
        goes_on = (
            f"the agent waiting in place for a decision ({waiter.described()}) goes on by itself"
        )
        if commands:
            return [f"the run is still {run.status.value}: a person must act; {goes_on} "
                    "once it is decided", *commands]  # fmt: skip
        return [f"{goes_on}: nothing needs restarting"]
    if run.status is RunStatus.QUEUED and not commands:
        return [_taken_by(run, origin(ledger, run_id))]
    if commands or not held:
        return [f"the run is still {run.status.value}: a person must act", *commands]
    gone = "" if run.owner is None else f" (the one that did, {owner_shown(run.owner)}, is gone)"
    started_by = origin(ledger, run_id)
    again = _resent(run, started_by) if run.input_json is None else _taken_by(run, started_by)
    return [f"no process holds the run{gone}: {again}"]


def origin(ledger: Reads, run_id: str) -> str | None:
    """What started the run the last time it was taken up (``Ledger.run(origin=...)``,
    which the integrations set); None for code that runs its agent itself."""
    last = None
    for entry in ledger.iter_journal(run_id):
        if entry.event == "lease_acquired":
            last = entry.data.get("origin")
    return last if isinstance(last, str) else None


def _resent(run: RunRecord, started_by: str | None) -> str:
    """How whatever started the run starts it again under the same id: the one way that
    applies, from its recorded origin (its integration's page says more)."""
    q = quoted(run.run_id)
    kind, _, detail = (started_by or "").partition(":")
    if kind == "celery":
        return (
            f"send the Celery task again with the same task id, TASK.apply_async(ARGS, "
            f"task_id={run.run_id!r}) (or the same run_id= key)"
        )
    if kind == "temporal":
        return (
            "the Temporal workflow schedules the activity again, its run named by the same "
            f"name= (oncelog_temporal.run(ledger, name=...), run {q})"
        )
    if kind == "dbos":
        workflow = run.run_id.rpartition("/")[0] or run.run_id
        return (
            f"DBOS.delete_workflow({workflow!r}), then start the workflow again under the "
            f"same id (the run {q} is WORKFLOW_ID/STEP)"
        )
    if kind == "langgraph":
        config = {"configurable": {"thread_id": detail}}
        return (
            f"invoke the LangGraph graph again on thread {quoted(detail)}: graph.invoke(None, "
            f"{config!r}) resumes it from its checkpoint (without a checkpointer, send the "
            f"request again on that thread); its node's run {q} replays its recorded steps"
        )
    if kind == "mcp":
        return (
            f"the MCP client calls its tool again through the proxy (oncelog mcp-proxy), in "
            f"a session of run id {q}; recorded calls replay"
        )
    if kind == "gateway":
        return (
            f"the MCP client calls its tool again through the gateway (oncelog gateway) in "
            f"run {q}, with the same call id (or, unnamed, the same arguments); recorded "
            "calls are answered from the ledger"
        )
    return (
        f"restart its agent with run id {q}; recorded steps replay and it goes on from "
        "where it stopped"
    )


def _failed(ledger: Reads, run: RunRecord, waiter: Waiter | None) -> list[str]:
    """A run that ended on an error: an effect that did not happen (refused, or its retry
    policy ran out) gets a fresh set of attempts from a person; else the code is fixed."""
    steps = ledger.steps(run.run_id)
    last = steps[-1] if steps else None
    if last is not None and last.state in RETRY.sources:
        retry = oncelog_command("retry", [run.run_id, last.step_id], options="--by NAME --why WHY")
        then = "then restart the run under the same id"
        if waiter is not None:
            then = (
                f"the agent waiting in place for it ({waiter.described()}) then goes on by "
                "itself: nothing needs restarting"
            )
        return [
            f"the run failed ({run.reason}): step {quoted(last.step_id)} did not happen; once "
            f"the provider can take it, give it a fresh set of attempts with the same key; {then}",
            retry,
        ]
    if last is not None and last.state is StepState.ABANDONED:
        correct = resolve_command(
            run.run_id, last.step_id, None, then="not_done", options="--correct --by NAME"
        )
        return [
            f"the run failed ({run.reason}): a person abandoned step {quoted(last.step_id)}; "
            "once the provider shows it did not happen, correct that decision, then restart "
            "the run under the same id",
            correct,
        ]
    if run.stopped_by == "ApprovalDenied":
        return [
            f"the run failed ({run.reason}): a denial is final for those arguments, at every "
            "replay; if the action must happen after all, start a new run (a new run id) "
            "and approve its request"
        ]
    return [f"the run failed ({run.reason}); fix the cause, then run it again under the same id"]


def _taken_by(run: RunRecord, started_by: str | None) -> str:
    q = quoted(run.run_id)
    if run.input_json is not None:
        agent = "" if run.agent is None else f" {option('--agent', run.agent)}"
        return (
            f"the run {q} is queued: an `oncelog worker` takes it and resumes it where it "
            f"stopped (start one if none is running: oncelog worker MODULE:HANDLER{agent}, "
            "with the handler its queue consumer runs)"
        )
    waiting = "a process waiting on it goes on by itself"
    return f"the run {q} is queued: {_resent(run, started_by)} ({waiting})"


def _commands(ledger: Reads, run: RunRecord) -> list[str]:
    commands = [
        command
        for s in ledger.steps(run.run_id)
        if s.state in IN_DOUBT
        for command in decide_commands(run.run_id, s.step_id, s.attempts)
    ]  # fmt: skip
    for a in ledger.approvals("pending", limit=1000):
        if a.run_id == run.run_id:
            approve = oncelog_command("approve", [run.run_id, a.step_id], options="--by NAME")
            commands.append(f"{approve}   (or deny)")
    commands += _switches(ledger, run)
    if run.stopped_by in ("BudgetExceeded", "BudgetPaused"):
        budgets = oncelog_command(
            "budgets", [run.run_id], options="--set LIMIT=NEW_LIMIT --by NAME"
        )
        commands.append(budgets)
    if run.stopped_by == "RetriesPaused":
        for s in ledger.steps(run.run_id)[-1:]:
            resume = oncelog_command(
                "retry", [run.run_id, s.step_id], options="--resume --by NAME --why WHY"
            )
            commands.append(f"{resume}   (its retries are paused)")
    if run.stopped_by in _FIX_THE_CODE:
        show = oncelog_command("show", [run.run_id])
        commands.append(f"fix the agent's code ({show}), then restart it")
    return commands


def _switches(ledger: Reads, run: RunRecord) -> list[str]:
    """The command that clears each kill switch on that covers the run."""
    commands = []
    for h in ledger.halts(limit=1000):
        if h.scope.value == "run" and h.target == run.run_id:
            commands.append(f"oncelog resume {option('--run', run.run_id)} --by NAME")
        elif h.scope.value == "agent" and h.target == run.agent:
            commands.append(f"oncelog resume {option('--agent', h.target)} --by NAME")
        elif h.scope.value == "global":
            commands.append("oncelog resume --global --by NAME")
    return commands
