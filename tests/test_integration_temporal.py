"""Temporal activities as oncelog runs, without a Temporal server: the SDK's
``ActivityEnvironment`` runs the attempts Temporal would make, in this process and in
processes SIGKILLed right after the provider performed the effect."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.display import decide_commands

from .integration_agents.processes import require_framework
from .support.engine_workers import TIMEOUT, Processes
from .support.provider_process import Provider

require_framework("temporalio", "temporal")

from temporalio import activity  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402

from oncelog.integrations import temporal as oncelog_temporal  # noqa: E402

from .engine_agents.temporal_activity import attempt  # noqa: E402

AGENT = "tests.engine_agents.temporal_activity"


def one_attempt(engine_workers: Processes, number: int, probe: str) -> tuple[int, str]:
    process = engine_workers.start("-m", AGENT, "wf-1", "7", str(number), "o-1", probe)
    code = process.wait(timeout=TIMEOUT)
    return code, engine_workers.log(process)


def test_an_attempt_after_a_worker_died_finds_the_effect_and_returns_it(
    engine_workers: Processes, engine_provider: Provider, db_path: str
) -> None:
    engine_workers.arm_kill()
    code, log = one_attempt(engine_workers, 1, "probe")
    assert code == -signal.SIGKILL, log
    code, log = one_attempt(engine_workers, 2, "probe")
    assert code == 0, log
    assert engine_provider.total("wf-1/7") == 1
    code, log = one_attempt(engine_workers, 3, "probe")  # its completion lost, say: once more
    assert code == 0, log
    assert engine_provider.total("wf-1/7") == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run("wf-1/7").status is oncelog.RunStatus.COMPLETED


def test_an_effect_in_doubt_ends_the_activity_non_retryable_with_the_command(
    engine_workers: Processes, engine_provider: Provider
) -> None:
    engine_workers.arm_kill()
    code, log = one_attempt(engine_workers, 1, "unprobed")
    assert code == -signal.SIGKILL, log
    for number in (2, 3):  # a retry policy that retried anyway would not fire it either
        code, log = one_attempt(engine_workers, number, "unprobed")
        assert code == 1, log
        assert "ERROR AmbiguousOutcome non_retryable=True" in log
        for pasted in decide_commands("wf-1/7", "send", 1):  # each decision, as it pastes
            assert pasted in log
    assert engine_provider.total("wf-1/7") == 1


def test_the_run_is_the_same_for_every_attempt_and_only_its_activity() -> None:
    def name() -> str:
        return oncelog_temporal.run_id()

    named = activity.defn(name="name")(name)
    assert attempt("wf-1", "3", 1).run(named) == "wf-1/3"
    assert attempt("wf-1", "3", 5).run(named) == "wf-1/3"
    assert attempt("wf-1", "4", 1).run(named) == "wf-1/4"
    assert attempt("", "standalone-9", 1).run(named) == "standalone-9"


def test_a_run_held_elsewhere_is_a_retryable_error(
    engine_provider: Provider, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONCELOG_URL", db_path)
    with oncelog.open(db_path) as ledger:

        @activity.defn(name="held")
        def held() -> Any:
            with oncelog_temporal.run(ledger) as run:
                return run.run_id

        with ledger.run("wf-2/1"), pytest.raises(ApplicationError) as raised:
            attempt("wf-2", "1", 1).run(held)
        assert raised.value.type == "RunLeased"
        assert not raised.value.non_retryable
        assert attempt("wf-2", "1", 2).run(held) == "wf-2/1"


def test_an_async_activity_replays_its_effect_in_a_later_attempt(
    engine_provider: Provider, db_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .engine_agents import provider_tool

    monkeypatch.setattr(provider_tool, "PROVIDER", engine_provider.url)
    monkeypatch.setattr(provider_tool, "ENTERED", tmp_path / "entered")
    with oncelog.open(db_path) as ledger:

        @activity.defn(name="send_async")
        async def send_async(order: str) -> Any:
            async with oncelog_temporal.async_run(ledger) as run:
                return await run.effect("send", provider_tool.send, run.run_id, order, 0.0)

        first = asyncio.run(attempt("wf-3", "2", 1).run(send_async, "o-3"))
        again = asyncio.run(attempt("wf-3", "2", 2).run(send_async, "o-3"))
    assert again == first
    assert engine_provider.total("wf-3/2") == 1


def test_a_named_run_lets_a_new_activity_take_up_what_a_person_resolved(
    engine_workers: Processes, engine_provider: Provider, db_path: str
) -> None:
    def activity_attempt(activity_id: str, number: int) -> tuple[int, str]:
        process = engine_workers.start(
            "-m", AGENT, "wf-4", activity_id, str(number), "o-4", "unprobed", "charge-o-4"
        )
        return process.wait(timeout=TIMEOUT), engine_workers.log(process)

    engine_workers.arm_kill()
    assert activity_attempt("1", 1)[0] == -signal.SIGKILL
    code, log = activity_attempt("1", 2)
    assert "ERROR AmbiguousOutcome non_retryable=True" in log
    with oncelog.open(db_path) as ledger:
        ledger.resolve("wf-4/charge-o-4", "send", "done", by="test", result={"looked": "up"})
    code, log = activity_attempt("2", 1)  # the workflow scheduled the activity again
    assert code == 0, log
    assert 'RESULT {"looked": "up"}' in log
    assert engine_provider.total("wf-4/charge-o-4") == 1
