"""Attacks on budgets: "each attempt reserves its cost before the call, so no number of
restarts can spend past the budget" where restarts resend on their own (a payment declared
with a deduplication window is sent again after each kill, and each resend is an
attempt), and an agent's daily budget charged by runs in several processes at once.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import oncelog

from .support import oncelog_cli
from .support.flaky_agent import flaky, tries_made
from .support.launch import python

SPENDER = Path(__file__).parent / "attack_agents" / "agent_spender.py"

OPTIONS = ("--dedupe-window", "600", "--cost", "1", "--budget", "2.5")


def test_resends_after_kills_stop_at_the_budget(store_url: str, tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    for sent in (1, 2):  # two attempts fit in 2.5
        code, out = flaky(store_url, tries, *OPTIONS, crash_at="after_call@charge")
        assert code == -signal.SIGKILL, out
        assert len(tries_made(tries)) == sent
    for _ in range(3):  # a third would cost 3: refused before it is sent, every time
        code, out = flaky(store_url, tries, *OPTIONS, crash_at="after_call@charge")
        assert code == oncelog.EXIT_HALTED, out
        assert "BudgetExceeded" in out
    assert len(tries_made(tries)) == 2
    with oncelog.open(store_url) as ledger:
        _, usage = ledger.budget_usage("r")
        assert usage.cost == 2
        assert ledger.verify().ok
    oncelog_cli(store_url, "budgets", "r", "--set", "cost=3.5", "--by", "alice")
    code, out = flaky(store_url, tries, *OPTIONS)
    assert code == 0, out
    made = tries_made(tries)
    assert len(made) == 3
    assert len({t.key for t in made}) == 1
    with oncelog.open(store_url) as ledger:
        [charge] = ledger.steps("r")
        _, usage = ledger.budget_usage("r")
        assert ledger.verify().ok
    assert (charge.state, charge.attempts, usage.cost) == (oncelog.StepState.DONE, 3, 3)


SPENDERS, EACH, DAILY = 4, 12, 20


def test_racing_runs_of_one_agent_never_spend_past_its_daily_budget(
    store_url: str, tmp_path: Path
) -> None:
    """Four runs of one agent, in four processes started together, each try twelve
    effects against a daily budget of twenty: every intent checks and charges the
    agent's usage in its transaction, so together they perform twenty, never more."""
    with oncelog.open(store_url) as ledger:
        ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=DAILY), by="ops")
    markers, go = tmp_path / "markers", tmp_path / "go"
    argvs = [python(SPENDER, store_url, f"r{n}", "billing", markers, str(EACH), go)
             for n in range(SPENDERS)]  # fmt: skip
    spenders = [subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) for argv in argvs]
    try:
        go.touch()
        ended = [(s.communicate(timeout=60)[1], s.returncode) for s in spenders]
    finally:
        for spender in spenders:
            if spender.poll() is None:
                spender.kill()
                spender.communicate()
    assert {code for _, code in ended} <= {0, oncelog.EXIT_HALTED}, ended
    performed = markers.read_text().splitlines()
    assert len(performed) == len(set(performed)) == DAILY
    with oncelog.open(store_url) as ledger:
        steps = [s for n in range(SPENDERS) for s in ledger.steps(f"r{n}")]
        assert ledger.verify().ok
    assert sorted(performed) == sorted(s.key for s in steps)
