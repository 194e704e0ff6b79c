"""Options shared by the commands."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

import oncelog

F = TypeVar("F", bound=Callable[..., Any])


def db_option(fn: F) -> F:
    decorated: F = click.option(
        "--db",
        "db",
        envvar="ONCELOG_URL",
        default=None,
        metavar="URL",
        help="Ledger path or URL (default: $ONCELOG_URL, else ./.oncelog/ledger.db).",
    )(fn)
    return decorated


def json_option(fn: F) -> F:
    decorated: F = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON instead of a table."
    )(fn)
    return decorated


@contextmanager
def opened(db: str | None, **options: Any) -> Iterator[oncelog.Ledger]:
    """Open the ledger; turn oncelog errors into a message and their exit code (2 for a
    usage error, 75 for a ledger that cannot be reached now, 1 for the rest). A command
    that only reads, or decides on what is recorded, passes ``create=False``: pointed at
    the wrong place it says so (exit 2) instead of creating an empty ledger there."""
    try:
        with oncelog.open(db, **options) as ledger:
            yield ledger
    except oncelog.LedgerNotFound as exc:
        click.echo(f"Error: {exc}; check --db or $ONCELOG_URL", err=True)
        raise click.exceptions.Exit(2) from exc
    except oncelog.UsageError as exc:
        raise click.UsageError(str(exc)) from exc
    except oncelog.OnceLogError as exc:
        # As click prints its own errors, with the error's exit code (75: try again later).
        click.echo(f"Error: {type(exc).__name__}: {exc}", err=True)
        raise click.exceptions.Exit(exc.exit_code) from exc


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
