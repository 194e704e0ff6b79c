"""The trials: a clean one that learns the agent's effects, then one per boundary that
kills the agent's first process there and restarts it, as a supervisor would, until it
completes, halts for a person or waits. Each trial has a run id and a ledger of its own,
so that what its ledger holds is that trial's doing and nothing else's.

With a test person (``--approve NAME``), an agent that stops to wait for an approval
(exit 4) has it granted in NAME's name, journalled as crashtest's, and is started again:
a process that stopped before its boundary is started again with the crash point moved
past the effects it completed (a restarted process replays them without reaching any)."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import oncelog

from . import counting, findings
from .agent import Agent, Exit
from .errors import NotTestable
from .evidence import Effect, read


class Outcome(str, enum.Enum):
    COMPLETED = "completed"
    HALTED = "halted"  # exit 3: the run stopped where a person must decide
    WAITING = "waiting"  # exit 4: for an approval or a higher budget
    NOT_REACHED = "not_reached"  # the first process ended without reaching the boundary
    FAILED = "failed"  # any other exit code
    TIMED_OUT = "timed_out"
    GAVE_UP = "gave_up"  # still killed, or asking to run later, at the last restart

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


ENDINGS = {
    oncelog.EXIT_COMPLETED: Outcome.COMPLETED,
    oncelog.EXIT_HALTED: Outcome.HALTED,
    oncelog.EXIT_WAITING: Outcome.WAITING,
}


@dataclass(frozen=True)
class Boundary:
    """One crash point of one effect: the ``effect``-th one the agent's process starts."""

    point: str
    effect: int
    step_id: str
    tool: str
    kind: str

    @property
    def crash_at(self) -> str:
        """``ONCELOG_CRASH_AT`` for it: the ``effect``-th time the process reaches ``point``.
        Counted rather than named by step id, so that step ids that change from process
        to process (a mistake crashtest looks for) cannot make it miss."""
        return f"{self.point}:{self.effect}"


def boundaries(effects: Sequence[Effect], points: Iterable[str]) -> list[Boundary]:
    points = tuple(points)
    return [
        Boundary(point, number, effect.step_id, effect.tool, effect.kind)
        for number, effect in enumerate(effects, 1)
        for point in points
    ]


@dataclass(frozen=True)
class TrialResult:
    boundary: Boundary
    run_id: str
    outcome: Outcome
    exit_code: int | None  # of the last process; None if it timed out
    restarts: int
    problems: tuple[findings.Problem, ...]
    recoveries: tuple[findings.Recovery, ...] = ()
    approvals: int = 0  # granted by the test person
    performed: counting.Counts | None = None  # at the provider; None: not counted


@dataclass(frozen=True)
class Settings:
    max_restarts: int = 5
    idempotent: frozenset[str] = frozenset()  # tools whose re-runs the user accepts
    approver: str | None = None  # the test person who grants approvals; None: nobody


# Journalled with each approval crashtest grants, so that nobody takes it for a person's.
APPROVAL_NOTE = "granted by oncelog crashtest for a test: nobody read the request"


@dataclass
class Trials:
    agent: Agent
    workdir: Path
    settings: Settings = field(default_factory=Settings)
    # In every run id, so that keys never repeat across invocations at a real provider.
    session: str = field(default_factory=lambda: secrets.token_hex(3))
    # What the provider performed in the run without crashes; None: not counted.
    clean: counting.Counts | None = None

    def learn(self) -> list[Effect]:
        """Run the agent once without a crash; the effects it makes, in order."""
        run_id, ledger, logs = self._trial("clean")
        self.agent.reset(run_id, ledger, logs / "reset.log")
        before = self.agent.count(run_id, ledger, logs / "count-before.log")
        ended, processes = self.agent.start(run_id, ledger, logs / "process-1.log"), 1
        while self._waits(ended) and processes <= self.settings.max_restarts:
            if not self._approve(ledger):
                break
            processes += 1
            ended = self.agent.start(run_id, ledger, logs / f"process-{processes}.log")
        if ended.code != oncelog.EXIT_COMPLETED:
            hint = ""
            if ended.code == oncelog.EXIT_WAITING and self.settings.approver is None:
                hint = (
                    " It waits for a person (exit 4): --approve NAME has a test person grant "
                    "its approvals, journalled as crashtest's."
                )
            raise NotTestable(
                f"without any crash the agent did not complete ({_ending(ended)}); crashtest "
                f"needs an agent that does.{hint} Its output ends:\n{ended.tail()}"
            )
        after = self.agent.count(run_id, ledger, logs / "count-after.log")
        if before is not None and after is not None:
            self.clean = counting.performed(before, after)
            if not self.clean:
                raise NotTestable(
                    f"the --count command counted nothing the run without crashes performed "
                    f"(it printed {after} after it, {before} before): it must count what "
                    "this agent's provider performs"
                )
        effects = read(ledger).effects()
        if not effects:
            raise NotTestable(
                "the agent completed without recording any effect in the ledger crashtest "
                "gave it: open it with oncelog.open() (which reads $ONCELOG_URL) and run its "
                "effects through tools declared with @ledger.tool"
            )
        return effects

    def run(self, number: int, boundary: Boundary) -> TrialResult:
        """Kill the first process at ``boundary``, restart until it ends, and judge."""
        run_id, ledger, logs = self._trial(f"{number:03d}")
        self.agent.reset(run_id, ledger, logs / "reset.log")
        before = self.agent.count(run_id, ledger, logs / "count-before.log")
        first = self.agent.start(run_id, ledger, logs / "process-1.log", boundary.crash_at)
        processes, approvals = 1, 0
        # Stopped for an approval before the boundary: granted, the boundary is still ahead.
        while self._waits(first) and processes <= self.settings.max_restarts:
            granted = self._approve(ledger)
            if not granted:
                break
            approvals, processes = approvals + granted, processes + 1
            completed = len(read(ledger).effects())
            crash_at = f"{boundary.point}:{boundary.effect - completed}"
            first = self.agent.start(run_id, ledger, logs / f"process-{processes}.log", crash_at)
        if not first.killed:
            outcome = _outcome(first)
            if outcome not in (Outcome.FAILED, Outcome.TIMED_OUT):
                outcome = Outcome.NOT_REACHED
            problems = _failure(outcome, first, run_id)
            return TrialResult(boundary, run_id, outcome, first.code, 0, problems, (), approvals)
        at_kill = read(ledger)
        last, restarts = first, 0
        while restarts < self.settings.max_restarts and (_again(last) or self._waits(last)):
            if not _again(last):
                granted = self._approve(ledger)
                if not granted:
                    break
                approvals += granted
            restarts += 1
            last = self.agent.start(run_id, ledger, logs / f"process-{processes + restarts}.log")
        final, outcome = read(ledger), _outcome(last)
        after = self.agent.count(run_id, ledger, logs / "count-after.log")
        performed = None if before is None or after is None else counting.performed(before, after)
        relied = findings.recoveries(final)
        problems = (
            *findings.ran_twice(final, self.settings.idempotent),
            *findings.not_resumed(at_kill, final),
            *findings.divergences(final),
            *_failure(outcome, last, run_id),
            *self._beyond(performed, relied, run_id),
        )
        return TrialResult(
            boundary, run_id, outcome, last.code, restarts, problems, tuple(relied), approvals,
            performed,
        )  # fmt: skip

    def _beyond(
        self, performed: counting.Counts | None, relied: list[findings.Recovery], run_id: str
    ) -> list[findings.Problem]:
        if performed is None or self.clean is None:
            return []
        beyond = counting.beyond(performed, self.clean, self.settings.idempotent)
        return findings.performed_twice(beyond, relied, run_id)

    def _waits(self, ended: Exit) -> bool:
        """Whether the process stopped to wait for a person that the test person stands
        in for."""
        return ended.code == oncelog.EXIT_WAITING and self.settings.approver is not None

    def _approve(self, ledger: Path) -> int:
        """Grant every pending approval of the trial's ledger in the test person's name;
        how many there were (none: the agent waits for something else, a budget say)."""
        assert self.settings.approver is not None
        with oncelog.open(str(ledger)) as opened:
            pending = opened.approvals("pending")
            for request in pending:
                opened.approve(
                    request.run_id, request.step_id, by=self.settings.approver,
                    request=request.id, note=APPROVAL_NOTE,
                )  # fmt: skip
        return len(pending)

    def _trial(self, name: str) -> tuple[str, Path, Path]:
        """The trial's run id, its ledger, and the folder for its processes' output."""
        folder = self.workdir / name
        folder.mkdir()
        return f"crashtest-{self.session}-{name}", folder / "ledger.db", folder


def _again(ended: Exit) -> bool:
    """Whether a supervisor would start the agent again at once."""
    return ended.killed or ended.code == oncelog.EXIT_TRY_LATER


def _outcome(ended: Exit) -> Outcome:
    if ended.code is None:
        return Outcome.TIMED_OUT
    if _again(ended):
        return Outcome.GAVE_UP
    return ENDINGS.get(ended.code, Outcome.FAILED)


def _ending(ended: Exit) -> str:
    return "no exit within the timeout" if ended.code is None else f"exit {ended.code}"


def _failure(outcome: Outcome, ended: Exit, run_id: str) -> tuple[findings.Problem, ...]:
    if outcome not in (Outcome.FAILED, Outcome.TIMED_OUT, Outcome.GAVE_UP):
        return ()
    detail = f"{outcome.label}: {_ending(ended)}; the agent's output ends:\n{ended.tail()}"
    fix = findings.FIXES[findings.Kind.AGENT_FAILED]
    return (findings.Problem(findings.Kind.AGENT_FAILED, detail, fix, run_id),)
