"""Workers that hold many runs at once (``--concurrency``), on both stores: a SIGKILLed
one's runs all go to another worker, a SIGTERMed one drains every run it holds, one run
raising or hanging leaves the others going, and a run taken from a stopped worker gets no
further write from it. The provider's own files say what happened in the world
(``worker_agents/handlers.py``), never the ledger.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .test_workers import HANDLER, TIMEOUT, World, ended

RUNS = 4
HANDLERS = {"sync": HANDLER, "async": "tests.worker_agents.handlers:handle_async"}


@pytest.fixture
def fleet(store_url: str, tmp_path: Path) -> Iterator[World]:
    provider = tmp_path / "provider"
    provider.mkdir()
    made = World(store_url, provider)
    yield made
    made.stop()


def submit(url: str, input: dict[str, object], runs: int = RUNS) -> list[str]:
    with oncelog.open(url) as ledger:
        for n in range(runs):
            ledger.submit(f"r{n}", input)
    return [f"r{n}" for n in range(runs)]


def wait_all_entered(world: World, steps: list[str]) -> set[int]:
    """The pids of the workers inside the provider calls of all ``steps``."""
    return {world.wait_entered(step) for step in steps}


def statuses(url: str) -> dict[str, oncelog.RunStatus]:
    with oncelog.open(url) as ledger:
        return {r.run_id: r.status for r in ledger.runs()}


def assert_each_effect_once(world: World, expected: int) -> None:
    asked = Counter(key for _, key in world.requests())
    assert len(world.performed()) == expected
    assert len(asked) == expected, asked
    assert set(asked.values()) == {1}, f"an effect was asked for twice: {asked}"


@pytest.mark.parametrize("handler", ["sync", "async"])
def test_sigterm_drains_every_run_the_worker_holds(fleet: World, handler: str) -> None:
    runs = submit(fleet.db_path, {"effects": 3, "seconds": 1.0})
    target = HANDLERS[handler]
    first = fleet.start_worker("--concurrency", str(RUNS), handler=target)
    assert wait_all_entered(fleet, [f"{r}-s0" for r in runs]) == {first.pid}
    first.send_signal(signal.SIGTERM)  # every run is in the middle of its provider call
    code, stderr = ended(first)
    assert code == oncelog.EXIT_TRY_LATER, stderr
    with oncelog.open(fleet.db_path) as ledger:
        for run_id in runs:
            record = ledger.get_run(run_id)
            assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
            done = [(s.step_id, s.state) for s in ledger.steps(run_id)]
            assert done == [("s0", oncelog.StepState.DONE)], "the call in progress was recorded"
    second = fleet.start_worker("--until-idle", "--concurrency", str(RUNS))
    code, stderr = ended(second)
    assert code == 0, stderr
    assert_each_effect_once(fleet, RUNS * 3)
    performed = fleet.performed()
    assert {performed[f"{r}-s0"] for r in runs} == {first.pid}
    assert {performed[f"{r}-s2"] for r in runs} == {second.pid}
    assert set(statuses(fleet.db_path).values()) == {oncelog.RunStatus.COMPLETED}


@pytest.mark.parametrize("handler", ["sync", "async"])
def test_a_killed_worker_loses_all_its_runs_to_another_at_once(fleet: World, handler: str) -> None:
    """SIGKILL inside N upsert calls: a worker on the same host takes every run at once
    (the owner's process is gone), calls each again with the same key, and no effect
    happens twice."""
    runs = submit(fleet.db_path, {"effects": 2, "seconds": 1.0, "kind": "upsert"})
    target = HANDLERS[handler]
    first = fleet.start_worker("--concurrency", str(RUNS), handler=target)
    wait_all_entered(fleet, [f"{r}-s0" for r in runs])
    first.kill()
    first.communicate(timeout=TIMEOUT)
    # A lease far longer than the test: only the owner's death lets the runs go.
    second = fleet.start_worker("--until-idle", "--concurrency", str(RUNS), handler=target)
    code, stderr = ended(second)
    assert code == 0, stderr
    assert_each_effect_once(fleet, RUNS * 2)
    assert set(fleet.performed().values()) == {second.pid}, "the killed calls never happened"
    assert set(statuses(fleet.db_path).values()) == {oncelog.RunStatus.COMPLETED}


def test_a_busy_worker_keeps_every_lease_it_holds(fleet: World) -> None:
    """N calls each longer than the lease: the one heartbeat thread renews all N leases,
    so a second worker looking meanwhile takes none of them."""
    runs = submit(fleet.db_path, {"effects": 1, "seconds": 2.5, "kind": "upsert"})
    first = fleet.start_worker("--until-idle", "--concurrency", str(RUNS), "--lease-ttl", "1")
    wait_all_entered(fleet, [f"{r}-s0" for r in runs])
    time.sleep(1.5)  # past the lease: only renewals keep the runs
    second = fleet.start_worker("--until-idle", "--lease-ttl", "1")
    code, stderr = ended(second)
    assert code == 0, stderr
    assert "completed" not in stderr, "the second worker took a run that was held"
    code, stderr = ended(first)
    assert code == 0, stderr
    assert_each_effect_once(fleet, RUNS)
    assert set(fleet.performed().values()) == {first.pid}


def test_runs_taken_from_a_stopped_worker_get_no_write_from_it(fleet: World) -> None:
    """SIGSTOP while N runs are in their upsert calls, past the lease: another worker takes
    them all over; the stopped one, continued, writes nothing more to any of them."""
    runs = submit(fleet.db_path, {"effects": 2, "seconds": 0.5, "kind": "upsert"})
    first = fleet.start_worker("--concurrency", str(RUNS), "--lease-ttl", "1")
    wait_all_entered(fleet, [f"{r}-s0" for r in runs])
    first.send_signal(signal.SIGSTOP)
    for run_id in runs:
        (fleet.provider / f"entered-{run_id}-s0").write_text("")
    second = fleet.start_worker("--concurrency", str(RUNS), "--lease-ttl", "1")
    assert wait_all_entered(fleet, [f"{r}-s0" for r in runs]) == {second.pid}
    deadline = time.monotonic() + TIMEOUT
    while set(statuses(fleet.db_path).values()) != {oncelog.RunStatus.COMPLETED}:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first.send_signal(signal.SIGCONT)
    time.sleep(1.0)  # its calls return; their outcomes are refused
    first.send_signal(signal.SIGTERM)
    second.send_signal(signal.SIGTERM)
    code, stderr = ended(first)
    assert (code, stderr.count("LeaseLost") >= RUNS) == (oncelog.EXIT_TRY_LATER, True), stderr
    assert ended(second)[0] == oncelog.EXIT_TRY_LATER
    assert set(fleet.performed().values()) == {second.pid}
    with oncelog.open(fleet.db_path) as ledger:
        for run_id in runs:
            assert [s.attempts for s in ledger.steps(run_id)] == [2, 1]
            tokens = [e.data["token"] for e in ledger.journal(run_id) if e.event == "intent"]
            assert len(set(tokens[1:])) == 1, "every intent after the takeover is the new owner's"
            assert ledger.get_run(run_id).status is oncelog.RunStatus.COMPLETED
        assert ledger.verify().ok


@oncelog.tool(kind="create", name="note")
def note(text: str, *, idempotency_key: str) -> str:
    return text


@oncelog.tool(kind="create", name="note")
async def note_async(text: str, *, idempotency_key: str) -> str:
    return text


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_one_run_raising_or_hanging_leaves_the_others_going(
    ledger: oncelog.Ledger, kind: str
) -> None:
    import asyncio

    release = threading.Event()

    def plain(run: oncelog.Run, input: str) -> None:
        if input == "raise":
            raise RuntimeError("this run's own bug")
        if input == "hang":
            release.wait(TIMEOUT)
        run.effect("note", note, input)

    async def awaiting(run: oncelog.AsyncRun, input: str) -> None:
        if input == "raise":
            raise RuntimeError("this run's own bug")
        if input == "hang":  # awaits forever, as a provider that never answers
            await asyncio.to_thread(release.wait, TIMEOUT)
        await run.effect("note", note_async, input)

    handle = plain if kind == "sync" else awaiting
    for name in ("hang", "raise", *[f"ok{n}" for n in range(6)]):
        ledger.submit(name, name)
    worker = oncelog.Worker(ledger, handle, poll=0.01, concurrency=2)
    codes: list[int] = []
    working = threading.Thread(target=lambda: codes.append(worker.run(until_idle=True)))
    working.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while sum(s is oncelog.RunStatus.COMPLETED for s in statuses_of(ledger).values()) < 6:
            assert time.monotonic() < deadline, "a hanging run stopped the others"
            time.sleep(0.02)
        assert statuses_of(ledger)["hang"] is oncelog.RunStatus.RUNNING
    finally:
        release.set()
        working.join(TIMEOUT)
    assert codes == [oncelog.EXIT_COMPLETED]
    found = statuses_of(ledger)
    assert found.pop("raise") is oncelog.RunStatus.FAILED
    assert set(found.values()) == {oncelog.RunStatus.COMPLETED}


def test_an_async_run_awaiting_does_not_hold_the_others(ledger: oncelog.Ledger) -> None:
    """Async handlers share one event loop: N runs awaiting the provider overlap."""
    import asyncio

    inside = 0
    most = 0

    @oncelog.tool(kind="create", name="wait_note")
    async def wait_note(text: str, *, idempotency_key: str) -> str:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.2)
        inside -= 1
        return text

    async def handle(run: oncelog.AsyncRun, input: str) -> None:
        await run.effect("note", wait_note, input)

    for n in range(8):
        ledger.submit(f"r{n}", f"r{n}")
    worker = oncelog.Worker(ledger, handle, poll=0.01, concurrency=8)
    assert worker.run(until_idle=True) == oncelog.EXIT_COMPLETED
    assert set(statuses_of(ledger).values()) == {oncelog.RunStatus.COMPLETED}
    assert most > 1, "the runs awaited one after another"


def test_max_runs_counts_the_runs_claimed(ledger: oncelog.Ledger) -> None:
    for n in range(5):
        ledger.submit(f"r{n}", f"r{n}")
    worker = oncelog.Worker(ledger, lambda run, input: run.effect("n", note, input), concurrency=3)
    assert worker.run(max_runs=4) == oncelog.EXIT_COMPLETED
    assert Counter(statuses_of(ledger).values()) == {
        oncelog.RunStatus.COMPLETED: 4,
        oncelog.RunStatus.QUEUED: 1,
    }


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_concurrency_must_be_a_whole_number_from_one(ledger: oncelog.Ledger, bad: object) -> None:
    with pytest.raises(oncelog.ConfigurationError, match="concurrency"):
        oncelog.Worker(ledger, lambda run, input: None, concurrency=bad)  # type: ignore[arg-type]


def statuses_of(ledger: oncelog.Ledger) -> dict[str, oncelog.RunStatus]:
    return {r.run_id: r.status for r in ledger.runs()}


def test_many_runs_at_once_in_threads_and_on_the_loop_share_one_ledger(
    ledger: oncelog.Ledger,
) -> None:
    """Plain and async handlers side by side, 32 runs at once: the store is used from the
    run threads, the loop's store threads and the heartbeat thread together; every run
    completes, every effect is made once and the journal verifies."""
    import asyncio

    calls: Counter[str] = Counter()
    lock = threading.Lock()

    @oncelog.tool(kind="create", name="count")
    def count(text: str, *, idempotency_key: str) -> str:
        with lock:
            calls[idempotency_key] += 1
        time.sleep(0.01)
        return text

    @oncelog.tool(kind="create", name="count_async")
    async def count_async(text: str, *, idempotency_key: str) -> str:
        calls[idempotency_key] += 1  # on the loop's one thread
        await asyncio.sleep(0.01)
        return text

    def plain(run: oncelog.Run, input: int) -> None:
        for n in range(3):
            run.effect(f"e{n}", count, f"{input}-{n}")

    async def awaiting(run: oncelog.AsyncRun, input: int) -> None:
        for n in range(3):
            await run.effect(f"e{n}", count_async, f"{input}-{n}")

    for n in range(96):
        ledger.submit(f"r{n}", n, agent="plain" if n % 2 else "async")
    worker = oncelog.Worker(ledger, {"plain": plain, "async": awaiting}, concurrency=32)
    assert worker.run(until_idle=True) == oncelog.EXIT_COMPLETED
    assert set(statuses_of(ledger).values()) == {oncelog.RunStatus.COMPLETED}
    assert len(calls) == 96 * 3
    assert set(calls.values()) == {1}
    assert ledger.verify().ok
