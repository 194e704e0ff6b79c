"""Workers in real processes: they share submitted runs, drain on SIGTERM, and lose a run
they stopped holding (SIGKILL, SIGSTOP past the lease) without any effect happening twice.

The handler (``worker_agents/handlers.py``) calls a provider that honours idempotency
keys and keeps its own records in a directory: one ``performed-<key>`` file per effect
that really happened, and a log of every request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .support.launch import PYTHON
from .support.operator_commands import oncelog_cli
from .support.pause_points import PausePoint

ROOT = Path(__file__).parent.parent
HANDLER = "tests.worker_agents.handlers:handle"
TIMEOUT = 60.0


class World:
    """The provider's directory and the workers started against one ledger."""

    def __init__(self, db_path: str, provider: Path) -> None:
        self.db_path = db_path
        self.provider = provider
        self.workers: list[subprocess.Popen[str]] = []

    def stop(self) -> None:
        """Kill the workers still running (a stopped one is woken first) and reap all."""
        for worker in self.workers:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()
            worker.communicate(timeout=TIMEOUT)

    def start_worker(
        self, *options: str, handler: str = HANDLER, pause: PausePoint | None = None
    ) -> subprocess.Popen[str]:
        """A worker process; one ``pause`` stops at its point until released."""
        env = {**os.environ, "WORKER_PROVIDER": str(self.provider)}
        worker = subprocess.Popen(
            [PYTHON, "-m", "oncelog", "worker", handler, "--db", self.db_path,
             "--poll", "0.05", *options],
            cwd=ROOT, env=env if pause is None else {**env, **pause.env()},
            pass_fds=() if pause is None else pause.fds(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        if pause is not None:
            pause.started()
        self.workers.append(worker)
        return worker

    def wait_entered(self, step: str) -> int:
        """The pid of the worker that entered the provider call for ``step``."""
        marker = self.provider / f"entered-{step}"
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, f"no worker reached {step}"
            time.sleep(0.01)
        return int(marker.read_text())

    def performed(self) -> dict[str, int]:
        """Effects that really happened (once per key): step -> pid that performed it."""
        found = [path.read_text().split() for path in self.provider.glob("performed-*")]
        return {step: int(pid) for pid, step in found}

    def requests(self) -> list[tuple[int, str]]:
        log = self.provider / "requests.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [(int(pid), key) for pid, key in (line.split() for line in lines)]


@pytest.fixture
def world(db_path: str, tmp_path: Path) -> Iterator[World]:
    provider = tmp_path / "provider"
    provider.mkdir()
    made = World(db_path, provider)
    yield made
    made.stop()


def ended(worker: subprocess.Popen[str]) -> tuple[int, str]:
    _, stderr = worker.communicate(timeout=TIMEOUT)
    return worker.returncode, stderr


def test_submit_queues_a_run_once(ledger: oncelog.Ledger) -> None:
    assert ledger.submit("r1", {"effects": 1}, agent="billing") is True
    assert ledger.submit("r1", {"effects": 1}, agent="billing") is False  # a redelivery
    with pytest.raises(oncelog.InputMismatch):
        ledger.submit("r1", {"effects": 2}, agent="billing")
    with pytest.raises(oncelog.InvalidPayload):
        ledger.submit("r2", {"effects": object()})
    record = ledger.get_run("r1")
    assert (record.status, record.input, record.agent) == (
        oncelog.RunStatus.QUEUED, {"effects": 1}, "billing",
    )  # fmt: skip
    assert [r.run_id for r in ledger.runs()] == ["r1"]  # the refused one left nothing


def test_an_in_process_worker_runs_sync_and_async_handlers(ledger: oncelog.Ledger) -> None:
    seen: list[tuple[str, object]] = []

    @oncelog.tool(kind="create", name="note")
    def note(text: str, *, idempotency_key: str) -> str:
        seen.append((text, idempotency_key))
        return text

    def plain(run: oncelog.Run, input: object) -> None:
        run.effect("note", note, f"plain {input}")

    async def awaiting(run: oncelog.AsyncRun, input: object) -> None:
        await run.effect("note", note, f"async {input}")

    ledger.submit("p", 1, agent="plain")
    ledger.submit("a", 2, agent="async")
    ledger.submit("x", 3, agent="nobody-handles-this")
    worker = oncelog.Worker(ledger, {"plain": plain, "async": awaiting}, poll=0.01)
    assert worker.run(until_idle=True) == oncelog.EXIT_COMPLETED
    assert sorted(text for text, _ in seen) == ["async 2", "plain 1"]
    statuses = {r.run_id: r.status for r in ledger.runs()}
    assert statuses == {
        "p": oncelog.RunStatus.COMPLETED,
        "a": oncelog.RunStatus.COMPLETED,
        "x": oncelog.RunStatus.QUEUED,
    }


def test_two_workers_share_the_runs_and_each_effect_happens_once(world: World) -> None:
    with oncelog.open(world.db_path) as ledger:
        for n in range(12):
            ledger.submit(f"r{n}", {"effects": 3, "seconds": 0.05})
    workers = [world.start_worker("--until-idle") for _ in range(2)]
    for worker in workers:
        code, stderr = ended(worker)
        assert code == 0, stderr
    performed = world.performed()
    assert len(performed) == 36
    assert len(world.requests()) == 36, "no effect was even asked for twice"
    assert set(performed.values()) == {w.pid for w in workers}, "both workers took runs"
    with oncelog.open(world.db_path) as ledger:
        assert {r.status for r in ledger.runs()} == {oncelog.RunStatus.COMPLETED}


def test_sigterm_drains_the_worker_and_another_finishes_the_run(world: World) -> None:
    with oncelog.open(world.db_path) as ledger:
        ledger.submit("r", {"effects": 3, "seconds": 1.0})
    first = world.start_worker()
    assert world.wait_entered("r-s0") == first.pid
    first.send_signal(signal.SIGTERM)  # in the middle of the provider call
    code, stderr = ended(first)
    assert code == oncelog.EXIT_TRY_LATER, stderr
    with oncelog.open(world.db_path) as ledger:
        record = ledger.get_run("r")
        steps = ledger.steps("r")
    assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
    assert [(s.step_id, s.state) for s in steps] == [("s0", oncelog.StepState.DONE)]
    second = world.start_worker("--until-idle")
    code, stderr = ended(second)
    assert code == 0, stderr
    performed = world.performed()
    assert sorted(performed) == ["r-s0", "r-s1", "r-s2"]
    assert performed["r-s0"] == first.pid
    assert {performed["r-s1"], performed["r-s2"]} == {second.pid}


def test_a_killed_workers_run_halts_then_a_person_releases_it(world: World) -> None:
    """SIGKILL inside a create call: the next worker cannot know if it happened, so it
    halts the run instead of calling again; a person's decision queues it again."""
    with oncelog.open(world.db_path) as ledger:
        ledger.submit("r", {"effects": 2, "seconds": 1.0})
    first = world.start_worker()
    world.wait_entered("r-s0")
    first.kill()
    first.communicate(timeout=TIMEOUT)
    second = world.start_worker("--until-idle")
    code, stderr = ended(second)
    assert code == 0, stderr
    with oncelog.open(world.db_path) as ledger:
        assert ledger.get_run("r").stopped_by == "AmbiguousOutcome"
    assert world.performed() == {}, "the killed call never reached the provider"
    oncelog_cli(world.db_path, "resolve", "r", "s0", "not_done", "--by", "alice")
    third = world.start_worker("--until-idle")
    code, stderr = ended(third)
    assert code == 0, stderr
    assert world.performed() == {"r-s0": third.pid, "r-s1": third.pid}
    with oncelog.open(world.db_path) as ledger:
        assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_a_stopped_worker_loses_its_lease_and_its_writes(world: World) -> None:
    """SIGSTOP inside an upsert call, past the lease: another worker takes the run over
    and re-runs the upsert with the same key; the stopped one, continued, is refused."""
    with oncelog.open(world.db_path) as ledger:
        ledger.submit("r", {"effects": 2, "seconds": 0.5, "kind": "upsert"})
    first = world.start_worker("--lease-ttl", "1")
    world.wait_entered("r-s0")
    first.send_signal(signal.SIGSTOP)
    (world.provider / "entered-r-s0").write_text("")
    second = world.start_worker("--lease-ttl", "1")
    assert world.wait_entered("r-s0") == second.pid  # only after the lease expired
    deadline = time.monotonic() + TIMEOUT
    with oncelog.open(world.db_path) as ledger:
        while ledger.get_run("r").status is not oncelog.RunStatus.COMPLETED:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    first.send_signal(signal.SIGCONT)
    first.send_signal(signal.SIGTERM)
    second.send_signal(signal.SIGTERM)
    code, stderr = ended(first)
    assert (code, "LeaseLost" in stderr) == (oncelog.EXIT_TRY_LATER, True), stderr
    assert ended(second)[0] == oncelog.EXIT_TRY_LATER
    assert world.performed() == {"r-s0": second.pid, "r-s1": second.pid}
    with oncelog.open(world.db_path) as ledger:
        steps = ledger.steps("r")
        tokens = [e.data["token"] for e in ledger.journal("r") if e.event == "intent"]
    assert [s.attempts for s in steps] == [2, 1]
    assert len(set(tokens[1:])) == 1, "every intent after the takeover is the new owner's"


def test_a_tool_that_takes_it_gets_the_fencing_token(ledger: oncelog.Ledger) -> None:
    """A provider that keeps the highest token it saw for a run can refuse a stale worker."""
    seen: list[int] = []

    @oncelog.tool(kind="upsert", name="guarded")
    def guarded(n: int, *, idempotency_key: str, fencing_token: int) -> int:
        seen.append(fencing_token)
        return n

    with ledger.run("r") as run:
        run.effect("a", guarded, 1)
        first = run.fencing_token
    with ledger.run("r") as run:  # a takeover: the next owner's token is higher
        run.effect("a", guarded, 1)  # replayed: not called, so no token is handed out
        run.effect("b", guarded, 2)
    assert seen == [first, first + 1]
    assert ledger.steps("r")[1].args_payload == {"args": [2], "kwargs": {}}
