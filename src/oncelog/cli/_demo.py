"""``oncelog demo``: a support agent killed at step 12 of 20, without and with oncelog."""

from __future__ import annotations

import shlex
import tempfile
from importlib.util import find_spec
from pathlib import Path

import click

from ..display import install_line
from ..showcases.demo import DemoFailed, oncelog_here

# What the demo runs: the Stripe client, localstripe's command, aiosmtpd's command.
NEEDS = ("stripe", "localstripe", "aiosmtpd")


def _out_dir(out: Path | None) -> Path:
    if out is None:
        return Path(tempfile.mkdtemp(prefix="oncelog-demo-"))
    if out.exists() and any(out.iterdir()):
        raise click.UsageError(f"{out} is not empty; give a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


@click.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A new or empty directory for the services' records, logs and the ledger "
    "(default: a new temporary directory).",
)
@click.option(
    "--no-mail-probe",
    is_flag=True,
    help="Leave the email in doubt to a person, even where Dovecot could serve the mail "
    "server's store to the mail probe.",
)
def demo(out: Path | None, no_mail_probe: bool) -> None:
    """Kill a support agent at step 12 of 20, right after it emailed the customer, and
    restart it: without a ledger, then with oncelog. Count what the services recorded.
    The email in doubt is settled by the mail probe where Dovecot is installed, else by
    a person."""
    missing = [name for name in NEEDS if find_spec(name) is None]
    if missing:
        raise click.ClickException(f"the demo needs {', '.join(missing)}: {install_line('demo')}")
    from ..showcases.demo.runner import run_demo  # imports the Stripe client
    from ..showcases.demo.services import unwound_by_sigterm

    folder = _out_dir(out)
    try:
        with unwound_by_sigterm():
            run_demo(folder, click.echo, mail_probe=not no_mail_probe)
    except DemoFailed as exc:
        raise click.ClickException(
            f"{exc.message}\n(everything the demo left is in {folder})"
        ) from exc
    click.echo(f"\nEverything the demo left is in {folder}")
    ledger = shlex.quote(str(folder / "oncelog" / "ledger.db"))
    click.echo(f"  {oncelog_here()} show conv-4711 --db {ledger}")
