"""Holds on a resource (``run.hold``): list them; a person frees one its holder cannot."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click

import oncelog

from ._options import by_option, db_option, emit, json_option, opened, text_option


def _name(resource: str) -> Any:
    """RESOURCE as ``oncelog holds`` prints it (a JSON array), or a plain string name."""
    try:
        parsed = json.loads(resource)
    except (ValueError, RecursionError):
        return resource
    return parsed if isinstance(parsed, list) else resource


def _describe(hold: oncelog.HoldRecord) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(hold.since))
    return f"{hold.resource}: {hold.state}, run {hold.holder} since {since} (token {hold.token})"


@click.command()
@db_option
@json_option
def holds(db: str | None, as_json: bool) -> None:
    """List held resources: the holder run, since when, its token and state (held,
    blocked by an effect in doubt, lapsed, free)."""
    with opened(db, create=False) as ledger:
        found = ledger.holds()
    if as_json:
        emit([dataclasses.asdict(h) for h in found])
        return
    if not found:
        click.echo("no resource has been held")
    for h in found:
        click.echo(_describe(h))


@click.command()
@click.argument("resource")
@by_option("The person releasing it (recorded)")
@text_option("--why", "Why the resource is safe to hand on (recorded).")
@click.option("--force", is_flag=True, help="Even while the holder's lease runs.")
@db_option
def release(resource: str, by: str, why: str, force: bool, db: str | None) -> None:
    """Free the hold on RESOURCE (as `oncelog holds` prints it, e.g. '["host","db-1"]'),
    journalled in the holder's run. Refused while the holder's lease runs, unless
    --force: then it may still be acting on the resource."""
    with opened(db, create=False) as ledger:
        found = ledger.release_hold(_name(resource), by=by, why=why, force=force)
    click.echo(f"released: {_describe(found)}")
