"""A run's budget: what it allows, what it has used, what is left; a person may change it."""

from __future__ import annotations

import dataclasses

import click

import oncelog
from oncelog.display import visible

from ._options import by_option, db_option, emit, json_option, next_for, opened, print_next, say

_LIMITS = list(oncelog.Budget().limits())
_POLICY = ("on_exceed", "warn_at", "webhook")


def _changed(budget: oncelog.Budget | None, pairs: tuple[str, ...]) -> oncelog.Budget:
    """``budget`` with the NAME=VALUE changes applied; the rest is kept."""
    changes: dict[str, object] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in (*_LIMITS, *_POLICY) or not value:
            raise click.BadParameter(
                f"{pair!r}: use NAME=VALUE with NAME one of {[*_LIMITS, *_POLICY]}"
            )
        if value == "none":
            changes[name] = "stop" if name == "on_exceed" else None
        elif name in ("on_exceed", "webhook"):
            changes[name] = value
        else:
            try:
                changes[name] = float(value)
            except ValueError:
                raise click.BadParameter(f"{pair!r}: {value!r} is not a number") from None
    try:
        return dataclasses.replace(budget or oncelog.Budget(), **changes)  # type: ignore[arg-type]
    except oncelog.ConfigurationError as exc:
        raise click.BadParameter(exc.message) from None


@click.command()
@click.argument("run_id")
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Change a limit or the policy (repeat; 'none' removes a limit); the rest is kept.",
)
@by_option("Who changes it (required with --set)", required=False)
@db_option
@json_option
def budgets(
    run_id: str, pairs: tuple[str, ...], by: str | None, db: str | None, as_json: bool
) -> None:
    """A run's budget, what it has used and what is left; --set changes it."""
    with opened(db, create=False) as ledger:
        if pairs:
            if not by:
                raise click.UsageError("--set needs --by NAME: a person changes a budget")
            current, _ = ledger.budget_usage(run_id)
            ledger.set_budget(run_id, _changed(current, pairs), by=by)
        budget, used = ledger.budget_usage(run_id)
        after = next_for(ledger, run_id) if pairs else None
    rows = {
        name: {
            "limit": None if budget is None else getattr(budget, name),
            "used": getattr(used, name),
        }
        for name in _LIMITS
    }
    policy = {name: getattr(budget, name) for name in _POLICY} if budget else None
    if as_json:
        emit({"run_id": run_id, "limits": rows, "policy": policy})
        return
    if budget is None:
        say(f"run {visible(run_id)} has no budget")
    else:
        say("  ".join(f"{name}={value}" for name, value in (policy or {}).items()))
    for name, row in rows.items():
        limit = "-" if row["limit"] is None else f"{row['limit']:g}"
        click.echo(f"{name:<13} used {row['used']:>10.6g}   limit {limit}")
    if after is not None:
        print_next(after)
