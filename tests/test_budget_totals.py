"""Budgets' running totals: kept on the run's row and the agent's day row by the store as
steps are written (0009_budget_totals.sql), so an intent checks a budget at a constant
cost; they must always equal what the steps count, and ``verify`` must notice when they do
not. On both stores."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from typing import Any

import pytest

import oncelog
from oncelog import AgentBudget, Budget, StepState
from oncelog.audit._verify import verify

from .conftest import require
from .support.postgres import POSTGRES_REASON, fresh_schema, postgres_is_up

BUDGET = Budget(steps=100, tokens=10_000, cost=100.0, irreversible=10)


class Declined(Exception):
    """The provider's definite no: the step is recorded failed and not counted."""


def sql(ledger_url: str, statement: str) -> None:
    """One statement on the ledger's tables, behind oncelog's back."""
    if ledger_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger_url, autocommit=True) as conn:
            conn.execute(statement)
        return
    with closing(sqlite3.connect(ledger_url)) as db, db:
        db.execute(statement)


def counted(ledger: oncelog.Ledger, run_id: str) -> tuple[int, int, float, int]:
    """steps, tokens, cost, irreversible summed afresh over the run's steps."""
    steps = [s for s in ledger.steps(run_id) if s.state is not StepState.FAILED]
    row = ledger.store._read(  # type: ignore[attr-defined]
        "SELECT COALESCE(SUM(cost), 0), COALESCE(SUM(irreversible), 0) FROM steps "
        "WHERE run_id = ? AND state != 'failed'",
        (run_id,),
    )[0]
    tokens = sum(s.tokens_in + s.tokens_out for s in steps)
    return len(steps), tokens, float(row[0]), int(row[1])


def kept(ledger: oncelog.Ledger, run_id: str) -> tuple[int, int, float, int]:
    _, used = ledger.budget_usage(run_id)
    return used.steps, used.tokens, used.cost, used.irreversible


def tools(ledger: oncelog.Ledger) -> dict[str, oncelog.Tool[..., Any]]:
    failures = {"flaky": 1}

    @ledger.tool(kind="create", cost=0.5)
    def create(n: int, *, idempotency_key: str) -> int:
        return n

    @ledger.tool(kind="payment", cost=1.0)
    def pay(n: int, *, idempotency_key: str) -> int:
        return n

    @ledger.tool(kind="create", cost=2.0, refusals=(Declined,))
    def declined(n: int, *, idempotency_key: str) -> int:
        raise Declined("no")

    @ledger.tool(kind="upsert", cost=0.25)
    def flaky(n: int, *, idempotency_key: str) -> int:
        if failures["flaky"]:
            failures["flaky"] -= 1
            raise ConnectionError("reset")
        return n

    return {"create": create, "pay": pay, "declined": declined, "flaky": flaky}


def model() -> dict[str, object]:
    return {"usage": {"input_tokens": 60, "output_tokens": 10, "cost": 0.125}}


def test_run_totals_follow_every_kind_of_step(ledger: oncelog.Ledger) -> None:
    act = tools(ledger)

    def agent() -> None:
        with ledger.run("r", budget=BUDGET) as run:
            run.llm("think", model)
            run.effect("c1", act["create"], 1)
            run.effect("p1", act["pay"], 1)
            with pytest.raises(oncelog.EffectRefused):
                run.effect("no", act["declined"], 1)
            run.read("look", lambda: 1)
            run.effect("f1", act["flaky"], 1)  # first not_done, raised; then retried

    with pytest.raises(ConnectionError):
        agent()
    assert kept(ledger, "r") == counted(ledger, "r")
    agent()
    # f1's cost is charged per attempt; the refusal is not counted at all.
    assert kept(ledger, "r") == counted(ledger, "r") == (5, 70, 2.125, 1)
    assert ledger.store.budget_drift(None) == []


def test_a_budget_set_on_a_running_run_counts_what_it_already_did(
    ledger: oncelog.Ledger,
) -> None:
    act = tools(ledger)
    with ledger.run("r") as run:
        for n in range(3):
            run.effect(f"s{n}", act["create"], n)
    ledger.set_budget("r", Budget(steps=4), by="ops")
    assert kept(ledger, "r")[0] == 3
    with pytest.raises(oncelog.BudgetExceeded), ledger.run("r") as run:
        for n in range(5):
            run.effect(f"s{n}", act["create"], n)
    assert len(ledger.steps("r")) == 4
    assert ledger.store.budget_drift("r") == []


def test_agent_totals_count_today_across_runs_and_budget_changes(
    ledger: oncelog.Ledger,
) -> None:
    act = tools(ledger)
    with ledger.run("before", agent="bot") as run:  # no budget yet: nothing kept
        run.effect("s", act["create"], 0)
    ledger.set_agent_budget("bot", AgentBudget(calls=6, cost=10.0), by="ops")
    for run_id in ("a", "b"):
        with ledger.run(run_id, agent="bot") as run:
            run.effect("s", act["pay"], 1)
            with pytest.raises(oncelog.EffectRefused):
                run.effect("no", act["declined"], 1)
    assert ledger.store.budget_drift(None) == []
    ledger.set_agent_budget("bot", None, by="ops")
    with ledger.run("unbudgeted", agent="bot") as run:
        run.effect("s", act["create"], 0)
    ledger.set_agent_budget("bot", AgentBudget(calls=5), by="ops")  # counted afresh: 4
    with pytest.raises(oncelog.BudgetExceeded), ledger.run("c", agent="bot") as run:
        for n in range(3):
            run.effect(f"s{n}", act["create"], n)
    assert [s.step_id for s in ledger.steps("c")] == ["s0"]
    assert ledger.store.budget_drift(None) == []


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE runs SET used_steps = used_steps - 1 WHERE run_id = 'r'",
        "UPDATE runs SET used_cost = used_cost + 0.5 WHERE run_id = 'r'",
        "UPDATE agent_usage SET calls = 0",
        "DELETE FROM agent_usage",
    ],
)
def test_verify_finds_totals_that_disagree_with_the_steps(
    ledger: oncelog.Ledger, store_url: str, edit: str
) -> None:
    act = tools(ledger)
    ledger.set_agent_budget("bot", AgentBudget(calls=10), by="ops")
    with ledger.run("r", agent="bot", budget=BUDGET) as run:
        run.effect("s", act["pay"], 1)
    assert verify(ledger.store).ok
    sql(store_url, edit)
    problems = [p for p in verify(ledger.store).problems if p.kind == "budget_totals"]
    assert len(problems) == 1, problems
    assert ("'r'" if "runs" in edit else "'bot'") in problems[0].message


@pytest.mark.parametrize("setter", ["run", "agent"])
def test_setting_a_budget_waits_for_the_intents_in_flight(setter: str) -> None:
    """PostgreSQL's intent function leaves a step of a run without a budget uncounted; a
    budget set while such an intent has not committed must count afresh only after it has.
    An intent holds the kill-switch lock shared until its commit: a raw transaction holding
    it stands in for one, and the setter must wait for its commit."""
    require(postgres_is_up(), POSTGRES_REASON)
    import psycopg

    with fresh_schema() as url, oncelog.open(url) as ledger:
        with ledger.run("r", agent="a") as run:
            run.effect("one", tools(ledger)["create"], 1)
        with psycopg.connect(url) as in_flight:
            in_flight.execute("SELECT pg_advisory_xact_lock_shared(1869505381, 2)")
            done = threading.Event()

            def set_it() -> None:
                if setter == "run":
                    ledger.set_budget("r", BUDGET, by="ops")
                else:
                    ledger.set_agent_budget("a", AgentBudget(calls=10), by="ops")
                done.set()

            worker = threading.Thread(target=set_it)
            worker.start()
            assert not done.wait(1.0), "the budget was set while an intent held the lock"
            in_flight.commit()
            worker.join(10)
        assert done.is_set()
        assert kept(ledger, "r") == counted(ledger, "r")
