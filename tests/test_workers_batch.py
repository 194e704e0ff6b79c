"""A worker with free slots claims runs in batches (``--concurrency``): up to one run per
free slot in one transaction, each run with a lease, an owner, a fencing token and a
``lease_acquired`` of its own, on both stores.

In processes, held at the commit of a batch claim (the pause point ``after_claim_commit``,
before any run of it starts): SIGKILLed, another worker takes every run at once; stopped
past the lease, another takes every run once the leases expire, and the stopped one,
let go, performs nothing; SIGTERMed, it gives every run back at once. Workers racing for
one queue take each run once. The provider's own files say what happened in the world
(``worker_agents/handlers.py``), never the ledger.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

import oncelog
from oncelog.process import _leases as leases
from oncelog.stores._sql_queue import CLAIM_WINDOW

from .support.pause_points import PausePoint
from .test_workers import TIMEOUT, World, ended
from .test_workers_concurrency import assert_each_effect_once, statuses, submit

BATCH = 6


@pytest.fixture
def paused() -> Iterator[PausePoint]:
    point = PausePoint("after_claim_commit")
    yield point
    point.close()


def leases_taken(url: str, run_id: str) -> list[tuple[int, str, str]]:
    """The run's ``lease_acquired`` records: journal id, owner, fencing token."""
    with oncelog.open(url) as ledger:
        return [
            (e.id, str(e.data["owner"]), str(e.data["token"]))
            for e in ledger.journal(run_id)
            if e.event == "lease_acquired"
        ]


def assert_one_batch(url: str, runs: list[str]) -> None:
    """Every run leased once, each by an owner of its own, the leases journalled one
    after another (one transaction: nothing came between them)."""
    taken = [leases_taken(url, run_id) for run_id in runs]
    assert all(len(t) == 1 for t in taken), taken
    ids = sorted(t[0][0] for t in taken)
    assert len({t[0][1] for t in taken}) == len(runs), "two runs share an owner"
    with oncelog.open(url) as ledger:
        between = [e for e in ledger.journal() if ids[0] <= e.id <= ids[-1]]
    assert [e.event for e in between].count("lease_acquired") == len(between) == len(runs)


# -- the claim itself ---------------------------------------------------------------------


def pause() -> None:
    time.sleep(0.01)  # so that the store's clock orders what follows


def test_a_batch_takes_the_oldest_runs_each_with_a_lease_of_its_own(
    ledger: oncelog.Ledger,
) -> None:
    for n in range(5):
        ledger.submit(f"a{n}", n, agent="a")
        pause()
    ledger.submit("b0", 0, agent="b")
    first = ledger.claim_many(["a"], 3)
    assert [c.run_id for c in first] == ["a0", "a1", "a2"]
    owners = [c.claimed_lease.owner for c in first]
    assert len(set(owners)) == 3
    assert [c.claimed_lease.token for c in first] == [1, 1, 1]
    for context in first:
        record = ledger.get_run(context.run_id)
        assert (record.status, record.owner) == (
            oncelog.RunStatus.RUNNING,
            context.claimed_lease.owner,
        )
    assert [c.run_id for c in ledger.claim_many(["a"], 5)] == ["a3", "a4"], "fewer than asked"
    assert ledger.claim_many(["a"], 5) == []
    assert [c.run_id for c in ledger.claim_many(None, 5)] == ["b0"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 10_001])
def test_a_batch_is_a_whole_number_of_runs(ledger: oncelog.Ledger, bad: object) -> None:
    ledger.submit("r", 0)
    with pytest.raises(oncelog.ConfigurationError, match="limit"):
        ledger.claim_many(None, bad)  # type: ignore[arg-type]
    assert ledger.get_run("r").owner is None


def test_a_dead_owners_run_takes_its_turn_among_the_free_ones(ledger: oncelog.Ledger) -> None:
    """A run whose owner is gone (here: this process closed it, so it no longer holds the
    owner) goes by when it was last taken, between the runs queued before and after."""
    ledger.submit("r0", 0)
    pause()
    ledger.submit("r1", 1)
    pause()
    (orphan,) = ledger.claim_many(None, 1)
    leases.forget(orphan.claimed_lease.owner)  # its process let it go without a word
    pause()
    ledger.submit("r2", 2)
    taken = ledger.claim_many(None, 3)
    assert [c.run_id for c in taken] == ["r1", "r0", "r2"]
    assert [c.claimed_lease.token for c in taken] == [1, 2, 1]


def test_runs_queued_after_more_held_runs_than_the_window_are_claimed(
    ledger: oncelog.Ledger,
) -> None:
    """A worker holding more live runs than one claim asks the owners of still finds the
    runs submitted after them."""
    held_count = CLAIM_WINDOW + 6
    for n in range(held_count):
        ledger.submit(f"held{n}", n)
    held = ledger.claim_many(None, held_count)
    assert len(held) == held_count
    pause()
    ledger.submit("late", 0)
    assert [c.run_id for c in ledger.claim_many(None, 10)] == ["late"]
    for context in held:
        ledger.release_claim(context)
    assert {r.status for r in ledger.runs(limit=held_count + 1)} == {
        oncelog.RunStatus.QUEUED,
        oncelog.RunStatus.RUNNING,  # "late", still held
    }


def test_a_claim_given_back_is_queued_at_once(ledger: oncelog.Ledger) -> None:
    ledger.submit("r", 0)
    (context,) = ledger.claim_many(None, 2)
    ledger.release_claim(context)
    record = ledger.get_run("r")
    assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
    assert "claimed but not started" in str(record.reason)
    events = [e.event for e in ledger.journal("r")]
    assert events == ["run_submitted", "lease_acquired", "run_queued"]
    assert [c.run_id for c in ledger.claim_many(None, 2)] == ["r"]


def test_a_claim_given_back_after_a_takeover_changes_nothing(
    ledger: oncelog.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    """The first owner is gone by this process's account; another claim takes the run;
    the first claim given back then is refused by its fence, said in the log, not raised."""
    ledger.submit("r", 0)
    (first,) = ledger.claim_many(None, 1)
    leases.forget(first.claimed_lease.owner)
    (second,) = ledger.claim_many(None, 1)
    with caplog.at_level(logging.WARNING, logger="oncelog"):
        ledger.release_claim(first)
    assert "could not give back run r" in caplog.text
    record = ledger.get_run("r")
    assert (record.status, record.owner) == (
        oncelog.RunStatus.RUNNING,
        second.claimed_lease.owner,
    )
    ledger.release_claim(second)


# -- in processes ---------------------------------------------------------------------------


@pytest.fixture
def fleet(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    made = World(store_url, tmp_path_factory.mktemp("provider"))
    yield made
    made.stop()


def held_at_claim(
    fleet: World, paused: PausePoint, *options: str
) -> tuple[list[str], subprocess.Popen[str]]:
    """``BATCH`` runs of two effects, and a worker held right after it claimed them all."""
    runs = submit(fleet.db_path, {"effects": 2, "seconds": 0.0}, BATCH)
    first = fleet.start_worker("--concurrency", str(BATCH), *options, pause=paused)
    assert paused.wait(TIMEOUT) == first.pid
    return runs, first


def test_a_worker_killed_holding_a_batch_loses_every_run_at_once(
    fleet: World, paused: PausePoint
) -> None:
    runs, first = held_at_claim(fleet, paused)
    assert_one_batch(fleet.db_path, runs)
    first.kill()
    first.communicate(timeout=TIMEOUT)
    # A lease far longer than the test: only the owner's death lets the runs go.
    second = fleet.start_worker("--until-idle", "--concurrency", str(BATCH))
    code, stderr = ended(second)
    assert code == 0, stderr
    assert_each_effect_once(fleet, BATCH * 2)
    assert set(fleet.performed().values()) == {second.pid}
    assert set(statuses(fleet.db_path).values()) == {oncelog.RunStatus.COMPLETED}


def test_a_stopped_batch_is_taken_once_its_leases_expire(fleet: World, paused: PausePoint) -> None:
    """Held at the claim's commit, the worker lives and renews nothing (no run of the batch
    started): another takes every run once its lease runs out, not before; the first, let
    go, enters the runs it claimed, finds them taken and performs and writes nothing."""
    runs, first = held_at_claim(fleet, paused, "--until-idle", "--lease-ttl", "1")
    claimed = time.monotonic()
    second = fleet.start_worker("--concurrency", str(BATCH), "--lease-ttl", "1")
    deadline = claimed + TIMEOUT
    while set(statuses(fleet.db_path).values()) != {oncelog.RunStatus.COMPLETED}:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert time.monotonic() - claimed >= 1.0, "a run was taken before its lease expired"
    second.send_signal(signal.SIGTERM)
    assert ended(second)[0] == oncelog.EXIT_TRY_LATER
    with oncelog.open(fleet.db_path) as ledger:
        written = len(ledger.journal(limit=10_000))
    paused.release()
    code, stderr = ended(first)
    assert code == 0, stderr
    assert_each_effect_once(fleet, BATCH * 2)
    assert set(fleet.performed().values()) == {second.pid}
    with oncelog.open(fleet.db_path) as ledger:
        assert len(ledger.journal(limit=10_000)) == written, "the stopped worker wrote"
        for run_id in runs:
            record = ledger.get_run(run_id)
            assert (record.status, record.fencing_token) == (oncelog.RunStatus.COMPLETED, 2)
        assert ledger.verify().ok


def test_sigterm_after_a_batch_claim_gives_every_run_back_at_once(
    fleet: World, paused: PausePoint
) -> None:
    runs, first = held_at_claim(fleet, paused)
    first.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # delivered at once; its handler runs as the main thread reads on
    paused.release()
    code, stderr = ended(first)
    assert code == oncelog.EXIT_TRY_LATER, stderr
    assert not list(fleet.provider.glob("entered-*")), "a run of the batch started"
    with oncelog.open(fleet.db_path) as ledger:
        for run_id in runs:
            record = ledger.get_run(run_id)
            assert (record.status, record.owner) == (oncelog.RunStatus.QUEUED, None)
            assert "claimed but not started" in str(record.reason), "its handler ran"
            events = [e.event for e in ledger.journal(run_id)]
            assert events == ["run_submitted", "lease_acquired", "run_queued"]
    second = fleet.start_worker("--until-idle", "--concurrency", str(BATCH))
    code, stderr = ended(second)
    assert code == 0, stderr
    assert_each_effect_once(fleet, BATCH * 2)
    assert set(statuses(fleet.db_path).values()) == {oncelog.RunStatus.COMPLETED}


def test_workers_batch_claiming_one_queue_take_each_run_once(fleet: World) -> None:
    runs = submit(fleet.db_path, {"effects": 2, "seconds": 0.0}, 48)
    workers = [fleet.start_worker("--until-idle", "--concurrency", "8") for _ in range(3)]
    for worker in workers:
        code, stderr = ended(worker)
        assert code == 0, stderr
    assert_each_effect_once(fleet, len(runs) * 2)
    for run_id in runs:
        assert len(leases_taken(fleet.db_path, run_id)) == 1, f"{run_id} was claimed twice"
    assert set(statuses(fleet.db_path).values()) == {oncelog.RunStatus.COMPLETED}
    with oncelog.open(fleet.db_path) as ledger:
        assert ledger.verify().ok
