"""``oncelog metrics``: a Prometheus endpoint for what the ledger holds."""

from __future__ import annotations

import threading

import click

from oncelog import ConfigurationError

from ._options import db_option, opened


@click.command()
@click.option("--port", default=9464, show_default=True, help="Port of the /metrics endpoint.")
@click.option("--addr", default="127.0.0.1", show_default=True, help="Address to bind.")
@db_option
def metrics(port: int, addr: str, db: str | None) -> None:
    """Serve Prometheus metrics of the ledger (effects in doubt, active halts, pending
    approvals) at http://ADDR:PORT/metrics until interrupted."""
    try:
        from .. import metrics as prometheus
    except ConfigurationError as exc:  # the extra is not installed
        raise click.ClickException(exc.message) from exc
    with opened(db, create=False) as ledger:
        prometheus.serve(ledger, port=port, addr=addr)
        click.echo(f"serving http://{addr}:{port}/metrics", err=True)
        threading.Event().wait()
