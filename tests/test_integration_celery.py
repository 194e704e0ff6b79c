"""Celery tasks as oncelog runs, with a real worker process on RabbitMQ and on Redis: a
worker SIGKILLed right after the provider performed the effect, the broker redelivers,
the provider counts the effect once; a warm shutdown finishes the task in progress."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import oncelog

from .conftest import require
from .integration_agents.processes import require_framework
from .support.engine_workers import ROOT, TIMEOUT, Processes, reachable, wait_for
from .support.provider_process import Provider, running_provider

require_framework("celery", "celery")

from celery import Celery  # noqa: E402
from celery.result import AsyncResult  # noqa: E402

# Redis database of these tests: Celery keeps unacknowledged messages in one hash per DB.
# Task results are kept there too, whatever the broker.
REDIS = "redis://127.0.0.1:6379/13"
BROKERS = {"rabbitmq": (5672, "amqp://guest:guest@127.0.0.1:5672//"), "redis": (6379, REDIS)}


class Celeries(Processes):
    def __init__(self, directory: Path, env: dict[str, str], client: Celery) -> None:
        super().__init__(directory, env)
        self.client = client

    def worker(self, pool: str = "solo") -> Any:
        process = self.start(
            "-m", "celery", "-A", "tests.engine_agents.celery_app", "worker", f"--pool={pool}",
            "--concurrency=1",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
            "-Q", self.env["CELERY_QUEUE"],
        )  # fmt: skip
        self.wait_log(process, "ready.")
        return process

    def send(
        self, order: str, *, probe: bool, seconds: float = 0.0, **options: Any
    ) -> AsyncResult[Any]:
        return self.client.send_task(
            "tests.engine_agents.celery_app.send_order", args=(order, probe, seconds),
            queue=self.env["CELERY_QUEUE"], **options,
        )  # fmt: skip


@pytest.fixture(params=sorted(BROKERS))
def celery(request: pytest.FixtureRequest, tmp_path: Path, db_path: str) -> Iterator[Celeries]:
    port, broker = BROKERS[request.param]
    require(reachable(port), f"{request.param} is not running on 127.0.0.1:{port}")
    require(reachable(6379), "Redis (the tasks' result store) is not running on 127.0.0.1:6379")
    queue = f"oncelog-test-{uuid.uuid4().hex}"  # parallel runs never share a queue
    client = Celery("oncelog_test_client", broker=broker, backend=REDIS)
    client.conf.broker_transport_options = {"visibility_timeout": 5}
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        env = {"CELERY_BROKER": broker, "CELERY_BACKEND": REDIS, "CELERY_QUEUE": queue,
               "ONCELOG_URL": db_path, "ENGINE_PROVIDER": provider.url}  # fmt: skip
        processes = Celeries(tmp_path, env, client)
        processes.provider = provider  # type: ignore[attr-defined]
        try:
            yield processes
        finally:
            processes.stop_all()
            client.close()


def provider_of(celery: Celeries) -> Provider:
    provider: Provider = celery.provider  # type: ignore[attr-defined]
    return provider


def test_a_task_is_a_run_named_by_its_task_id(celery: Celeries, db_path: str) -> None:
    celery.worker()
    result = celery.send("o-1", probe=True)
    answer = result.get(timeout=TIMEOUT)
    assert answer["payload"] == {"order": "o-1"}
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(result.id).status is oncelog.RunStatus.COMPLETED
    assert provider_of(celery).total(result.id) == 1


def test_a_worker_killed_after_the_effect_does_it_once_after_redelivery(
    celery: Celeries, db_path: str
) -> None:
    first = celery.worker()
    celery.arm_kill()
    result = celery.send("o-2", probe=True)
    first.wait(timeout=TIMEOUT)
    assert first.returncode == -signal.SIGKILL
    celery.worker()  # the broker gives the unacknowledged task to the new worker
    answer = result.get(timeout=TIMEOUT)
    assert provider_of(celery).counts(result.id) == {answer["key"]: 1}
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(result.id).status is oncelog.RunStatus.COMPLETED


def test_a_pool_child_killed_after_the_effect_is_rejected_and_redelivered(
    celery: Celeries, db_path: str
) -> None:
    worker = celery.worker(pool="prefork")
    celery.arm_kill()
    result = celery.send("o-8", probe=True)
    child = celery.wait_entered()
    assert child != worker.pid  # the task runs in the pool's child, which the provider kills
    answer = result.get(timeout=TIMEOUT)  # reject_on_worker_lost: the same worker again
    assert worker.poll() is None
    assert provider_of(celery).counts(result.id) == {answer["key"]: 1}
    assert celery.log(worker).count(f"[{result.id}] received") == 2


def test_an_effect_in_doubt_fails_the_task_with_the_command_and_no_retry(
    celery: Celeries, db_path: str
) -> None:
    first = celery.worker()
    celery.arm_kill()
    result = celery.send("o-3", probe=False)
    first.wait(timeout=TIMEOUT)
    second = celery.worker()
    with pytest.raises(Exception, match=rf"oncelog resolve {result.id} send done") as failed:
        result.get(timeout=TIMEOUT)
    assert type(failed.value).__name__ == "AmbiguousOutcome"
    assert provider_of(celery).total(result.id) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(result.id).status is oncelog.RunStatus.HALTED
    # Failed once, acknowledged, never retried: one more task goes through, not this one.
    assert celery.send("o-4", probe=True).get(timeout=TIMEOUT)["payload"] == {"order": "o-4"}
    assert celery.log(second).count(f"[{result.id}] received") == 1
    # A person looked it up at the provider; the task sent again under its id goes on.
    with oncelog.open(db_path) as ledger:
        ledger.resolve(result.id, "send", "done", by="test", result={"looked": "up"})
    celery.send("o-3", probe=False, task_id=result.id)  # its old failure is stored: read the ledger
    with oncelog.open(db_path) as ledger:
        wait_for(
            lambda: ledger.get_run(result.id).status is oncelog.RunStatus.COMPLETED,
            "the task sent again to complete its run",
        )
        assert ledger.steps(result.id)[0].result == {"looked": "up"}
    assert provider_of(celery).total(result.id) == 1


def test_a_run_held_elsewhere_is_retried_with_backoff_until_it_is_free(
    celery: Celeries, db_path: str
) -> None:
    worker = celery.worker()
    task_id = f"held-{uuid.uuid4().hex}"
    with oncelog.open(db_path) as ledger, ledger.run(task_id):
        result = celery.send("o-5", probe=True, task_id=task_id)
        celery.wait_log(worker, "RunLeased")
        assert provider_of(celery).total(task_id) == 0
    assert result.get(timeout=TIMEOUT)["payload"] == {"order": "o-5"}
    assert provider_of(celery).total(task_id) == 1
    assert f"[{task_id}] received" in celery.log(worker)


def test_a_warm_shutdown_finishes_the_task_in_progress(celery: Celeries, db_path: str) -> None:
    worker = celery.worker()
    result = celery.send("o-6", probe=True, seconds=2.0)
    behind = [celery.send(f"o-7-{n}", probe=True) for n in range(3)]
    assert celery.wait_entered() == worker.pid
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=TIMEOUT) == 0
    assert result.get(timeout=TIMEOUT)["payload"] == {"order": "o-6"}
    assert provider_of(celery).total(result.id) == 1
    # Celery may take one more message before it stops (its solo pool on RabbitMQ does);
    # what was not taken stays in the queue for the next worker.
    assert sum(provider_of(celery).total(task.id) for task in behind) <= 1
    celery.worker()
    for n, task in enumerate(behind):
        assert task.get(timeout=TIMEOUT)["payload"] == {"order": f"o-7-{n}"}
        assert provider_of(celery).total(task.id) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(result.id).status is oncelog.RunStatus.COMPLETED


def test_the_example_sends_its_receipt_once_after_a_kill(tmp_path: Path, db_path: str) -> None:
    require(reachable(5672), "RabbitMQ is not running on 127.0.0.1:5672")
    env = {"CELERY_QUEUE": f"oncelog-test-{uuid.uuid4().hex}", "ONCELOG_URL": db_path,
           "PYTHONPATH": str(ROOT / "examples/celery")}  # fmt: skip
    example = Processes(tmp_path, env, cwd=tmp_path)
    worker = ("-m", "celery", "-A", "tasks", "worker", "--pool=solo", "--without-gossip",
              "--without-mingle", "--without-heartbeat", "-l", "info")  # fmt: skip
    try:
        example.env["ONCELOG_CRASH_AT"] = "after_call"
        first = example.start(*worker)
        example.wait_log(first, "ready.")
        del example.env["ONCELOG_CRASH_AT"]
        sender = example.start(str(ROOT / "examples/celery/tasks.py"), "order-1")
        assert sender.wait(timeout=TIMEOUT) == 0, example.log(sender)
        assert first.wait(timeout=TIMEOUT) == -signal.SIGKILL
        second = example.start(*worker)
        example.wait_log(second, "succeeded")
    finally:
        example.stop_all()
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1


def test_a_task_without_late_acknowledgement_is_refused() -> None:
    from oncelog.integrations.celery import once_task

    app = Celery("refused")
    with pytest.raises(oncelog.ConfigurationError, match="needs acks_late=True"):
        once_task(app, oncelog.open, acks_late=False)
    with pytest.raises(oncelog.ConfigurationError, match="needs reject_on_worker_lost=True"):
        once_task(app, oncelog.open, reject_on_worker_lost=False)


def test_a_task_called_rather_than_sent_needs_a_run_id(tmp_path: Path) -> None:
    from oncelog.integrations.celery import once_task

    app = Celery("called")
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:

        @once_task(app, lambda: ledger)
        def unnamed(run: oncelog.Run) -> str:
            return run.run_id

        @once_task(app, lambda: ledger, run_id=lambda order: f"order-{order}")
        def named(run: oncelog.Run, order: str) -> str:
            return run.run_id

        with pytest.raises(oncelog.UsageError, match="was called, not sent"):
            unnamed()
        assert named("7") == "order-7"
