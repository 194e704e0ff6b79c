"""Retention: ``oncelog prune`` archives completed runs to a new file and removes them;
``oncelog retention`` shows and sets the policy it uses when given no window."""

from __future__ import annotations

import re
import sys

import click

from ._options import db_option, emit, json_option, opened, say

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def duration(text: str) -> float:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w`` or a number of seconds."""
    found = _DURATION.match(text)
    if found is None:
        raise click.BadParameter(f"{text!r} is not a length of time such as 90d, 12h or 3600")
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def _agent_window(text: str) -> tuple[str, float]:
    agent, equals, window = text.rpartition("=")
    if not equals or not agent:
        raise click.BadParameter(f"{text!r} is not AGENT=WINDOW, such as billing=30d")
    return agent, duration(window)


@click.command()
@click.option(
    "--to",
    "archive",
    default=None,
    metavar="FILE",
    help="The archive to write (a new file); an earlier prune's, to finish it.",
)
@click.option(
    "--older-than",
    default=None,
    metavar="WINDOW",
    help="Remove runs that ended longer ago than this (90d, 12h, seconds); "
    "default: the retention policy (oncelog retention).",
)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="AGENT=WINDOW",
    help="This agent's runs are kept this long instead (repeat).",
)
@click.option("--limit", default=10_000, show_default=True, help="At most this many runs.")
@click.option("--batch", default=100, show_default=True, help="Runs removed per transaction.")
@click.option("--dry-run", is_flag=True, help="List the runs it would remove; write nothing.")
@click.option(
    "--forget",
    default=None,
    metavar="RUN",
    help="Let this pruned run's id start a new run again (needs --by; no --to).",
)
@click.option("--by", default=None, help="Who decides to forget it.")
@db_option
@json_option
def prune(
    archive: str | None, older_than: str | None, agents: tuple[str, ...], limit: int,
    batch: int, dry_run: bool, forget: str | None, by: str | None, db: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Archive completed runs past their window to FILE (--to), then remove them from the
    ledger; or, with --forget RUN, let a pruned run's id be run again."""
    if forget is not None:
        if archive is not None or older_than is not None or agents or dry_run or not by:
            click.echo("Error: --forget RUN takes --by NAME, and no window, --to or --dry-run",
                       err=True)  # fmt: skip
            sys.exit(2)
        _forget(forget, by, db, as_json)
        return
    if archive is None:
        click.echo("Error: give --to FILE (or --forget RUN --by NAME)", err=True)
        sys.exit(2)
    try:
        window = None if older_than is None else duration(older_than)
        windows = dict(_agent_window(text) for text in agents)
    except click.BadParameter as exc:
        click.echo(f"Error: {exc.message}", err=True)
        sys.exit(2)
    if dry_run:
        with opened(db, create=False) as ledger:
            due = ledger.prunable(older_than=window, agents=windows, limit=limit)
        if as_json:
            emit({"due": due})
        for run_id in [] if as_json else due:
            say(run_id)
        return
    with opened(db, create=False) as ledger:
        report = ledger.prune(archive, older_than=window, agents=windows, limit=limit, batch=batch)
    if as_json:
        emit({
            "archive": report.archive, "resumed": report.resumed, "archived": report.archived,
            "removed": [run.run_id for run in report.removed], "records": report.records,
            "gone": report.gone, "kept": report.kept, "anchors": report.anchors,
        })  # fmt: skip
        return
    if report.archive is None:
        click.echo("no run is due: nothing archived, nothing removed")
        return
    how = "finished the prune of" if report.resumed else "archived"
    say(f"{how} {report.archived} runs in {report.archive}")
    click.echo(
        f"removed {len(report.removed)} runs ({report.records} journal records), anchored at "
        f"journal record {', '.join(map(str, report.anchors)) or '-'}"
    )
    if report.gone:
        click.echo(f"{len(report.gone)} archived runs were gone already")
    for run_id in report.kept:
        say(f"kept {run_id}: it changed since it was archived, or may no longer go")


def _forget(run_id: str, by: str, db: str | None, as_json: bool) -> None:
    with opened(db, create=False) as ledger:
        was = ledger.forget_pruned(run_id, by=by)
    if as_json:
        emit({"forgotten": run_id, "status": was.status, "archive": was.archive,
              "pruned_at": was.pruned_at, "anchor": was.anchor})  # fmt: skip
        return
    say(f"forgot pruned run {run_id} ({was.status}, archived in {was.archive}): "
        "the id starts a new run, whose effects run again")  # fmt: skip


@click.command()
@click.option("--set", "window", default=None, metavar="WINDOW",
              help="Keep runs this long after they end (90d, 12h, seconds).")  # fmt: skip
@click.option("--clear", is_flag=True, help="Remove the window.")
@click.option("--agent", default=None, help="The window of this agent's runs, not the ledger's.")
@click.option("--by", default=None, help="Who decides (needed to set or clear).")
@db_option
@json_option
def retention(
    window: str | None, clear: bool, agent: str | None, by: str | None, db: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Show or set the retention policy `oncelog prune` uses when given no window."""
    if window is not None or clear:
        if (window is not None) == clear or not by:
            click.echo("Error: give --set WINDOW or --clear, and --by NAME", err=True)
            sys.exit(2)
        try:
            keep = None if clear else duration(window or "")
        except click.BadParameter as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(2)
        with opened(db, create=False) as ledger:
            ledger.set_retention(keep, by=by, agent=agent)
    with opened(db, create=False) as ledger:
        policy = ledger.retention()
    if as_json:
        emit({"ledger": policy.pop("", None), "agents": policy})
        return
    if not policy:
        click.echo("no retention policy: oncelog prune needs a window")
    for name, keep in sorted(policy.items()):
        say(f"{'ledger' if name == '' else 'agent ' + name}: runs kept {keep / 86400:g} days "
            f"({keep:g} s) after they end")  # fmt: skip
