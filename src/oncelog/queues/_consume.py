"""What every queue consumer does with one message: name its run, submit it, run it here,
and tell the broker what to do with the message.

A message is acknowledged only once its run has completed, now or before (a redelivered
duplicate, or a run completed and since pruned: it is not run again). A run that stopped
for a person, and a message that can never succeed (not JSON, input that another message
already gave the same run, the handler's own exception, a run that failed before it was
pruned), are parked: out of the queue, never redelivered into a loop. Anything that will
go through later (another live consumer holds the run, this one is draining, the ledger
cannot be used now) goes back to the queue.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import oncelog
from oncelog import (
    ConfigurationError,
    InvalidPayload,
    Ledger,
    NeedsPerson,
    OnceLogError,
    RunPruned,
    RunStatus,
    StoreError,
    TryLater,
    WaitingForPerson,
)

log = logging.getLogger("oncelog.queues")

# handler(run, input): a Run for a plain function, an AsyncRun for a coroutine function.
Handler = Callable[[Any, Any], Any]

# What prefixes a run id made from the body itself (the last resort).
BODY_HASH = "body-sha256:"


class Settle(enum.Enum):
    """What the broker is told about a message."""

    ACK = "acknowledged"  # its run completed, now or before
    PARK = "parked"  # a person must act, or it can never succeed: out of the queue
    RETRY = "queued again"  # it will go through later: redelivered


@dataclass(frozen=True)
class Outcome:
    settle: Settle
    run_id: str | None  # None: the message did not name a run
    reason: str

    def describe(self) -> str:
        return f"run {self.run_id or '(none)'} {self.settle.value}: {self.reason}"


class QueueConsumer:
    """The broker-independent half of a consumer: one message in, one ``Outcome`` out.

    ``run_id_field`` names a field of the JSON body that holds the run id; without it
    the message's own id is used (AMQP ``message_id``, JetStream ``Nats-Msg-Id``), and
    without that a hash of the body's JSON, which makes two different tasks with equal
    bodies one run. ``agent`` is the agent the runs are submitted for (their kill switch,
    their daily budget, the worker that finishes them after a person decided).
    ``concurrency`` messages are worked on at once, each in a thread; with more than one,
    coroutine-function handlers share one event loop (``handler_loop``, set by the
    broker's consumer) rather than each making its own."""

    def __init__(
        self,
        ledger: Ledger,
        handler: Handler,
        *,
        agent: str | None = None,
        run_id_field: str | None = None,
        retry_delay: float = 1.0,
        concurrency: int = 1,
    ) -> None:
        if not callable(handler):
            raise ConfigurationError(f"the handler must be callable, not {handler!r}")
        if retry_delay < 0:
            raise ConfigurationError("retry_delay cannot be negative")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(
                f"concurrency must be a whole number from 1, not {concurrency!r}"
            )
        self.ledger = ledger
        self.handler = handler
        self.agent = agent
        self.run_id_field = run_id_field
        self.retry_delay = retry_delay
        self.concurrency = concurrency
        self.handler_loop: asyncio.AbstractEventLoop | None = None

    def process(self, body: bytes, message_id: str | None) -> Outcome:
        """Run the message's run to its end here (or find it ended) and say how to settle
        the message. Never raises for what a message or its handler does."""
        if oncelog.draining():
            return Outcome(Settle.RETRY, None, "this consumer is draining")
        try:
            input = _decode(body)
            run_id = self.run_id_for(input, message_id)
        except OnceLogError as exc:
            return Outcome(Settle.PARK, None, f"{type(exc).__name__}: {exc}")
        try:
            return self._run(run_id, input)
        except (TryLater, StoreError) as exc:  # the ledger's trouble is not the message's
            return Outcome(Settle.RETRY, run_id, f"{type(exc).__name__}: {exc}")
        except (NeedsPerson, WaitingForPerson) as exc:
            return Outcome(Settle.PARK, run_id, f"waits for a person: {type(exc).__name__}: {exc}")
        except RunPruned as exc:  # ended before, and pruned: never run again
            done = Settle.ACK if exc.status == RunStatus.COMPLETED.value else Settle.PARK
            return Outcome(done, run_id, f"{exc.status} before it was pruned: {exc}")
        except OnceLogError as exc:
            return Outcome(Settle.PARK, run_id, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            log.warning("run %s: the handler raised", run_id, exc_info=True)
            return Outcome(Settle.PARK, run_id, f"the handler raised {type(exc).__name__}: {exc}")

    def run_id_for(self, input: Any, message_id: str | None) -> str:
        """The run a message is for: the declared field, else the message id, else a hash
        of the body's canonical JSON (key order and spacing do not count)."""
        if self.run_id_field is not None:
            value = input.get(self.run_id_field) if isinstance(input, dict) else None
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
                raise InvalidPayload(
                    f"the body has no run id in its field {self.run_id_field!r}: {value!r}"
                )
            return str(value)
        if message_id:
            return message_id
        digest = hashlib.sha256(oncelog.canonical_json(input, what="message body").encode())
        return BODY_HASH + digest.hexdigest()

    def _run(self, run_id: str, input: Any) -> Outcome:
        self.ledger.submit(run_id, input, agent=self.agent)
        record = self.ledger.get_run(run_id)
        if record.status is RunStatus.COMPLETED:
            return Outcome(Settle.ACK, run_id, "already completed (a duplicate)")
        if record.status in (RunStatus.HALTED, RunStatus.WAITING):
            reason = f"{record.status.value} for a person: {record.stopped_by}: {record.reason}"
            return Outcome(Settle.PARK, run_id, reason)
        self._call_handler(run_id, record.input)
        return Outcome(Settle.ACK, run_id, "completed")

    def _call_handler(self, run_id: str, input: Any) -> None:
        handler = self.handler
        if inspect.iscoroutinefunction(handler):

            async def run_async() -> None:
                async with self.ledger.run(run_id, create=False) as run:
                    await handler(run, input)

            if self.handler_loop is None:
                asyncio.run(run_async())
            else:  # this message's thread waits; the run awaits beside the others
                asyncio.run_coroutine_threadsafe(run_async(), self.handler_loop).result()
            return
        with self.ledger.run(run_id, create=False) as run:
            handler(run, input)


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError:
        raise InvalidPayload("the message body is nested too deeply to be decoded") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise InvalidPayload(f"the message body is not JSON: {exc}") from None
