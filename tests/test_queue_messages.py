"""The broker-independent half of the queue consumers, in this process: which run a
message names, what each ending tells the broker, and the extras' absence."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

import oncelog
from oncelog.queues._consume import BODY_HASH, QueueConsumer, Settle
from oncelog.queues.jetstream import JetStreamConsumer
from oncelog.queues.rabbitmq import RabbitMQConsumer


@oncelog.tool(kind="create", name="queue_note")
def note(text: str, *, idempotency_key: str) -> str:
    return text


def handle(run: oncelog.Run, input: Any) -> None:
    run.effect("note", note, str(input))


def test_the_run_id_is_the_declared_field_else_the_message_id_else_a_body_hash(
    ledger: oncelog.Ledger,
) -> None:
    by_field = QueueConsumer(ledger, handle, run_id_field="ticket")
    assert by_field.run_id_for({"ticket": 4711}, "message-1") == "4711"
    for no_id in ({"ticket": ""}, {"ticket": None}, {"other": 1}, [1, 2]):
        with pytest.raises(oncelog.InvalidPayload, match="no run id in its field 'ticket'"):
            by_field.run_id_for(no_id, "message-1")
    plain = QueueConsumer(ledger, handle)
    assert plain.run_id_for({"a": 1}, "message-1") == "message-1"
    hashed = plain.run_id_for({"a": 1, "b": [2]}, None)
    assert hashed.startswith(BODY_HASH)
    assert plain.run_id_for({"b": [2], "a": 1}, "") == hashed, "key order does not count"
    assert plain.run_id_for({"a": 2, "b": [2]}, None) != hashed


def test_what_each_ending_tells_the_broker(ledger: oncelog.Ledger) -> None:
    consumer = QueueConsumer(ledger, handle, agent="support")
    first = consumer.process(b'{"n": 1}', "m1")
    assert (first.settle, first.run_id, first.reason) == (Settle.ACK, "m1", "completed")
    again = consumer.process(b'{"n": 1}', "m1")
    assert (again.settle, again.reason) == (Settle.ACK, "already completed (a duplicate)")
    other = consumer.process(b'{"n": 2}', "m1")
    assert (other.settle, other.reason.split(":")[0]) == (Settle.PARK, "InputMismatch")
    assert consumer.process(b"\xff", None).settle is Settle.PARK
    ledger.halt("incident", by="ops", agent="support", ahead=True)
    halted = consumer.process(b'{"n": 3}', "m2")
    assert (halted.settle, halted.reason.split(":")[1]) == (Settle.PARK, " RunHalted")
    assert consumer.process(b'{"n": 3}', "m2").reason.startswith("halted for a person")
    assert ledger.get_run("m2").status is oncelog.RunStatus.HALTED


def test_a_body_nested_too_deeply_to_decode_is_parked_not_raised(ledger: oncelog.Ledger) -> None:
    """Python's JSON decoder recurses per level: such a body raised a RecursionError."""
    deep = b"[" * 60_000 + b"]" * 60_000
    outcome = QueueConsumer(ledger, handle).process(deep, "m1")
    assert (outcome.settle, outcome.reason.split(":")[0]) == (Settle.PARK, "InvalidPayload")
    assert ledger.runs() == []


def test_an_async_handler_runs_too(ledger: oncelog.Ledger) -> None:
    async def awaiting(run: oncelog.AsyncRun, input: Any) -> None:
        await run.effect("note", note, str(input))

    outcome = QueueConsumer(ledger, awaiting).process(b'"hello"', "m1")
    assert outcome.settle is Settle.ACK
    assert [s.result for s in ledger.steps("m1")] == ["hello"]


@pytest.mark.parametrize(("module", "client"), [("rabbitmq", "pika"), ("jetstream", "nats")])
def test_a_missing_client_names_the_extra(
    module: str, client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, client, None)  # as if not installed
    monkeypatch.delitem(sys.modules, f"oncelog.queues.{module}", raising=False)
    extra = "rabbitmq" if module == "rabbitmq" else "nats"
    with pytest.raises(oncelog.ConfigurationError, match=rf"pip install .*\[{extra}\]"):
        importlib.import_module(f"oncelog.queues.{module}")


def test_bad_consumer_settings_are_configuration_errors(ledger: oncelog.Ledger) -> None:
    with pytest.raises(oncelog.ConfigurationError, match="not a RabbitMQ URL"):
        RabbitMQConsumer(ledger, handle, url="amqp://host:port/", queue="q")
    with pytest.raises(oncelog.ConfigurationError, match="needs a queue name"):
        RabbitMQConsumer(ledger, handle, url="amqp://host/", queue="")
    with pytest.raises(oncelog.ConfigurationError, match="ack_wait must be positive"):
        JetStreamConsumer(ledger, handle, url="nats://host", stream="S", ack_wait=0)
    with pytest.raises(oncelog.ConfigurationError, match="must be callable"):
        QueueConsumer(ledger, "handle")  # type: ignore[arg-type]
    with pytest.raises(oncelog.ConfigurationError, match="cannot be negative"):
        QueueConsumer(ledger, handle, retry_delay=-1)
    with pytest.raises(oncelog.ConfigurationError, match="concurrency must be a whole number"):
        RabbitMQConsumer(ledger, handle, url="amqp://host/", queue="q", concurrency=0)
