"""Retention: ``Ledger.prune`` / ``oncelog prune`` archive completed runs and remove them;
the ledger and the archive both verify across the cut, on both stores.

A run's age is the time its row last changed (``runs.updated_at``); tests age runs by
moving that time back, as a clock read days later would see them."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog.testing import abandon

from .support.launch import python

DAY = 86400.0


def tamper(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """A write behind the ledger's back (here: moving a run's end into the past)."""
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(sql.replace("?", "%s"), params)
    else:
        with closing(sqlite3.connect(store_url)) as lite:
            lite.execute(sql, params)
            lite.commit()


def age(store_url: str, days: float, *run_ids: str, steps: bool = True) -> None:
    """Move the runs' ends (and their steps' starts) ``days`` into the past. ``verify``
    holds a step's start to its journalled intent: a run aged so and kept shows there."""
    marks = ", ".join("?" * len(run_ids))
    tamper(store_url, f"UPDATE runs SET updated_at = updated_at - ? WHERE run_id IN ({marks})",
           (days * DAY, *run_ids))  # fmt: skip
    if steps:
        tamper(store_url, f"UPDATE steps SET started_at = started_at - ? "
               f"WHERE run_id IN ({marks})", (days * DAY, *run_ids))  # fmt: skip


def sender(ledger: oncelog.Ledger) -> oncelog.Tool[..., Any]:
    @ledger.tool(kind="create", name="send")
    def send(n: int, *, idempotency_key: str) -> int:
        return n

    return send


def completed(ledger: oncelog.Ledger, *run_ids: str, agent: str | None = None) -> None:
    send = sender(ledger)
    for run_id in run_ids:
        with ledger.run(run_id, agent=agent) as run:
            for n in range(3):
                run.effect(f"s{n}", send, n)


def run_ids(ledger: oncelog.Ledger) -> set[str]:
    return {run.run_id for run in ledger.runs(limit=10_000)}


def assert_verifies(ledger: oncelog.Ledger, **options: Any) -> Any:
    report = ledger.verify(**options)
    assert report.ok, report.problems
    return report


# -- what prune removes, archives and anchors ---------------------------------------------


def test_prune_archives_removes_and_both_verify(ledger: oncelog.Ledger, store_url: str,
                                               tmp_path: Path) -> None:  # fmt: skip
    completed(ledger, "old-1", "old-2", "new")
    age(store_url, 3, "old-1", "old-2")
    before = ledger.size()
    archive = tmp_path / "archive.jsonl"

    report = ledger.prune(archive, older_than=DAY)

    assert sorted(run.run_id for run in report.removed) == ["old-1", "old-2"]
    assert run_ids(ledger) == {"new"}
    after = ledger.size()
    assert (after.runs, after.steps) == (before.runs - 2, before.steps - 6)
    assert after.records < before.records
    verified = assert_verifies(ledger)
    assert (verified.pruned_runs, verified.pruned_records) == (2, report.records)
    assert [name for _, name in verified.anchors] == ["archive.jsonl"]
    assert [record for record, _ in verified.anchors] == report.anchors
    checked = ledger.verify_archive(archive)
    assert checked.ok, checked.problems
    assert (checked.runs, checked.anchored, checked.unanchored) == (2, 2, [])
    # The archive is `oncelog export`'s lines: each run's records, hashes as stored.
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert lines[0]["type"] == "prune_archive"
    assert {line["run_id"] for line in lines if line["type"] == "record"} == {"old-1", "old-2"}
    # Nothing more is due; the ledger is written and read on as before.
    assert ledger.prune(tmp_path / "second.jsonl", older_than=DAY).archive is None
    assert not (tmp_path / "second.jsonl").exists()
    completed(ledger, "later")
    assert_verifies(ledger)


def test_a_signed_anchor_and_an_earlier_export_verify_across_the_cut(
    store_url: str, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    subprocess.run(python("-m", "oncelog", "keys", "new", "--dir", str(keys)), check=True,
                   capture_output=True)  # fmt: skip
    private = next(keys.glob("*.key"))
    public = next(keys.glob("*.pub"))
    with oncelog.open(store_url, signing_key=str(private)) as ledger:
        completed(ledger, "old", "new")
        exported = list(ledger.checkpoints())  # signed at each run's end, kept elsewhere
        age(store_url, 3, "old")
        report = ledger.prune(tmp_path / "a.jsonl", older_than=DAY)
        assert [run.run_id for run in report.removed] == ["old"]
        # The chain under no run holds the anchor, and a checkpoint signs it.
        anchor_marks = [mark for mark in ledger.checkpoints() if mark.run_id == ""]
        assert anchor_marks
        assert_verifies(ledger, public_keys=[public], against=exported)
        archived = ledger.verify_archive(tmp_path / "a.jsonl", public_keys=[public])
        assert archived.ok, archived.problems
        assert archived.checkpoints >= 1
        assert archived.signatures_checked


def test_an_archive_edited_after_the_prune_fails_its_check(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    completed(ledger, "old")
    age(store_url, 3, "old")
    archive = tmp_path / "a.jsonl"
    ledger.prune(archive, older_than=DAY)
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    intent = next(line for line in lines if line.get("event") == "intent")
    intent["data"] = intent["data"].replace("send", "wire", 1)  # another tool, after the fact
    archive.write_text("".join(json.dumps(line) + "\n" for line in lines))
    checked = ledger.verify_archive(archive)
    assert not checked.ok
    assert any("does not follow" in problem for problem in checked.problems)
    assert any("no anchor" in problem for problem in checked.problems)


def test_an_agents_own_window(ledger: oncelog.Ledger, store_url: str, tmp_path: Path) -> None:
    completed(ledger, "billing-old", "billing-mid", agent="billing")
    completed(ledger, "other-mid")
    age(store_url, 10, "billing-old")
    age(store_url, 3, "billing-mid", "other-mid")

    report = ledger.prune(tmp_path / "a.jsonl", older_than=7 * DAY, agents={"billing": 2 * DAY})

    assert sorted(run.run_id for run in report.removed) == ["billing-mid", "billing-old"]
    assert run_ids(ledger) == {"other-mid"}
    assert ledger.prune(tmp_path / "b.jsonl", agents={"billing": 1.0}).archive is None


def test_spend_still_in_an_agents_day_is_never_pruned(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    """An agent's daily budget counts today's steps from a running total: a run whose
    steps started today stays until the day is over, even if its row looks old (a clock
    stepped back), so the total and the steps it counts still agree."""
    ledger.set_agent_budget("billing", oncelog.AgentBudget(calls=1000), by="ops")
    completed(ledger, "today", agent="billing")
    age(store_url, 3, "today", steps=False)
    assert ledger.prune(tmp_path / "a.jsonl", older_than=DAY).archive is None
    assert run_ids(ledger) == {"today"}
    assert_verifies(ledger)  # the agent's totals included


# -- what prune never touches -------------------------------------------------------------


def test_runs_that_must_stay_are_never_pruned(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    send = sender(ledger)

    @ledger.tool(kind="create", name="charge")
    def charge(n: int, *, idempotency_key: str) -> int:
        raise ConnectionResetError("the provider hung up mid-call")

    @ledger.tool(kind="destructive", name="wipe")
    def wipe(n: int, *, idempotency_key: str) -> int:
        return n

    @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order))
    def refund(order: int, *, idempotency_key: str) -> int:
        return order

    completed(ledger, "done")
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("in-doubt") as run:
        run.effect("charge", charge, 1)
    with pytest.raises(oncelog.ApprovalRequired), ledger.run("waiting") as run:
        run.effect("wipe", wipe, 1)
    with ledger.run("claims-for-ever") as run:
        run.effect("refund", refund, 7)
    with ledger.run("holder") as run, run.hold("db-1"):
        run.effect("s", send, 1)
    live = ledger.run("live").__enter__()
    live.effect("s", send, 1)
    abandon(live)  # its process was killed: the lease stays until it expires
    with ledger.run("halted-by-person") as run:
        run.effect("s", send, 1)
    ledger.halt("investigating", by="ops", run="halted-by-person")
    with pytest.raises(RuntimeError), ledger.run("failed") as run:
        run.effect("s", send, 1)
        raise RuntimeError("the agent's own bug")
    everyone = run_ids(ledger)
    age(store_url, 30, *everyone)
    aged = {(p.kind, p.message) for p in ledger.verify().problems}  # the steps' moved starts

    report = ledger.prune(tmp_path / "a.jsonl", older_than=DAY)

    assert sorted(run.run_id for run in report.removed) == ["done", "failed"]
    assert run_ids(ledger) == everyone - {"done", "failed"}
    after = {(p.kind, p.message) for p in ledger.verify().problems}
    assert after <= aged
    assert all("'done'" not in m and "'failed'" not in m for _, m in after)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"older_than": 0}, oncelog.ConfigurationError),
        ({"older_than": -DAY}, oncelog.ConfigurationError),
        ({"older_than": float("nan")}, oncelog.ConfigurationError),
        ({"older_than": "90d"}, oncelog.ConfigurationError),
        ({}, oncelog.ConfigurationError),
        ({"agents": {"billing": 0}}, oncelog.ConfigurationError),
        ({"agents": {"nobody": DAY}}, oncelog.UnknownName),
        ({"older_than": DAY, "batch": 0}, oncelog.ConfigurationError),
    ],
)
def test_bad_input_is_a_typed_error_and_changes_nothing(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path, options: dict[str, Any],
    error: type[Exception],
) -> None:  # fmt: skip
    completed(ledger, "old", agent="billing")
    age(store_url, 3, "old", steps=False)
    with pytest.raises(error):
        ledger.prune(tmp_path / "a.jsonl", **options)
    assert run_ids(ledger) == {"old"}
    assert not (tmp_path / "a.jsonl").exists()
    assert_verifies(ledger)


def test_an_existing_file_is_never_written_over(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    completed(ledger, "old")
    age(store_url, 3, "old")
    archive = tmp_path / "a.jsonl"
    archive.write_text("someone's notes\n")
    with pytest.raises(oncelog.ArchiveExists):
        ledger.prune(archive, older_than=DAY)
    assert archive.read_text() == "someone's notes\n"
    assert run_ids(ledger) == {"old"}
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"] or (tmp_path / "ledger.db").exists()


# -- the ledger's size, where a person and a scraper see it ------------------------------


def test_the_console_and_the_metrics_show_the_ledgers_size_and_oldest_run(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from oncelog import metrics

    from .support.console_client import console_client

    completed(ledger, "old", "new")
    age(store_url, 3, "old")
    tamper(
        store_url, "UPDATE runs SET created_at = created_at - ? WHERE run_id = 'old'", (3 * DAY,)
    )

    def shown() -> tuple[str, str]:
        registry = CollectorRegistry()
        registry.register(metrics.LedgerCollector(ledger))
        with console_client(ledger) as person:
            page = person.get("/").text
        return page, generate_latest(registry).decode()

    page, scraped = shown()
    assert "2 runs, 6 steps" in page
    assert 'oncelog_ledger_rows{table="runs"} 2.0' in scraped
    assert "oncelog_ledger_size_bytes" in scraped
    oldest = ledger.size().oldest_run_at
    assert oldest is not None
    line = next(t for t in scraped.splitlines() if t.startswith("oncelog_ledger_oldest_run"))
    assert float(line.split()[1]) == oldest

    assert "no retention policy is set" in page
    ledger.set_retention(DAY, by="ops")
    ledger.prune(tmp_path / "a.jsonl")
    page, scraped = shown()
    assert "1 runs, 3 steps" in page
    assert "kept 1.0 days after they end" in page
    assert 'oncelog_ledger_rows{table="runs"} 1.0' in scraped
    assert (ledger.size().oldest_run_at or 0) > oldest + DAY


def test_the_prune_command_says_what_it_did_and_exits_by_the_table(
    store_url: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from oncelog.cli import cli

    with oncelog.open(store_url) as ledger:
        completed(ledger, "old", "new", agent="billing")
    age(store_url, 3, "old")
    archive = tmp_path / "a.jsonl"
    (tmp_path / "notes.txt").write_text("keep me\n")

    def prune(*args: str) -> Any:
        return CliRunner().invoke(cli, ["prune", "--db", store_url, *args])

    assert prune("--to", str(archive)).exit_code == 2  # no window
    assert prune("--to", str(archive), "--older-than", "-1d").exit_code == 2
    assert prune("--to", str(archive), "--agent", "billing").exit_code == 2
    assert prune("--to", str(archive), "--agent", "nobody=1d").exit_code == 5
    assert prune("--to", str(tmp_path / "notes.txt"), "--older-than", "1d").exit_code == 6
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
    dry = prune("--to", str(archive), "--agent", "billing=36h", "--dry-run")
    assert (dry.exit_code, dry.output.split()) == (0, ["old"])
    assert not archive.exists()
    with oncelog.open(store_url) as ledger:
        assert ledger.prunable(agents={"billing": 36 * 3600}) == ["old"]
    done = prune("--to", str(archive), "--agent", "billing=36h")
    assert done.exit_code == 0, done.output
    assert "archived 1 runs" in done.output
    assert "removed 1 runs" in done.output
    verified = CliRunner().invoke(cli, ["verify", "--db", store_url, "--archive", str(archive)])
    assert verified.exit_code == 0, verified.output
    assert "pruned: 1 runs" in verified.output
    assert "1 removed under its anchor: ok" in verified.output
    nothing = prune("--to", str(tmp_path / "b.jsonl"), "--older-than", "1d")
    assert "no run is due" in nothing.output


def test_a_claim_that_expired_goes_with_its_run_one_in_force_keeps_it(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    @ledger.tool(kind="payment", name="refund", once_per=lambda order: ("refund", order),
                 once_for=3600)  # fmt: skip
    def refund(order: int, *, idempotency_key: str) -> int:
        return order

    for order in (1, 2):
        with ledger.run(f"refund-{order}") as run:
            run.effect("refund", refund, order)
    age(store_url, 3, "refund-1", "refund-2")
    # As the store's clock will read once the first claim's hour is over.
    tamper(store_url, "UPDATE subjects SET expires_at = expires_at - 7200 WHERE run_id = ?",
           ("refund-1",))  # fmt: skip
    assert len(ledger.subjects()) == 2

    report = ledger.prune(tmp_path / "a.jsonl", older_than=DAY)

    assert [run.run_id for run in report.removed] == ["refund-1"]
    assert [claim.run_id for claim in ledger.subjects()] == ["refund-2"]
    after = {p.run_id for p in ledger.verify().problems}
    assert after <= {"refund-2"}  # only its aged starts
    with ledger.run("refund-again") as run:  # the expired subject is free, as before
        assert run.effect("refund", refund, 1) == 1


def test_a_holds_last_holder_stays_until_another_run_takes_it(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    send = sender(ledger)
    with ledger.run("first") as run, run.hold("db-1"):
        run.effect("s", send, 1)
    age(store_url, 3, "first")
    assert ledger.prune(tmp_path / "a.jsonl", older_than=DAY).archive is None
    with ledger.run("second") as run, run.hold("db-1"):
        run.effect("s", send, 2)

    report = ledger.prune(tmp_path / "b.jsonl", older_than=DAY)

    assert [run.run_id for run in report.removed] == ["first"]
    [hold] = ledger.holds()
    assert (hold.holder, hold.token) == ("second", 2)  # the next holder's token stays greater
    assert_verifies(ledger)


# -- the stored policy ------------------------------------------------------------------------


def test_a_stored_policy_is_what_prune_uses_and_verify_holds_it(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    completed(ledger, "billing-old", agent="billing")
    completed(ledger, "other-mid")
    age(store_url, 10, "billing-old")
    age(store_url, 3, "other-mid")
    with pytest.raises(oncelog.ConfigurationError):
        ledger.prune(tmp_path / "a.jsonl")  # no window given, none set
    with pytest.raises(oncelog.UnknownName):
        ledger.set_retention(DAY, by="ops", agent="nobody")
    with pytest.raises(oncelog.ConfigurationError):
        ledger.set_retention(-DAY, by="ops")
    ledger.set_retention(7 * DAY, by="ops")
    ledger.set_retention(2 * DAY, by="ops", agent="billing")
    assert ledger.retention() == {"": 7 * DAY, "billing": 2 * DAY}
    assert ledger.prunable() == ["billing-old"]

    report = ledger.prune(tmp_path / "a.jsonl")

    assert [run.run_id for run in report.removed] == ["billing-old"]
    ledger.set_retention(None, by="ops", agent="billing")
    assert ledger.retention() == {"": 7 * DAY}
    # The retention policy is held to the journal: a window shortened behind its back.
    aged = {p.message for p in ledger.verify().problems}  # other-mid's aged starts
    tamper(store_url, "UPDATE retention_policy SET keep = 60 WHERE agent = ''")
    shortened = {p.message for p in ledger.verify().problems} - aged
    assert any("the ledger's retention" in message for message in shortened)


def test_the_retention_command_shows_and_sets_the_policy(store_url: str) -> None:
    from click.testing import CliRunner

    from oncelog.cli import cli

    with oncelog.open(store_url) as ledger:
        completed(ledger, "r", agent="billing")

    def retention(*args: str) -> Any:
        return CliRunner().invoke(cli, ["retention", "--db", store_url, *args])

    assert "no retention policy" in retention().output
    assert retention("--set", "90d").exit_code == 2  # who decides
    assert retention("--set", "soon", "--by", "ops").exit_code == 2
    assert retention("--set", "30d", "--agent", "nobody", "--by", "ops").exit_code == 5
    assert retention("--set", "90d", "--by", "ops").exit_code == 0
    shown = retention("--set", "30d", "--agent", "billing", "--by", "ops")
    assert shown.exit_code == 0, shown.output
    assert "ledger: runs kept 90 days" in shown.output
    assert "agent billing: runs kept 30 days" in shown.output
    assert retention("--clear", "--agent", "billing", "--by", "ops").exit_code == 0
    assert json.loads(retention("--json").output) == {"ledger": 90 * DAY, "agents": {}}
