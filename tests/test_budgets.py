"""Budgets belong to the run: checked in the intent's transaction, never reset by restarts."""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext, suppress
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

import oncelog

from .support.launch import PYTHON, python
from .support.operator_commands import oncelog_cli
from .support.receiver import Receiver, receiving

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
    argv = python(str(SPENDER), db_path, "r1", str(markers), "40", "20")
    kills = starts = 0
    window = 0.5  # once the budget is spent a start only replays and halts: kills must
    # land within that shorter life, however fast this machine starts a process
    while kills < 50 and starts < 200:
        starts += 1
        began = time.monotonic()
        agent = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        time.sleep(chance.uniform(0.0, window))
        if agent.poll() is None:
            agent.send_signal(signal.SIGKILL)
            kills += 1
        else:
            window = max(0.01, min(window, time.monotonic() - began))
        _, stderr = agent.communicate(timeout=60)
        expected = (0, oncelog.EXIT_HALTED, -signal.SIGKILL)
        assert agent.returncode in expected, (seed, agent.returncode, stderr)
        assert agent.returncode != 0, "the budget should stop the run before it completes"
    assert kills == 50, (seed, kills, starts)
    performed = markers.read_text().splitlines() if markers.exists() else []
    # On a loaded machine every kill can land before the agent reached its ledger: then no
    # run exists yet, and nothing may have been performed.
    attempts = 0
    if Path(db_path).exists():
        with oncelog.open(db_path) as ledger, suppress(oncelog.UnknownRun):
            steps = ledger.steps("r1")
            attempts = sum(s.attempts for s in steps if s.type is oncelog.StepType.EFFECT)
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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as server:
        yield server


def counting_tool(ledger: oncelog.Ledger, calls: list[int]) -> oncelog.Tool[..., int]:
    @ledger.tool(kind="create", name="act", cost=1.0)
    def act(n: int, *, idempotency_key: str) -> int:
        calls.append(n)
        return n

    return act


def test_pause_waits_for_a_higher_limit(ledger: oncelog.Ledger) -> None:
    calls: list[int] = []
    act = counting_tool(ledger, calls)
    budget = oncelog.Budget(cost=2, on_exceed="pause")
    for _ in range(2):  # a restart does not get past the limit either
        with pytest.raises(oncelog.BudgetPaused) as paused, ledger.run("r", budget=budget) as run:
            for n in range(4):
                run.effect(f"s{n}", act, n)
    assert calls == [0, 1]
    assert paused.value.exit_code == oncelog.EXIT_WAITING
    assert ledger.get_run("r").status is oncelog.RunStatus.WAITING
    alert = paused.value.alert
    assert (alert.kind, alert.limit, alert.used, alert.allowed) == ("exceeded", "cost", 3, 2)
    assert pickle.loads(pickle.dumps(paused.value)).alert == alert
    ledger.set_budget("r", replace(budget, cost=4), by="alice")
    with ledger.run("r") as run:
        for n in range(4):
            run.effect(f"s{n}", act, n)
    assert calls == [0, 1, 2, 3]
    alerts = [e for e in ledger.journal("r") if e.event == "budget_alert"]
    assert len(alerts) == 1, "journalled once for the operator, though met twice"


def test_async_code_awaits_a_person_raising_the_limit(db_path: str) -> None:
    calls: list[int] = []
    ledger = oncelog.open(db_path, approval_poll=0.05)
    act = counting_tool(ledger, calls)

    async def agent() -> None:
        budget = oncelog.Budget(steps=1, on_exceed="pause")
        async with ledger.run("r", budget=budget) as run:
            await run.effect("a", act, 1)
            await run.effect("b", act, 2)  # waits here for a person

    def person() -> None:
        with oncelog.open(db_path) as other:
            while not any(e.event == "budget_alert" for e in other.journal("r")):
                time.sleep(0.02)
            assert calls == [1]
            other.set_budget("r", oncelog.Budget(steps=2, on_exceed="pause"), by="alice")

    helper = threading.Thread(target=person)
    helper.start()
    asyncio.run(asyncio.wait_for(agent(), timeout=30))
    helper.join()
    ledger.close()
    assert calls == [1, 2]


def test_escalate_alerts_once_then_pauses(db_path: str, receiver: Receiver) -> None:
    alerts: list[oncelog.BudgetAlert] = []
    budget = oncelog.Budget(cost=4, warn_at=0.5, on_exceed="escalate", webhook=receiver.url)
    for _ in range(3):  # each a new ledger, as a restarted process would open
        with oncelog.open(db_path, on_budget_alert=alerts.append) as ledger:
            act = counting_tool(ledger, [])
            with pytest.raises(oncelog.BudgetPaused), ledger.run("r", budget=budget) as run:
                for n in range(6):
                    run.effect(f"s{n}", act, n)
    assert [(a.kind, a.limit, a.used) for a in alerts] == [
        ("warning", "cost", 2),
        ("exceeded", "cost", 5),
    ]
    assert [(b["event"], b["run_id"], b["step_id"]) for b in receiver.bodies] == [
        ("oncelog.budget.warning", "r", "s1"),
        ("oncelog.budget.exceeded", "r", "s4"),
    ]
    with oncelog.open(db_path, on_budget_alert=alerts.append) as ledger:
        ledger.set_budget("r", replace(budget, cost=5), by="alice")  # a new budget: new alerts
        act = counting_tool(ledger, [])
        with pytest.raises(oncelog.BudgetPaused), ledger.run("r") as run:
            for n in range(6):
                run.effect(f"s{n}", act, n)
    assert [(a.kind, a.step_id) for a in alerts[2:]] == [("warning", "s4"), ("exceeded", "s5")]


def test_an_agents_budget_warns_and_pauses_across_runs(ledger: oncelog.Ledger) -> None:
    alerts: list[oncelog.BudgetAlert] = []
    ledger.on_budget_alert = alerts.append
    act = counting_tool(ledger, [])
    daily = oncelog.AgentBudget(calls=3, warn_at=0.6, on_exceed="pause")
    ledger.set_agent_budget("billing", daily, by="ops")
    with ledger.run("a", agent="billing") as run:
        run.effect("one", act, 1)
        run.effect("two", act, 2)  # 2 of 3 calls: past 60 %
    with (
        pytest.raises(oncelog.BudgetPaused, match="daily budget"),
        ledger.run("b", agent="billing") as run,
    ):
        run.effect("three", act, 3)  # the warning is not repeated in this run
        run.effect("four", act, 4)
    assert [(a.kind, a.scope, a.target, a.run_id) for a in alerts] == [
        ("warning", "agent", "billing", "a")
    ]
    assert ledger.get_run("b").status is oncelog.RunStatus.WAITING


@pytest.mark.parametrize(
    "bad",
    [
        {"on_exceed": "explode"},
        {"warn_at": 1.5},
        {"webhook": "file:///etc/passwd"},
        {"cost": -1},
    ],
)
def test_a_bad_budget_is_refused_when_made(bad: dict[str, object]) -> None:
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.Budget(**bad)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_crash_loop_escalates_once_and_waits(
    db_path: str, tmp_path: Path, receiver: Receiver
) -> None:
    """Killed 20 times at random instants with an escalating budget: the effects stay
    within it, the run waits (exit 4) instead of halting, a person is told at most once
    per alert, and once the person raises the limit a restart completes the run."""
    markers, seed = tmp_path / "markers", random.randrange(1 << 30)
    chance = random.Random(seed)
    argv = [PYTHON, str(SPENDER), db_path, "r1", str(markers), "12", "8", "escalate",
            receiver.url]  # fmt: skip
    kills = starts = 0
    while kills < 20 and starts < 100:
        starts += 1
        agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert agent.stdout is not None
        agent.stdout.readline()  # after the imports, as above
        time.sleep(chance.uniform(0.0, 0.4))
        if agent.poll() is None:
            agent.send_signal(signal.SIGKILL)
            kills += 1
        _, stderr = agent.communicate(timeout=60)
        assert agent.returncode in (oncelog.EXIT_WAITING, -signal.SIGKILL), (seed, stderr)
    final = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert final.returncode == oncelog.EXIT_WAITING, (seed, final.stderr)
    assert "BudgetPaused" in final.stderr
    performed = markers.read_text().splitlines()
    assert len(performed) <= 8, (seed, len(performed))
    events = [body["event"] for body in receiver.bodies]
    assert events.count("oncelog.budget.warning") <= 1, (seed, events)
    assert events.count("oncelog.budget.exceeded") <= 1, (seed, events)
    with oncelog.open(db_path) as ledger:
        journalled = [e for e in ledger.journal("r1") if e.event == "budget_alert"]
    assert len(journalled) == 2, (seed, journalled)  # the warning and the escalation
    oncelog_cli(db_path, "budgets", "r1", "--set", "cost=20", "--by", "alice")
    final = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert final.returncode == 0, (seed, final.stderr)
    assert len(set(markers.read_text().splitlines())) == 12
