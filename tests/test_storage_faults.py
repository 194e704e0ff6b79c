"""Storage faults: an fsync failing with EIO, a write failing with EIO, a full disk.

The invariant (DESIGN.md 1 and 7): an effect never runs when its intent could not be made
durable, a failed commit never leads to a second execution, and the ledger reopens
consistent. Every test runs a real agent process whose effect appends a line to a marker
file, so executions are counted outside the process that failed.

How the faults are injected. libfiu (Debian ``fiu-utils``) wraps libc calls when a process
runs under ``fiu-run -x``; its failure points are named after the call, e.g.
``posix/io/sync/fdatasync`` and ``posix/io/rw/pwrite`` (``pwrite64`` included). The agent
arms the point itself, through libfiu's control API, immediately before the commit under
test: arming from the start would fail the ledger's own open, and arming from outside
(``fiu-ctrl`` with the pid) would need a handshake to hit the same instant. Debian's SQLite
(which CPython's ``sqlite3`` links) appends WAL frames with ``pwrite64``. A commit is made
durable with one ``fdatasync`` of the WAL: inside the commit with ``synchronous=FULL``
(durability ``full``), right after it by the store by default (durability ``intent``);
nothing between the arming and that commit syncs or writes, so the failing call is exactly
the commit's. ``failinfo`` sets errno (EIO); ``onetime`` fails that one call and lets
everything after it succeed.

Why the endings differ. By default the intent's commit is published before its fsync, so
a failed fsync leaves it committed whatever follows: the step is in doubt at the next run.
With ``FULL`` the frames were written, only not synced; SQLite does not publish them, but
its recovery at the next open accepts every frame whose checksum is valid. So such a
commit reappears after a restart unless something overwrote it: if the process goes on,
its next commit overwrites those frames and the outcome is gone; if the process dies right
after the failure, it reappears. Each case pins which ending SQLite produces, so the
in-doubt path is really exercised, and checks that ending.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

import oncelog
from oncelog import EXIT_TRY_LATER, Resolution, RunStatus, StepRecord, StepState

from .conftest import require
from .support.launch import python

AGENT = Path(__file__).parent / "fault_agents" / "notice_agent.py"
RUN_ID = "ticket-4711"
STEPS = ("a", "b", "c")
FAULTY = "b"  # the step whose commit fails; "a" before it succeeded, "c" after it never ran
FDATASYNC = "posix/io/sync/fdatasync"
PWRITE = "posix/io/rw/pwrite"
AGENT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Files:
    ledger: Path
    markers: Path  # one JSON line per execution of the effect
    report: Path  # how the agent's last process ended


@dataclass(frozen=True)
class Ending:
    returncode: int
    error_type: str | None
    message: str | None


@dataclass(frozen=True)
class FaultCase:
    point: str
    once: bool  # the fault fails one call; else every call until the process ends
    dies: bool  # the agent is killed right after the failed commit (no later commit or close)
    commit_survives: bool  # what SQLite's recovery then shows: the failed commit, or not
    use_async: bool = False  # the agent uses AsyncRun: its commits run in worker threads
    # An outcome commit fsyncs only with durability "full"; with "intent" its frames ride
    # on the next intent's fsync, whose failure is an intent fault.
    durability: str = "intent"

    def options(self, phase: str) -> list[str]:
        command = fiu_command(self.point, once=self.once)
        options = ["--fault", command, "--fault-step", FAULTY, "--fault-phase", phase]
        options += ["--durability", self.durability]
        options += ["--die-on-store-error"] if self.dies else []
        return [*options, "--async"] if self.use_async else options


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path / "ledger.db", tmp_path / "markers.jsonl", tmp_path / "report.json")


@pytest.fixture
def fiu() -> None:
    require(
        shutil.which("fiu-run") is not None,
        "libfiu (Debian fiu-utils) is needed for fsync fault tests",
    )


def fiu_command(point: str, *, once: bool) -> str:
    """A libfiu control command: fail ``point`` with EIO, once or until the process ends."""
    return f"enable name={point},failinfo={errno.EIO}" + (",onetime" if once else "")


def agent_command(files: Files, *options: str, under_fiu: bool = False) -> list[str]:
    command = python(str(AGENT), str(files.ledger), RUN_ID)
    command += [str(files.markers), str(files.report), "--steps", ",".join(STEPS), *options]
    # -f "": no control FIFO in /tmp; the agent arms its faults through the library itself.
    return ["fiu-run", "-x", "-f", "", *command] if under_fiu else command


def agent_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}


def read_ending(files: Files, returncode: int, stderr: str) -> Ending:
    if returncode == -signal.SIGKILL and not files.report.exists():
        return Ending(returncode, None, None)  # killed (--crash-before) before it could say
    assert files.report.exists(), f"the agent wrote no report (exit {returncode}): {stderr}"
    report = json.loads(files.report.read_text())
    files.report.unlink()
    return Ending(returncode, report["error_type"], report["message"])


def run_agent(files: Files, *options: str, under_fiu: bool = False) -> Ending:
    done = subprocess.run(
        agent_command(files, *options, under_fiu=under_fiu),
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT,
        check=False,
    )
    return read_ending(files, done.returncode, done.stderr)


def executions(files: Files) -> Counter[str]:
    """How many times each step's effect really ran, from the effect's own records."""
    if not files.markers.exists():
        return Counter()
    lines = files.markers.read_text().splitlines()
    return Counter(json.loads(line)["step"] for line in lines)


def marker_keys(files: Files) -> list[str]:
    """The idempotency keys the provider received, one per execution."""
    return [json.loads(line)["key"] for line in files.markers.read_text().splitlines()]


def reopen_consistent(ledger_path: Path) -> dict[str, StepRecord]:
    """Open the ledger afresh (no fault, the writer gone), check it, return its steps.

    Consistent means: SQLite's own checks pass, and the steps agree with the journal that
    is written in the same transactions (an intent recovered without its journal entry,
    or the reverse, would show a torn transaction)."""
    with closing(sqlite3.connect(ledger_path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    with oncelog.open(str(ledger_path)) as ledger:
        steps = ledger.steps(RUN_ID)
        journal = ledger.journal(RUN_ID)
        assert ledger.get_run(RUN_ID).next_seq == len(steps)
    assert [s.seq for s in steps] == list(range(len(steps)))
    for step in steps:
        events = [e for e in journal if e.seq == step.seq]
        intents = [e for e in events if e.event == "intent"]
        assert len(intents) == step.attempts, (step, events)
        assert intents[-1].data["key"] == step.key
        if step.state is StepState.IN_FLIGHT:
            assert events[-1].event == "intent", (step, events)
        if step.state is StepState.DONE:
            assert events[-1].event in ("outcome", "resolved"), (step, events)
    return {s.step_id: s for s in steps}


def resolve(ledger_path: Path, resolution: Resolution) -> None:
    """A person decides the one step in doubt, as the CLI or console would."""
    with oncelog.open(str(ledger_path)) as ledger:
        assert ledger.get_run(RUN_ID).status is RunStatus.HALTED
        [doubt] = ledger.in_doubt()
        assert json.loads(doubt.args_json)["args"] == [FAULTY]
        result = {"sent": FAULTY} if resolution is Resolution.DONE else None
        ledger.resolve(RUN_ID, doubt.step_id, resolution, by="on-call", result=result)


def assert_completed_once_each(files: Files, ending: Ending) -> None:
    assert ending == Ending(0, None, None)
    assert executions(files) == Counter(dict.fromkeys(STEPS, 1))
    final = reopen_consistent(files.ledger).values()
    assert [r.state for r in final] == [StepState.DONE] * len(STEPS)
    # The provider saw each recorded step's key once, and no other key.
    assert sorted(marker_keys(files)) == sorted(r.key for r in final)
    with oncelog.open(str(files.ledger)) as ledger:
        assert ledger.get_run(RUN_ID).status is RunStatus.COMPLETED


def assert_failed_commit(ending: Ending, case: FaultCase, expected_text: str) -> None:
    """The agent was told, with a typed error, and stopped."""
    assert ending.error_type == "StoreUnavailable", ending
    assert ending.message is not None
    assert expected_text in ending.message
    assert ending.returncode == (-signal.SIGKILL if case.dies else EXIT_TRY_LATER)


INTENT_FAULTS = {
    # The intent was committed before its fsync failed: it stays, whatever comes next (the
    # run marked failed, every later sync failing too, or the process killed).
    "fdatasync-once": FaultCase(FDATASYNC, once=True, dies=False, commit_survives=True),
    "fdatasync-once-async": FaultCase(
        FDATASYNC, once=True, dies=False, commit_survives=True, use_async=True
    ),
    "fdatasync-always": FaultCase(FDATASYNC, once=False, dies=False, commit_survives=True),
    "fdatasync-then-killed": FaultCase(FDATASYNC, once=False, dies=True, commit_survives=True),
    # A failed write leaves no complete frame to recover.
    "pwrite-once": FaultCase(PWRITE, once=True, dies=False, commit_survives=False),
    "pwrite-then-killed": FaultCase(PWRITE, once=False, dies=True, commit_survives=False),
}


@pytest.mark.usefixtures("fiu")
@pytest.mark.parametrize("case", INTENT_FAULTS.values(), ids=INTENT_FAULTS.keys())
def test_failed_intent_commit_never_runs_the_effect(files: Files, case: FaultCase) -> None:
    failed = run_agent(files, *case.options("intent"), under_fiu=True)

    assert_failed_commit(failed, case, "disk I/O error")
    assert executions(files) == Counter({"a": 1}), "the effect ran without a durable intent"
    steps = reopen_consistent(files.ledger)
    assert steps["a"].state is StepState.DONE
    assert (FAULTY in steps) is case.commit_survives, "not the ending this case exercises"

    resumed = run_agent(files)
    if FAULTY in steps:
        # The intent came back although its commit failed: the step is in doubt, so the
        # run halts rather than guess; the effect did not run, so a person says not_done.
        assert steps[FAULTY].state is StepState.IN_FLIGHT
        assert (resumed.returncode, resumed.error_type) == (3, "AmbiguousOutcome")
        assert executions(files) == Counter({"a": 1})
        assert reopen_consistent(files.ledger)[FAULTY].state is StepState.UNKNOWN
        resolve(files.ledger, Resolution.NOT_DONE)
        resumed = run_agent(files)
    assert_completed_once_each(files, resumed)


OUTCOME_FAULTS = {
    # The run-failed commit overwrites the unsynced outcome: the step stays in flight.
    "fdatasync-once": FaultCase(
        FDATASYNC, once=True, dies=False, commit_survives=False, durability="full"
    ),
    "fdatasync-once-async": FaultCase(
        FDATASYNC, once=True, dies=False, commit_survives=False, use_async=True, durability="full"
    ),
    # Nothing overwrites the unsynced outcome: recovery brings it back, the step is done.
    "fdatasync-then-killed": FaultCase(
        FDATASYNC, once=False, dies=True, commit_survives=True, durability="full"
    ),
}


@pytest.mark.usefixtures("fiu")
@pytest.mark.parametrize("case", OUTCOME_FAULTS.values(), ids=OUTCOME_FAULTS.keys())
def test_failed_outcome_commit_never_runs_the_effect_again(files: Files, case: FaultCase) -> None:
    failed = run_agent(files, *case.options("outcome"), under_fiu=True)

    assert_failed_commit(failed, case, "disk I/O error")
    assert executions(files) == Counter({"a": 1, "b": 1})
    steps = reopen_consistent(files.ledger)
    outcome_survived = steps[FAULTY].state is StepState.DONE
    assert outcome_survived is case.commit_survives, "not the ending this case exercises"

    resumed = run_agent(files)
    if not outcome_survived:
        # The effect ran but its outcome is not recorded: in doubt, never re-run.
        assert steps[FAULTY].state is StepState.IN_FLIGHT
        assert (resumed.returncode, resumed.error_type) == (3, "AmbiguousOutcome")
        assert executions(files) == Counter({"a": 1, "b": 1})
        resolve(files.ledger, Resolution.DONE)
        resumed = run_agent(files)
    assert_completed_once_each(files, resumed)


# -- a full disk ----------------------------------------------------------------------------

SMALL_DISK = "size=1m,mode=0700"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own, so filling it disturbs nothing else."""
    require(os.geteuid() == 0, "mounting a small tmpfs for the full-disk test needs root")
    require(shutil.which("mount") is not None, "mount(8) is needed for the full-disk test")
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", SMALL_DISK, "oncelog-full-disk", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    require(mounted.returncode == 0, f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True, timeout=60)


def fill(folder: Path, name: str = "filler") -> Path:
    """Write a file until the file system refuses another byte."""
    filler = folder / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for size in (1 << 16, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0
    return filler


def run_agent_filling_disk_before(files: Files, step: str, disk: Path) -> tuple[Ending, Path]:
    """Run the agent; when it reaches ``step`` (its earlier steps done), fill the disk."""
    agent = subprocess.Popen(
        agent_command(files, "--pause-before", step),
        env=agent_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline() == f"paused before {step}\n"
        filler = fill(disk)
        _, stderr = agent.communicate("go\n", timeout=AGENT_TIMEOUT)
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait()
    return read_ending(files, agent.returncode, stderr), filler


def test_full_disk_never_runs_the_effect(tmp_path: Path, small_disk: Path) -> None:
    # The ledger on the small disk; the effect's markers and the report on the big one.
    files = Files(small_disk / "ledger.db", tmp_path / "markers.jsonl", tmp_path / "report.json")

    failed, filler = run_agent_filling_disk_before(files, FAULTY, small_disk)

    assert (failed.returncode, failed.error_type) == (EXIT_TRY_LATER, "StoreUnavailable")
    assert failed.message is not None
    assert str(files.ledger) in failed.message
    assert "disk is full" in failed.message
    assert executions(files) == Counter({"a": 1}), "the effect ran without a durable intent"

    # Restarted while the disk is still full (the agent's exit moved its WAL into the
    # ledger and removed it, which may have freed a few pages): the same clear error,
    # nothing runs.
    refill = fill(small_disk, "refill")
    again = run_agent(files)
    assert (again.returncode, again.error_type) == (EXIT_TRY_LATER, "StoreUnavailable")
    assert again.message is not None
    assert "disk is full" in again.message
    assert executions(files) == Counter({"a": 1})

    filler.unlink()
    refill.unlink()
    steps = reopen_consistent(files.ledger)
    assert list(steps) == ["a"]  # a commit refused for space left no recoverable intent
    assert_completed_once_each(files, run_agent(files))


# -- an agent that retries after a failed commit -------------------------------------------


# A Run refuses every step after one of its store operations failed: the failed step used
# its position, so a retry in the same process would land one position later.
RETRY_CASES = [
    pytest.param("intent", "positional", id="intent-positional"),
    pytest.param("intent", "named", id="intent-named"),
    pytest.param("outcome", "positional", id="outcome-positional"),
    pytest.param("outcome", "named", id="outcome-named"),
]


@pytest.mark.usefixtures("fiu")
@pytest.mark.parametrize(("phase", "naming"), RETRY_CASES)
def test_retry_after_failed_commit_keeps_each_effect_once(
    files: Files, phase: str, naming: str
) -> None:
    """Agent code may catch StoreUnavailable and call the step again, as it would after
    any transient error. Whatever the Run does then (refuse, or record the retry where
    the failed attempt belongs), each effect must run once, across a crash and a resume."""
    once = FaultCase(FDATASYNC, once=True, dies=False, commit_survives=False, durability="full")
    style = ["--positional"] if naming == "positional" else []
    options = [*once.options(phase), "--retry-store-error", "--crash-before", "c", *style]

    first = run_agent(files, *options, under_fiu=True)

    assert first.returncode != 0
    assert executions(files)[FAULTY] <= 1, "the retry ran the effect again"
    resumed = run_agent(files, *style)
    if resumed.error_type == "AmbiguousOutcome":
        # A person asks the provider (here, its own records) and decides.
        sent = executions(files)[FAULTY] == 1
        resolve(files.ledger, Resolution.DONE if sent else Resolution.NOT_DONE)
        resumed = run_agent(files, *style)
    assert executions(files)[FAULTY] == 1, "the effect ran twice"
    assert_completed_once_each(files, resumed)
