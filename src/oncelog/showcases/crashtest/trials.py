"""The trials: a clean one that learns the agent's effects, then one per boundary that
kills the agent's first process there and restarts it, as a supervisor would, until it
completes, halts for a person or waits. Each trial has a run id and a ledger of its own,
so that what its ledger holds is that trial's doing and nothing else's."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import oncelog

from . import findings
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


@dataclass(frozen=True)
class Settings:
    max_restarts: int = 5
    idempotent: frozenset[str] = frozenset()  # tools whose re-runs the user accepts


@dataclass
class Trials:
    agent: Agent
    workdir: Path
    settings: Settings = field(default_factory=Settings)
    # In every run id, so that keys never repeat across invocations at a real provider.
    session: str = field(default_factory=lambda: secrets.token_hex(3))

    def learn(self) -> list[Effect]:
        """Run the agent once without a crash; the effects it makes, in order."""
        run_id, ledger, logs = self._trial("clean")
        self.agent.reset(run_id, ledger, logs / "reset.log")
        ended = self.agent.start(run_id, ledger, logs / "process-1.log")
        if ended.code != oncelog.EXIT_COMPLETED:
            raise NotTestable(
                f"without any crash the agent did not complete ({_ending(ended)}); crashtest "
                f"needs an agent that does. Its output ends:\n{ended.tail()}"
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
        first = self.agent.start(run_id, ledger, logs / "process-1.log", boundary.crash_at)
        if not first.killed:
            outcome = _outcome(first)
            if outcome not in (Outcome.FAILED, Outcome.TIMED_OUT):
                outcome = Outcome.NOT_REACHED
            return TrialResult(
                boundary, run_id, outcome, first.code, 0, _failure(outcome, first, run_id)
            )
        at_kill = read(ledger)
        last, restarts = first, 0
        while restarts < self.settings.max_restarts and _again(last):
            restarts += 1
            last = self.agent.start(run_id, ledger, logs / f"process-{restarts + 1}.log")
        final, outcome = read(ledger), _outcome(last)
        problems = (
            *findings.ran_twice(final, self.settings.idempotent),
            *findings.not_resumed(at_kill, final),
            *findings.divergences(final),
            *_failure(outcome, last, run_id),
        )
        return TrialResult(boundary, run_id, outcome, last.code, restarts, problems)

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
