"""The kill switch: turn it on, turn it off (a person), list it."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

import oncelog
from oncelog.display import escape_invisible, visible

from ._options import by_option, db_option, emit, json_option, next_for, opened, print_next, say

F = TypeVar("F", bound=Callable[..., Any])


def switch_options(fn: F) -> F:
    """Which switch: --run RUN, --agent AGENT, or --global (each needs exactly one)."""
    for option in reversed(
        (
            click.option("--run", "run", metavar="RUN_ID", help="One run."),
            click.option("--agent", "agent", metavar="AGENT", help="Every run of an agent."),
            click.option("--global", "every", is_flag=True, help="Every run."),
        )
    ):
        fn = option(fn)
    return fn


def _one(run: str | None, agent: str | None, every: bool) -> None:
    if [run is not None, agent is not None, every].count(True) != 1:
        raise click.UsageError("name exactly one switch: --run RUN_ID, --agent AGENT or --global")


def _describe(halt: oncelog.Halt) -> str:
    where = (
        "global"
        if halt.scope is oncelog.HaltScope.GLOBAL
        else f"{halt.scope.value} {visible(halt.target)}"
    )
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(halt.set_at))
    line = f"{where}: {halt.reason} (set by {halt.set_by} at {when})"
    if halt.cleared_by:
        line += f"; cleared by {halt.cleared_by}" + (f": {halt.note}" if halt.note else "")
    return line


@click.command()
@switch_options
@click.option("--reason", required=True, help="Why; shown to whoever meets the halt.")
@by_option("Who sets it (recorded)")
@click.option(
    "--ahead",
    is_flag=True,
    help="The run or agent has not started yet: set the switch all the same (without it, "
    "an id the ledger has never seen is refused).",
)
@db_option
def halt(
    run: str | None,
    agent: str | None,
    every: bool,
    reason: str,
    by: str,
    ahead: bool,
    db: str | None,
) -> None:
    """Turn a kill switch on: no new step of a covered run starts until a person clears it.
    Never creates a ledger: pointed at none, it says where it looked."""
    _one(run, agent, every)
    with opened(db, create=False) as ledger:
        found = ledger.halt(reason, by=by, run=run, agent=agent, ahead=ahead)
    say(f"halted: {_describe(found)}")


@click.command()
@switch_options
@by_option("The person clearing it (recorded)")
@click.option("--note", default=None, help="Why it is safe to go on.")
@db_option
def resume(
    run: str | None, agent: str | None, every: bool, by: str, note: str | None, db: str | None
) -> None:
    """Turn a kill switch off. Restart the halted agents afterwards; they resume."""
    _one(run, agent, every)
    with opened(db, create=False) as ledger:
        found = ledger.clear_halt(by=by, run=run, agent=agent, note=note)
        say(f"cleared: {_describe(found)}")
        if run is None:
            after = ["restart the halted agents it covered; each resumes where it stopped "
                     "(oncelog runs --status queued lists them)"]  # fmt: skip
        else:
            try:
                after = next_for(ledger, run)
            except oncelog.UnknownRun:  # a switch set ahead, for a run that never started
                after = [f"run {run} has not started: nothing was waiting on this switch"]
    print_next(after)


@click.command()
@click.option("--all", "everything", is_flag=True, help="Include cleared switches.")
@db_option
@json_option
def halts(everything: bool, db: str | None, as_json: bool) -> None:
    """List kill switches that are on (with --all, the cleared ones too), then the runs
    stopped at a step that needs a person."""
    with opened(db, create=False) as ledger:
        found = ledger.halts(active_only=not everything)
        stopped = [r for r in ledger.runs(oncelog.RunStatus.HALTED) if r.stop_json is not None]
    if as_json:
        emit([{**dataclasses.asdict(h), "scope": h.scope.value, "active": h.active} for h in found])
        return
    if not found:
        click.echo("no kill switch is on")
    for h in found:
        say(_describe(h))
    for run in stopped:
        stop = json.loads(run.stop_json or "{}")
        say(
            f"run {visible(run.run_id)} is stopped at step {visible(stop['step_id'] or '-')} "
            f"for a person: {stop['kind']}: {escape_invisible(stop['message'])}"
        )
