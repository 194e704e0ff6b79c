"""A run's budget: what it allows, what it has used, what is left; a person may change it."""

from __future__ import annotations

import dataclasses

import click

import oncelog

from ._options import db_option, emit, json_option, opened

_LIMITS = [field.name for field in dataclasses.fields(oncelog.Budget)]


def _parse_limits(pairs: tuple[str, ...]) -> oncelog.Budget:
    limits: dict[str, float | None] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in _LIMITS or not value:
            raise click.BadParameter(f"{pair!r}: use NAME=VALUE with NAME one of {_LIMITS}")
        try:
            limits[name] = None if value == "none" else float(value)
        except ValueError:
            raise click.BadParameter(f"{pair!r}: {value!r} is not a number") from None
    return oncelog.Budget(**limits)  # type: ignore[arg-type]


@click.command()
@click.argument("run_id")
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Replace the budget with these limits (repeat; 'none' for no limit).",
)
@click.option("--by", default=None, help="Who changes it (required with --set).")
@db_option
@json_option
def budgets(
    run_id: str, pairs: tuple[str, ...], by: str | None, db: str | None, as_json: bool
) -> None:
    """A run's budget, what it has used and what is left; --set changes it."""
    with opened(db) as ledger:
        if pairs:
            if not by:
                raise click.UsageError("--set needs --by NAME: a person changes a budget")
            ledger.set_budget(run_id, _parse_limits(pairs), by=by)
        budget, used = ledger.store.budget_usage(run_id)
    rows = {
        name: {
            "limit": None if budget is None else getattr(budget, name),
            "used": getattr(used, name),
        }
        for name in _LIMITS
    }
    if as_json:
        emit({"run_id": run_id, "limits": rows})
        return
    if budget is None:
        click.echo(f"run {run_id} has no budget")
    for name, row in rows.items():
        limit = "-" if row["limit"] is None else f"{row['limit']:g}"
        click.echo(f"{name:<13} used {row['used']:>10.6g}   limit {limit}")
