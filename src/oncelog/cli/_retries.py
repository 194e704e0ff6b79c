"""A person's way out of an effect that did not happen: a fresh set of attempts with the
same key (``retry``), its retries paused and resumed (``retry --pause``, ``--resume``),
and the run driven on again from the step it stopped at after an outage (``redrive``).
All refuse what could perform an effect twice."""

from __future__ import annotations

import click

from oncelog.display import visible

from ._options import by_option, db_option, next_for, opened, print_next, say, text_option

_WHO = by_option("Who decides (journalled)")
_WHY = text_option("--why", "Why it is safe to try again (journalled).")
_FORCE = click.option(
    "--force",
    is_flag=True,
    help="Even while a live process holds the run (it is fenced off; journalled).",
)


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@_WHO
@_WHY
@_FORCE
@click.option(
    "--pause", is_flag=True, help="Pause the effect's retries: the run stops at its next attempt."
)
@click.option("--resume", is_flag=True, help="Resume paused retries, with the same key.")
@db_option
def retry(
    run_id: str, step_id: str, by: str, why: str, force: bool, pause: bool, resume: bool,
    db: str | None,
) -> None:  # fmt: skip
    """Give an effect whose retry policy ran out, or that the provider refused, a fresh set
    of attempts with the same idempotency key; the run goes on from it at its next start.
    Refused for a step done, in doubt (resolve it) or abandoned (correct that). --pause
    stops its retries at the next attempt (the run halts until --resume); --resume lets
    them go on, with the same key."""
    if pause or resume:
        if (pause and resume) or force:
            raise click.UsageError("give one of --pause and --resume, without --force")
        with opened(db, create=False) as ledger:
            step = ledger.pause_retries(run_id, step_id, by=by, why=why, resume=resume)
            after = next_for(ledger, run_id)
        done = "resumed: its next attempt goes on" if resume else "paused at its next attempt"
        who = visible(by)
        say(f"{visible(run_id)} {visible(step_id)}: retries {done}, key {step.key} (by {who})")
        print_next(after)
        return
    _retry(run_id, step_id, by, why, force, db)


@click.command()
@click.argument("run_id")
@click.option(
    "--from",
    "step_id",
    default=None,
    metavar="STEP_ID",
    help="The step to drive on from (default: the run's last step).",
)
@_WHO
@_WHY
@_FORCE
@db_option
def redrive(
    run_id: str, step_id: str | None, by: str, why: str, force: bool, db: str | None
) -> None:
    """After an outage: a new attempt at the step the run stopped at (or --from STEP, which
    must be its last), the steps before it kept. Never re-runs a done effect or one in
    doubt: those are refused, naming the command that fits."""
    if step_id is None:
        with opened(db, create=False) as ledger:
            ledger.get_run(run_id)  # an unknown run is refused, naming the nearest
            steps = ledger.steps(run_id)
        if not steps:
            raise click.UsageError(f"run {run_id} has no step to drive on from")
        step_id = steps[-1].step_id
    _retry(run_id, step_id, by, why, force, db)


def _retry(run_id: str, step_id: str, by: str, why: str, force: bool, db: str | None) -> None:
    with opened(db, create=False) as ledger:
        step = ledger.retry(run_id, step_id, by=by, why=why, force=force)
        after = next_for(ledger, run_id)
    say(
        f"{visible(run_id)} {visible(step_id)}: {step.state.value}, a fresh set of attempts "
        f"with the same key {step.key} (by {visible(by)})"
    )
    print_next(after)
