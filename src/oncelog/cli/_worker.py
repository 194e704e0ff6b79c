"""Submitting runs and working them off: ``oncelog submit`` and ``oncelog worker``."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

import oncelog

from ._options import db_option, given_json, opened


def _load(target: str) -> Any:
    """``module:attribute``, imported as the user's own code (the current directory first)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r}: use MODULE:ATTRIBUTE, e.g. myagents:handle")
    sys.path.insert(0, str(Path.cwd()))
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"{target!r}: {exc}") from exc
    return found


@click.command()
@click.argument("run_id")
@click.option("--agent", default=None, help="The agent whose handler runs it.")
@click.option("--input", "input_text", default="null", metavar="JSON", help="The handler's input.")
@db_option
def submit(run_id: str, agent: str | None, input_text: str, db: str | None) -> None:
    """Queue a run for workers; the same submission twice queues it once."""
    given = given_json(input_text, "--input")
    with opened(db) as ledger:
        new = ledger.submit(run_id, given, agent=agent)
    click.echo(f"{run_id}: {'queued' if new else 'already submitted'}")


@click.command()
@click.argument("target")
@click.option(
    "--agent",
    "agents",
    multiple=True,
    help="Only runs of this agent (repeat); with a single handler, default: any run.",
)
@click.option("--poll", default=1.0, show_default=True, help="Seconds between looks when idle.")
@click.option("--until-idle", is_flag=True, help="Exit 0 when no run is left to claim.")
@click.option(
    "--lease-ttl",
    default=30.0,
    show_default=True,
    help="Seconds another worker waits before taking over the runs of one that stopped.",
)
@click.option(
    "--concurrency",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs at once in this process (async handlers on one event loop, others in threads).",
)
@db_option
def worker(
    target: str,
    agents: tuple[str, ...],
    poll: float,
    until_idle: bool,
    lease_ttl: float,
    concurrency: int,
    db: str | None,
) -> None:
    """Claim and run submitted runs with the handler TARGET (MODULE:ATTRIBUTE, a function
    taking (run, input) or a mapping from agent name to such functions). SIGTERM drains:
    the steps in progress are recorded, nothing new starts, the runs are queued again,
    exit 75."""
    handlers = _load(target)
    if agents:
        if isinstance(handlers, Mapping):
            handlers = {name: handlers[name] for name in agents if name in handlers}
        else:
            handlers = dict.fromkeys(agents, handlers)
    logging.basicConfig(level=logging.INFO, format="oncelog worker: %(message)s")
    with opened(db, lease_ttl=lease_ttl) as ledger:
        try:
            working = oncelog.Worker(ledger, handlers, poll=poll, concurrency=concurrency)
            code = working.run(until_idle=until_idle)
        except oncelog.ConfigurationError as exc:
            raise click.UsageError(str(exc)) from exc
    sys.exit(code)
