"""What ``ledger.run(...)`` (or a worker's claim) asked for, carried by the ``RunContext``
until it is entered, when the run's lease is taken."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..records._budgets import Budget
from ..records._records import RunRecord
from ..stores import Lease

PlanArg = Sequence[str] | Callable[[], Sequence[str]] | None


@dataclass(frozen=True)
class RunOptions:
    """What ``ledger.run`` was asked for, or what a worker claimed."""

    plan: PlanArg = None
    replace_plan: bool = False
    create: bool = True
    agent: str | None = None
    budget: Budget | None = None
    claimed: tuple[Lease, RunRecord] | None = None  # a worker's claim: the lease is held
    origin: str | None = None  # what started it, journalled with its lease (``what_next``)


# What ``ledger.run(run_id)`` asks for, made once: it is immutable.
PLAIN = RunOptions()
