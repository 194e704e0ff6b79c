"""Budgets: limits that belong to a run or an agent, not to the process running them.

A run's budget is stored with it when it is created; a restart, a crash loop or a
redelivered message cannot reset it, only a person can change it (``ledger.set_budget``).
Each new step is checked in the transaction that writes it, against what is already
recorded: steps, model tokens, cost, irreversible actions, and wall-clock time since the
run was created. An agent's daily budget is checked the same way across all its runs.

What happens at a limit is the budget's ``on_exceed`` policy: ``stop`` the run (a person
must look), ``pause`` it until a person raises the limit, or ``escalate``: tell someone
(the ledger's ``on_budget_alert`` callback and the budget's ``webhook``), then pause.
``warn_at`` (a fraction of each limit) sends the same kind of alert earlier.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from .. import _numbers as numbers
from .._exceptions import BudgetExceeded, BudgetPaused, ConfigurationError
from ._value import Value, as_dict, field_names

Policy = Literal["stop", "pause", "escalate"]
POLICIES = ("stop", "pause", "escalate")


class _Policy(Value, kw_only=True):
    """What to do at a limit, shared by run and agent budgets (keyword-only)."""

    on_exceed: Policy = "stop"
    warn_at: float | None = None  # e.g. 0.8: alert once 80 % of any limit is used
    webhook: str | None = None  # http(s) URL that receives alerts as JSON, by POST

    def __post_init__(self) -> None:
        if self.on_exceed not in POLICIES:
            raise ConfigurationError(
                f"on_exceed must be one of {', '.join(POLICIES)}, not {self.on_exceed!r}"
            )
        if self.warn_at is not None and not 0 < numbers.amount(self.warn_at, "warn_at") < 1:
            raise ConfigurationError(f"warn_at is a fraction between 0 and 1, not {self.warn_at}")
        if self.webhook is not None:
            from .._webhook import checked_url  # an open makes no budget: it need not import it

            checked_url(self.webhook, "webhook")
        for name, value in self.limits().items():
            if value is not None:
                # Counts stored whole (``steps=3.0`` from a command line becomes 3).
                checked = _LIMIT_CHECKS.get(name, numbers.amount)(value, f"budget limit {name}")
                if not isinstance(getattr(self, name), timedelta):
                    object.__setattr__(self, name, checked)

    def limits(self) -> dict[str, float | None]:
        """The limits by name (None: unlimited), in seconds where they are times."""
        policy = field_names(_Policy)
        return {n: _seconds(getattr(self, n)) for n in field_names(self) if n not in policy}

    def to_json(self) -> str:
        stored = as_dict(self)
        stored.update(self.limits())
        return json.dumps(stored, sort_keys=True, allow_nan=False)


# How each limit is checked: counts are whole numbers, times at most a century; the rest
# (cost) finite and >= 0.
_LIMIT_CHECKS: dict[str, Callable[[object, str], float]] = {
    "steps": numbers.count,
    "tokens": numbers.count,
    "irreversible": numbers.count,
    "calls": numbers.count,
    "wall_clock": lambda value, what: numbers.seconds(value, what, positive=False),
}


def _seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


class Budget(_Policy):
    """Limits for one run; ``None`` means no limit. ``wall_clock`` is in seconds (or a
    ``timedelta``) from the run's creation, not from the process start."""

    steps: int | None = None
    tokens: int | None = None
    cost: float | None = None
    wall_clock: float | timedelta | None = None
    irreversible: int | None = None

    @classmethod
    def from_json(cls, text: str) -> Budget:
        return cls(**json.loads(text))


class AgentBudget(_Policy):
    """Daily limits (midnight to midnight UTC) for an agent, across all of its runs: tool
    calls (effects), cost, irreversible actions. ``None`` means no limit."""

    calls: int | None = None
    cost: float | None = None
    irreversible: int | None = None

    @classmethod
    def from_json(cls, text: str) -> AgentBudget:
        return cls(**json.loads(text))


class AgentBudgetSetting(Value):
    """An agent's daily budget as it stands, with who set it and when."""

    agent: str
    budget: AgentBudget
    set_by: str
    set_at: float


class Usage(Value):
    """What a run has recorded so far (refused steps excluded, steps in doubt included)."""

    steps: int
    tokens: int
    cost: float
    wall_clock: float
    irreversible: int


class BudgetAlert(Value):
    """A limit reached (``kind="exceeded"``) or nearly reached (``"warning"``), as handed
    to the ``on_budget_alert`` callback and posted to the budget's webhook."""

    kind: Literal["warning", "exceeded"]
    scope: Literal["run", "agent"]
    target: str  # the run id or the agent's name
    limit: str  # steps, tokens, cost, wall_clock, irreversible or calls
    used: float
    allowed: float
    policy: Policy
    webhook: str | None
    run_id: str
    step_id: str | None

    @property
    def whose(self) -> str:
        if self.scope == "run":
            return "the run's budget"
        return f"agent {self.target!r}'s daily budget"

    @property
    def message(self) -> str:
        if self.kind == "warning":
            return f"{self.limit} {self.used:g} of {self.whose} of {self.allowed:g} used"
        return f"{self.limit} {self.used:g} over {self.whose} of {self.allowed:g}"

    def to_json(self) -> str:
        """As journalled and posted to a webhook."""
        data = {**as_dict(self), "event": f"oncelog.budget.{self.kind}", "message": self.message}
        return json.dumps(data, sort_keys=True)


def check(
    budget: Budget | AgentBudget,
    used: dict[str, float],
    *,
    scope: Literal["run", "agent"],
    target: str,
    run_id: str,
    step_id: str | None,
) -> tuple[BudgetAlert | None, list[BudgetAlert]]:
    """The first limit ``used`` goes past, and the limits past their warning threshold."""
    warnings: list[BudgetAlert] = []
    for name, limit in budget.limits().items():
        if limit is None:
            continue
        spent = used[name]
        over = spent > limit
        if over or (budget.warn_at is not None and spent >= budget.warn_at * limit):
            alert = BudgetAlert(
                "exceeded" if over else "warning", scope, target, name, spent, limit,
                budget.on_exceed, budget.webhook, run_id, step_id,
            )  # fmt: skip
            if over:
                return alert, warnings
            warnings.append(alert)
    return None, warnings


def refusal(alert: BudgetAlert, key: str | None = None) -> BudgetExceeded | BudgetPaused:
    """The error that stops a step at ``alert``'s limit, as its policy says."""
    message = (
        f"{alert.step_id!r} would go past {alert.whose}: {alert.limit} {alert.used:g} over "
        f"{alert.allowed:g}; a person may raise it: {_raising(alert)}"
    )
    if alert.policy == "stop":
        return BudgetExceeded(message, run_id=alert.run_id, step_id=alert.step_id, key=key,
                              alert=alert)  # fmt: skip
    return BudgetPaused(
        message + "; the run waits until then",
        run_id=alert.run_id, step_id=alert.step_id, key=key, alert=alert,
    )  # fmt: skip


def _raising(alert: BudgetAlert) -> str:
    """The command (or, for an agent's daily budget, which has none, the call) that raises
    the limit ``alert`` reached."""
    if alert.scope == "run":
        from .._commands import oncelog_command

        return oncelog_command(
            "budgets", [alert.run_id], options=f"--set {alert.limit}=NEW_LIMIT --by NAME"
        )
    return f"ledger.set_agent_budget({alert.target!r}, AgentBudget({alert.limit}=...), by=NAME)"


def remaining(budget: Budget, usage: Usage) -> dict[str, Any]:
    """What is left of each limit (None: unlimited), to put in a prompt."""
    return {
        name: None if limit is None else max(limit - getattr(usage, name), 0)
        for name, limit in budget.limits().items()
    }
