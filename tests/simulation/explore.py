"""Exploring: schedules from consecutive seeds, each played and judged; a failing one is
shrunk and printed as a test. Wall time is read here only, between schedules, to stop a
local ``--budget`` and to report schedules per second; never inside a schedule."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .driver import Outcome, play
from .known import Known, unknown
from .oracle import Finding, check
from .printer import as_test
from .schedule import Schedule, generate
from .shrink import shrink


@dataclass(frozen=True)
class Failure:
    """A failing seed: its findings, of which ``unexplained`` no known bug accounts for,
    and its shrunk reproduction as a test."""

    seed: int
    findings: list[Finding]
    unexplained: list[Finding]
    reproduction: str


@dataclass
class Report:
    schedules: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.schedules / self.seconds if self.seconds else 0.0

    @property
    def unexplained(self) -> list[Failure]:
        return [failure for failure in self.failures if failure.unexplained]

    def summary(self) -> str:
        families = sorted({f.family for failure in self.failures for f in failure.findings})
        return (f"{self.schedules} schedules in {self.seconds:.1f} s ({self.per_second:.1f} "
                f"schedules/s); {len(self.failures)} failing seeds ({', '.join(families) or '-'}), "
                f"{len(self.unexplained)} not known")  # fmt: skip


@contextmanager
def quiet() -> Iterator[None]:
    """The engine's log off while exploring: thousands of stops would flood the output."""
    logger = logging.getLogger("oncelog")
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


def judge(schedule: Schedule) -> tuple[Outcome, list[Finding]]:
    outcome = play(schedule)
    return outcome, check(outcome)


def explore(
    seeds: range,
    known: list[Known],
    *,
    budget: float | None = None,
    shrink_known: bool = False,
    max_shrinks: int = 3,
) -> Report:
    """Play the schedule of each seed (until ``budget`` seconds have passed, if given).
    Failures no known bug explains are shrunk (the first ``max_shrinks``), known ones only
    with ``shrink_known``."""
    report, began, shrinks = Report(), time.monotonic(), 0
    with quiet():
        for seed in seeds:
            if budget is not None and time.monotonic() - began > budget:
                break
            schedule = generate(seed)
            outcome, findings = judge(schedule)
            report.schedules += 1
            if findings:
                odd = unknown(outcome, findings, known)
                reproduction = ""
                if (odd or shrink_known) and shrinks < max_shrinks:
                    shrinks += 1
                    reproduction = as_test(*_shrunk(schedule, (odd or findings)[0], known))
                report.failures.append(Failure(seed, findings, odd, reproduction))
    report.seconds = time.monotonic() - began
    return report


def _shrunk(
    schedule: Schedule, finding: Finding, known: list[Known]
) -> tuple[Schedule, list[Finding]]:
    """``schedule`` shrunk while it fails as ``finding`` does: its family, and explained by
    the same known bug or by none."""

    def like(outcome: Outcome, other: Finding) -> bool:
        return other.family == finding.family and _bug(outcome, other, known) == bug

    def fails(candidate: Schedule) -> bool:
        outcome, findings = judge(candidate)
        return any(like(outcome, other) for other in findings)

    outcome, _ = judge(schedule)
    bug = _bug(outcome, finding, known)
    small = shrink(schedule, fails)
    outcome, findings = judge(small)
    return small, [other for other in findings if like(outcome, other)]


def _bug(outcome: Outcome, finding: Finding, known: list[Known]) -> str | None:
    return next((bug.item for bug in known if bug.matches(outcome, finding)), None)
