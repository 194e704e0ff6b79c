"""Budgets: limits that belong to a run, not to the process running it.

A run's budget is stored with it when it is created; a restart, a crash loop or a
redelivered message cannot reset it, only a person can change it (``ledger.set_budget``).
Each new step is checked in the transaction that writes it, against what the run has
already recorded: steps, model tokens, cost, irreversible actions, and wall-clock time
since the run was created.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Budget:
    """Limits for one run; ``None`` means no limit. ``wall_clock`` is in seconds (or a
    ``timedelta``) from the run's creation, not from the process start."""

    steps: int | None = None
    tokens: int | None = None
    cost: float | None = None
    wall_clock: float | timedelta | None = None
    irreversible: int | None = None

    def to_json(self) -> str:
        limits = asdict(self)
        if isinstance(self.wall_clock, timedelta):
            limits["wall_clock"] = self.wall_clock.total_seconds()
        return json.dumps(limits, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Budget:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class AgentBudget:
    """Daily limits (midnight to midnight UTC) for an agent, across all of its runs: tool
    calls (effects), cost, irreversible actions. ``None`` means no limit."""

    calls: int | None = None
    cost: float | None = None
    irreversible: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AgentBudget:
        return cls(**json.loads(text))


def agent_exceeded(budget: AgentBudget, calls: int, cost: float, irreversible: int) -> str | None:
    """The first daily limit these totals go past, described, or None."""
    for name, used in (("calls", calls), ("cost", cost), ("irreversible", irreversible)):
        limit = getattr(budget, name)
        if limit is not None and used > limit:
            return f"{name} today {used:g} over the agent's daily budget of {limit:g}"
    return None


@dataclass(frozen=True)
class Usage:
    """What a run has recorded so far (refused steps excluded, steps in doubt included)."""

    steps: int
    tokens: int
    cost: float
    wall_clock: float
    irreversible: int


def exceeded(budget: Budget, usage: Usage) -> str | None:
    """The first limit ``usage`` goes past, described, or None."""
    limits = asdict(budget)
    if isinstance(budget.wall_clock, timedelta):
        limits["wall_clock"] = budget.wall_clock.total_seconds()
    for field in fields(Usage):
        limit, used = limits[field.name], getattr(usage, field.name)
        if limit is not None and used > limit:
            return f"{field.name} {used:g} over the budget of {limit:g}"
    return None


def remaining(budget: Budget, usage: Usage) -> dict[str, Any]:
    """What is left of each limit (None: unlimited), to put in a prompt."""
    limits = json.loads(budget.to_json())
    return {
        name: None if limit is None else max(limit - getattr(usage, name), 0)
        for name, limit in limits.items()
    }
