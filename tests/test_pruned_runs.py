"""A pruned run id is never run again: ``oncelog prune`` leaves a tombstone in the
transaction that removes the run, and every way of entering a run refuses that id
(``RunPruned``, exit 7) until a person forgets it; on both stores."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import oncelog
from oncelog.cli import cli
from oncelog.queues._consume import QueueConsumer, Settle

from .test_retention import DAY, age, assert_verifies, completed, run_ids, tamper


def pruned(ledger: oncelog.Ledger, store_url: str, tmp_path: Path, *ids: str,
           agent: str | None = None, archive: str = "a.jsonl") -> None:  # fmt: skip
    """Complete runs ``ids``, age them and prune them to ``archive``."""
    completed(ledger, *ids, agent=agent)
    age(store_url, 3, *ids)
    report = ledger.prune(tmp_path / archive, older_than=DAY)
    assert sorted(run.run_id for run in report.removed) == sorted(ids)


def test_entering_a_pruned_run_is_refused_and_performs_nothing(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    pruned(ledger, store_url, tmp_path, "refund-42", agent="billing")
    records = ledger.size().records
    calls: list[int] = []

    @ledger.tool(kind="payment", name="refund")
    def refund(n: int, *, idempotency_key: str) -> int:
        calls.append(n)
        return n

    entries: list[Any] = [
        lambda: ledger.run("refund-42"),  # SQLite: the quick insert
        lambda: ledger.run("refund-42", agent="billing"),
        lambda: ledger.run("refund-42", budget=oncelog.Budget(steps=5)),  # general path
        lambda: ledger.run("refund-42", create=False),
    ]
    for enter in entries:
        with pytest.raises(oncelog.RunPruned) as caught, enter() as run:
            run.effect("s0", refund, 1)
        exc = caught.value
        assert (exc.run_id, exc.status, exc.archive) == ("refund-42", "completed", "a.jsonl")
        assert exc.anchor is not None
        assert exc.pruned_at is not None
        assert exc.exit_code == oncelog.EXIT_PRUNED == 7
        assert "a.jsonl" in str(exc)
        assert "--forget" in str(exc)
    with pytest.raises(oncelog.RunPruned):
        ledger.submit("refund-42", {"order": 42})
    with pytest.raises(oncelog.RunPruned):
        ledger.get_run("refund-42")
    with pytest.raises(oncelog.RunPruned):  # a kill switch on it would stop nothing
        ledger.halt("looking", by="ops", run="refund-42")
    assert calls == []
    assert "refund-42" not in run_ids(ledger)
    assert ledger.size().records == records  # every refusal rolled back whole
    assert_verifies(ledger)
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.status, copy.archive, copy.anchor) == (exc.status, exc.archive, exc.anchor)


def test_a_failed_run_pruned_is_refused_too(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
    with pytest.raises(RuntimeError), ledger.run("f1") as run:
        run.effect("s0", send, 0)
        raise RuntimeError("the agent's own bug")
    age(store_url, 3, "f1")
    assert [r.run_id for r in ledger.prune(tmp_path / "a.jsonl", older_than=DAY).removed] == ["f1"]
    with pytest.raises(oncelog.RunPruned) as caught, ledger.run("f1"):
        pass
    assert caught.value.status == "failed"


def test_tombstones_outlive_later_prunes_and_only_a_person_forgets_one(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    pruned(ledger, store_url, tmp_path, "old", archive="first.jsonl")
    pruned(ledger, store_url, tmp_path, "older", archive="second.jsonl")
    with pytest.raises(oncelog.RunPruned) as caught, ledger.run("old"):
        pass
    assert caught.value.archive == "first.jsonl"
    with pytest.raises(oncelog.ConfigurationError):
        ledger.forget_pruned("old", by="")
    with pytest.raises(oncelog.UnknownRun) as unknown:
        ledger.forget_pruned("never", by="ops")
    assert type(unknown.value) is oncelog.UnknownRun

    was = ledger.forget_pruned("old", by="ops")
    assert (was.run_id, was.archive) == ("old", "first.jsonl")
    with pytest.raises(oncelog.UnknownRun) as again:
        ledger.forget_pruned("old", by="ops")  # forgotten once
    assert type(again.value) is oncelog.UnknownRun
    forgotten = [e for e in ledger.iter_journal() if e.event == "pruned_run_forgotten"]
    assert [(e.run_id, e.data["run_id"], e.data["by"]) for e in forgotten] == [("", "old", "ops")]
    # Forgotten, the id starts a new run, whose effects run again (what forgetting means).
    completed(ledger, "old")
    assert [s.state.value for s in ledger.steps("old")] == ["done"] * 3
    with pytest.raises(oncelog.RunPruned), ledger.run("older"):
        pass
    assert_verifies(ledger)


def test_verify_holds_the_tombstones_to_the_anchors(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    pruned(ledger, store_url, tmp_path, "a", "b", "c")
    ledger.forget_pruned("c", by="ops")
    assert_verifies(ledger)
    tamper(store_url, "DELETE FROM pruned_runs WHERE run_id = ?", ("a",))
    tamper(store_url, "UPDATE pruned_runs SET anchor = anchor + 1000 WHERE run_id = ?", ("b",))
    tamper(store_url, "INSERT INTO pruned_runs (run_id, anchor, status) VALUES ('z', 1, 'x')")
    found = {(p.run_id, p.message.split(":")[0]) for p in ledger.verify().problems}
    assert found == {
        ("", "pruned run 'a' has no tombstone"),
        ("", "pruned run 'b' has a tombstone naming another anchor than the journal"),
        ("", "run 'z' has a tombstone but no prune in the journal removed it"),
    }


def test_the_commands_say_it_was_pruned_and_where_its_archive_is(
    store_url: str, tmp_path: Path
) -> None:
    with oncelog.open(store_url) as ledger:
        pruned(ledger, store_url, tmp_path, "old", agent="billing")

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(cli, [*args, "--db", store_url])

    shown = invoke("show", "old")
    assert shown.exit_code == 7, shown.output
    assert "RunPruned" in shown.output
    assert "archive: a.jsonl" in shown.output
    assert "status: completed" in shown.output
    assert invoke("submit", "old", "--input", "{}").exit_code == 7
    assert invoke("prune", "--forget", "old").exit_code == 2  # who decides?
    assert invoke("prune", "--forget", "old", "--by", "ops", "--to", "x").exit_code == 2
    assert invoke("prune", "--forget", "old", "--by", "ops", "--older-than", "1d").exit_code == 2
    assert invoke("prune").exit_code == 2  # neither --to nor --forget
    assert invoke("prune", "--forget", "nope", "--by", "ops").exit_code == 5
    forgot = invoke("prune", "--forget", "old", "--by", "ops", "--json")
    assert forgot.exit_code == 0, forgot.output
    assert json.loads(forgot.output)["archive"] == "a.jsonl"
    assert invoke("show", "old").exit_code == 5  # forgotten: no such run


def test_a_queue_consumer_acknowledges_a_pruned_completed_run_and_parks_a_failed_one(
    ledger: oncelog.Ledger, store_url: str, tmp_path: Path
) -> None:
    pruned(ledger, store_url, tmp_path, "m-done")
    send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
    with pytest.raises(RuntimeError), ledger.run("m-failed") as run:
        run.effect("s0", send, 0)
        raise RuntimeError("the agent's own bug")
    age(store_url, 3, "m-failed")
    ledger.prune(tmp_path / "b.jsonl", older_than=DAY)
    handled: list[str] = []
    consumer = QueueConsumer(ledger, lambda run, input: handled.append(run.run_id))

    done = consumer.process(b"{}", "m-done")
    assert (done.settle, done.run_id) == (Settle.ACK, "m-done")
    assert "a.jsonl" in done.reason
    failed = consumer.process(b"{}", "m-failed")
    assert (failed.settle, failed.run_id) == (Settle.PARK, "m-failed")
    assert handled == []
    assert not {"m-done", "m-failed"} & run_ids(ledger)


def test_every_insert_of_a_run_is_one_that_reads_the_tombstone() -> None:
    """The three inserts of a run read the tombstone (``stores/_sql_tombstones``); a new
    way of creating a run must too, and be added here."""
    stores = Path(oncelog.__file__).parent / "stores"
    inserting = {
        path.name for path in stores.glob("*.py") if "INSERT INTO runs" in path.read_text()
    }
    assert inserting == {"_sql_runs.py", "_sqlite_runs.py", "_sql_queue.py"}
    reading = {path.name for path in stores.glob("*.py") if "tombstones." in path.read_text()}
    assert {"_sql_runs.py", "_sqlite_runs.py", "_sql_store.py"} <= reading  # submit: the store
