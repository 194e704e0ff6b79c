"""A RabbitMQ consumer that runs each message as an oncelog run (``pip install
'oncelog[rabbitmq]'``)::

    from oncelog.queues.rabbitmq import RabbitMQConsumer

    RabbitMQConsumer(ledger, handle, url="amqp://localhost", queue="tickets").run()

One message at a time (prefetch 1). Its handler runs in a thread while this one keeps the
connection serviced, so heartbeats flow through a run of any length; the handler's thread
hands the acknowledgement back with ``add_callback_threadsafe``. A completed run is
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

try:
    import pika
    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
    from pika.exceptions import AMQPError, ChannelClosedByBroker, ConnectionWrongStateError
    from pika.spec import Basic, BasicProperties
except ImportError:
    raise ConfigurationError(
        "the RabbitMQ consumer needs pika: pip install 'oncelog[rabbitmq]'"
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
    ) -> None:
        super().__init__(
            ledger, handler, agent=agent, run_id_field=run_id_field, retry_delay=retry_delay
        )
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
        session = _Session(self, connection)
        try:
            session.consume()
        except AMQPError as exc:
            oncelog.drain()
            session.wait_for_run()
            if isinstance(exc, ChannelClosedByBroker) and exc.reply_code == NOT_FOUND:
                raise ConfigurationError(f"RabbitMQ: {exc.reply_text}") from None
            log.error("RabbitMQ connection lost (its messages are redelivered): %r", exc)
        finally:
            if connection.is_open:
                connection.close()
        return EXIT_TRY_LATER


class _Session:
    """One connection and the message being worked on (at most one)."""

    def __init__(self, consumer: RabbitMQConsumer, connection: BlockingConnection) -> None:
        self.consumer = consumer
        self.connection = connection
        self.busy: threading.Thread | None = None

    def consume(self) -> None:
        channel = self.connection.channel()
        channel.queue_declare(self.consumer.parked_queue, durable=True)
        channel.confirm_delivery()  # a parked copy is on the broker before the reject
        channel.basic_qos(prefetch_count=1)
        tag = channel.basic_consume(self.consumer.queue, self._on_message)
        while not oncelog.draining():
            self.connection.process_data_events(time_limit=POLL)
        channel.basic_cancel(tag)
        while self.busy is not None:  # its settlement arrives through the connection
            self.connection.process_data_events(time_limit=POLL)

    def wait_for_run(self) -> None:
        """The connection is gone: let the run in progress reach its next step."""
        if self.busy is not None:
            self.busy.join()

    def _on_message(
        self,
        channel: BlockingChannel,
        method: Basic.Deliver,
        properties: BasicProperties,
        body: bytes,
    ) -> None:
        assert method.delivery_tag is not None  # a delivery always has its tag
        message = _Message(channel, method.delivery_tag, properties, body)
        self.busy = threading.Thread(target=self._work, args=(message,), name="oncelog-consume")
        self.busy.start()

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
            self.busy = None


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
