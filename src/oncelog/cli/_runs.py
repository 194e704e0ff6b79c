"""Listing runs and steps, and resolving effects whose outcome is unknown."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

import oncelog
from oncelog.display import DECISIONS, decide_commands, evidence_urls, oncelog_command, visible

from ._options import (
    by_option,
    db_option,
    emit,
    filled,
    given_json,
    json_option,
    next_for,
    opened,
    print_next,
    say,
    text_option,
)
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
        say(
            f"{visible(r.run_id):<30} {r.status.value:<10} {r.next_seq:>5} steps  "
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
        released = {r.run_id: next_for(ledger, r.run_id) for r in ledger.released_runs()}
        runs = {d.step.run_id for d in in_doubt}
        evidence = {r: evidence_urls(ledger.iter_journal(r)) for r in runs}
    if as_json:
        emit([
            {**_doubt_row(d, why, claims.get((d.step.run_id, d.step.seq))),
             "evidence_url": evidence[d.step.run_id].get(d.step.step_id)}
            for d, why in found
        ])  # fmt: skip
        return
    if not found:
        click.echo("no effects in doubt")
    for d, why in found:
        s = d.step
        say(f"{visible(s.run_id)} {visible(s.step_id)} ({s.tool}, {s.kind}) {d.state} key={s.key}")
        say(f"    arguments: {shown(s.args_json)}")
        url = evidence[s.run_id].get(s.step_id)
        if url is not None:
            say(f"    look up:   {visible(url)}")
        subject = claims.get((s.run_id, s.seq))
        if subject is not None:  # no other run acts on it until this is decided
            say(f"    subject:   {visible(subject)}, held by this effect")
        say(f"    started:   {_age(d.age)} ago; lease owner {d.holder}")
        say(f"    why:       {why}")
        for i, line in enumerate(decisions(s)):
            say(f"    {'decide:' if i == 0 else '':<11}{line}")
    for run_id, lines in released.items():
        say(f"{visible(run_id)}: decided, not moved yet: {lines[0]}")


def decisions(step: oncelog.StepRecord, *, said: bool = True) -> list[str]:
    """The ``oncelog resolve`` command of each decision on ``step``'s attempt in doubt,
    with when to run it after ``#`` if ``said``."""
    commands = [filled(c) for c in decide_commands(step.run_id, step.step_id, step.attempts)]
    if not said:
        return commands
    return [f"{cmd}  # {why}" for cmd, (_, _, why) in zip(commands, DECISIONS, strict=True)]


def _why_in_flight(doubt: oncelog.EffectInDoubt) -> str:
    owner = doubt.holder
    if not doubt.orphaned:
        return (
            f"in flight: a live process ({owner}) holds its run's lease and heartbeats, so it "
            "may still be running it; if that process is gone (on another host), decide once "
            "its lease lapses, or now with --force"
        )
    return (
        f"orphaned: its run's lease has expired or the process that held it ({owner}) is "
        "gone, so nobody is running it; it may or may not have happened. Decide below, or "
        "start the run again to let its probe look"
    )


def _doubt_row(doubt: oncelog.EffectInDoubt, why: str, subject: str | None) -> dict[str, Any]:
    commands = decisions(doubt.step, said=False)
    row = {**step_row(doubt.step), "reason": f"{why}; decide: {' | '.join(commands)}"}
    row.update(subject=subject, decide=commands)
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
@by_option("Who decides (recorded in the journal)")
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
@text_option(
    "--text",
    "The result as plain text, for 'done' (an MCP tool's result is built from it).",
    required=False,
)
@click.option(
    "--correct",
    is_flag=True,
    help="Replace a wrong resolution of the run's last step, before the run goes on.",
)
@click.option(
    "--attempt",
    type=click.IntRange(min=1),
    default=None,
    help="The attempt you decided on, as `oncelog unknown` showed it: refused if the step "
    "has been run again since. Needed once the step has had more than one attempt.",
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
    attempt: int | None,
    note: str | None,
    db: str | None,
) -> None:
    """Decide an effect in doubt: done (it happened), not_done (run it again) or abandon.
    Refused while a live process holds the run's lease, unless --force, and if the step
    has been run again since the attempt named by --attempt. With --correct, change a
    resolution that was wrong while nothing has acted on it."""
    given = result_json if text is None else json.dumps(text)
    if result_json is not None and text is not None:
        raise click.UsageError("give --result JSON or --text TEXT, not both")
    result = _result_given(oncelog.Resolution(resolution), given, no_result)
    with opened(db, create=False) as ledger:
        if attempt is None:
            attempt = _only_attempt(ledger, run_id, step_id, correct=correct)
        step = ledger.resolve(
            run_id, step_id, oncelog.Resolution(resolution), by=by, result=result, note=note,
            force=force, correct=correct, attempt=attempt,
        )  # fmt: skip
        after = next_for(ledger, run_id)
    fixed = " (corrected)" if correct else ""
    click.echo(f"{run_id} {step_id}: {step.state.value}{fixed} (by {by})")
    print_next(after)


_IN_DOUBT = (oncelog.StepState.IN_FLIGHT, oncelog.StepState.UNKNOWN)


def _only_attempt(ledger: oncelog.Ledger, run_id: str, step_id: str, *, correct: bool) -> int:
    """The attempt a decision that names none is about: the step's first, if it has had
    no other, as then no older attempt can be the one the person looked at (and the
    decision is still bound to it, should the step move on before it is written).
    Otherwise ``AttemptMismatch``, with the command that names the attempt there now."""
    step = next((s for s in ledger.steps(run_id) if s.step_id == step_id), None)
    if step is None:
        return 1  # refused by the decision itself, which lists the run's steps
    if step.attempts == 1 or (step.state not in _IN_DOUBT and not correct):
        return step.attempts  # a settled step's refusal says who settled it, and when
    pasted = _command_naming(step.attempts)
    raise oncelog.AttemptMismatch(
        f"{step_id!r} has had {step.attempts} attempts: it is at attempt {step.attempts} now "
        f"({step.state.value}), so a decision must name the attempt it was made on. If what "
        f"you found at the provider (key {step.key}) is about attempt {step.attempts}, run: "
        f"{pasted}",
        run_id=run_id, step_id=step_id, key=step.key,
    )  # fmt: skip


def _command_naming(attempt: int) -> str:
    """The ``oncelog resolve`` command being run, as given, with ``--attempt`` added."""
    context = click.get_current_context()
    given = context.params
    words = ["--by", given["by"]]
    for option, name in (("--result", "result_json"), ("--text", "text"), ("--note", "note")):
        if given[name] is not None:
            words += [option, given[name]]
    for flag in ("no_result", "force", "correct"):
        if given[flag]:
            words.append(f"--{flag.replace('_', '-')}")
    words += ["--attempt", str(attempt)]
    if context.get_parameter_source("db") is click.core.ParameterSource.COMMANDLINE:
        words += ["--db", given["db"]]
    return oncelog_command(
        "resolve", [given["run_id"], given["step_id"]], then=given["resolution"],
        options=shlex.join(words),
    )  # fmt: skip


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
    return given_json(result_json or "", "--result")
