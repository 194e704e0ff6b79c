"""The ``oncelog`` command: thin commands over the library API."""

from __future__ import annotations

import click

from ._approvals import approvals, approve, deny
from ._budgets import budgets
from ._completion import completion
from ._console import console
from ._consume import consume
from ._crashtest import crashtest
from ._demo import demo
from ._evidence import export, keys, verify
from ._gateway import gateway
from ._halts import halt, halts, resume
from ._holds import holds, release
from ._mcp_proxy import mcp_proxy
from ._metrics import metrics
from ._prune import prune, retention
from ._retries import redrive, retry
from ._runs import resolve, runs, unknown
from ._ship import ship
from ._show import show
from ._worker import submit, worker


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
    retry,
    redrive,
    approvals,
    approve,
    deny,
    budgets,
    halt,
    resume,
    halts,
    holds,
    release,
    console,
    submit,
    worker,
    consume,
    metrics,
    keys,
    verify,
    export,
    prune,
    retention,
    ship,
    crashtest,
    completion,
    mcp_proxy,
    gateway,
):
    cli.add_command(command)


def main() -> None:
    # One name however it is started (the script, python -m oncelog), so messages and the
    # completion variable (_ONCELOG_COMPLETE) are the same.
    cli(prog_name="oncelog")
