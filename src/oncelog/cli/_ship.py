"""``oncelog ship``: send the journal to a sink, out of the ledger's failure domain."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType

import click

import oncelog
from oncelog import ConfigurationError, Ledger
from oncelog.sinks import ADDRESSES, Shipper, SinkUnavailable, open_sink

from ._options import db_option, opened

EXIT_TRY_LATER = 75


@click.command()
@click.option("--to", "address", required=True, metavar="SINK", help=f"Where: {ADDRESSES}.")
@click.option("--state", "state_file", required=True, metavar="FILE",
              help="Where the position is kept between runs (one shipper per file).")  # fmt: skip
@click.option("--once", is_flag=True, help="Ship what is there, then exit (75: the sink is down).")
@click.option("--poll", default=0.5, show_default=True, help="Seconds between looks.")
@click.option("--batch", default=500, show_default=True, help="Lines per send, at most.")
@click.option("--max-backoff", default=30.0, show_default=True,
              help="Longest wait between tries while the sink is down, in seconds.")  # fmt: skip
@click.option("--settle", default=30.0, show_default=True,
              help="Seconds after which an id missing below shipped ones is taken as never "
              "committed (PostgreSQL).")  # fmt: skip
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="An HTTP header to send with each batch (repeat).")  # fmt: skip
@click.option("--metrics-port", type=int, default=None,
              help="Serve the shipper's Prometheus metrics on 127.0.0.1:PORT.")  # fmt: skip
@db_option
def ship(
    address: str, state_file: str, once: bool, poll: float, batch: int, max_backoff: float,
    settle: float, headers: tuple[str, ...], metrics_port: int | None, db: str | None,
) -> None:  # fmt: skip
    """Send journal records and checkpoints to a sink as they are written, at least once,
    until SIGTERM; a sink that is down is tried again with backoff. Started before the
    ledger exists, it waits for it (with --once it exits 2)."""
    try:
        sink = open_sink(address, headers=_headers(headers))
    except ConfigurationError as exc:
        raise click.BadParameter(exc.message, param_hint="--to") from exc
    if not once:
        _wait_for_ledger(db, poll)
    with opened(db, create=False) as ledger:
        shipper = Shipper(
            ledger, sink, state_file, poll=poll, batch=batch, settle=settle,
            max_backoff=max_backoff,
        )  # fmt: skip
        with shipper:
            if once:
                _ship_once(shipper)
                return
            if metrics_port is not None:
                _serve_metrics(ledger, shipper, metrics_port)
            _ship_until_stopped(shipper)


def _wait_for_ledger(db: str | None, poll: float) -> None:
    """A shipper beside the agents (a sidecar) may start before they create the ledger:
    it waits for it to appear, creating nothing. Any other error is ``opened``'s to say."""
    said = False
    while True:
        try:
            oncelog.open(db, create=False).close()
            return
        except oncelog.LedgerNotFound as exc:
            if not said:
                click.echo(f"waiting for the ledger: {exc}", err=True)
                said = True
            time.sleep(poll)
        except oncelog.OnceLogError:
            return


def _ship_once(shipper: Shipper) -> None:
    try:
        sent = shipper.ship_once()
    except SinkUnavailable as exc:
        click.echo(f"{exc.message} ({shipper.lag} behind)", err=True)
        sys.exit(EXIT_TRY_LATER)
    click.echo(f"shipped {sent} lines to {shipper.name}")


def _ship_until_stopped(shipper: Shipper) -> None:
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("oncelog ship: %(message)s"))
    logging.getLogger("oncelog.sinks").addHandler(handler)
    click.echo(f"shipping to {shipper.name}, from {shipper.state_file}", err=True)
    shipper.start()
    stopped.wait()
    shipper.stop()
    click.echo(f"stopped: {shipper.shipped} lines shipped", err=True)


def _serve_metrics(ledger: Ledger, shipper: Shipper, port: int) -> None:
    """The shipper's counters, and the ledger's state as ``oncelog metrics`` serves it."""
    try:
        from .. import metrics
    except ConfigurationError as exc:  # the extra is not installed
        raise click.ClickException(exc.message) from exc
    metrics.watch_shipper(shipper)
    metrics.serve(ledger, port=port)


def _headers(given: tuple[str, ...]) -> dict[str, str]:
    headers = {}
    for header in given:
        name, colon, value = header.partition(":")
        if not colon or not name.strip():
            raise click.BadParameter(f"{header!r}: use 'NAME: VALUE'", param_hint="--header")
        headers[name.strip()] = value.strip()
    return headers
