"""A RabbitMQ consumer that runs each message as an oncelog run (``pip install
'.[rabbitmq]'`` in oncelog's checkout)::

    from oncelog.queues.rabbitmq import RabbitMQConsumer

    RabbitMQConsumer(ledger, handle, url="amqp://localhost", queue="tickets").run()

One message at a time by default (prefetch 1), ``concurrency`` at once with a prefetch of as
many. Each handler runs in a thread of a pool while this one keeps the connection
serviced, so heartbeats flow through a run of any length; the handler's thread hands the
acknowledgement back with ``add_callback_threadsafe``. A completed run is
acknowledged; a parked message is published to the parked queue (``QUEUE.parked`` by
default, declared here) with the headers ``oncelog-run-id`` and ``oncelog-reason``, then
rejected without requeue; a message to try later is nacked with requeue after
``retry_delay`` seconds (at once when draining). The queue itself is declared by whoever
publishes to it.
"""

from __future__ import annotations

import copy
import logging
import threading
from functools import partial
from typing import NamedTuple

import oncelog
from oncelog import EXIT_TRY_LATER, ConfigurationError, Ledger

from ..display import install_line

try:
    import pika
    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
    from pika.exceptions import AMQPError, ChannelClosedByBroker, ConnectionWrongStateError
    from pika.spec import Basic, BasicProperties
except ImportError:
    raise ConfigurationError(
        f"the RabbitMQ consumer needs pika: {install_line('rabbitmq')}"
    ) from None


from ._consume import Handler, Outcome, QueueConsumer, Settle

log = logging.getLogger("oncelog.queues")

# Seconds between looks at the drain flag while the connection is serviced.
POLL = 0.25
NOT_FOUND = 404


class RabbitMQConsumer(QueueConsumer):
    """Consume ``queue`` until SIGTERM (or ``oncelog``'s drain), running each message's
    run with ``handler(run, input)``; see ``QueueConsumer`` for the run id and ``agent``."""

    def __init__(
        self,
        ledger: Ledger,
        handler: Handler,
        *,
        url: str,
        queue: str,
        parked_queue: str | None = None,
        agent: str | None = None,
        run_id_field: str | None = None,
        retry_delay: float = 1.0,
        concurrency: int = 1,
    ) -> None:
        super().__init__(
            ledger, handler, agent=agent, run_id_field=run_id_field,
            retry_delay=retry_delay, concurrency=concurrency,
        )  # fmt: skip
        if not queue:
            raise ConfigurationError("a RabbitMQ consumer needs a queue name")
        try:
            self.parameters = pika.URLParameters(url)
        except ValueError as exc:
            raise ConfigurationError(f"not a RabbitMQ URL: {exc}") from None
        self.queue = queue
        self.parked_queue = parked_queue or f"{queue}.parked"

    def run(self) -> int:
        """Consume until drained; return 75 (try later). Called from the main thread,
        SIGTERM drains: the run in progress stops after its current step, its message
        goes back to the queue unless the run completed, and nothing new is taken. A lost
        or unreachable broker is logged and drains too."""
        if threading.current_thread() is threading.main_thread():
            oncelog.handle_sigterm()
        try:
            connection = BlockingConnection(self.parameters)
        except AMQPError as exc:
            log.error("cannot reach RabbitMQ: %r", exc)
            return EXIT_TRY_LATER
        with oncelog.Fleet(self.concurrency) as fleet:
            if self.concurrency > 1:
                self.handler_loop = fleet.loop()
            session = _Session(self, connection, fleet)
            try:
                session.consume()
            except AMQPError as exc:
                oncelog.drain()
                fleet.close()  # the runs in progress reach their next step
                if isinstance(exc, ChannelClosedByBroker) and exc.reply_code == NOT_FOUND:
                    raise ConfigurationError(f"RabbitMQ: {exc.reply_text}") from None
                log.error("RabbitMQ connection lost (its messages are redelivered): %r", exc)
            finally:
                self.handler_loop = None
                if connection.is_open:
                    connection.close()
        return EXIT_TRY_LATER


class _Session:
    """One connection and the messages being worked on (at most ``concurrency``)."""

    def __init__(
        self, consumer: RabbitMQConsumer, connection: BlockingConnection, fleet: oncelog.Fleet
    ) -> None:
        self.consumer = consumer
        self.connection = connection
        self.fleet = fleet
        # Messages delivered and not settled yet; read and written on the connection's
        # thread only (a delivery and a settlement both run there).
        self.unsettled = 0

    def consume(self) -> None:
        channel = self.connection.channel()
        channel.queue_declare(self.consumer.parked_queue, durable=True)
        channel.confirm_delivery()  # a parked copy is on the broker before the reject
        # At most one message per slot: the broker sends the next once one is settled.
        channel.basic_qos(prefetch_count=self.consumer.concurrency)
        tag = channel.basic_consume(self.consumer.queue, self._on_message)
        while not oncelog.draining():
            self.connection.process_data_events(time_limit=POLL)
        channel.basic_cancel(tag)
        while self.unsettled:  # their settlements arrive through the connection
            self.connection.process_data_events(time_limit=POLL)

    def _on_message(
        self,
        channel: BlockingChannel,
        method: Basic.Deliver,
        properties: BasicProperties,
        body: bytes,
    ) -> None:
        assert method.delivery_tag is not None  # a delivery always has its tag
        message = _Message(channel, method.delivery_tag, properties, body)
        self.unsettled += 1
        self.fleet.start(partial(self._work, message))

    def _work(self, message: _Message) -> None:
        outcome = self.consumer.process(message.body, message.properties.message_id)
        if outcome.settle is Settle.RETRY:
            oncelog.wait_for_drain(self.consumer.retry_delay)  # not at once back into a busy loop
        try:
            self.connection.add_callback_threadsafe(partial(self._settle, message, outcome))
        except ConnectionWrongStateError:
            log.warning("%s; not settled: the connection is gone", outcome.describe())

    def _settle(self, message: _Message, outcome: Outcome) -> None:
        try:
            if outcome.settle is Settle.ACK:
                message.channel.basic_ack(message.tag)
            elif outcome.settle is Settle.RETRY:
                message.channel.basic_nack(message.tag, requeue=True)
            else:
                message.park(self.consumer.parked_queue, outcome)
            log.info(outcome.describe())
        finally:
            self.unsettled -= 1


class _Message(NamedTuple):
    channel: BlockingChannel
    tag: int
    properties: BasicProperties
    body: bytes

    def park(self, parked_queue: str, outcome: Outcome) -> None:
        """A copy to the parked queue, with the run and the reason; then the reject."""
        parked = copy.copy(self.properties)
        headers = dict(self.properties.headers or {})
        if outcome.run_id is not None:
            headers["oncelog-run-id"] = outcome.run_id
        headers["oncelog-reason"] = outcome.reason[:2000]
        parked.headers = headers
        parked.delivery_mode = pika.DeliveryMode.Persistent.value
        self.channel.basic_publish("", parked_queue, self.body, parked, mandatory=True)
        self.channel.basic_reject(self.tag, requeue=False)
