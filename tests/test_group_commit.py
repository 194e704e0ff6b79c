"""Group commit on SQLite: the runs of one process share the fsyncs of the WAL, and an
intent is still durable before its tool is called.

Many threads, each a run, make intents at once under the fsync-recording shim
(``support/power_loss.py``) until one of them is SIGKILLed at a crash point: the shim's
log counts the WAL's fsyncs, fewer than the intents made, and the ledger cut back to its
last fsync (the disk after a power cut at that instant) holds the intent of every call
the provider saw. Counted at the provider's own file, never from the ledger.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path

import pytest

import oncelog
from oncelog.stores import _group_sync
from oncelog.stores._group_sync import GroupSync

from .conftest import require
from .support.launch import run_python
from .support.power_loss import PowerSetup, build_shim

THREADS_AGENT = Path(__file__).parent / "power_agents" / "threads.py"
RUNS, EFFECTS = 12, 5  # about 500 WAL pages: no checkpoint folds the WAL meanwhile


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("gcc") is not None, "gcc builds the fsync-recording shim")
    return build_shim(tmp_path_factory.mktemp("shim"))


def intents(ledger: Path) -> dict[str, str]:
    """Each step's idempotency key, by key, as the ledger holds it."""
    with oncelog.open(str(ledger)) as opened:
        return {
            step.key: step.step_id
            for run in opened.runs()
            for step in opened.steps(run.run_id)
            if step.key is not None
        }


def test_concurrent_intents_share_fsyncs_and_every_called_one_survives_a_power_cut(
    shim: Path, tmp_path: Path
) -> None:
    setup = PowerSetup(shim, tmp_path, "intent")
    setup.create()
    done = run_python(
        THREADS_AGENT, "--ledger", setup.ledger, "--provider", setup.provider,
        "--runs", str(RUNS), "--effects", str(EFFECTS),
        env={**setup.env(setup.ledger, crash_at=f"after_call@effect-{EFFECTS - 1}")},
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-3000:]
    called = setup.calls()
    assert called, "no tool was called before the kill"
    copy = setup.cut_back(tmp_path / "power-cut")
    made = intents(setup.ledger)  # the files as the OS has them: every intent committed
    wal_syncs = setup.syncs().count("ledger.db-wal")
    assert len(made) >= len(called) > wal_syncs, (len(made), len(called), wal_syncs)
    on_disk = intents(copy)
    assert [key for key in called if key not in on_disk] == [], "a called intent was lost"
    with oncelog.open(str(copy)) as ledger:
        assert ledger.verify().ok


class HeldSync:
    """``fdatasync`` held until let go, its first call failing if asked, its calls
    counted: the interleaving of threads made exact."""

    def __init__(self, first_fails: bool) -> None:
        self.entered, self.go = threading.Event(), threading.Event()
        self.first_fails, self.calls = first_fails, 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        assert self.go.wait(10)
        if self.first_fails and self.calls == 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fdatasync(fd)


def wait_in_thread(group: GroupSync, ticket: int, errors: list[BaseException]) -> threading.Thread:
    def wait() -> None:
        try:
            group.wait(ticket)
        except OSError as exc:
            errors.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


@pytest.mark.parametrize("fails", [False, True], ids=["synced", "failed"])
def test_commits_made_during_an_fsync_share_the_next_and_a_failure_fails_each_it_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    wal = tmp_path / "ledger.db-wal"
    wal.write_bytes(b"frames")
    group = GroupSync(str(wal))
    held = HeldSync(fails)
    monkeypatch.setattr(_group_sync, "_fdatasync", held)
    errors: list[BaseException] = []
    tickets = [group.committed() for _ in range(2)]  # both before the first fsync starts
    first = [wait_in_thread(group, ticket, errors) for ticket in tickets]
    assert held.entered.wait(10)
    # Commits made while that fsync runs: it may not cover them, the next one does.
    later = [group.committed() for _ in range(3)]
    second = [wait_in_thread(group, ticket, errors) for ticket in later]
    held.go.set()
    for thread in first + second:
        thread.join(10)
    # The first two rode on one fsync, the three behind it on a second: never one each.
    assert held.calls == 2
    # A failure fails every commit the failed fsync covered, and only those: none of them
    # tried again, as the next fsync could succeed without the pages the kernel dropped.
    assert [getattr(e, "errno", None) for e in errors] == ([errno.EIO] * 2 if fails else [])
    group.close()


def test_a_commit_still_on_its_way_to_its_sync_when_the_store_closes_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A committer leaves the store's lock before it waits for its fsync, so a close can
    come between; the close syncs it while the WAL is there, and its wait returns."""
    synced: list[int] = []

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        os.fdatasync(fd)

    monkeypatch.setattr(_group_sync, "_fdatasync", fdatasync)
    wal = tmp_path / "ledger.db-wal"
    wal.write_bytes(b"frames")
    group = GroupSync(str(wal))
    ticket = group.committed()
    group.close()
    wal.unlink()  # as the last connection's close removes it
    group.wait(ticket)
    assert len(synced) == 1
