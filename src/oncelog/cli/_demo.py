"""``oncelog demo``: an agent killed right after sending an email, with and without oncelog."""

from __future__ import annotations

from pathlib import Path

import click

from .._demo.runner import run_demo


@click.command()
@click.option(
    "--dir",
    "folder",
    default="oncelog-demo",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the demo keeps its ledger and the provider's outbox (wiped first).",
)
def demo(folder: Path) -> None:
    """Kill a support agent with SIGKILL after it emails a customer; restart it; count emails."""
    counts = run_demo(folder, click.echo)
    click.echo("\n== emails per ticket, as the email provider recorded them")
    for ticket, count in counts.items():
        verdict = "duplicate!" if count > 1 else "once"
        click.echo(f"  {ticket}: {count}  {verdict}")
    click.echo(
        f"\nledger: {folder / 'ledger.db'}  (try: oncelog show ticket-3 "
        f"--db {folder / 'ledger.db'})"
    )
    if counts.get("ticket-2") != 1 or counts.get("ticket-3") != 1:
        raise click.ClickException("oncelog let an email go out twice; please report this")
