"""Budgets belong to the run: checked in the intent's transaction, never reset by restarts."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import pytest

import oncelog

SPENDER = Path(__file__).parent / "budget_agents" / "spender.py"


def tool(ledger: oncelog.Ledger, kind: str = "create", cost: float = 0.0) -> oncelog.Tool[..., int]:
    calls: list[int] = []

    @ledger.tool(kind=kind, name=f"t_{kind}", cost=cost)  # type: ignore[arg-type]
    def act(n: int, *, idempotency_key: str) -> int:
        calls.append(n)
        return n

    return act


@pytest.mark.parametrize(
    ("budget", "kind", "allowed"),
    [
        (oncelog.Budget(steps=3), "create", 3),
        (oncelog.Budget(cost=2.5), "create", 2),
        (oncelog.Budget(irreversible=2), "payment", 2),
        (oncelog.Budget(irreversible=2), "create", 10),
    ],
)
def test_a_limit_stops_the_next_step(
    ledger: oncelog.Ledger, budget: oncelog.Budget, kind: str, allowed: int
) -> None:
    act = tool(ledger, kind, cost=1.0)
    done = 0
    with (
        pytest.raises(oncelog.BudgetExceeded) if allowed < 10 else nullcontext(),
        ledger.run("r", budget=budget) as run,
    ):
        for n in range(10):
            run.effect(f"s{n}", act, n)
            done += 1
    assert done == allowed
    if allowed < 10:
        assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
        assert len(ledger.steps("r")) == allowed


def test_tokens_wall_clock_and_what_is_left(ledger: oncelog.Ledger) -> None:
    def model() -> dict[str, object]:
        return {"usage": {"input_tokens": 60, "output_tokens": 10, "cost": 0.25}}

    with (
        pytest.raises(oncelog.BudgetExceeded, match="tokens"),
        ledger.run("r", budget=oncelog.Budget(tokens=100, cost=10)) as run,
    ):
        run.llm("a", model)
        assert run.budget_left() == {
            "steps": None, "tokens": 30, "cost": 9.75, "wall_clock": None, "irreversible": None,
        }  # fmt: skip
        run.llm("b", model)  # 140 tokens now: over, so the next step is refused
        run.llm("c", model)
    with (
        pytest.raises(oncelog.BudgetExceeded, match="wall_clock"),
        ledger.run("w", budget=oncelog.Budget(wall_clock=timedelta(seconds=0.1))) as run,
    ):
        run.read("first", lambda: 1)
        time.sleep(0.2)
        run.read("second", lambda: 2)


def test_a_refusal_is_refunded_and_a_person_can_raise_the_limit(ledger: oncelog.Ledger) -> None:
    class Declined(Exception):
        pass

    @ledger.tool(kind="payment", name="pay", cost=1.0, refusals=(Declined,))
    def pay(n: int, *, idempotency_key: str) -> int:
        if n == 0:
            raise Declined
        return n

    with ledger.run("r", budget=oncelog.Budget(cost=1.0)) as run:
        with pytest.raises(oncelog.EffectRefused):
            run.effect("first", pay, 0)
        assert run.effect("second", pay, 1) == 1  # the refused one is not counted
    with pytest.raises(oncelog.BudgetExceeded), ledger.run("r") as run:
        with pytest.raises(oncelog.EffectRefused):
            run.effect("first", pay, 0)
        run.effect("second", pay, 1)
        run.effect("third", pay, 2)
    ledger.set_budget("r", oncelog.Budget(cost=2.0), by="alice")
    with ledger.run("r", budget=oncelog.Budget(cost=0)) as run:  # code cannot lower or reset
        with pytest.raises(oncelog.EffectRefused):
            run.effect("first", pay, 0)
        run.effect("second", pay, 1)
        assert run.effect("third", pay, 2) == 2
    assert "budget_set" in [e.event for e in ledger.journal("r")]


@pytest.mark.slow
def test_a_crash_loop_never_spends_past_the_budget(db_path: str, tmp_path: Path) -> None:
    """50 SIGKILLs at random instants, restarting each time as a supervisor would: the
    effects performed (counted by the tool itself) never exceed the budget."""
    markers, seed = tmp_path / "markers", random.randrange(1 << 30)
    chance = random.Random(seed)
    argv = [sys.executable, str(SPENDER), db_path, "r1", str(markers), "40", "20"]
    kills = starts = 0
    while kills < 50 and starts < 200:
        starts += 1
        agent = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        time.sleep(chance.uniform(0.0, 0.5))
        if agent.poll() is None:
            agent.send_signal(signal.SIGKILL)
            kills += 1
        _, stderr = agent.communicate(timeout=60)
        expected = (0, oncelog.EXIT_HALTED, -signal.SIGKILL)
        assert agent.returncode in expected, (seed, agent.returncode, stderr)
        assert agent.returncode != 0, "the budget should stop the run before it completes"
    assert kills == 50, (seed, kills, starts)
    performed = markers.read_text().splitlines() if markers.exists() else []
    with oncelog.open(db_path) as ledger:
        attempts = sum(s.attempts for s in ledger.steps("r1") if s.type is oncelog.StepType.EFFECT)
    assert len(performed) <= attempts <= 20, (seed, len(performed), attempts)
    final = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert final.returncode == oncelog.EXIT_HALTED, (seed, final.stderr)
    assert "BudgetExceeded" in final.stderr


def test_an_agents_daily_budget_spans_its_runs(ledger: oncelog.Ledger) -> None:
    class Declined(Exception):
        pass

    @ledger.tool(kind="payment", name="pay", cost=2.0, refusals=(Declined,))
    def pay(n: int, *, idempotency_key: str) -> int:
        if n < 0:
            raise Declined
        return n

    ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=3, cost=5.0), by="ops")
    with ledger.run("a", agent="billing") as run:
        run.effect("one", pay, 1)
        with pytest.raises(oncelog.EffectRefused):
            run.effect("refused", pay, -1)  # refunded: counts neither call nor cost
    with (
        pytest.raises(oncelog.BudgetExceeded, match="daily budget"),
        ledger.run("b", agent="billing") as run,
    ):
        run.effect("two", pay, 2)
        run.effect("three", pay, 3)  # cost 6.0 > 5.0 today
    with ledger.run("c", agent="support") as run:  # another agent is not touched
        run.effect("four", pay, 4)
    ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=3, cost=6.0), by="ops")
    with ledger.run("b", agent="billing") as run:
        run.effect("two", pay, 2)
        run.effect("three", pay, 3)
    with (
        pytest.raises(oncelog.BudgetExceeded, match="calls"),
        ledger.run("d", agent="billing") as run,
    ):
        run.effect("five", pay, 5)
    events = [e.event for e in ledger.journal("", limit=100)]
    assert events.count("agent_budget_set") == 2
