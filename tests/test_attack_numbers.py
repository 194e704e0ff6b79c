"""Attacks with numbers that are not numbers: NaN, infinity, fractions of a count and
integers past int64, given to ``oncelog approve``, ``oncelog budgets --set``, ``oncelog
runs --limit`` and the API. Each is refused at the boundary with a typed error and
nothing written; what reached the provider is read from the tool's tries file."""

from __future__ import annotations

from pathlib import Path

import pytest

import oncelog
from oncelog._exit_codes import EXIT_USAGE

from .support.flaky_agent import flaky, tries_made
from .support.launch import run_python


def _cli(store_url: str, *args: str) -> tuple[int, str]:
    done = run_python("-m", "oncelog", *args, "--db", store_url)
    return done.returncode, done.stdout + done.stderr


def _journal_size(store_url: str) -> int:
    with oncelog.open(store_url, create=False) as ledger:
        return len(list(ledger.iter_journal()))


@pytest.mark.parametrize("expires_in", ["nan", "inf", "-inf", "1e400"])
def test_an_approval_that_expires_in_nan_is_refused_and_the_ledger_stays_whole(
    store_url: str, tmp_path: Path, expires_in: str
) -> None:
    tries = tmp_path / "tries"
    code, out = flaky(store_url, tries, "--approval")
    assert code == oncelog.EXIT_WAITING, out
    before = _journal_size(store_url)
    code, out = _cli(
        store_url, "approve", "r", "charge", "--by", "alice", "--expires-in", expires_in
    )
    assert code == EXIT_USAGE, out
    assert "expires_in" in out
    assert "Traceback" not in out
    assert _journal_size(store_url) == before
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        assert [a.status for a in ledger.approvals(None)] == [oncelog.ApprovalStatus.PENDING]
    code, out = _cli(store_url, "approve", "r", "charge", "--by", "alice", "--expires-in", "60")
    assert code == 0, out
    code, out = flaky(store_url, tries, "--approval")
    assert code == 0, out
    assert len(tries_made(tries)) == 1
    with oncelog.open(store_url) as ledger:
        assert ledger.verify().ok
        assert len(list(ledger.export())) > 0


def test_a_budget_of_nan_cost_is_refused_and_the_limit_still_holds(
    store_url: str, tmp_path: Path
) -> None:
    tries = tmp_path / "tries"
    options = ("--cost", "1000000", "--budget", "10")
    code, out = flaky(store_url, tries, *options)
    assert code == oncelog.EXIT_HALTED, out
    for bad in ("cost=nan", "cost=inf", "steps=1.5", "steps=1e30", "tokens=-1"):
        before = _journal_size(store_url)
        code, out = _cli(store_url, "budgets", "r", "--set", bad, "--by", "mallory")
        assert code == EXIT_USAGE, (bad, out)
        assert "Traceback" not in out
        assert _journal_size(store_url) == before
        code, out = flaky(store_url, tries, *options)
        assert code == oncelog.EXIT_HALTED, (bad, out)
        assert "BudgetExceeded" in out
    assert tries_made(tries) == []
    with oncelog.open(store_url) as ledger:
        budget, _ = ledger.budget_usage("r")
        assert budget is not None
        assert budget.cost == 10
        assert ledger.verify().ok


@pytest.mark.parametrize("limit", [str(10**30), "-1"])
def test_a_listing_limit_past_int64_is_a_usage_error(store_url: str, limit: str) -> None:
    with oncelog.open(store_url):
        pass
    code, out = _cli(store_url, "runs", "--limit", limit)
    assert code == EXIT_USAGE, out
    assert "Traceback" not in out
    assert "limit" in out
