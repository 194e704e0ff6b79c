"""``oncelog consume rabbitmq`` against the RabbitMQ server on this machine: a consumer
SIGKILLed inside an effect is replaced and the redelivered message resumes the same run;
a duplicate is one run; poison and halted runs are parked once, never redelivered.

Each test has its own queue (and ``QUEUE.parked``), deleted afterwards. "Nothing unacked"
is read once every consumer has exited: RabbitMQ puts a message a consumer held unacked
back into the queue when its connection closes, so an empty queue then means each message
was acknowledged or parked.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

import oncelog

from .conftest import require
from .support.consumers import Consumers
from .support.operator_commands import oncelog_cli

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def rabbitmq_is_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Queue:
    channel: BlockingChannel
    name: str

    def publish(self, body: Any, message_id: str | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        properties = pika.BasicProperties(message_id=message_id, delivery_mode=2)
        self.channel.basic_publish("", self.name, data, properties)

    def ready(self, name: str | None = None) -> int:
        """Messages waiting in the queue (or in ``name``), not those held by a consumer."""
        declared = self.channel.queue_declare(name or self.name, passive=True)
        count: int = declared.method.message_count
        return count

    def take_parked(self) -> list[tuple[dict[str, Any], bytes]]:
        """Every parked message's headers and body (taken off the parked queue)."""
        taken: list[tuple[dict[str, Any], bytes]] = []
        while True:
            method, properties, body = self.channel.basic_get(f"{self.name}.parked", True)
            if method is None or properties is None or body is None:
                return taken
            taken.append((dict(properties.headers or {}), body))


@pytest.fixture
def queue() -> Iterator[Queue]:
    require(rabbitmq_is_up(), "RabbitMQ is not running on 127.0.0.1:5672")
    name = f"oncelog-test-{uuid.uuid4().hex[:10]}"
    connection = pika.BlockingConnection(pika.URLParameters(URL))
    channel = connection.channel()
    channel.queue_declare(name, durable=True)
    try:
        yield Queue(channel, name)
    finally:
        channel.queue_delete(name)
        channel.queue_delete(f"{name}.parked")
        connection.close()


@pytest.fixture
def consumers(queue: Queue, db_path: str, tmp_path: Path) -> Iterator[Consumers]:
    started = Consumers(db_path, tmp_path, ["rabbitmq", "--url", URL, "--queue", queue.name])
    yield started
    started.close()


def test_a_killed_consumers_message_resumes_its_run_in_another(
    queue: Queue, consumers: Consumers
) -> None:
    queue.publish({"effects": 3, "seconds": 0.5, "kind": "upsert"}, message_id="task-1")
    first = consumers.start()
    assert consumers.wait_entered("task-1-s1") == first.pid
    consumers.kill(first)  # inside the provider call of the second effect
    second = consumers.start()
    consumers.wait_log(second, "run task-1 acknowledged")
    assert consumers.stop(second) == oncelog.EXIT_TRY_LATER
    performed = consumers.performed()
    assert performed == {"task-1-s0": first.pid, "task-1-s1": second.pid, "task-1-s2": second.pid}
    assert sorted(consumers.requests()) == sorted(set(consumers.requests())), "asked once each"
    assert "acknowledged" not in consumers.log(first)
    assert consumers.log(second).count("acknowledged") == 1
    assert (queue.ready(), queue.ready(f"{queue.name}.parked")) == (0, 0)
    with oncelog.open(consumers.db_path) as ledger:
        assert ledger.get_run("task-1").status is oncelog.RunStatus.COMPLETED
        assert [s.attempts for s in ledger.steps("task-1")] == [1, 2, 1]


def test_sigterm_puts_the_message_back_after_the_step_in_progress(
    queue: Queue, consumers: Consumers
) -> None:
    queue.publish({"effects": 3, "seconds": 0.5}, message_id="task-2")
    first = consumers.start()
    assert consumers.wait_entered("task-2-s0") == first.pid
    assert consumers.stop(first) == oncelog.EXIT_TRY_LATER  # inside the first effect
    assert "run task-2 queued again: Draining" in consumers.log(first)
    assert queue.ready() == 1
    with oncelog.open(consumers.db_path) as ledger:
        record = ledger.get_run("task-2")
        assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
        assert [s.state for s in ledger.steps("task-2")] == [oncelog.StepState.DONE]
    second = consumers.start()
    consumers.wait_log(second, "run task-2 acknowledged")
    consumers.stop(second)
    assert consumers.performed() == {
        "task-2-s0": first.pid, "task-2-s1": second.pid, "task-2-s2": second.pid,
    }  # fmt: skip
    assert queue.ready() == 0


def test_the_same_message_twice_is_one_run_and_both_are_acknowledged(
    queue: Queue, consumers: Consumers
) -> None:
    """Heartbeats every second: a run of three seconds keeps its connection only because
    the connection is serviced while the handler works."""
    for _ in range(2):
        queue.publish({"effects": 2, "seconds": 1.5}, message_id="task-3")
    consumer = consumers.start("--url", f"{URL}?heartbeat=1")
    consumers.wait_log(consumer, "run task-3 acknowledged", count=2)
    assert consumers.stop(consumer) == oncelog.EXIT_TRY_LATER
    log = consumers.log(consumer)
    assert "acknowledged: completed" in log
    assert "acknowledged: already completed (a duplicate)" in log
    assert consumers.handled() == ["task-3"]
    assert len(consumers.performed()) == 2
    assert queue.ready() == 0


def test_poison_messages_are_parked_once(queue: Queue, consumers: Consumers) -> None:
    queue.publish({"poison": True}, message_id="bad-handler")
    queue.publish(b"not json", message_id="bad-body")
    queue.publish({"effects": 1}, message_id="twice")
    queue.publish({"effects": 2}, message_id="twice")  # another task under the same id
    consumer = consumers.start()
    consumers.wait_log(consumer, "parked", count=3)
    consumers.wait_log(consumer, "acknowledged")
    assert consumers.stop(consumer) == oncelog.EXIT_TRY_LATER
    assert consumers.handled() == ["bad-handler", "twice"], "each reached the handler once"
    assert queue.ready() == 0
    parked = {headers.get("oncelog-run-id"): headers["oncelog-reason"] for headers, _ in
              queue.take_parked()}  # fmt: skip
    assert set(parked) == {"bad-handler", None, "twice"}
    assert "ValueError: this handler cannot handle a poison message" in parked["bad-handler"]
    assert "not JSON" in parked[None]
    assert "InputMismatch" in parked["twice"]


def test_a_run_in_doubt_is_parked_and_a_worker_finishes_it_after_a_person(
    queue: Queue, consumers: Consumers
) -> None:
    """SIGKILL inside a ``create`` call: the redelivered message finds the effect in doubt,
    so its run halts for a person and the message is parked, not redelivered; the person's
    decision queues the run in the ledger, and ``oncelog worker`` finishes it."""
    queue.publish({"effects": 2, "seconds": 0.5}, message_id="task-4")
    first = consumers.start()
    consumers.wait_entered("task-4-s0")
    consumers.kill(first)
    second = consumers.start()
    consumers.wait_log(second, "run task-4 parked")
    assert consumers.stop(second) == oncelog.EXIT_TRY_LATER
    ((headers, body),) = queue.take_parked()
    assert headers["oncelog-run-id"] == "task-4"
    assert "AmbiguousOutcome" in headers["oncelog-reason"]
    assert json.loads(body) == {"effects": 2, "seconds": 0.5}
    assert queue.ready() == 0
    assert consumers.performed() == {}
    oncelog_cli(consumers.db_path, "resolve", "task-4", "s0", "not_done", "--by", "alice")
    consumers.run_worker()
    assert sorted(consumers.performed()) == ["task-4-s0", "task-4-s1"]
    with oncelog.open(consumers.db_path) as ledger:
        assert ledger.get_run("task-4").status is oncelog.RunStatus.COMPLETED


def test_a_consumer_with_concurrency_drains_every_message_it_holds(
    queue: Queue, consumers: Consumers
) -> None:
    tasks = [f"task-c{n}" for n in range(4)]
    for task in tasks:
        queue.publish({"effects": 2, "seconds": 0.5}, message_id=task)
    first = consumers.start("--concurrency", "4")
    assert {consumers.wait_entered(f"{t}-s0") for t in tasks} == {first.pid}, "all at once"
    assert consumers.stop(first) == oncelog.EXIT_TRY_LATER  # inside every first effect
    assert consumers.log(first).count("queued again: Draining") == len(tasks)
    assert queue.ready() == len(tasks)
    with oncelog.open(consumers.db_path) as ledger:
        for task in tasks:
            assert [s.state for s in ledger.steps(task)] == [oncelog.StepState.DONE]
    second = consumers.start("--concurrency", "4")
    consumers.wait_log(second, "acknowledged", count=len(tasks))
    consumers.stop(second)
    performed = consumers.performed()
    assert {performed[f"{t}-s0"] for t in tasks} == {first.pid}
    assert {performed[f"{t}-s1"] for t in tasks} == {second.pid}
    assert sorted(consumers.requests()) == sorted(set(consumers.requests())), "asked once each"
    assert (queue.ready(), queue.ready(f"{queue.name}.parked")) == (0, 0)
