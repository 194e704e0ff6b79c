"""The kill switch never does nothing silently, and a mistyped name leads to the right one.

``halt`` and ``resume`` never create a ledger (the wrong directory is an error naming the
path looked at); a switch for a run or agent the ledger has never seen is refused unless
``--ahead`` says it is meant; ``resume --run <typo>`` says nothing was cleared; unknown run
ids list the nearest ones; approving another run's request says which run it belongs to.
The commands run in their own processes, as a person types them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import oncelog

from .support.launch import run_python


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_python("-m", "oncelog", *args, cwd=cwd)


def started(ledger: oncelog.Ledger, run_id: str, agent: str | None = None) -> None:
    with ledger.run(run_id, agent=agent):
        pass


def test_halt_and_resume_in_the_wrong_directory_create_nothing(tmp_path: Path) -> None:
    for args in (
        ("halt", "--run", "m-a", "--reason", "incident", "--by", "ops"),
        ("halt", "--global", "--reason", "incident", "--by", "ops"),
        ("resume", "--run", "m-a", "--by", "ops"),
    ):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == oncelog.LedgerNotFound.exit_code, done.stdout + done.stderr
        assert "no ledger at " in done.stderr
        assert str(Path(".oncelog") / "ledger.db") in done.stderr  # the path it looked for
        assert "halted" not in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_halt_on_a_run_never_seen_is_refused_unless_ahead(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        started(ledger, "m-a", agent="mailer")
    typo = cli("halt", "--run", "m-b", "--reason", "incident", "--by", "ops", "--db", store_url)
    assert typo.returncode == oncelog.UnknownName.exit_code, typo.stdout + typo.stderr
    assert "did you mean 'm-a'" in typo.stderr
    assert "--ahead" in typo.stderr
    agent = cli("halt", "--agent", "mailr", "--reason", "x", "--by", "ops", "--db", store_url)
    assert agent.returncode == oncelog.UnknownName.exit_code, agent.stdout + agent.stderr
    assert "did you mean 'mailer'" in agent.stderr
    with oncelog.open(store_url) as ledger:
        assert ledger.halts() == []
        with pytest.raises(oncelog.UnknownRun, match="did you mean 'm-a'"):
            ledger.halt("incident", by="ops", run="m-b")
        with pytest.raises(oncelog.UnknownAgent):
            ledger.halt("incident", by="ops", agent="nobody")
        assert ledger.halts() == []
    ahead = cli("halt", "--run", "m-c", "--ahead", "--reason", "not yet", "--by", "ops",
                "--db", store_url)  # fmt: skip
    assert ahead.returncode == 0, ahead.stderr
    assert "halted: run m-c" in ahead.stdout
    with oncelog.open(store_url) as ledger:
        with pytest.raises(oncelog.RunHalted), ledger.run("m-c") as run:
            run.read("s", lambda: None)
        assert ledger.verify().ok
    # Clearing it says so, and that nothing had been waiting on it.
    cleared = cli("resume", "--run", "m-c", "--by", "ops", "--db", store_url)
    assert cleared.returncode == 0, cleared.stderr
    assert "cleared: run m-c" in cleared.stdout


def test_resume_of_a_mistyped_run_says_nothing_was_cleared(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        started(ledger, "m-a")
        ledger.halt("incident", by="ops", run="m-a")
    typo = cli("resume", "--run", "m-b", "--by", "ops", "--db", store_url)
    assert typo.returncode == oncelog.UnknownName.exit_code, typo.stdout + typo.stderr
    assert "cleared" not in typo.stdout
    assert "none was cleared" in typo.stderr
    assert "did you mean 'm-a'" in typo.stderr
    with oncelog.open(store_url) as ledger:
        [still] = ledger.halts()
    assert still.target == "m-a"


def test_unknown_ids_list_the_nearest(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        started(ledger, "order-1041")
        with pytest.raises(oncelog.UnknownRun, match="did you mean 'order-1041'"):
            ledger.get_run("order-1014")
        with pytest.raises(oncelog.UnknownApproval, match="did you mean 'order-1041'"):
            ledger.approve("order-1014", "delete", by="alice")
    shown = cli("show", "order-1014", "--db", store_url)
    assert shown.returncode == oncelog.UnknownName.exit_code
    assert "did you mean 'order-1041'" in shown.stderr


def test_approving_another_runs_request_names_its_run(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="destructive", name="delete_account")
        def delete(account: str, *, idempotency_key: str) -> None:
            raise AssertionError("never approved here")

        for run_id in ("r1", "r2"):
            with pytest.raises(oncelog.ApprovalRequired), ledger.run(run_id) as run:
                run.effect("delete", delete, f"acct-{run_id}")
        theirs = next(a for a in ledger.approvals() if a.run_id == "r2")
        with pytest.raises(oncelog.UnknownApproval, match="belongs to run 'r2', step 'delete'"):
            ledger.approve("r1", "delete", by="alice", request=theirs.id)
        with pytest.raises(oncelog.UnknownApproval, match="pending in run 'r1': step 'delete'"):
            ledger.approve("r1", "delte", by="alice")
        assert {a.status for a in ledger.approvals(None)} == {oncelog.ApprovalStatus.PENDING}
