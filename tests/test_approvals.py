"""Approvals: bound to the run, the step and the exact arguments; used once; durable."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import oncelog

from .support import oncelog_cli
from .support.launch import python

DELETER = Path(__file__).parent / "approval_agents" / "deleter.py"


def deleter(
    store_url: str, markers: Path, account: str = "acct_1", crash_at: str | None = None
) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_CRASH_AT"}
    if crash_at:
        env["ONCELOG_CRASH_AT"] = crash_at
    done = subprocess.run(
        python(str(DELETER), store_url, "r1", str(markers), account),
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def deletions(markers: Path) -> list[str]:
    return markers.read_text().splitlines() if markers.exists() else []


def test_a_destructive_effect_waits_and_runs_once_approved(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    for _ in range(3):  # waiting survives restarts; nothing runs
        code, out = deleter(store_url, markers)
        assert code == oncelog.EXIT_WAITING, out
        assert "ApprovalRequired" in out
    assert deletions(markers) == []
    listed = oncelog_cli(store_url, "approvals")
    assert "r1 delete (delete_account) pending" in listed
    assert '"acct_1"' in listed
    with oncelog.open(store_url) as ledger:
        assert ledger.get_run("r1").status is oncelog.RunStatus.WAITING
        assert len(ledger.approvals()) == 1  # one request, not one per restart
    oncelog_cli(store_url, "approve", "r1", "delete", "--by", "alice")
    code, out = deleter(store_url, markers)
    assert code == 0, out
    code, out = deleter(store_url, markers)  # a replay does not need or use an approval
    assert code == 0, out
    assert len(deletions(markers)) == 1
    with oncelog.open(store_url) as ledger:
        [used] = ledger.approvals(None)
        events = [e.event for e in ledger.journal("r1")]
    assert (used.status, used.decided_by) == (oncelog.ApprovalStatus.USED, "alice")
    assert "approval_approved" in events


def test_an_approval_counts_only_for_its_arguments(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers, "acct_1")[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r1", "delete", "--by", "alice")
    code, out = deleter(store_url, markers, "acct_2")  # the model now names another account
    assert code == oncelog.EXIT_WAITING, out
    assert deletions(markers) == []
    with oncelog.open(store_url) as ledger:
        pending = ledger.approvals()
    assert [a.args_json for a in pending] == ['{"args":["acct_2"],"kwargs":{}}']


def test_an_expired_approval_does_not_count(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers)[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r1", "delete", "--by", "alice", "--expires-in", "0.2")
    time.sleep(0.4)
    assert deleter(store_url, markers)[0] == oncelog.EXIT_WAITING
    assert deletions(markers) == []
    with oncelog.open(store_url) as ledger:
        statuses = sorted(a.status.value for a in ledger.approvals(None))
    assert statuses == ["expired", "pending"]


def test_a_crash_before_the_intent_commits_keeps_the_approval(
    store_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers)[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r1", "delete", "--by", "alice")
    code, _ = deleter(store_url, markers, crash_at="before_intent_commit@delete")
    assert code == -9
    code, out = deleter(store_url, markers)
    assert code == 0, out
    assert len(deletions(markers)) == 1


def test_an_approval_is_used_once_even_across_a_crash(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers)[0] == oncelog.EXIT_WAITING
    oncelog_cli(store_url, "approve", "r1", "delete", "--by", "alice")
    code, _ = deleter(store_url, markers, crash_at="after_call@delete")
    assert code == -9
    assert len(deletions(markers)) == 1
    code, out = deleter(store_url, markers)  # in doubt, destructive, no probe: a person
    assert code == oncelog.EXIT_HALTED, out
    oncelog_cli(
        store_url, "resolve", "r1", "delete", "not_done", "--by", "bob"
    )  # wrong, on purpose
    code, out = deleter(store_url, markers)  # the used approval does not let it run again
    assert code == oncelog.EXIT_WAITING, out
    assert len(deletions(markers)) == 1


def test_a_denial_reaches_the_agent_as_a_typed_result(store_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    assert deleter(store_url, markers)[0] == oncelog.EXIT_WAITING
    oncelog_cli(
        store_url, "deny", "r1", "delete", "--by", "carol", "--note", "customer asked to keep it"
    )
    for _ in range(2):  # and again on replay
        code, out = deleter(store_url, markers)
        assert code == 0, out
        assert "denied: carol denied 'delete' with these arguments: customer asked" in out
    assert deletions(markers) == []


def test_async_code_awaits_the_approval(store_url: str) -> None:
    ran: list[str] = []
    with oncelog.open(store_url, approval_poll=0.05) as ledger:

        @ledger.tool(kind="create", name="wire", approval=True)
        async def wire(cents: int, *, idempotency_key: str) -> int:
            ran.append(idempotency_key)
            return cents

        def approver() -> None:
            with oncelog.open(store_url) as other:
                while not other.approvals():
                    time.sleep(0.02)
                other.approve("r", "wire", by="dana")

        async def agent() -> int:
            async with ledger.run("r") as run:
                return int(await run.effect("wire", wire, 900))

        thread = threading.Thread(target=approver)
        thread.start()
        assert asyncio.run(asyncio.wait_for(agent(), timeout=30)) == 900
        thread.join()
    assert len(ran) == 1


def test_misuse(ledger: oncelog.Ledger) -> None:
    with pytest.raises(oncelog.UnknownApproval):
        ledger.approve("r", "nothing", by="alice")
    with pytest.raises(oncelog.ConfigurationError):
        ledger.deny("r", "nothing", by="")
