"""The heartbeat thread: it is woken only for a lease due before it would wake by itself,
yet renews a short lease held while it sleeps on a long one; a thread that ended is
replaced at the next hold; a forked child renews with a thread of its own, and none of
its parent's leases; a lost lease does not keep the thread polling. Each test has a
``Heartbeats`` of its own and a real SQLite ledger, whose lease expiry the test reads with
SQL of its own."""

from __future__ import annotations

import gc
import os
import sqlite3
import time
import weakref
from collections.abc import Iterator
from contextlib import closing

import pytest

from oncelog.process._heartbeat import Heartbeats
from oncelog.stores import Lease, SQLiteStore

from .test_store_contract import alive, dead


def take(store: SQLiteStore, run_id: str, owner: str, ttl: float) -> Lease:
    lease, _ = store.acquire(
        run_id, owner=owner, ttl=ttl, plan=None, replace_plan=False, create=True,
        owner_is_dead=alive,
    )  # fmt: skip
    return lease


def expires_at(path: str, run_id: str) -> float:
    with closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT lease_expires_at FROM runs WHERE run_id = ?", (run_id,))
        return float(row.fetchone()[0])


@pytest.fixture
def store(db_path: str) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(db_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def beats() -> Iterator[Heartbeats]:
    made = Heartbeats()
    yield made
    with made._lock:
        made._beats.clear()


def renewed_within(path: str, run_id: str, before: float, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if expires_at(path, run_id) > before:
            return True
        time.sleep(0.02)
    return False


def test_a_short_lease_held_while_the_thread_sleeps_on_a_long_one_is_renewed(
    store: SQLiteStore, db_path: str, beats: Heartbeats
) -> None:
    """The thread sleeps a third of the long lease (20 s); the short one is due in 0.2 s,
    sooner, so holding it wakes the thread."""
    beats.hold(store, take(store, "long", "w-long", 60.0))
    time.sleep(0.2)  # the thread is asleep on the long lease
    assert beats._wakes_at > time.monotonic() + 10
    short = take(store, "short", "w-short", 0.6)
    before = expires_at(db_path, "short")
    beats.hold(store, short)
    assert renewed_within(db_path, "short", before, 1.5)


def test_a_lease_due_later_than_the_thread_wakes_does_not_wake_it(
    store: SQLiteStore, beats: Heartbeats
) -> None:
    beats.hold(store, take(store, "first", "w-1", 3.0))  # the thread wakes in 1 s
    time.sleep(0.2)
    waits = counted_waits(beats)
    beats.hold(store, take(store, "second", "w-2", 30.0))  # due in 10 s
    time.sleep(0.3)
    assert waits == []


def counted_waits(beats: Heartbeats) -> list[float]:
    """The thread's waits from now on (each time it goes back to sleep)."""
    waits: list[float] = []
    wait = beats._wake.wait

    def counting(timeout: float | None = None) -> bool:
        waits.append(time.monotonic())
        return wait(timeout)

    beats._wake.wait = counting  # type: ignore[method-assign]
    return waits


class Failing(SQLiteStore):
    """A store whose first renewal fails with an error no store raises on purpose."""

    failed = False

    def heartbeat(self, lease: Lease) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug in a renewal")
        super().heartbeat(lease)


# The thread's end is the case: the exception that ended it is reported, not a failure.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_ended_is_replaced_at_the_next_hold(db_path: str, beats: Heartbeats) -> None:
    store = Failing(db_path)
    try:
        beats.hold(store, take(store, "first", "w-1", 0.3))
        deadline = time.monotonic() + 2
        while (beats._thread is not None or not store.failed) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.failed
        assert beats._thread is None  # the renewal's error ended it
        second = take(store, "second", "w-2", 0.6)
        before = expires_at(db_path, "second")
        beats.hold(store, second)
        assert renewed_within(db_path, "second", before, 1.5)
    finally:
        store.close()


def test_a_forked_child_renews_with_a_thread_of_its_own(db_path: str, beats: Heartbeats) -> None:
    with closing(SQLiteStore(db_path)) as store:
        beats.hold(store, take(store, "parent", "w-parent", 60.0))
    time.sleep(0.1)
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here, its lock is fresh
        code = 1
        try:
            child = SQLiteStore(db_path)
            lease = take(child, "child", "w-child", 0.6)
            before = expires_at(db_path, "child")
            beats.hold(child, lease)
            code = 0 if renewed_within(db_path, "child", before, 1.5) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_forked_child_renews_none_of_its_parents_leases(db_path: str, beats: Heartbeats) -> None:
    """A child that holds a lease of its own must not renew the ones it inherited: were
    the parent killed, they would be kept alive by a process that is not running them."""
    with closing(SQLiteStore(db_path)) as store:
        lease = take(store, "parent", "w-parent", 0.6)
        beats.hold(store, lease)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                child = SQLiteStore(db_path)
                beats.hold(child, take(child, "child", "w-child", 0.6))
                time.sleep(1.5)  # the parent's lease would be due for renewal 4 times
                code = 0
            finally:
                os._exit(code)
        beats.release(lease)  # the parent stops renewing it at once
        before = expires_at(db_path, "parent")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert expires_at(db_path, "parent") == before


def test_a_lost_lease_does_not_keep_the_thread_polling(
    store: SQLiteStore, beats: Heartbeats
) -> None:
    """Once a renewal finds the run taken over, the lease is renewed no more; the thread
    sleeps until the next lease is due instead of looking every 10 ms."""
    lease = take(store, "r", "w-lost", 0.3)
    store.acquire(
        "r", owner="w-new", ttl=60.0, plan=None, replace_plan=False, create=True,
        owner_is_dead=dead,
    )  # fmt: skip
    beats.hold(store, lease)
    deadline = time.monotonic() + 2
    while not beats.lost(lease) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert beats.lost(lease)
    waits = counted_waits(beats)
    time.sleep(0.5)
    assert len(waits) <= 1, waits


def test_a_sleeping_thread_keeps_no_store_alive(db_path: str, beats: Heartbeats) -> None:
    """Once its leases are released, the thread refers to none of them, renewed or not: a
    store nobody else holds is collected (its connection closed, SQLite's WAL with it)."""
    store = SQLiteStore(db_path)
    renewed, kept = take(store, "renewed", "w-1", 0.3), take(store, "kept", "w-2", 30.0)
    before = expires_at(db_path, "renewed")
    beats.hold(store, renewed)
    beats.hold(store, kept)
    assert renewed_within(db_path, "renewed", before, 1.5)
    beats.release(renewed)
    beats.release(kept)
    time.sleep(0.3)  # the thread is asleep again
    assert beats._wakes_at > 0
    gone = weakref.ref(store)
    del store, renewed, kept
    gc.collect()
    assert gone() is None
