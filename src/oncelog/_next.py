"""What happens next for a run, in words a person acts on: who takes it on by itself, or
the commands, arguments filled in, that move it. The CLI prints it after every decision
and under ``oncelog show``; the console shows it in its banner (``Ledger.what_next``). It
only reads, through the ledger's public reads (``Reads``)."""

from __future__ import annotations

from typing import Protocol

from ._commands import oncelog_command, option, quoted
from ._exceptions import resolve_command
from .records._records import (
    Approval,
    Halt,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
)
from .records._transitions import IN_DOUBT, RETRY


class Reads(Protocol):
    """What this module reads of a ``Ledger``."""

    def get_run(self, run_id: str) -> RunRecord: ...
    def runs(self, status: RunStatus, *, limit: int) -> list[RunRecord]: ...
    def steps(self, run_id: str) -> list[StepRecord]: ...
    def approvals(self, status: str, *, limit: int) -> list[Approval]: ...
    def halts(self, *, limit: int) -> list[Halt]: ...


LISTED = 1000  # released runs shown; more than any person works through at once
_FIX_THE_CODE = ("ReplayDivergence", "ArgumentDrift")


def what_next(ledger: Reads, run_id: str) -> list[str]:
    """Lines saying what happens next for ``run_id``: the first says what the run does, any
    others are commands a person runs."""
    run = ledger.get_run(run_id)
    q = quoted(run_id)
    if run.status is RunStatus.COMPLETED:
        return ["the run is completed: nothing is left to do"]
    if run.owner is not None and run.status in (RunStatus.RUNNING, RunStatus.WAITING):
        return [
            f"the process that holds the run ({run.owner}) goes on by itself; if it is gone, "
            f"restart the agent with run id {q}"
        ]
    if run.status is RunStatus.QUEUED:
        return [_taken_by(run)]
    if run.status is RunStatus.FAILED:
        return _failed(ledger, run)
    return [f"the run is still {run.status.value}: a person must act", *_commands(ledger, run)]


def _failed(ledger: Reads, run: RunRecord) -> list[str]:
    """A run that ended on an error: an effect that did not happen (refused, or its retry
    policy ran out) gets a fresh set of attempts from a person; else the code is fixed."""
    steps = ledger.steps(run.run_id)
    last = steps[-1] if steps else None
    if last is not None and last.state in RETRY.sources:
        retry = oncelog_command("retry", [run.run_id, last.step_id], options="--by NAME --why WHY")
        return [
            f"the run failed ({run.reason}): step {quoted(last.step_id)} did not happen; once "
            "the provider can take it, give it a fresh set of attempts with the same key, "
            "then restart the run under the same id",
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


def _taken_by(run: RunRecord) -> str:
    q = quoted(run.run_id)
    if run.input_json is not None:
        return (
            f"the run {q} is queued: an `oncelog worker` takes it and resumes it where it "
            "stopped (start one if none is running)"
        )
    return (
        f"the run {q} is queued: restart its agent with run id {q}; recorded steps replay "
        "and it goes on from where it stopped (a process waiting on it goes on by itself)"
    )


def _commands(ledger: Reads, run: RunRecord) -> list[str]:
    commands = [
        resolve_command(run.run_id, s.step_id, s.attempts)
        for s in ledger.steps(run.run_id)
        if s.state in IN_DOUBT
    ]  # fmt: skip
    for a in ledger.approvals("pending", limit=1000):
        if a.run_id == run.run_id:
            approve = oncelog_command("approve", [run.run_id, a.step_id], options="--by NAME")
            commands.append(f"{approve}   (or deny)")
    for h in ledger.halts(limit=1000):
        if h.scope.value == "run" and h.target == run.run_id:
            commands.append(f"oncelog resume {option('--run', run.run_id)} --by NAME")
        elif h.scope.value == "agent" and h.target == run.agent:
            commands.append(f"oncelog resume {option('--agent', h.target)} --by NAME")
        elif h.scope.value == "global":
            commands.append("oncelog resume --global --by NAME")
    if run.stopped_by in ("BudgetExceeded", "BudgetPaused"):
        budgets = oncelog_command(
            "budgets", [run.run_id], options="--set LIMIT=NEW_LIMIT --by NAME"
        )
        commands.append(budgets)
    if run.stopped_by in _FIX_THE_CODE:
        show = oncelog_command("show", [run.run_id])
        commands.append(f"fix the agent's code ({show}), then restart it")
    return commands
