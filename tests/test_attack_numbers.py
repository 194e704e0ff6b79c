"""Attacks with numbers that are not numbers: NaN, infinity, fractions of a count and
integers past int64, given to ``oncelog approve``, ``oncelog budgets --set``, ``oncelog
runs --limit`` and the API. Each is refused at the boundary with a typed error and
nothing written; what reached the provider is read from the tool's tries file."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

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


# -- the API's own boundaries (in process) -----------------------------------------------

BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1, True, "10", 10**400]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_an_approval_that_expires_in_a_bad_number_writes_nothing(
    store_url: str, tmp_path: Path, value: object
) -> None:
    code, out = flaky(store_url, tmp_path / "tries", "--approval")
    assert code == oncelog.EXIT_WAITING, out
    before = _journal_size(store_url)
    with oncelog.open(store_url) as ledger:
        with pytest.raises(oncelog.ConfigurationError, match="expires_in"):
            ledger.approve("r", "charge", by="alice", expires_in=value)  # type: ignore[arg-type]
        assert _journal_size(store_url) == before
        assert ledger.approve("r", "charge", by="alice", expires_in=timedelta(hours=1)).id == 1
        assert ledger.verify().ok


@pytest.mark.parametrize(
    "limits",
    [{"steps": 1.5}, {"steps": True}, {"tokens": 2**63}, {"cost": math.nan},
     {"cost": math.inf}, {"wall_clock": math.nan}, {"irreversible": -1}, {"warn_at": math.nan}],
    ids=repr,
)  # fmt: skip
def test_a_budget_with_a_bad_number_is_refused(limits: dict[str, Any]) -> None:
    with pytest.raises(oncelog.ConfigurationError):
        oncelog.Budget(**limits)


def test_whole_numbers_given_as_floats_are_stored_whole() -> None:
    budget = oncelog.Budget(steps=3.0, cost=2)  # type: ignore[arg-type]  # as --set sends them
    assert (budget.steps, type(budget.steps), budget.cost) == (3, int, 2.0)
    assert oncelog.AgentBudget(calls=4.0).calls == 4  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [lambda: oncelog.Retry(attempts=2.5), lambda: oncelog.Retry(backoff=math.nan),  # type: ignore[arg-type]
     lambda: oncelog.Retry(cap=math.inf)],
)  # fmt: skip
def test_a_retry_policy_with_a_bad_number_is_refused(make: Callable[[], object]) -> None:
    with pytest.raises(oncelog.ConfigurationError):
        make()


@pytest.mark.parametrize("option", ["dedupe_window", "cost"])
def test_a_tool_declared_with_a_bad_number_is_refused(option: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=option):
        settings: dict[str, Any] = {option: math.nan}
        oncelog.tool(kind="payment", **settings)(lambda: None)


@pytest.mark.parametrize("limit", [10**30, -1, 2.5, True])
def test_a_listing_limit_that_is_not_a_count_is_refused(store_url: str, limit: Any) -> None:
    with oncelog.open(store_url) as ledger, pytest.raises(oncelog.ConfigurationError):
        ledger.runs(limit=limit)
