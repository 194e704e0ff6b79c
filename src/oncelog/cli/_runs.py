"""Listing runs and steps, and resolving effects whose outcome is unknown."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click

import oncelog

from .._display import redact
from ._options import db_option, emit, json_option, opened


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _shown(text: str | None, limit: int = 300) -> str:
    """Recorded JSON as a person may see it: secret-looking keys masked, cut short."""
    if text is None:
        return "-"
    try:
        shown = json.dumps(
            redact(json.loads(text)), ensure_ascii=False, sort_keys=True, separators=(",", ":")
        )
    except ValueError:
        shown = f"(not JSON) {text}"
    return shown if len(shown) <= limit else shown[:limit] + f"… ({len(shown)} chars)"


def _step_row(step: oncelog.StepRecord, in_doubt_because: str | None = None) -> dict[str, Any]:
    row = step._asdict()
    row.update(type=step.type.value, state=step.state.value)
    for field in ("args_json", "result_json", "error_json"):
        if row[field] is not None:
            row[field] = json.dumps(redact(json.loads(row[field])), sort_keys=True)
    if in_doubt_because is not None:
        row["reason"] = in_doubt_because
    if step.result is oncelog.NO_RESULT:
        row["no_result"] = True
    return row


@click.command()
@click.option("--status", type=click.Choice([s.value for s in oncelog.RunStatus]))
@click.option("--limit", default=100, show_default=True)
@db_option
@json_option
def runs(status: str | None, limit: int, db: str | None, as_json: bool) -> None:
    """List runs, most recently updated first."""
    with opened(db, create=False) as ledger:
        found = ledger.runs(status, limit=limit)
    if as_json:
        emit([{**dataclasses.asdict(r), "status": r.status.value} for r in found])
        return
    for r in found:
        click.echo(
            f"{r.run_id:<30} {r.status.value:<10} {r.next_seq:>5} steps  "
            f"{_when(r.updated_at)}  {r.reason or ''}"
        )


@click.command()
@click.argument("run_id")
@db_option
@json_option
def show(run_id: str, db: str | None, as_json: bool) -> None:
    """A run's timeline: every step with its state, key, attempts and result."""
    with opened(db, create=False) as ledger:
        run = ledger.get_run(run_id)
        steps = ledger.steps(run_id)
    if as_json:
        emit(
            {
                "run": {**dataclasses.asdict(run), "status": run.status.value},
                "steps": [_step_row(s) for s in steps],
            }
        )
        return
    click.echo(f"run {run.run_id}: {run.status.value}" + (f" ({run.reason})" if run.reason else ""))
    if run.plan:
        click.echo(f"plan: {', '.join(run.plan)}")
    for s in steps:
        took = "" if s.finished_at is None else f" {1000 * (s.finished_at - s.started_at):.0f} ms"
        click.echo(
            f"{s.seq:>4} {s.step_id:<20} {s.type.value:<6} {s.kind:<11} "
            f"{s.state.value:<9} x{s.attempts} {s.key}  {_when(s.started_at)}{took}"
        )
        click.echo(f"       arguments: {_shown(s.args_json)}")
        if s.result_json is not None:
            click.echo(f"       result:    {_shown(s.result_json)}")
        elif s.result is oncelog.NO_RESULT:
            click.echo("       result:    oncelog.NO_RESULT (resolved done without it)")
        if s.error_json is not None:
            click.echo(f"       error:     {_shown(s.error_json)}")


@click.command()
@db_option
@json_option
def unknown(db: str | None, as_json: bool) -> None:
    """Effects in doubt: started, with no recorded outcome. Each needs a person, unless
    it is in flight in a process that still holds its run."""
    with opened(db, create=False) as ledger:
        found = [(d, d.step.reason or _why_in_flight(d)) for d in ledger.effects_in_doubt()]
    if as_json:
        emit([_doubt_row(d, why) for d, why in found])
        return
    if not found:
        click.echo("no effects in doubt")
    for d, why in found:
        s = d.step
        click.echo(f"{s.run_id} {s.step_id} ({s.tool}, {s.kind}) {d.state} key={s.key}")
        click.echo(f"    arguments: {_shown(s.args_json)}")
        click.echo(f"    started:   {_age(d.age)} ago; lease owner {d.lease_owner or '-'}")
        click.echo(f"    why:       {why}")


def _why_in_flight(doubt: oncelog.EffectInDoubt) -> str:
    if not doubt.orphaned:
        return "in flight: its process may still be running it"
    step = doubt.step
    return (
        "orphaned: its run's lease has expired, so nobody is running it; it may or may not "
        f"have happened. Decide: oncelog resolve {step.run_id} {step.step_id} done "
        "--result JSON (or not_done, or abandon) --by NAME, or start the run again to let "
        "its probe look"
    )


def _doubt_row(doubt: oncelog.EffectInDoubt, why: str) -> dict[str, Any]:
    row = _step_row(doubt.step, why)
    row.update(orphaned=doubt.orphaned, age_seconds=round(doubt.age, 3))
    row["lease_owner"] = doubt.lease_owner
    return row


def _age(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@click.argument("resolution", type=click.Choice([r.value for r in oncelog.Resolution]))
@click.option("--by", required=True, help="Who decides (recorded in the journal).")
@click.option(
    "--result",
    "result_json",
    default=None,
    metavar="JSON",
    help="The provider's result, for 'done' (this or --no-result is required).",
)
@click.option(
    "--no-result",
    is_flag=True,
    help="'done' without the provider's result: the agent gets oncelog.NO_RESULT.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Decide even while a live process holds the run (recorded as forced).",
)
@click.option(
    "--text",
    default=None,
    help="The result as plain text, for 'done' (an MCP tool's result is built from it).",
)
@click.option(
    "--correct",
    is_flag=True,
    help="Replace a wrong resolution of the run's last step, before the run goes on.",
)
@click.option("--note", default=None)
@db_option
def resolve(
    run_id: str,
    step_id: str,
    resolution: str,
    by: str,
    result_json: str | None,
    no_result: bool,
    force: bool,
    text: str | None,
    correct: bool,
    note: str | None,
    db: str | None,
) -> None:
    """Decide an effect in doubt: done (it happened), not_done (run it again) or abandon.
    Refused while a live process holds the run's lease, unless --force. With --correct,
    change a resolution that was wrong while nothing has acted on it."""
    given = result_json if text is None else json.dumps(text)
    if result_json is not None and text is not None:
        raise click.UsageError("give --result JSON or --text TEXT, not both")
    result = _result_given(oncelog.Resolution(resolution), given, no_result)
    with opened(db, create=False) as ledger:
        step = ledger.resolve(
            run_id, step_id, oncelog.Resolution(resolution), by=by, result=result, note=note,
            force=force, correct=correct,
        )  # fmt: skip
    fixed = " (corrected)" if correct else ""
    click.echo(f"{run_id} {step_id}: {step.state.value}{fixed} (by {by})")


def _result_given(resolution: oncelog.Resolution, result_json: str | None, no_result: bool) -> Any:
    """What ``--result`` / ``--text`` / ``--no-result`` say, for ``Ledger.resolve``."""
    if resolution is not oncelog.Resolution.DONE:
        if result_json is not None or no_result:
            raise click.UsageError("--result, --text and --no-result go with 'done' only")
        return None
    if (result_json is None) == (not no_result):
        raise click.UsageError(
            "'done' needs --result JSON or --text TEXT (the provider's answer, which the "
            "agent gets), or --no-result if it cannot be known (the agent gets "
            "oncelog.NO_RESULT)"
            if result_json is None
            else "give --result (or --text) or --no-result, not both"
        )
    if no_result:
        return oncelog.NO_RESULT
    try:
        return json.loads(result_json or "")
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--result") from exc
