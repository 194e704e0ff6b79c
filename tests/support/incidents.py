"""Ledgers holding what the console is for: a destructive effect waiting for approval, an
effect in doubt after a process was killed, a run over its budget. Each is made by real
agent code through the public API, as in production."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import oncelog

from .launch import python

LOOPER = Path(__file__).parents[1] / "halt_agents" / "looper.py"


def approval_pending(ledger: oncelog.Ledger, run_id: str = "r-delete", **kwargs: str) -> None:
    """A run waiting (exit 4) for a person to approve deleting an account."""

    @ledger.tool(kind="destructive", name="delete_account")
    def delete_account(account: str, *, idempotency_key: str, **extra: str) -> dict[str, str]:
        return {"deleted": account}

    with pytest.raises(oncelog.ApprovalRequired), ledger.run(run_id) as run:
        run.effect("delete", delete_account, "acct_1", **kwargs)


def refund_pending(ledger: oncelog.Ledger, run_id: str = "r-refund") -> None:
    """A run waiting for a person to approve a refund over 100 (a per-call policy)."""

    @ledger.tool(kind="payment", name="refund", approval=lambda order, amount: amount > 100)
    def refund(order: str, amount: int, *, idempotency_key: str) -> dict[str, object]:
        return {"order": order, "amount": amount}

    with pytest.raises(oncelog.ApprovalRequired), ledger.run(run_id) as run:
        run.effect("refund", refund, "o-7", 150)


def effect_in_doubt(ledger: oncelog.Ledger, run_id: str = "r-mail", said: str = "") -> None:
    """A run halted on an email whose provider never answered."""

    @ledger.tool(kind="create", name="send_email")
    def send_email(to: str, body: str, *, idempotency_key: str) -> None:
        raise ConnectionError(f"no answer from the mail provider{said}")

    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run(run_id, agent="mailer") as run:
        run.effect("email", send_email, to="a@example.com", body="your refund")


def effect_killed_in_flight(db_path: str, tmp_path: Path, run_id: str = "r-killed") -> None:
    """An agent process SIGKILLed right after its email went out, before the outcome was
    recorded, then restarted: the restart finds the effect in doubt and halts (exit 3)."""
    argv = python(str(LOOPER), db_path, run_id, "mailer", str(tmp_path / "sent"), "1")
    env = {**os.environ, "ONCELOG_CRASH_AT": "after_call@email-0"}
    killed = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert killed.returncode == -9, killed
    env.pop("ONCELOG_CRASH_AT")
    restarted = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert restarted.returncode == oncelog.EXIT_HALTED, restarted


def over_budget(ledger: oncelog.Ledger, run_id: str = "r-budget") -> None:
    """A run stopped by its budget of one step, at its second."""
    with pytest.raises(oncelog.BudgetExceeded):
        count_twice(ledger, run_id, budget=oncelog.Budget(steps=1))


def count_twice(ledger: oncelog.Ledger, run_id: str, budget: oncelog.Budget | None = None) -> None:
    """The agent of ``over_budget``: two recorded reads."""
    with ledger.run(run_id, budget=budget) as run:
        run.read("one", _count, 1)
        run.read("two", _count, 2)


def _count(n: int) -> int:
    return n
