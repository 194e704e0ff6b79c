"""Approvals: list the pending requests, approve or deny one."""

from __future__ import annotations

import dataclasses
import time

import click

from ._options import db_option, emit, json_option, opened


@click.command()
@click.option("--all", "everything", is_flag=True, help="Include decided and used requests.")
@db_option
@json_option
def approvals(everything: bool, db: str | None, as_json: bool) -> None:
    """Effects waiting for a person's approval, with the exact arguments they would run with."""
    with opened(db, create=False) as ledger:
        found = ledger.approvals(None if everything else "pending")
    if as_json:
        emit([{**dataclasses.asdict(a), "status": a.status.value} for a in found])
        return
    if not found:
        click.echo("no approval is pending")
    for a in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.requested_at))
        decided = f" by {a.decided_by}" if a.decided_by else ""
        click.echo(f"{a.run_id} {a.step_id} ({a.tool}) {a.status.value}{decided}, asked {when}")
        click.echo(f"    arguments: {a.args_json[:300]}")


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@click.option("--by", required=True, help="Who approves (recorded).")
@click.option(
    "--expires-in",
    type=float,
    default=None,
    metavar="SECONDS",
    help="The approval lapses after this long if unused.",
)
@click.option("--note", default=None)
@db_option
def approve(
    run_id: str, step_id: str, by: str, expires_in: float | None, note: str | None, db: str | None
) -> None:
    """Approve the pending request of a step, for its exact arguments, once."""
    with opened(db, create=False) as ledger:
        found = ledger.approve(run_id, step_id, by=by, expires_in=expires_in, note=note)
    click.echo(f"{run_id} {step_id}: {found.status.value} by {by}")


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@click.option("--by", required=True, help="Who denies (recorded).")
@click.option("--note", default=None, help="Why; the agent receives it.")
@db_option
def deny(run_id: str, step_id: str, by: str, note: str | None, db: str | None) -> None:
    """Deny the pending request of a step: the agent gets ApprovalDenied there."""
    with opened(db, create=False) as ledger:
        found = ledger.deny(run_id, step_id, by=by, note=note)
    click.echo(f"{run_id} {step_id}: {found.status.value} by {by}")
