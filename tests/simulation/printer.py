"""A shrunk schedule printed as a test to paste into ``tests/``: the schedule as data, the
driver playing it, the oracle judging it."""

from __future__ import annotations

from .oracle import Finding
from .schedule import Schedule

_TEMPLATE = '''from tests.simulation.driver import play
from tests.simulation.oracle import check
from tests.simulation.schedule import Agent, Call, Declaration, Schedule


def test_simulated_seed_{seed}() -> None:
    """Found by the simulator (seed {seed}), shrunk: {found}"""
    schedule = {schedule}
    assert check(play(schedule)) == []
'''


def as_test(schedule: Schedule, findings: list[Finding]) -> str:
    found = "; ".join(f"{f.family}: {f.text}" for f in findings)
    return _TEMPLATE.format(seed=schedule.seed, found=found, schedule=_layout(repr(schedule)))


def _layout(text: str) -> str:
    """The schedule's repr, one run, declaration and script per line."""
    for name in ("declaration=", "agents=", "Agent(", "faults=", "crashes=", "ticks=",
                 "decisions="):  # fmt: skip
        text = text.replace(name, "\n        " + name)
    text = text.replace(", \n", ",\n")  # no space left at a line's end
    return text.replace("\n        Agent(", "\n            Agent(")
