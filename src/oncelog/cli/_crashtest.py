"""``oncelog crashtest -- COMMAND``: kill an agent at every effect boundary, restart it, and
say from its ledger whether any effect ran twice."""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from oncelog.testing import CRASH_POINTS

from ..showcases.crashtest import (
    Agent,
    NotTestable,
    Report,
    Settings,
    Table,
    Trials,
    boundaries,
    summary,
)
from ._options import emit, json_option

EXIT_PROBLEMS = 1


class CannotTest(click.ClickException):
    exit_code = 2


@click.command(context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True)
@click.option(
    "--point", "points", multiple=True, type=click.Choice(CRASH_POINTS),
    help="Only this crash point (repeatable; default: all five).",
)  # fmt: skip
@click.option(
    "--idempotent", "idempotent", multiple=True, metavar="TOOL",
    help="A tool whose re-run after a crash you checked is harmless (repeatable).",
)  # fmt: skip
@click.option(
    "--max-restarts", default=5, show_default=True, type=click.IntRange(min=1),
    help="Restarts after the kill before giving up.",
)  # fmt: skip
@click.option(
    "--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
    help="Seconds one process of the agent may take.",
)  # fmt: skip
@click.option(
    "--keep", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
    help="Keep each trial's ledger and output in DIR (new or empty).",
)  # fmt: skip
@click.option(
    "--reset", "reset", default=None, metavar="CMD",
    help="A shell command run before each trial, to put the agent's services back.",
)  # fmt: skip
@click.option(
    "--approve", "approver", default=None, metavar="NAME",
    help="Grant the agent's approvals in NAME's name, journalled as crashtest's.",
)  # fmt: skip
@click.option(
    "--count", "count", default=None, metavar="CMD",
    help="A shell command printing how many effects the provider performed (a number, or "
    "JSON per tool): count at the provider, not from the ledger.",
)  # fmt: skip
@json_option
@click.pass_context
def crashtest(
    ctx: click.Context,
    command: tuple[str, ...],
    points: tuple[str, ...],
    idempotent: tuple[str, ...],
    max_restarts: int,
    timeout: float,
    keep: Path | None,
    reset: str | None,
    approver: str | None,
    count: str | None,
    as_json: bool,
) -> None:
    """Kill COMMAND with SIGKILL at every effect boundary, restart it with the same run id
    ($ONCELOG_RUN_ID, or {run_id} in its arguments) and its own ledger ($ONCELOG_URL) until
    it completes, halts or waits, and report what its ledger shows. --reset runs a shell
    command before each trial (the first, clean run too); --count another, before and
    after each, whose difference is what the provider performed in the trial. Exit 0 when
    nothing ran twice and no mistake was seen, 1 otherwise, 2 when the agent cannot be
    tested."""
    points = tuple(point for point in CRASH_POINTS if point in points) or CRASH_POINTS
    say = (lambda line: None) if as_json else click.echo
    say(f"oncelog crashtest: {shlex.join(command)}")
    with _workdir(keep) as workdir:
        trials = Trials(
            Agent(command, timeout, reset, count),
            workdir,
            Settings(max_restarts, frozenset(idempotent), approver),
        )
        try:
            effects = trials.learn()
            table = Table(effects, points)
            say(table.header())
            results = []
            for number, boundary in enumerate(boundaries(effects, points), 1):
                results.append(trials.run(number, boundary))
                say(table.row(results[-1]))
        except NotTestable as exc:
            raise CannotTest(str(exc)) from exc
        report = Report(command, tuple(effects), tuple(results), keep, approver, count)
    if as_json:
        emit(report.to_json())
    else:
        click.echo(summary(report))
    ctx.exit(0 if report.passed else EXIT_PROBLEMS)


@contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="oncelog-crashtest-") as scratch:
            yield Path(scratch)
        return
    if keep.exists() and any(keep.iterdir()):
        raise click.UsageError(f"--keep {keep}: the folder must be new or empty")
    keep.mkdir(parents=True, exist_ok=True)
    yield keep
