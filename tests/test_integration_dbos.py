"""DBOS steps as oncelog runs: the process SIGKILLed right after the provider performed the
effect, then DBOS's own recovery in a new process runs the step again; the provider
counts the effect once. DBOS keeps its state in SQLite and in PostgreSQL."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .conftest import require
from .integration_agents.processes import require_framework
from .support import postgres
from .support.engine_workers import ROOT, TIMEOUT, Processes
from .support.launch import python
from .support.provider_process import Provider, running_provider

require_framework("dbos", "dbos")

APP = "tests.engine_agents.dbos_app"


@pytest.fixture(params=["sqlite", "postgresql"])
def system_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """DBOS's system database URL and schema: a file, or a fresh schema dropped after."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dbos.sqlite'}", "dbos"
        return
    require(postgres.postgres_is_up(), postgres.POSTGRES_REASON)
    schema = f"dbos_{secrets.token_hex(6)}"
    try:
        yield postgres.ADMIN_URL, schema
    finally:
        postgres.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def dbos(system_database: tuple[str, str], tmp_path: Path, db_path: str) -> Iterator[Processes]:
    with running_provider(tmp_path / "provider", "ignores_keys") as provider:
        env = {"ONCELOG_URL": db_path, "ENGINE_PROVIDER": provider.url,
               "DBOS_SCHEMA": system_database[1]}  # fmt: skip
        processes = Processes(tmp_path, env)
        processes.provider = provider  # type: ignore[attr-defined]
        processes.url = system_database[0]  # type: ignore[attr-defined]
        try:
            yield processes
        finally:
            processes.stop_all()


def provider_of(dbos: Processes) -> Provider:
    provider: Provider = dbos.provider  # type: ignore[attr-defined]
    return provider


def run_app(dbos: Processes, *argv: str) -> tuple[int, str]:
    process = dbos.start("-m", APP, dbos.url, *argv)  # type: ignore[attr-defined]
    code = process.wait(timeout=TIMEOUT)
    return code, dbos.log(process)


def killed_then_recovered(
    dbos: Processes, workflow: str, probe: str, start: str = "start"
) -> tuple[int, str]:
    dbos.arm_kill()
    code, log = run_app(dbos, start, workflow, "o-1", probe)
    assert code == -signal.SIGKILL, log
    return run_app(dbos, "recover", workflow)


def test_recovery_finds_the_effect_done_and_does_not_repeat_it(
    dbos: Processes, db_path: str
) -> None:
    workflow = f"wf-{secrets.token_hex(4)}"
    code, log = killed_then_recovered(dbos, workflow, "probe")
    assert code == 0, log
    run_id = f"{workflow}/step-1"
    assert f'"run": "{workflow}"' in log
    assert sum(provider_of(dbos).counts(run_id).values()) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(run_id).status is oncelog.RunStatus.COMPLETED


def test_an_effect_in_the_workflows_own_code_is_replayed_by_recovery(
    dbos: Processes, db_path: str
) -> None:
    workflow = f"wf-{secrets.token_hex(4)}"
    code, log = killed_then_recovered(dbos, workflow, "probe", start="start-direct")
    assert code == 0, log
    assert f'"run": "{workflow}"' in log
    assert provider_of(dbos).total(workflow) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(workflow).status is oncelog.RunStatus.COMPLETED


def test_recovery_halts_an_effect_in_doubt_without_firing_it_again(
    dbos: Processes, db_path: str
) -> None:
    workflow = f"wf-{secrets.token_hex(4)}"
    code, log = killed_then_recovered(dbos, workflow, "unprobed")
    run_id = f"{workflow}/step-1"
    assert code == oncelog.EXIT_HALTED, log
    assert "ERROR AmbiguousOutcome" in log
    assert f"oncelog resolve {run_id} send done --no-result --by NAME" in log
    assert f"oncelog resolve {run_id} send not_done --by NAME" in log
    assert provider_of(dbos).total(run_id) == 1
    with oncelog.open(db_path) as ledger:
        assert ledger.get_run(run_id).status is oncelog.RunStatus.HALTED
        attempts = ledger.steps(run_id)[0].attempts
    assert attempts == 1  # should_retry kept DBOS from retrying the step


def test_after_a_person_resolved_it_the_workflow_runs_again_under_its_id(
    dbos: Processes, db_path: str
) -> None:
    workflow = f"wf-{secrets.token_hex(4)}"
    code, log = killed_then_recovered(dbos, workflow, "unprobed")
    assert code == oncelog.EXIT_HALTED, log
    run_id = f"{workflow}/step-1"
    with oncelog.open(db_path) as ledger:
        ledger.resolve(run_id, "send", "done", by="test", result={"looked": "up"})
    code, log = run_app(dbos, "restart", workflow, "o-1", "unprobed")
    assert code == 0, log
    assert '"sent": {"looked": "up"}' in log
    assert provider_of(dbos).total(run_id) == 1


def test_should_retry_refuses_a_stop_for_a_person_and_allows_a_try_later() -> None:
    from oncelog.integrations import dbos as oncelog_dbos

    assert not oncelog_dbos.should_retry(oncelog.AmbiguousOutcome("in doubt", run_id="r"))
    assert not oncelog_dbos.should_retry(oncelog.ApprovalRequired("waits", run_id="r"))
    assert not oncelog_dbos.should_retry(oncelog.EffectRefused("refused", run_id="r"))
    assert oncelog_dbos.should_retry(oncelog.RunLeased("held", run_id="r"))
    assert oncelog_dbos.should_retry(ConnectionError("the step's own trouble"))


def test_the_run_id_is_only_known_inside_dbos() -> None:
    from oncelog.integrations import dbos as oncelog_dbos

    with pytest.raises(oncelog.NoActiveRun):
        oncelog_dbos.run_id()


def test_the_example_sends_its_receipt_once_after_a_kill(tmp_path: Path) -> None:
    example = python(str(ROOT / "examples/dbos/app.py"), "order-1")
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_URL"}
    killed = subprocess.run(
        example, cwd=tmp_path, env={**env, "ONCELOG_CRASH_AT": "after_call"},
        capture_output=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    recovered = subprocess.run(
        example, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT,
        check=True,
    )  # fmt: skip
    assert "'order': 'order-1'" in recovered.stdout
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1
