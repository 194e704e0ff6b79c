"""A NATS JetStream consumer that runs each message as an oncelog run (``pip install
'.[nats]'`` in oncelog's checkout)::

    from oncelog.queues.jetstream import JetStreamConsumer

    JetStreamConsumer(ledger, handle, url="nats://localhost:4222", stream="TICKETS").run()

It creates (or reuses) the durable pull consumer ``durable`` on ``stream`` with explicit
acks and ``ack_wait``, and fetches one message at a time (up to ``concurrency`` at once,
fetching as many as it has room for; coroutine-function handlers then run on this
consumer's own event loop). Each handler runs in a thread;
every third of ``ack_wait`` the message is marked in progress, so JetStream does not
redeliver it during a long run, and does redeliver it within ``ack_wait`` of this process
dying. A completed run is acknowledged (and the acknowledgement confirmed by the server);
a parked message is terminated (``term``: never redelivered); a message to try later is
nak'ed with a redelivery delay of ``retry_delay`` seconds (none when draining). The stream
itself is created by whoever publishes to it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import oncelog
from oncelog import EXIT_TRY_LATER, ConfigurationError, Ledger

from ..display import install_line

try:
    import nats
    from nats.aio.msg import Msg
    from nats.errors import Error as NatsError
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js import JetStreamContext
    from nats.js.api import AckPolicy, ConsumerConfig
    from nats.js.errors import NotFoundError
except ImportError:
    raise ConfigurationError(
        f"the JetStream consumer needs nats-py: {install_line('nats')}"
    ) from None

from ._consume import Handler, Outcome, QueueConsumer, Settle

log = logging.getLogger("oncelog.queues")

# Seconds a fetch waits for a message before the drain flag is looked at again.
POLL = 1.0
# Tries to reach the server again (two seconds apart) before the consumer drains and
# exits 75, at start and after a lost connection.
RECONNECTS = 3


class JetStreamConsumer(QueueConsumer):
    """Consume ``stream`` (only ``subject`` in it, if given) through the durable consumer
    ``durable`` until SIGTERM (or ``oncelog``'s drain), running each message's run with
    ``handler(run, input)``; see ``QueueConsumer`` for the run id and ``agent``."""

    def __init__(
        self,
        ledger: Ledger,
        handler: Handler,
        *,
        url: str,
        stream: str,
        durable: str = "oncelog",
        subject: str | None = None,
        ack_wait: float = 30.0,
        agent: str | None = None,
        run_id_field: str | None = None,
        retry_delay: float = 1.0,
        concurrency: int = 1,
    ) -> None:
        super().__init__(
            ledger, handler, agent=agent, run_id_field=run_id_field,
            retry_delay=retry_delay, concurrency=concurrency,
        )  # fmt: skip
        if not stream or not durable:
            raise ConfigurationError("a JetStream consumer needs a stream and a durable name")
        if ack_wait <= 0:
            raise ConfigurationError("ack_wait must be positive")
        self.url = url
        self.stream = stream
        self.durable = durable
        self.subject = subject
        self.ack_wait = ack_wait

    def run(self) -> int:
        """Consume until drained; return 75 (try later). Called from the main thread,
        SIGTERM drains: the run in progress stops after its current step, its message is
        nak'ed for redelivery unless the run completed, and nothing new is fetched. A server
        that cannot be reached (again, after a lost connection) in ``RECONNECTS`` tries
        is logged and drains too."""
        if threading.current_thread() is threading.main_thread():
            oncelog.handle_sigterm()
        return asyncio.run(self._consume())

    async def _consume(self) -> int:
        try:
            client = await nats.connect(
                self.url, max_reconnect_attempts=RECONNECTS, error_cb=_log_error
            )
        except (OSError, NatsError) as exc:
            log.error("cannot reach NATS: %r", exc)
            return EXIT_TRY_LATER
        if self.concurrency > 1:
            self.handler_loop = asyncio.get_running_loop()
        # The messages' own threads: apart from the loop's default pool, which an async
        # handler's store calls need while its message's thread waits for it.
        threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="oncelog-consume")
        working: set[asyncio.Future[None]] = set()
        try:
            subscription = await self._subscribe(client.jetstream())
            while not oncelog.draining():
                working = await _reaped(working, wait=len(working) >= self.concurrency)
                if len(working) >= self.concurrency:
                    continue
                try:
                    messages = await subscription.fetch(
                        self.concurrency - len(working), timeout=POLL
                    )
                except NatsTimeout:
                    continue
                working |= {asyncio.ensure_future(self._handle(m, threads)) for m in messages}
            while working:  # draining: each run stops at its next step and is settled
                working = await _reaped(working, wait=True)
        except NotFoundError as exc:
            raise ConfigurationError(f"JetStream: {exc.description}") from None
        except NatsError as exc:
            log.error("NATS connection lost (its messages are redelivered): %r", exc)
        finally:
            if working:  # their messages cannot be kept: stop their runs at the next step
                oncelog.drain()
                await asyncio.wait(working)
            self.handler_loop = None
            threads.shutdown()
            await client.close()
        return EXIT_TRY_LATER

    async def _subscribe(self, js: JetStreamContext) -> JetStreamContext.PullSubscription:
        config = ConsumerConfig(
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            filter_subject=self.subject,
        )
        await js.add_consumer(self.stream, config)
        return await js.pull_subscribe_bind(durable=self.durable, stream=self.stream)

    async def _handle(self, message: Msg, threads: ThreadPoolExecutor) -> None:
        message_id = (message.headers or {}).get("Nats-Msg-Id")
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(threads, self.process, message.data, message_id)
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=self.ack_wait / 3)
                if not work.done():
                    await message.in_progress()
        except BaseException:
            oncelog.drain()  # the message cannot be kept: stop its run at the next step
            await work
            raise
        await self._settle(message, work.result())

    async def _settle(self, message: Msg, outcome: Outcome) -> None:
        where = f"stream sequence {message.metadata.sequence.stream}"
        try:
            if outcome.settle is Settle.ACK:
                await message.ack_sync()
            elif outcome.settle is Settle.RETRY:
                await message.nak(delay=None if oncelog.draining() else self.retry_delay)
            else:
                await message.term()
        except NatsError as exc:
            # Unsettled, it is redelivered after ack_wait: acknowledged then if its run
            # completed, run or parked again otherwise.
            log.warning("%s (%s); not settled: %r", outcome.describe(), where, exc)
            return
        log.info("%s (%s)", outcome.describe(), where)


async def _reaped(working: set[asyncio.Future[None]], *, wait: bool) -> set[asyncio.Future[None]]:
    """The messages of ``working`` still being worked on, after waiting up to ``POLL`` for
    one to end if ``wait``; an error of one that ended (its settlement's) is raised here."""
    if wait and working:
        await asyncio.wait(working, timeout=POLL, return_when=asyncio.FIRST_COMPLETED)
    for ended in [w for w in working if w.done()]:
        ended.result()
    return {w for w in working if not w.done()}


async def _log_error(exc: Exception) -> None:
    log.warning("NATS: %r", exc)
