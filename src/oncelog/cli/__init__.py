"""The ``oncelog`` command: thin commands over the library API."""

from __future__ import annotations

import click

from ._approvals import approvals, approve, deny
from ._budgets import budgets
from ._demo import demo
from ._halts import halt, halts, resume
from ._runs import resolve, runs, show, unknown


@click.group()
@click.version_option(package_name="oncelog")
def cli() -> None:
    """Exactly-once side effects for AI agents: inspect runs, resolve effects in doubt."""


for command in (
    demo,
    runs,
    show,
    unknown,
    resolve,
    approvals,
    approve,
    deny,
    budgets,
    halt,
    resume,
    halts,
):
    cli.add_command(command)


def main() -> None:
    cli()
