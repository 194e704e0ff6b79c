"""Listing runs and steps, and resolving effects whose outcome is unknown."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

import oncelog

from ._options import db_option, emit, json_option, opened, print_next
from ._show import SUBJECTS, run_row, shown, step_row, when


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
        emit([run_row(r) for r in found])
        return
    for r in found:
        click.echo(
            f"{r.run_id:<30} {r.status.value:<10} {r.next_seq:>5} steps  "
            f"{when(r.updated_at)}  {r.reason or ''}"
        )


@click.command()
@db_option
@json_option
def unknown(db: str | None, as_json: bool) -> None:
    """Effects in doubt: started, with no recorded outcome. Each needs a person, unless
    it is in flight in a process that still holds its run."""
    with opened(db, create=False) as ledger:
        in_doubt = ledger.effects_in_doubt()
        claims = {(c.run_id, c.seq): c.subject for c in ledger.subjects(limit=SUBJECTS)}
        found = [(d, d.step.reason or _why_in_flight(d)) for d in in_doubt]
        released = {r.run_id: ledger.what_next(r.run_id) for r in ledger.released_runs()}
    if as_json:
        emit([_doubt_row(d, why, claims.get((d.step.run_id, d.step.seq))) for d, why in found])
        return
    if not found:
        click.echo("no effects in doubt")
    for d, why in found:
        s = d.step
        click.echo(f"{s.run_id} {s.step_id} ({s.tool}, {s.kind}) {d.state} key={s.key}")
        click.echo(f"    arguments: {shown(s.args_json)}")
        subject = claims.get((s.run_id, s.seq))
        if subject is not None:  # no other run acts on it until this is decided
            click.echo(f"    subject:   {subject}, held by this effect")
        click.echo(f"    started:   {_age(d.age)} ago; lease owner {d.lease_owner or '-'}")
        click.echo(f"    why:       {why}")
        click.echo(f"    decide:    {_resolve_command(s)}")
    for run_id, lines in released.items():
        click.echo(f"{run_id}: decided, not moved yet: {lines[0]}")


def _resolve_command(step: oncelog.StepRecord) -> str:
    return (
        f"oncelog resolve {shlex.quote(step.run_id)} {shlex.quote(step.step_id)} "
        "done|not_done|abandon --by NAME"
    )


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


def _doubt_row(doubt: oncelog.EffectInDoubt, why: str, subject: str | None) -> dict[str, Any]:
    row = {**step_row(doubt.step), "reason": why, "subject": subject}
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
        after = ledger.what_next(run_id)
    fixed = " (corrected)" if correct else ""
    click.echo(f"{run_id} {step_id}: {step.state.value}{fixed} (by {by})")
    print_next(after)


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
