"""Attacks on "a halt sticks": an agent whose code catches the stop and goes on, as a
framework that hands a tool's error back to its model does (``halt_agents/catcher.py``).
Once a step needs a person, no later step of the run starts, in that process or the
next, the run does not end ``completed``, the process exits with the stop's code, and
``oncelog unknown`` lists the effect in doubt; a person's decision lets it go on. What
happened is counted at a provider process, never read from the ledger.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import oncelog

from .support.launch import environment, run_python
from .support.operator_commands import oncelog_cli
from .support.provider_process import Provider

CATCHER = Path(__file__).parent / "halt_agents" / "catcher.py"


def catcher(
    store_url: str, provider: Provider, scenario: str, *options: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_python(
        CATCHER, store_url, "r", provider.url, scenario, *options, env=environment(crash_at)
    )


def performed(provider: Provider) -> Counter[str]:
    """How many times the provider performed each tool's effect for run ``r``."""
    return Counter(effect.payload["tool"] for effect in provider.effects("r"))


def run_of(store_url: str) -> oncelog.RunRecord:
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        return ledger.get_run("r")


def test_a_caught_ambiguous_outcome_called_again_is_refused_and_the_run_stays_halted(
    store_url: str, provider: Provider
) -> None:
    for _ in range(2):  # the first start, then a restart: the halt is in the ledger
        started = catcher(store_url, provider, "ambiguous")
        assert performed(provider) == Counter(pay=1)
        assert started.returncode == oncelog.EXIT_HALTED, started.stdout + started.stderr
        assert "finished" in started.stdout  # the code went on to its end
        run = run_of(store_url)
        assert run.status is oncelog.RunStatus.HALTED
        with oncelog.open(store_url) as ledger:
            [step] = ledger.steps("r")
            [doubt] = ledger.effects_in_doubt()
        assert (step.step_id, step.state) == ("pay@0", oncelog.StepState.UNKNOWN)
        assert doubt.step.step_id == "pay@0"
        assert "pay@0" in oncelog_cli(store_url, "unknown")
    assert "'pay@1' was not started: step 'pay@0'" in started.stdout
    oncelog_cli(store_url, "resolve", "r", "pay@0", "done", "--no-result", "--by", "alice")
    assert run_of(store_url).stop_seq is None  # the decision lifted the stop
    finished = catcher(store_url, provider, "ambiguous")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert performed(provider) == Counter(pay=1, notify=1)
    assert run_of(store_url).status is oncelog.RunStatus.COMPLETED


def test_caught_drift_stops_every_later_step_until_the_code_is_fixed(
    store_url: str, provider: Provider
) -> None:
    killed = catcher(store_url, provider, "drift", crash_at="after_outcome_commit@pay")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    for _ in range(2):
        drifted = catcher(store_url, provider, "drift", "--amount", "20")
        assert performed(provider) == Counter(pay=1)
        assert drifted.returncode == oncelog.EXIT_HALTED, drifted.stdout + drifted.stderr
        assert "caught ArgumentDrift:" in drifted.stdout
        assert run_of(store_url).status is oncelog.RunStatus.HALTED
    fixed = catcher(store_url, provider, "drift", "--amount", "10")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert performed(provider) == Counter(pay=1, notify=1)
    assert run_of(store_url).status is oncelog.RunStatus.COMPLETED


def test_a_caught_budget_stop_refuses_a_cheaper_step_until_the_budget_is_raised(
    store_url: str, provider: Provider
) -> None:
    for _ in range(2):
        stopped = catcher(store_url, provider, "budget")
        assert performed(provider) == Counter(pay=1)
        assert stopped.returncode == oncelog.EXIT_HALTED, stopped.stdout + stopped.stderr
        assert "caught BudgetExceeded:" in stopped.stdout
        assert run_of(store_url).status is oncelog.RunStatus.HALTED
        listed = oncelog_cli(store_url, "halts")
        assert "run r is stopped at step big@1 for a person: BudgetExceeded:" in listed
    with oncelog.open(store_url) as ledger:
        ledger.set_budget("r", oncelog.Budget(cost=10.0), by="alice")
    assert run_of(store_url).stop_seq is None  # the decision lifted the stop
    raised = catcher(store_url, provider, "budget")
    assert raised.returncode == 0, raised.stdout + raised.stderr
    assert performed(provider) == Counter(pay=1, big=1, small=1, notify=1)


def test_a_caught_kill_switch_ends_the_run_halted_not_completed(
    store_url: str, provider: Provider
) -> None:
    with oncelog.open(store_url):
        pass  # a kill switch is set on a ledger that exists: `halt` creates none
    oncelog_cli(store_url, "halt", "--run", "r", "--ahead", "--reason", "incident 7", "--by", "ops")
    for _ in range(2):
        halted = catcher(store_url, provider, "switch")
        assert halted.returncode == oncelog.EXIT_HALTED, halted.stdout + halted.stderr
        assert "caught RunHalted:" in halted.stdout
        assert performed(provider) == Counter()
        assert run_of(store_url).status is oncelog.RunStatus.HALTED
    oncelog_cli(store_url, "resume", "--run", "r", "--by", "ops")
    resumed = catcher(store_url, provider, "switch")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert performed(provider) == Counter(pay=1, notify=1)


def test_raising_an_agent_budget_lifts_its_runs_budget_stops(ledger: oncelog.Ledger) -> None:
    """In process, on both stores: the agent's daily budget stops a run whose code catches
    it; a person's higher budget lifts the stop in its own transaction, and the run then
    goes on from the stopped step."""
    sent: list[str] = []

    @ledger.tool(kind="create", name="send")
    def send(to: str, *, idempotency_key: str) -> str:
        sent.append(to)
        return to

    ledger.set_agent_budget("mailer", oncelog.AgentBudget(calls=1), by="ops")
    for _ in range(2):
        with pytest.raises(oncelog.BudgetExceeded), ledger.run("m", agent="mailer") as run:
            run.effect("a", send, "a")
            with pytest.raises(oncelog.BudgetExceeded):
                run.effect("b", send, "b")
            with pytest.raises(oncelog.BudgetExceeded, match="'c' was not started"):
                run.effect("c", send, "c")
        assert ledger.get_run("m").stop_seq == 1
    ledger.set_agent_budget("mailer", oncelog.AgentBudget(calls=10), by="ops")
    assert ledger.get_run("m").stop_seq is None
    with ledger.run("m", agent="mailer") as run:
        for to in ("a", "b", "c"):
            run.effect(to, send, to)
    assert sent == ["a", "b", "c"]
    assert ledger.verify().ok
