"""The verdict: one line per boundary as its trial ends, then a summary and the fixes; or
the same as JSON."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .evidence import Effect
from .findings import Kind, Problem, Reliance
from .trials import APPROVAL_NOTE, Boundary, Outcome, TrialResult

WIDTH = 100
LABELS = {
    Kind.RAN_TWICE: "ran twice",
    Kind.RUN_ID_AT_START: "run id made at process start",
    Kind.STEP_IDS_CHANGE: "step ids change between attempts",
    Kind.REPLAY_DIVERGED: "replay diverged",
    Kind.AGENT_FAILED: "agent failed",
    Kind.PERFORMED_TWICE: "performed twice at the provider",
}

RELIED_ON = {Reliance.WINDOW: "a declared dedupe_window", Reliance.PROBE: "a probe's answer"}


@dataclass(frozen=True)
class Report:
    command: tuple[str, ...]
    effects: tuple[Effect, ...]
    trials: tuple[TrialResult, ...]
    ledgers: Path | None  # where the trials' ledgers and logs were kept
    approver: str | None = None  # the test person who granted approvals
    count_command: str | None = None  # None: effects were counted from the ledger

    @property
    def problems(self) -> list[tuple[Boundary, Problem]]:
        return [(trial.boundary, problem) for trial in self.trials for problem in trial.problems]

    @property
    def passed(self) -> bool:
        return not self.problems

    def outcomes(self) -> dict[str, int]:
        counted = Counter(trial.outcome for trial in self.trials)
        return {outcome.value: counted[outcome] for outcome in Outcome if counted[outcome]}

    def relied(self) -> dict[Reliance, int]:
        """How many recoveries relied on each thing other than the provider's records."""
        counted = Counter(r.relied_on for trial in self.trials for r in trial.recoveries)
        return {reliance: counted[reliance] for reliance in Reliance if counted[reliance]}

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "passed": self.passed,
            "effects": [
                {"effect": n, "step_id": e.step_id, "tool": e.tool, "kind": e.kind}
                for n, e in enumerate(self.effects, 1)
            ],
            "trials": [_trial_json(trial) for trial in self.trials],
            "summary": {
                "boundaries": len(self.trials),
                "outcomes": self.outcomes(),
                "problems": len(self.problems),
            },
            "ledgers": None if self.ledgers is None else str(self.ledgers),
            "counted_at": "ledger" if self.count_command is None else "provider",
            "count_command": self.count_command,
            "approved_by": self.approver,
        }


def _trial_json(trial: TrialResult) -> dict[str, Any]:
    b = trial.boundary
    return {
        "point": b.point, "effect": b.effect, "step_id": b.step_id, "tool": b.tool,
        "kind": b.kind, "crash_at": b.crash_at, "run_id": trial.run_id,
        "outcome": trial.outcome.value, "exit_code": trial.exit_code,
        "restarts": trial.restarts, "approvals": trial.approvals, "performed": trial.performed,
        "recoveries": [
            {"run_id": r.run_id, "step_id": r.step_id, "tool": r.tool,
             "relied_on": r.relied_on.value, "said": r.said}
            for r in trial.recoveries
        ],
        "problems": [
            {"kind": p.kind.value, "run_id": p.run_id, "step_id": p.step_id, "tool": p.tool,
             "key": p.key, "detail": p.detail, "fix": p.fix}
            for p in trial.problems
        ],
    }  # fmt: skip


class Table:
    """The text report, printed a line at a time while the trials run."""

    def __init__(self, effects: Sequence[Effect], points: Sequence[str]) -> None:
        self.effects = effects
        self.points = points
        self.point_width = max(map(len, points))
        steps = max(len(f"{n} {e.step_id}") for n, e in enumerate(effects, 1))
        self.width = self.point_width + 2 + steps

    def header(self) -> str:
        intro = (
            f"A run without crashes made {_many(len(self.effects), 'effect')}. One trial per "
            f"boundary ({len(self.points)} of each effect) kills the agent there with SIGKILL, "
            "then restarts it:"
        )
        lines = textwrap.wrap(intro, WIDTH)
        width = max(len(e.step_id) for e in self.effects)
        lines += [
            f"  {n} {e.step_id:<{width}}  {e.tool} ({e.kind})"
            for n, e in enumerate(self.effects, 1)
        ]
        lines += ["", f"{'boundary':<{self.width}}  {'outcome':<11}  restarts  problems"]
        return "\n".join(lines)

    def row(self, trial: TrialResult) -> str:
        b = trial.boundary
        boundary = f"{b.point:<{self.point_width}}  {b.effect} {b.step_id}"
        problems = ", ".join(dict.fromkeys(LABELS[p.kind] for p in trial.problems)) or "-"
        return (
            f"{boundary:<{self.width}}  {trial.outcome.label:<11}  {trial.restarts:>8}  {problems}"
        )


def summary(report: Report) -> str:
    counts = ", ".join(
        f"{count} {Outcome(outcome).label}" + (" for a person" if outcome == "halted" else "")
        for outcome, count in report.outcomes().items()
    )
    lines = ["", f"{_many(len(report.trials), 'boundary')}: {counts}."]
    if report.ledgers is not None:
        lines.append(f"The trials' ledgers and logs are in {report.ledgers}.")
    lines += _wrapped(_approvals(report)) + _wrapped(_counted(report)) + _which(report)
    if report.passed:
        where = "at the provider" if report.count_command else "in the ledger"
        lines.append(
            f"PASSED: no effect ran twice {where}, every restart resumed its run, and step "
            "ids held."
        )
        return "\n".join(lines)
    lines += ["", f"FAILED: {_many(len(report.problems), 'problem')}."]
    for boundary, problem in report.problems:
        where = f"{boundary.point} {boundary.effect} {boundary.step_id}"
        lines.append(_item(f"{where}: {LABELS[problem.kind]}: {problem.detail}"))
    lines += ["", "How to fix:"]
    fixes = dict.fromkeys((problem.kind, problem.fix) for _, problem in report.problems)
    lines += [_item(f"{LABELS[kind]}: {fix}") for kind, fix in fixes]
    return "\n".join(lines)


def _approvals(report: Report) -> str:
    granted = sum(trial.approvals for trial in report.trials)
    if not granted:
        return ""
    return (
        f"{_many(granted, 'approval')} granted by the test person {report.approver!r}, "
        f"journalled with the note {APPROVAL_NOTE!r}."
    )


def _counted(report: Report) -> str:
    """Where the effects were counted, and what the recoveries took on trust."""
    relied = report.relied()
    trusted = ""
    if relied:
        trusted = f"{_many(sum(relied.values()), 'recovery')} relied on " + " and ".join(
            RELIED_ON[reliance] + (f" ({n})" if len(relied) > 1 else "")
            for reliance, n in relied.items()
        )
    if report.count_command is not None:
        checked = f" {trusted}; the provider's counts checked them." if trusted else ""
        return f"Effects were counted at the provider (--count {report.count_command}).{checked}"
    unseen = (
        f" {trusted}, not on what the provider showed: if the provider ignores the key or "
        "the probe is wrong, an effect ran twice and this report cannot see it."
        if trusted
        else ""
    )
    return (
        "Effects were counted from the ledger (no --count): it shows the attempts oncelog "
        f"made, not what the provider performed.{unseen} --count CMD counts them at the "
        "provider."
    )


def _which(report: Report) -> list[str]:
    """The boundaries each tool's recoveries relied on a window or a probe at."""
    where: dict[tuple[str, Reliance], list[str]] = {}
    for trial in report.trials:
        for recovery in trial.recoveries:
            at = f"{trial.boundary.point} {trial.boundary.effect}"
            found = where.setdefault((recovery.tool, recovery.relied_on), [])
            if at not in found:
                found.append(at)
    return [
        _item(f"{tool} on {RELIED_ON[reliance]}: {', '.join(at)}")
        for (tool, reliance), at in where.items()
    ]


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH) if text else []


def _item(text: str) -> str:
    """A list item: its first line wrapped, what follows (an agent's output) indented."""
    first, *rest = text.split("\n")
    wrapped = textwrap.fill(first, WIDTH, initial_indent="  ", subsequent_indent="    ")
    return "\n".join([wrapped, *(f"    | {line}" for line in rest)])


def _many(count: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{count} {noun if count == 1 else plural}"
