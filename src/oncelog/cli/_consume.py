"""``oncelog consume rabbitmq|jetstream``: run each message of a queue as an oncelog run."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import click

import oncelog

from ._options import db_option, opened
from ._worker import _load

F = TypeVar("F", bound=Callable[..., Any])


class Consumer(Protocol):
    def run(self) -> int: ...


def consumer_options(fn: F) -> F:
    """What both brokers' commands take: the handler, how runs are named and retried."""
    decorators = (
        click.argument("target"),
        click.option("--agent", default=None, help="The agent the runs are submitted for."),
        click.option(
            "--run-id-field",
            default=None,
            metavar="FIELD",
            help="Take the run id from this field of the JSON body "
            "(default: the message id, else a hash of the body).",
        ),
        click.option(
            "--retry-delay",
            default=1.0,
            show_default=True,
            help="Seconds before a message whose run cannot go on now is delivered again.",
        ),
        click.option(
            "--concurrency",
            default=1,
            show_default=True,
            type=click.IntRange(min=1),
            help="Messages worked on at once, each its own run (async handlers share one loop).",
        ),
        click.option(
            "--lease-ttl",
            default=30.0,
            show_default=True,
            help="Seconds before another process takes over the runs of one that stopped.",
        ),
        db_option,
    )
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def _consume(
    target: str, db: str | None, lease_ttl: float, make: Callable[..., Consumer], **options: Any
) -> None:
    """Run ``make(ledger, handler, **options)`` until it drains; exit with its code."""
    handler = _load(target)
    logging.basicConfig(level=logging.INFO, format="oncelog consume: %(message)s")
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # the consumer says what matters
    with opened(db, lease_ttl=lease_ttl) as ledger:
        try:
            code = make(ledger, handler, **options).run()
        except oncelog.ConfigurationError as exc:
            raise click.UsageError(str(exc)) from exc
    sys.exit(code)


@click.group()
def consume() -> None:
    """Run each message of a queue as an oncelog run with the handler TARGET
    (MODULE:ATTRIBUTE, a function taking (run, input)), acknowledged only once the run
    completed. SIGTERM drains: the step in progress is recorded, the message goes back to
    the queue, exit 75."""


@consume.command()
@click.option("--url", default="amqp://localhost:5672/%2F", show_default=True, help="Broker URL.")
@click.option("--queue", required=True, help="The queue to consume (declared by its publisher).")
@click.option("--parked-queue", default=None, help="Where parked messages go [QUEUE.parked].")
@consumer_options
def rabbitmq(target: str, db: str | None, lease_ttl: float, **options: Any) -> None:
    """Consume a RabbitMQ queue (needs the rabbitmq extra: pip install '.[rabbitmq]')."""
    try:
        from ..queues.rabbitmq import RabbitMQConsumer
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    _consume(target, db, lease_ttl, RabbitMQConsumer, **options)


@consume.command()
@click.option("--url", default="nats://localhost:4222", show_default=True, help="Server URL.")
@click.option("--stream", required=True, help="The stream to consume (created by its publisher).")
@click.option("--durable", default="oncelog", show_default=True, help="The durable consumer.")
@click.option("--subject", default=None, help="Only messages on this subject of the stream.")
@click.option(
    "--ack-wait",
    default=30.0,
    show_default=True,
    help="Seconds JetStream waits for a sign of life before it redelivers a message.",
)
@consumer_options
def jetstream(target: str, db: str | None, lease_ttl: float, **options: Any) -> None:
    """Consume a NATS JetStream stream (needs the nats extra: pip install '.[nats]')."""
    try:
        from ..queues.jetstream import JetStreamConsumer
    except oncelog.ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    _consume(target, db, lease_ttl, JetStreamConsumer, **options)
