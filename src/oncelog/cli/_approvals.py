"""Approvals: list the requests, approve or deny one of them by its id or arguments hash."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from oncelog import Approval, ApprovalEdit, ApprovalStatus, Ledger
from oncelog.display import argument_changes, escape_invisible, visible

from ._options import by_option, db_option, emit, json_option, next_for, opened, print_next, say
from ._prune import duration

F = TypeVar("F", bound=Callable[..., Any])
SHOWN_CHARS = 2000  # longer arguments are cut, and the listing says how to read them whole


@click.command()
@click.option("--all", "everything", is_flag=True, help="Include decided and used requests.")
@db_option
@json_option
def approvals(everything: bool, db: str | None, as_json: bool) -> None:
    """Effects waiting for a person's approval, with the exact arguments they would run with."""
    with opened(db, create=False) as ledger:
        found = ledger.approvals(None if everything else "pending")
        edits = _edits_of(ledger, found) if everything else {}
        named = {a.id: ledger.editable_arguments(a) for a in found if a.status.value == "pending"}
    if as_json:
        emit([{**dataclasses.asdict(a), "status": a.status.value} for a in found])
        return
    if not found:
        click.echo("no approval is pending")
    edited_ids = {e.edited_request for step in edits.values() for e in step}
    for a in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.requested_at))
        decided = f" by {a.decided_by}" if a.decided_by else ""
        say(
            f"request {a.id}: {visible(a.run_id)} {visible(a.step_id)} ({a.tool}) "
            f"{a.status.value}{decided}, "
            f"asked {when}"
        )
        click.echo(f"    arguments hash: {a.args_hash}")
        click.echo(f"    arguments: {_arguments(a)}")
        if named.get(a.id) is not None:
            # What `approve --args` takes, to copy and edit.
            given = _cut(json.dumps(named[a.id], ensure_ascii=False))
            say(f"    by name (to edit with approve --args): {given}")
        if a.status is ApprovalStatus.EDITED or a.id in edited_ids:
            for line in _changes(a, edits.get((a.run_id, a.step_id), [])):
                say(f"    {line}")


def _edits_of(ledger: Ledger, found: list[Approval]) -> dict[tuple[str, str], list[ApprovalEdit]]:
    """The edits of the steps of ``found`` that have an edited request."""
    steps = {(a.run_id, a.step_id) for a in found if a.status is ApprovalStatus.EDITED}
    return {step: ledger.approval_edits(*step) for step in steps}


def _arguments(a: Approval) -> str:
    return _cut(a.args_json)


def _cut(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return escape_invisible(text)
    more = len(text) - SHOWN_CHARS
    return (
        f"{escape_invisible(text[:SHOWN_CHARS])}… CUT: {more} more characters; read "
        "them all with `oncelog approvals --json` before deciding"
    )


def _request_options(fn: F) -> F:
    """Which request the person read: by id, by arguments hash, or both (then they must
    name the same request)."""
    fn = click.option(
        "--args-hash", default=None, metavar="HASH", help="The request's arguments hash."
    )(fn)
    decorated: F = click.option(
        "--request",
        type=int,
        default=None,
        metavar="ID",
        help="The request's id, as `oncelog approvals` lists it (needed, or --args-hash, "
        "once the step was asked with other arguments).",
    )(fn)
    return decorated


def _decided(a: Approval) -> str:
    return (
        f"{visible(a.run_id)} {visible(a.step_id)}: request {a.id} {a.status.value} by "
        f"{a.decided_by}, for arguments {_arguments(a)} (hash {a.args_hash})"
    )


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@by_option("Who approves (recorded)")
@_request_options
@click.option(
    "--expires-in",
    type=float,
    default=None,
    metavar="SECONDS",
    help="The approval lapses after this long if unused.",
)
@click.option(
    "--for",
    "lasting",
    default=None,
    metavar="DURATION",
    help="--expires-in as a length of time: 30m, 1h, 2d.",
)
@click.option("--note", default=None)
@click.option(
    "--args",
    "edited",
    default=None,
    metavar="JSON",
    help="Approve these arguments instead (a JSON object of every parameter by name, as "
    "`oncelog approvals` shows them): the step runs the edited call under a new key.",
)
@db_option
def approve(
    run_id: str,
    step_id: str,
    by: str,
    request: int | None,
    args_hash: str | None,
    expires_in: float | None,
    lasting: str | None,
    note: str | None,
    edited: str | None,
    db: str | None,
) -> None:
    """Approve one pending request of a step, for its exact arguments (or, with --args,
    for edited ones), once."""
    if lasting is not None:
        if expires_in is not None:
            raise click.UsageError("give --expires-in or --for, not both")
        expires_in = duration(lasting)
    with opened(db, create=False) as ledger:
        found = ledger.approve(
            run_id, step_id, by=by, request=request, args_hash=args_hash,
            expires_in=expires_in, note=note, args=edited,
        )  # fmt: skip
        edits = ledger.approval_edits(run_id, step_id) if edited is not None else []
        after = next_for(ledger, run_id)
    say(_decided(found))
    for line in _changes(found, edits):
        say(f"    {line}")
    print_next(after)


def _changes(a: Approval, edits: list[ApprovalEdit]) -> list[str]:
    """What a person changed of what was asked, for a request an edit made or replaced."""
    for edit in edits:
        if a.id in (edit.request, edit.edited_request):
            changed = argument_changes(
                json.loads(edit.args_json), json.loads(edit.edited_args_json)
            )
            return [
                f"edited by {edit.by}: request {edit.request} asked, request "
                f"{edit.edited_request} approved" + (f" ({edit.note})" if edit.note else ""),
                *(f"  {escape_invisible(line)}" for line in changed),
            ]
    return []


@click.command()
@click.argument("run_id")
@click.argument("step_id")
@by_option("Who denies (recorded)")
@_request_options
@click.option("--note", default=None, help="Why; the agent receives it.")
@db_option
def deny(
    run_id: str,
    step_id: str,
    by: str,
    request: int | None,
    args_hash: str | None,
    note: str | None,
    db: str | None,
) -> None:
    """Deny one pending request of a step: the agent gets ApprovalDenied there."""
    with opened(db, create=False) as ledger:
        found = ledger.deny(run_id, step_id, by=by, request=request, args_hash=args_hash, note=note)
        after = next_for(ledger, run_id)
    say(_decided(found))
    print_next(after)
