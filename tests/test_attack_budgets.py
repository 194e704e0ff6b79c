"""An attack on "each attempt reserves its cost before the call, so no number of restarts
can spend past the budget" where restarts resend on their own: a payment declared with a
deduplication window is sent again after each kill, and each resend is an attempt.
"""

from __future__ import annotations

import signal
from pathlib import Path

import oncelog

from .support import oncelog_cli
from .support.flaky_agent import flaky, tries_made

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
