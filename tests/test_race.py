"""Real processes racing for one run: exactly one executes the effect.

Agents (``race_agents/racer.py``) open the same SQLite file, wait at a barrier (a pipe
the parent closes, so they all wake at the same instant) and run a read step and one
effect whose tool appends to a marker file: the provider's own record of how often it
really acted.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

import oncelog

from .support.launch import CRASH_ENV, python
from .support.pause_points import PAUSE_ENV, PausePoint

AGENT = Path(__file__).parent / "race_agents" / "racer.py"
ROUNDS = 20
TIMEOUT = 30.0
OPEN_FDS: set[int] = set()  # pipe ends the parent has not closed yet, for cleanup


@dataclass
class Ended:
    code: int
    report: dict[str, Any] | None  # what the agent printed when it completed
    stderr: str


class Racer:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.ended: Ended | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def end(self, timeout: float = TIMEOUT) -> Ended:
        """Wait for the exit; read what the agent printed (once: the pipes close)."""
        if self.ended is None:
            out, err = self.proc.communicate(timeout=timeout)
            report = json.loads(out) if out.strip() else None
            self.ended = Ended(self.proc.returncode, report, err)
        return self.ended

    def wait_until_stopped(self, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            if pid and os.WIFSTOPPED(status):
                return
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                pytest.fail(f"agent {pid} ended with {self.proc.returncode} instead of stopping")
            time.sleep(0.01)  # waitpid has no timeout
        pytest.fail(f"agent {self.pid} did not stop within {timeout} s")


class Pipe:
    """A pipe whose ends the parent closes once the children have inherited them."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        OPEN_FDS.update((self.read, self.write))

    @staticmethod
    def close(fd: int) -> None:
        if fd in OPEN_FDS:
            OPEN_FDS.discard(fd)
            os.close(fd)

    def close_read(self) -> None:
        Pipe.close(self.read)

    def close_write(self) -> None:
        Pipe.close(self.write)

    def read_line(self, timeout: float = TIMEOUT) -> str:
        """One line; '' at end of file (every writer gone)."""
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([self.read], [], [], deadline - time.monotonic())
            assert ready, "timed out waiting on a pipe"
            chunk = os.read(self.read, 1)
            if not chunk:
                return ""
            data += chunk
        return data.decode().strip()


class Start(Protocol):
    def __call__(
        self, *args: str, fds: tuple[int, ...] = (), env: dict[str, str] | None = None
    ) -> Racer: ...


@contextmanager
def agents(tmp_path: Path, db: str | None = None) -> Iterator[Start]:
    """Start agent processes on ``db`` (the SQLite file ``ledger.db`` in ``tmp_path`` if
    not given); whatever happens, none outlives the test."""
    started: list[Racer] = []
    unarmed = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, PAUSE_ENV)}

    def start(*args: str, fds: tuple[int, ...] = (), env: dict[str, str] | None = None) -> Racer:
        proc = subprocess.Popen(
            python(str(AGENT), db or str(tmp_path / "ledger.db"), *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=fds,
            env={**unarmed, **(env or {})},
        )
        started.append(Racer(proc))
        return started[-1]

    try:
        yield start
    finally:
        for racer in started:
            if racer.proc.poll() is None:
                racer.proc.kill()  # SIGKILL ends a stopped process too
            racer.proc.communicate()  # reaps it and closes its pipes
        for fd in list(OPEN_FDS):  # a failed assertion may leave ends open
            Pipe.close(fd)


class Barrier:
    """Children signal they are ready on one pipe and wait for the end of another."""

    def __init__(self) -> None:
        self.ready = Pipe()
        self.go = Pipe()

    def args(self) -> list[str]:
        return ["--ready", str(self.ready.write), "--go", str(self.go.read)]

    def fds(self) -> tuple[int, ...]:
        return (self.ready.write, self.go.read)

    def release(self, count: int) -> None:
        self.ready.close_write()
        self.go.close_read()
        got = b""
        while len(got) < count:
            ready, _, _ = select.select([self.ready.read], [], [], TIMEOUT)
            chunk = os.read(self.ready.read, count) if ready else b""
            assert chunk, f"only {len(got)} of {count} agents got ready"
            got += chunk
        self.ready.close_read()
        self.go.close_write()  # every waiting agent reads end of file at once


def marker_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def step_record(db: Path, run_id: str, step_id: str) -> oncelog.StepRecord:
    with oncelog.open(str(db)) as ledger:
        [record] = [s for s in ledger.steps(run_id) if s.step_id == step_id]
        return record


# -- many processes, one run, one step ---------------------------------------------------


def race_round(
    start: Start, tmp_path: Path, racers: int, round_no: int, held: bool
) -> Counter[str]:
    """One round; ``held``: the winner stays in its tool until every loser has exited."""
    run_id, marker = f"race-{round_no}", tmp_path / f"marker-{round_no}"
    barrier, in_tool, hold = Barrier(), Pipe(), Pipe()
    fds = (*barrier.fds(), in_tool.write, *((hold.read,) if held else ()))
    extra = ["--in-tool", str(in_tool.write), *(["--hold", str(hold.read)] if held else [])]
    procs = [
        start(run_id, "--marker", str(marker), *barrier.args(), *extra, fds=fds)
        for _ in range(racers)
    ]
    in_tool.close_write()
    if held:
        hold.close_read()
    try:
        barrier.release(racers)
    except AssertionError as exc:
        exited = [(p.pid, p.end(timeout=5)) for p in procs if p.proc.poll() is not None]
        raise AssertionError(f"{exc}; agents that exited: {exited}") from None
    first_in = in_tool.read_line()
    assert first_in, "no agent reached the tool"
    winner = int(first_in)
    if held:
        losers = [p.end() for p in procs if p.pid != winner]
        assert [e.code for e in losers] == [75] * (racers - 1), [e.stderr for e in losers]
        hold.close_write()
    ended = {p.pid: p.end() for p in procs}
    assert in_tool.read_line() == "", "a second agent entered the tool"
    in_tool.close_read()

    key = oncelog.idempotency_key(run_id, "charge", "append_marker")
    assert marker_lines(marker) == [f"{winner} {key}"]
    expected = {"pid": winner, "note": "hello"}
    assert ended[winner].code == 0, ended[winner].stderr
    assert ended[winner].report == {"pid": winner, "result": expected, "called": True}
    for pid, end in ended.items():
        if pid == winner:
            continue
        assert end.code in (0, 75), end.stderr
        if end.code == 0:  # came after the winner finished: replayed, did not call
            assert end.report == {"pid": pid, "result": expected, "called": False}
        else:
            assert "RunLeased" in end.stderr
    record = step_record(tmp_path / "ledger.db", run_id, "charge")
    assert (record.state, record.attempts, record.result) == (oncelog.StepState.DONE, 1, expected)
    return Counter("replayed" if e.code == 0 else "leased" for p, e in ended.items() if p != winner)


@pytest.mark.slow
@pytest.mark.parametrize("racers", [2, 4])
def test_racers_for_one_step_exactly_one_executes(tmp_path: Path, racers: int) -> None:
    losers: Counter[str] = Counter()
    with agents(tmp_path) as start:
        for round_no in range(ROUNDS):
            losers += race_round(start, tmp_path, racers, round_no, held=round_no % 2 == 0)
    print(f"{racers} racers x {ROUNDS} rounds, losers: {dict(losers)}")


# -- two processes, two runs, one file ---------------------------------------------------


def test_racers_on_different_runs_do_not_block_each_other(tmp_path: Path) -> None:
    """A holds its run inside its tool until B has completed: B never waits for A."""
    barrier, hold = Barrier(), Pipe()
    with agents(tmp_path) as start:
        a = start(
            "run-a",
            "--marker",
            str(tmp_path / "marker-a"),
            "--hold",
            str(hold.read),
            *barrier.args(),
            fds=(*barrier.fds(), hold.read),
        )
        b = start(
            "run-b", "--marker", str(tmp_path / "marker-b"), *barrier.args(), fds=barrier.fds()
        )
        hold.close_read()
        try:
            barrier.release(2)
        except AssertionError as exc:
            exited = [(r.pid, r.end(timeout=5)) for r in (a, b) if r.proc.poll() is not None]
            raise AssertionError(f"{exc}; agents that exited: {exited}") from None
        ended_b = b.end()
        assert a.proc.poll() is None, "A finished without being released"
        hold.close_write()
        ended_a = a.end()
    for run_id, end, racer in (("run-a", ended_a, a), ("run-b", ended_b, b)):
        assert end.code == 0, end.stderr
        assert end.report is not None
        assert end.report["called"] is True
        key = oncelog.idempotency_key(run_id, "charge", "append_marker")
        assert marker_lines(tmp_path / f"marker-{run_id[-1]}") == [f"{racer.pid} {key}"]


# -- a live owner in a long call keeps its run -----------------------------------------


@pytest.mark.parametrize("renewed", [True, False], ids=["renewed", "renewal-broken"])
def test_a_call_longer_than_the_lease_keeps_the_run(tmp_path: Path, renewed: bool) -> None:
    """P1 (lease 1 s) is held after its tool answered, before its outcome commits, until its
    effect is older than a lease by the store's clock; P2, started then, must find the run
    leased (exit 75) and never enter the tool: P1's heartbeat renewed the lease. The
    control breaks P1's renewal: its effect is then orphaned, P2 takes the run over and,
    finding the create in flight, halts for a person (exit 3), and P1 cannot record its
    outcome (exit 75). So the first case passes because of the heartbeat, not because P2
    was early."""
    marker, db = tmp_path / "marker", str(tmp_path / "ledger.db")
    common = ("long", "--marker", str(marker), "--lease-ttl", "1")
    paused = PausePoint("after_call@charge")
    broken = () if renewed else ("--no-heartbeat",)
    with agents(tmp_path) as start:
        try:
            first = start(*common, *broken, fds=paused.fds(), env=paused.env())
            paused.started()
            assert paused.wait(TIMEOUT) == first.pid
            effect = effect_older_than(db, lease=1.0)
            assert effect.orphaned is not renewed, effect
            second = start(*common).end()
            paused.release()
            owner = first.end()
        finally:
            paused.close()
    key = oncelog.idempotency_key("long", "charge", "append_marker")
    assert marker_lines(marker) == [f"{first.pid} {key}"]
    if renewed:
        assert second.code == 75, second.stderr
        assert "RunLeased" in second.stderr
        assert owner.code == 0, owner.stderr
        assert owner.report is not None
        assert owner.report["called"] is True
    else:
        assert second.code == 3, second.stderr
        assert "AmbiguousOutcome" in second.stderr
        assert owner.code == 75, owner.stderr
        assert "LeaseLost" in owner.stderr


def effect_older_than(db: str, lease: float) -> oncelog.EffectInDoubt:
    """The one effect in flight, once its intent is older than ``lease`` seconds by the
    store's clock (its lease, taken before it, is then due, unless renewed)."""
    deadline = time.monotonic() + TIMEOUT
    with oncelog.open(db) as ledger:
        while time.monotonic() < deadline:
            [effect] = ledger.effects_in_doubt()
            if effect.age > lease:
                return effect
            time.sleep(0.05)  # the store's clock cannot be waited on
    pytest.fail(f"the effect did not grow older than {lease} s")


# -- a stopped owner, taken over after its lease expired ---------------------------------


def test_a_stopped_owner_is_fenced_out_after_a_takeover(tmp_path: Path) -> None:
    """P1 stops before its effect; P2 takes the run over once the lease expires and
    completes; P1, continued, may not write anything: LeaseLost, exit 75."""
    marker = tmp_path / "marker"
    common = ("fenced", "--marker", str(marker), "--lease-ttl", "1")
    with agents(tmp_path) as start:
        first = start(*common, "--stop-in", "read")
        first.wait_until_stopped()
        second = start(*common, "--retry-leased", "20").end()
        assert second.code == 0, second.stderr
        os.kill(first.pid, signal.SIGCONT)
        zombie = first.end()
    assert zombie.code == 75, zombie.stderr
    assert "LeaseLost" in zombie.stderr
    assert zombie.report is None
    assert second.report is not None
    key = oncelog.idempotency_key("fenced", "charge", "append_marker")
    assert marker_lines(marker) == [f"{second.report['pid']} {key}"]
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        steps = ledger.steps("fenced")
        assert [(s.step_id, s.state, s.attempts) for s in steps] == [
            ("prepare", oncelog.StepState.DONE, 1),
            ("charge", oncelog.StepState.DONE, 1),
        ]
        assert ledger.get_run("fenced").status is oncelog.RunStatus.COMPLETED
        owners = [e.data["owner"] for e in ledger.journal("fenced") if e.event == "lease_acquired"]
        assert [o.split("|")[1] for o in owners] == [str(first.pid), str(second.report["pid"])]


def test_a_stopped_owner_cannot_record_the_effect_it_made(tmp_path: Path) -> None:
    """P1 stops inside its tool after the provider acted. P2 takes over and, finding the
    create in flight, halts for a person (exit 3) instead of charging again. P1, continued,
    cannot record its outcome (exit 75). A person resolves it done; P3 completes by replay."""
    marker, db = tmp_path / "marker", tmp_path / "ledger.db"
    common = ("fenced", "--marker", str(marker), "--lease-ttl", "1")
    key = oncelog.idempotency_key("fenced", "charge", "append_marker")
    with agents(tmp_path) as start:
        first = start(*common, "--stop-in", "tool")
        first.wait_until_stopped()
        second = start(*common, "--retry-leased", "20").end()
        assert second.code == 3, second.stderr
        assert "AmbiguousOutcome" in second.stderr
        os.kill(first.pid, signal.SIGCONT)
        zombie = first.end()
        assert zombie.code == 75, zombie.stderr
        assert "LeaseLost" in zombie.stderr
        assert marker_lines(marker) == [f"{first.pid} {key}"]
        record = step_record(db, "fenced", "charge")
        assert (record.state, record.attempts) == (oncelog.StepState.UNKNOWN, 1)

        answer = {"pid": first.pid, "note": "hello"}  # what the provider says it did
        with oncelog.open(str(db)) as ledger:
            ledger.resolve("fenced", "charge", "done", by="alice", result=answer)
        third = start(*common).end()
    assert third.code == 0, third.stderr
    assert third.report is not None
    assert (third.report["result"], third.report["called"]) == (answer, False)
    assert marker_lines(marker) == [f"{first.pid} {key}"]
