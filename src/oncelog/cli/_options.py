"""Options shared by the commands."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

import oncelog

from ..display import printable

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


# Who decides, for every command that records a person's name: ``$ONCELOG_BY``, set once
# in the operator's shell as git takes ``user.name``, stands for ``--by``; the commands
# printed in this shell then leave ``--by NAME`` out (``print_next``).
BY_ENV = "ONCELOG_BY"

# The placeholders in the commands oncelog prints, and what to type instead. Pasted as
# printed, each would be recorded as a person's name, a reason or a provider's answer.
_PLACEHOLDERS = {
    "NAME": f"your own name (--by 'Ana Lima'), or set ${BY_ENV} once and leave --by out",
    "WHY": "why it is safe, in your words (--why 'provider shows no charge')",
    "TEXT": "why it is safe, in your words (--why 'provider shows no charge')",
    "WHAT IT RETURNED": "what the provider returned, as text",
}


def _not_a_placeholder(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``value``, unless it is a printed command's placeholder pasted unedited."""
    if value in _PLACEHOLDERS:
        raise click.BadParameter(
            f"{value!r} is the placeholder of the printed command: give {_PLACEHOLDERS[value]}",
            ctx=ctx, param=param,
        )  # fmt: skip
    return value


def by_option(what: str, *, required: bool = True) -> Callable[[F], F]:
    """``--by``: the person ``what`` (help text), from ``$ONCELOG_BY`` when not given."""
    return click.option(
        "--by", envvar=BY_ENV, required=required, callback=_not_a_placeholder,
        help=f"{what} (default: ${BY_ENV}).",
    )  # fmt: skip


def text_option(name: str, what: str, *, required: bool = True) -> Callable[[F], F]:
    """A free-text option (``--why``, ``--text``) that refuses its printed placeholder."""
    return click.option(name, required=required, callback=_not_a_placeholder, help=what)


def json_option(fn: F) -> F:
    decorated: F = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON instead of a table."
    )(fn)
    return decorated


@contextmanager
def opened(db: str | None, **options: Any) -> Iterator[oncelog.Ledger]:
    """Open the ledger; turn oncelog errors into a message and their exit code from the
    one table (``_exit_codes``): 2 a usage error, 5 not found, 6 a conflict, 75 a ledger
    that cannot be reached now, 1 the rest. These are answers about the ledger, not about
    the command line, so click's usage banner is not printed. A command that only reads,
    or decides on what is recorded, passes ``create=False``: pointed at the wrong place it
    says so (exit 2) instead of creating an empty ledger there."""
    try:
        with oncelog.open(db, **options) as ledger:
            yield ledger
    except oncelog.LedgerNotFound as exc:
        click.echo(f"Error: {exc}; {_where_to_look(db)}", err=True)
        raise click.exceptions.Exit(exc.exit_code) from exc
    except oncelog.OnceLogError as exc:
        click.echo(f"Error: {oncelog.explain(exc)}", err=True)
        raise click.exceptions.Exit(exc.exit_code) from exc


def _where_to_look(db: str | None) -> str:
    """What to do about a ledger not found: where the command looked, and how to point it
    at the one the agents write (a first ``oncelog console`` before any agent ran here)."""
    if db is not None:
        return "check --db or $ONCELOG_URL"
    return (
        f"with neither --db nor $ONCELOG_URL this command looks at {oncelog.DEFAULT_PATH} "
        f"under {os.getcwd()}, where an agent started in this directory without "
        "$ONCELOG_URL keeps its ledger: run an agent first, or point this command at the "
        "ledger your agents use with --db URL or ONCELOG_URL=URL"
    )


def given_json(text: str, option: str) -> Any:
    """An option's JSON text, decoded; a usage error (exit 2) saying why when it is not
    JSON or nests too deeply for Python to decode (a RecursionError, not a ValueError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter("nested too deeply to be decoded", param_hint=option) from None
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=option) from None


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def say(line: str) -> None:
    """Print one line that holds text from the ledger: what does not show is escaped
    (``display.printable``), so an id cannot forge a row or drive the terminal."""
    click.echo(printable(line))


def print_next(lines: list[str]) -> None:
    """What happens next for a run, after a decision (``next_for``)."""
    say(f"next: {lines[0]}")
    for command in lines[1:]:
        say(f"  {command}")


def next_for(ledger: oncelog.Ledger, run_id: str) -> list[str]:
    """``Ledger.what_next``, its commands ``filled`` for this shell."""
    return [filled(line) for line in ledger.what_next(run_id)]


def filled(command: str) -> str:
    """A printed command as this shell runs it: with ``$ONCELOG_BY`` set, ``--by NAME``
    left out, the CLI reading the name from there."""
    return command.replace(" --by NAME", "") if os.environ.get(BY_ENV) else command
