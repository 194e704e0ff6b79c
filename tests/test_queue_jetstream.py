"""``oncelog consume jetstream`` against the NATS server (JetStream) on this machine: a
consumer SIGKILLed inside an effect is replaced and the redelivered message resumes the
same run; a duplicate is one run; poison and halted runs are terminated once, never
redelivered; a run longer than ``ack_wait`` is not redelivered while it works.

Each test has its own stream, deleted afterwards; the consumers share the durable
consumer ``oncelog`` on it, whose info tells what is still pending or unacknowledged.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import ConsumerInfo, StreamConfig

import oncelog

from .conftest import require
from .support.consumers import Consumers

URL = "nats://127.0.0.1:4222"
ACK_WAIT = "2"  # seconds: how soon JetStream redelivers the message of a killed consumer


def nats_is_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 4222), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Stream:
    name: str

    def publish(self, *bodies: Any, message_id: str | None = None) -> None:
        async def publish() -> None:
            client = await nats.connect(URL)
            headers = None if message_id is None else {"Nats-Msg-Id": message_id}
            for body in bodies:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                await client.jetstream().publish(f"{self.name}.tasks", data, headers=headers)
            await client.close()

        asyncio.run(publish())

    def consumer_info(self) -> ConsumerInfo:
        async def info() -> ConsumerInfo:
            client = await nats.connect(URL)
            found: ConsumerInfo = await client.jetstream().consumer_info(self.name, "oncelog")
            await client.close()
            return found

        return asyncio.run(info())

    def unsettled(self) -> tuple[int, int]:
        """Messages not yet delivered, and delivered but not acknowledged (nor terminated)."""
        info = self.consumer_info()
        return info.num_pending or 0, info.num_ack_pending or 0


def _manage(action: str, name: str) -> None:
    async def manage() -> None:
        client = await nats.connect(URL)
        if action == "add":
            await client.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        else:
            await client.jetstream().delete_stream(name)
        await client.close()

    asyncio.run(manage())


@pytest.fixture
def stream() -> Iterator[Stream]:
    require(nats_is_up(), "NATS is not running on 127.0.0.1:4222")
    name = f"ONCELOG_TEST_{uuid.uuid4().hex[:10]}"
    _manage("add", name)
    try:
        yield Stream(name)
    finally:
        _manage("delete", name)


@pytest.fixture
def consumers(stream: Stream, db_path: str, tmp_path: Path) -> Iterator[Consumers]:
    broker = ["jetstream", "--url", URL, "--stream", stream.name, "--ack-wait", ACK_WAIT]
    started = Consumers(db_path, tmp_path, broker)
    yield started
    started.close()


def test_a_killed_consumers_message_resumes_its_run_in_another(
    stream: Stream, consumers: Consumers
) -> None:
    stream.publish({"effects": 3, "seconds": 0.5, "kind": "upsert"}, message_id="task-1")
    first = consumers.start()
    assert consumers.wait_entered("task-1-s1") == first.pid
    consumers.kill(first)  # inside the provider call of the second effect
    second = consumers.start()  # gets the message once ack_wait has passed
    consumers.wait_log(second, "run task-1 acknowledged")
    assert consumers.stop(second) == oncelog.EXIT_TRY_LATER
    performed = consumers.performed()
    assert performed == {"task-1-s0": first.pid, "task-1-s1": second.pid, "task-1-s2": second.pid}
    assert sorted(consumers.requests()) == sorted(set(consumers.requests())), "asked once each"
    assert consumers.log(second).count("acknowledged") == 1
    assert stream.unsettled() == (0, 0)
    assert stream.consumer_info().num_redelivered == 0  # no redelivery is left outstanding
    with oncelog.open(consumers.db_path) as ledger:
        assert ledger.get_run("task-1").status is oncelog.RunStatus.COMPLETED
        assert [s.attempts for s in ledger.steps("task-1")] == [1, 2, 1]


def test_sigterm_naks_the_message_after_the_step_in_progress(
    stream: Stream, consumers: Consumers
) -> None:
    stream.publish({"effects": 3, "seconds": 0.5}, message_id="task-2")
    first = consumers.start()
    assert consumers.wait_entered("task-2-s0") == first.pid
    assert consumers.stop(first) == oncelog.EXIT_TRY_LATER  # inside the first effect
    assert "run task-2 queued again: Draining" in consumers.log(first)
    with oncelog.open(consumers.db_path) as ledger:
        record = ledger.get_run("task-2")
        assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
        assert [s.state for s in ledger.steps("task-2")] == [oncelog.StepState.DONE]
    second = consumers.start()  # nak'ed without delay: no ack_wait to sit out
    consumers.wait_log(second, "run task-2 acknowledged")
    consumers.stop(second)
    assert consumers.performed() == {
        "task-2-s0": first.pid, "task-2-s1": second.pid, "task-2-s2": second.pid,
    }  # fmt: skip
    assert stream.unsettled() == (0, 0)


def test_the_same_task_twice_is_one_run_and_a_long_run_is_not_redelivered(
    stream: Stream, consumers: Consumers
) -> None:
    """Both messages carry the task's id in their body (JetStream itself drops a second
    message with the same ``Nats-Msg-Id``). The run lasts longer than ``ack_wait``: only
    the consumer's in-progress signals keep JetStream from redelivering it meanwhile."""
    task = {"id": "task-3", "effects": 2, "seconds": 1.5}
    stream.publish(task, task)
    consumer = consumers.start("--run-id-field", "id")
    consumers.wait_log(consumer, "run task-3 acknowledged", count=2)
    assert consumers.stop(consumer) == oncelog.EXIT_TRY_LATER
    log = consumers.log(consumer)
    assert "acknowledged: completed" in log
    assert "acknowledged: already completed (a duplicate)" in log
    assert consumers.handled() == ["task-3"]
    assert len(consumers.performed()) == 2
    info = stream.consumer_info()
    assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)


def test_poison_messages_are_terminated_once(stream: Stream, consumers: Consumers) -> None:
    stream.publish(
        {"id": "bad-handler", "poison": True},
        b"not json",
        {"id": "twice", "effects": 1},
        {"id": "twice", "effects": 2},  # another task under the same id
    )
    consumer = consumers.start("--run-id-field", "id")
    consumers.wait_log(consumer, "parked", count=3)
    consumers.wait_log(consumer, "acknowledged")
    assert consumers.stop(consumer) == oncelog.EXIT_TRY_LATER
    assert consumers.handled() == ["bad-handler", "twice"], "each reached the handler once"
    log = consumers.log(consumer)
    assert "run bad-handler parked: the handler raised ValueError" in log
    assert "run (none) parked: InvalidPayload: the message body is not JSON" in log
    assert "run twice parked: InputMismatch" in log
    info = stream.consumer_info()
    assert (info.num_pending, info.num_ack_pending, info.num_redelivered) == (0, 0, 0)


def test_a_halted_run_is_terminated_and_a_worker_finishes_it_after_a_person(
    stream: Stream, consumers: Consumers
) -> None:
    with oncelog.open(consumers.db_path) as ledger:
        ledger.halt("refund loop", by="ops", agent="support", ahead=True)
    stream.publish({"effects": 1}, message_id="task-4")
    consumer = consumers.start("--agent", "support")
    consumers.wait_log(consumer, "run task-4 parked: waits for a person: RunHalted")
    assert consumers.stop(consumer) == oncelog.EXIT_TRY_LATER
    assert stream.unsettled() == (0, 0)
    assert consumers.performed() == {}
    with oncelog.open(consumers.db_path) as ledger:
        assert ledger.get_run("task-4").status is oncelog.RunStatus.HALTED
        ledger.clear_halt(by="alice", agent="support")
    consumers.run_worker("--agent", "support")
    assert sorted(consumers.performed()) == ["task-4-s0"]
    with oncelog.open(consumers.db_path) as ledger:
        assert ledger.get_run("task-4").status is oncelog.RunStatus.COMPLETED


def test_an_async_consumer_with_concurrency_drains_every_message_it_holds(
    stream: Stream, consumers: Consumers
) -> None:
    tasks = [f"task-c{n}" for n in range(4)]
    for task in tasks:
        stream.publish({"effects": 2, "seconds": 0.5}, message_id=task)
    options, handler = ("--concurrency", "4"), "tests.queue_agents.handlers:handle_async"
    first = consumers.start(*options, handler=handler)
    assert {consumers.wait_entered(f"{t}-s0") for t in tasks} == {first.pid}, "all at once"
    assert consumers.stop(first) == oncelog.EXIT_TRY_LATER  # inside every first effect
    assert consumers.log(first).count("queued again: Draining") == len(tasks)
    with oncelog.open(consumers.db_path) as ledger:
        for task in tasks:
            assert [s.state for s in ledger.steps(task)] == [oncelog.StepState.DONE]
    second = consumers.start(*options, handler=handler)
    consumers.wait_log(second, "acknowledged", count=len(tasks))
    consumers.stop(second)
    performed = consumers.performed()
    assert {performed[f"{t}-s0"] for t in tasks} == {first.pid}
    assert {performed[f"{t}-s1"] for t in tasks} == {second.pid}
    assert sorted(consumers.requests()) == sorted(set(consumers.requests())), "asked once each"
    assert stream.unsettled() == (0, 0)
