"""``verify`` against forgeries of the tables replay, the controls and the budgets read.

Each forgery is made the way an intruder with write access to the database would make
it: plain SQL on the tables, the journal's append-only triggers out of the way where the
journal itself is edited. Every one must be reported, with a signing key and without,
on both stores.
"""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import AgentBudget, Budget
from oncelog.audit._signing import new_key_pair
from oncelog.audit._verify import Report
from oncelog.records._serialization import digest
from oncelog.stores._migrations import migrations

from .support.launch import PYTHON

_APPEND_ONLY = ("journal", "checkpoints", "ledger_meta")


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return new_key_pair(tmp_path / "keys")


def build(url: str, private: Path) -> None:
    """A ledger with a budgeted run of an agent (a model call, a payment), a run with a
    model call and no budget, a run waiting for approval, a submitted run, a cleared and
    an active kill switch, an agent budget."""
    with oncelog.open(url, signing_key=private) as ledger:

        @ledger.tool(kind="payment", name="charge", cost=2.5)
        def charge(cents: int, *, idempotency_key: str) -> dict[str, object]:
            return {"id": "ch_1", "cents": cents}

        @ledger.tool(kind="create", name="send", cost=0.25)
        def send(to: str, *, idempotency_key: str) -> str:
            return to

        @ledger.tool(kind="destructive", name="wipe")
        def wipe(*, idempotency_key: str) -> None: ...

        ledger.set_agent_budget("billing", AgentBudget(calls=100), by="ops")
        budget = Budget(cost=100, steps=50)
        with ledger.run(
            "paid", agent="billing", budget=budget, plan=["ask", "charge", "send"]
        ) as run:
            usage = {"prompt_tokens": 11, "completion_tokens": 7, "cost": 0.01}
            run.llm("ask", lambda: {"text": "ok", "usage": usage})
            run.effect("charge", charge, 500)
            run.effect("send", send, "a@example.com")
        with ledger.run("free") as run:  # without a budget: the store's own statements
            run.llm("muse", lambda: {"text": "hm", "usage": usage})
        with pytest.raises(oncelog.ApprovalRequired), ledger.run("w") as run:
            run.effect("w", wipe)
        ledger.submit("queued-1", {"n": 1}, budget=Budget(steps=3))
        ledger.halt("drill", by="ops", agent="billing", ahead=True)
        ledger.clear_halt(by="ops", agent="billing", note="drill over")
        ledger.halt("audit", by="ops", run="paid")


def tamper(url: str, *statements: str) -> None:
    """Run ``statements`` as an intruder would, the append-only triggers disabled."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            for table in _APPEND_ONLY:
                pg.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            for statement in statements:
                pg.execute(statement)
        return
    with closing(sqlite3.connect(url, isolation_level=None)) as lite:
        for table in _APPEND_ONLY:
            for what in ("update", "delete"):
                lite.execute(f"DROP TRIGGER IF EXISTS {table}_no_{what}")
        for statement in statements:
            lite.execute(statement)


def reports(url: str, public: Path, run_id: str | None = None) -> tuple[Report, Report]:
    """(unsigned, signed) verification of the ledger at ``url``."""
    with oncelog.open(url) as ledger:
        return (
            ledger.verify(run_id=run_id),
            ledger.verify(public_keys=[public], run_id=run_id),
        )


def messages(report: Report, kind: str) -> str:
    return "\n".join(p.message for p in report.problems if p.kind == kind)


def test_the_untouched_ledger_verifies_whole_and_by_run(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    build(store_url, keys[0])
    for run_id in (None, "paid", "free", "w", "queued-1"):
        for report in reports(store_url, keys[1], run_id):
            assert report.ok, (run_id, report.problems)


_STEP = "INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, "
_STEP += "state, result, attempts, started_at, cost, irreversible) VALUES "


def test_a_whole_run_inserted_without_the_journal_is_found(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    build(store_url, keys[0])
    tamper(
        store_url,
        "INSERT INTO runs (run_id, status, created_at, updated_at) "
        "VALUES ('ghost', 'completed', 1, 1)",
        _STEP + "('ghost', 0, 'pay', 'effect', 'charge', 'payment', 'k', 'h', "
        '\'{"args":[1],"kwargs":{}}\', \'done\', \'{"id":"ch_9"}\', 1, 1, 0, 1)',
    )
    for report in reports(store_url, keys[1]):
        assert {p.kind for p in report.problems} == {"state"}, report.problems
        said = messages(report, "state")
        assert "run 'ghost' is in the runs table but the journal never created it" in said
        assert "step 0 (pay) of run 'ghost' is in the steps table but not in the journal" in said
    done = subprocess.run(
        [PYTHON, "-m", "oncelog", "verify", "--db", store_url, "--public-key",
         str(keys[1])],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "PROBLEM state: run 'ghost' is in the runs table" in done.stdout


def test_steps_whose_run_row_was_deleted_are_found(store_url: str, keys: tuple[Path, Path]) -> None:
    """No foreign key keeps a step's run there on PostgreSQL (migration 18), nor on SQLite
    for a connection without ``PRAGMA foreign_keys``: verify does."""
    build(store_url, keys[0])
    tamper(store_url, "DELETE FROM runs WHERE run_id = 'paid'")
    for run_id in (None, "paid"):
        for report in reports(store_url, keys[1], run_id):
            [orphaned] = [p for p in report.problems if p.kind == "orphan_steps"]
            assert orphaned.run_id == "paid"
            assert "run 'paid' has no row in the runs table but 3 steps (0 to 2)" in (
                orphaned.message
            )
            assert "run 'paid' is in the journal but not in the runs table" in messages(
                report, "state"
            )
    done = subprocess.run(
        [PYTHON, "-m", "oncelog", "verify", "--db", store_url],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "PROBLEM orphan_steps: run 'paid' has no row" in done.stdout


def test_a_step_added_for_a_run_that_never_was_is_found(store_url: str) -> None:
    with oncelog.open(store_url):
        pass
    tamper(
        store_url,
        _STEP + "('nobody', 4, 'pay', 'effect', 'charge', 'payment', 'k', 'h', "
        '\'{"args":[1],"kwargs":{}}\', \'done\', \'{"id":"ch_9"}\', 1, 1, 0, 1)',
    )
    with oncelog.open(store_url) as ledger:
        report = ledger.verify()
    assert {p.kind for p in report.problems} == {"state", "orphan_steps"}, report.problems
    assert "run 'nobody' has no row in the runs table but step 4 in" in messages(
        report, "orphan_steps"
    )


def test_a_healthy_ledger_has_no_orphan_steps(store_url: str, keys: tuple[Path, Path]) -> None:
    build(store_url, keys[0])
    with oncelog.open(store_url) as ledger:
        for n in range(3):
            ledger.submit(f"more-{n}", {"n": n})
    for run_id in (None, "paid", "w", "more-0"):
        for report in reports(store_url, keys[1], run_id):
            assert report.ok, (run_id, report.problems)


FORGERIES = {
    # steps: what the budgets and replay read
    "step cost": ("UPDATE steps SET cost = 0 WHERE step_id = 'charge'", "other cost"),
    "step tokens_in": ("UPDATE steps SET tokens_in = 0 WHERE step_id = 'ask'", "other tokens_in"),
    "step tokens_out": ("UPDATE steps SET tokens_out = 1 WHERE step_id = 'ask'", "tokens_out"),
    # a model call's one record (by the general path in a budgeted run, 'ask'; by the
    # store's own statements or PostgreSQL's function, 'muse') holds its whole row
    "model state": ("UPDATE steps SET state = 'failed' WHERE step_id = 'ask'", "other state"),
    "model result": (
        "UPDATE steps SET result = '{\"text\":\"forged\"}' WHERE step_id = 'muse'",
        "other result",
    ),
    "model cost": ("UPDATE steps SET cost = 1 WHERE step_id = 'muse'", "other cost"),
    "model tokens": ("UPDATE steps SET tokens_in = 0 WHERE step_id = 'muse'", "other tokens_in"),
    "model started": (
        "UPDATE steps SET started_at = started_at - 60 WHERE step_id = 'muse'",
        "other started_at",
    ),
    "model attempts": ("UPDATE steps SET attempts = 2 WHERE step_id = 'ask'", "other attempts"),
    "step irreversible": (
        "UPDATE steps SET irreversible = 0 WHERE step_id = 'charge'",
        "other irreversible",
    ),
    "step irreversible negative": (
        "UPDATE steps SET irreversible = -1 WHERE step_id = 'charge'",
        "other irreversible",
    ),
    "step kind": ("UPDATE steps SET kind = 'read' WHERE step_id = 'charge'", "other kind"),
    "step type": ("UPDATE steps SET type = 'read' WHERE step_id = 'send'", "other type"),
    "step tool": ("UPDATE steps SET tool = 'other' WHERE step_id = 'send'", "other tool"),
    "step key": ("UPDATE steps SET key = 'k' WHERE step_id = 'send'", "other key"),
    "step started yesterday": (
        "UPDATE steps SET started_at = started_at - 86400 WHERE step_id = 'charge'",
        "other started_at",
    ),
    "step attempts": ("UPDATE steps SET attempts = 2 WHERE step_id = 'send'", "other attempts"),
    "step error": (
        "UPDATE steps SET error = '{\"type\":\"X\"}' WHERE step_id = 'send'",
        "other error",
    ),
    "step added": (
        _STEP + "('paid', 9, 'extra', 'effect', 'send', 'create', 'k', 'h', "
        "'{\"args\":[],\"kwargs\":{}}', 'done', 'null', 1, 1, 0, 0)",
        "added behind",
    ),
    # runs: budgets, the queue, the lease, replay's plan
    "run budget removed": ("UPDATE runs SET budget = NULL WHERE run_id = 'paid'", "other budget"),
    "run budget raised": (
        "UPDATE runs SET budget = replace(budget, '100', '100000') WHERE run_id = 'paid'",
        "other budget",
    ),
    "run status": ("UPDATE runs SET status = 'queued' WHERE run_id = 'paid'", "other status"),
    "run created later": (
        "UPDATE runs SET created_at = created_at + 3600 WHERE run_id = 'paid'",
        "other created_at",
    ),
    "run agent": ("UPDATE runs SET agent = NULL WHERE run_id = 'paid'", "other agent"),
    "run plan": ("UPDATE runs SET plan = '[\"x\"]' WHERE run_id = 'paid'", "other plan"),
    "run input": ("UPDATE runs SET input = '{\"n\":2}' WHERE run_id = 'queued-1'", "other input"),
    "run stopped_by": (
        "UPDATE runs SET stopped_by = 'RunHalted' WHERE run_id = 'w'",
        "other stopped_by",
    ),
    "run reason": ("UPDATE runs SET reason = 'fine' WHERE run_id = 'w'", "other reason"),
    "run stop": (  # a stop no step recorded: every later step of the run would be refused
        "UPDATE runs SET stop_seq = 0, stop = '{\"kind\":\"ArgumentDrift\"}' WHERE run_id = 'paid'",
        "other stop_seq, stop",
    ),
    "run fencing token": (
        "UPDATE runs SET fencing_token = fencing_token + 5 WHERE run_id = 'paid'",
        "other fencing_token",
    ),
    "run owner": ("UPDATE runs SET owner = 'h|1|2|n' WHERE run_id = 'paid'", "other owner"),
    "run deleted": ("DELETE FROM runs WHERE run_id = 'queued-1'", "not in the runs table"),
    # the kill switch
    "halt reason": ("UPDATE halts SET reason = 'x' WHERE target = 'paid'", "other reason"),
    "halt set_by": ("UPDATE halts SET set_by = 'x' WHERE target = 'paid'", "other set_by"),
    "halt cleared": (
        "UPDATE halts SET cleared_at = 1, cleared_by = 'x' WHERE target = 'paid'",
        "cleared behind",
    ),
    "halt cleared_by": (
        "UPDATE halts SET cleared_by = 'mallory' WHERE scope = 'agent'",
        "other cleared_by",
    ),
    "halt back on": (
        "UPDATE halts SET cleared_at = NULL, cleared_by = NULL, note = NULL WHERE scope = 'agent'",
        "other cleared_by, note, cleared",
    ),
    "halt moved": ("UPDATE halts SET target = 'other' WHERE target = 'paid'", "deleted"),
    "halt inserted": (
        "INSERT INTO halts (scope, target, reason, set_by, set_at) "
        "VALUES ('global', '', 'x', 'y', 1)",
        "set behind",
    ),
    "halt deleted": ("DELETE FROM halts WHERE target = 'paid'", "a row was deleted"),
    # agents' daily budgets
    "agent budget raised": (
        "UPDATE agent_budgets SET budget = replace(budget, '100', '100000')",
        "other budget",
    ),
    "agent budget set_by": ("UPDATE agent_budgets SET set_by = 'x'", "other set_by"),
    "agent budget removed": ("DELETE FROM agent_budgets", "was removed"),
    "agent budget inserted": (
        "INSERT INTO agent_budgets (agent, budget, set_by, set_at) "
        "VALUES ('other', '{\"calls\":1}', 'y', 1)",
        "set behind",
    ),
}


@pytest.mark.parametrize(("tamper_sql", "says"), FORGERIES.values(), ids=FORGERIES.keys())
def test_each_column_the_runtime_reads_is_held_to_the_journal(
    store_url: str, keys: tuple[Path, Path], tamper_sql: str, says: str
) -> None:
    build(store_url, keys[0])
    tamper(store_url, tamper_sql)
    for report in reports(store_url, keys[1]):
        # A forged step that changes what a budget counts (its type, state, cost, start)
        # also leaves the budgets' running totals behind: budget_totals says so too.
        assert {p.kind for p in report.problems} - {"budget_totals"} == {"state"}, report.problems
        assert says in messages(report, "state"), report.problems


def test_removing_every_hash_is_found_signed_or_not(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    build(store_url, keys[0])
    tamper(store_url, "UPDATE journal SET hash = NULL")
    for report in reports(store_url, keys[1]):
        assert "unchained" in {p.kind for p in report.problems}
        assert report.before_chain == 0
        assert sum(p.kind == "unchained" for p in report.problems) == report.records


def test_deleting_where_the_chain_starts_is_found(store_url: str, keys: tuple[Path, Path]) -> None:
    build(store_url, keys[0])
    tamper(store_url, "DELETE FROM ledger_meta")
    for report in reports(store_url, keys[1]):
        assert [p.kind for p in report.problems] == ["unchained"]
        assert "chain_from" in report.problems[0].message


def test_records_from_before_the_chain_stay_accepted_and_later_ones_must_be_chained(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    """A ledger that had records without hashes when it was upgraded (written before the
    chain existed) keeps them; what is written after must be chained. The upgrade is
    replayed: hashes gone, then the migration's own statement records where the chain
    starts."""
    build(store_url, keys[0])
    dialect = "postgres" if store_url.startswith("postgresql") else "sqlite"
    (records_start,) = [
        statement
        for migration in migrations(dialect)
        for statement in migration.statements()
        if statement.startswith("INSERT INTO ledger_meta")
    ]
    tamper(
        store_url, "UPDATE journal SET hash = NULL", "DELETE FROM checkpoints",
        "DELETE FROM ledger_meta", records_start,
    )  # fmt: skip
    with oncelog.open(store_url) as ledger:  # the records are from before the chain now
        old = ledger.verify()
        assert old.ok, old.problems
        assert old.before_chain == old.records > 0

        @ledger.tool(kind="create", name="note")
        def note(*, idempotency_key: str) -> None: ...

        with ledger.run("after") as run:
            run.effect("n", note)
    tamper(store_url, "UPDATE journal SET hash = NULL WHERE run_id = 'after'")
    for report in reports(store_url, keys[1]):
        unchained = [p for p in report.problems if p.kind == "unchained"]
        assert {p.run_id for p in unchained} == {"after"}, report.problems
        assert report.before_chain == old.records


_HUNDRED_THOUSAND = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
_HUNDRED_THOUSAND += "WHERE i < 100000) "


def test_the_oldest_of_more_than_100000_approvals_is_checked(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    build(store_url, keys[0])
    tamper(
        store_url,
        "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, status, "
        "requested_at, decided_by) SELECT run_id, 'w', 'wipe', args_hash, args, "
        "'approved', 1, 'mallory' FROM approvals",
        # Pending requests no agent asked: each reported on its own.
        _HUNDRED_THOUSAND + "INSERT INTO approvals (run_id, step_id, tool, args_hash, args, "
        f"status, requested_at) SELECT 'w', 'x' || i, 'wipe', '{digest('{}')}', '{{}}', "
        "'pending', 1 FROM n",
    )
    for report in reports(store_url, keys[1]):
        assert {p.kind for p in report.problems} == {"state"}
        forged = [p for p in report.problems if "of step 'w'" in p.message]
        assert len(forged) == 1, report.problems[:3]
        assert "the journal has no such request" in forged[0].message
        assert len(report.problems) == 100_001


def test_the_oldest_of_more_than_100000_active_halts_is_checked(
    store_url: str, keys: tuple[Path, Path]
) -> None:
    build(store_url, keys[0])
    tamper(
        store_url,
        "INSERT INTO halts (scope, target, reason, set_by, set_at) "
        "VALUES ('run', 'victim', 'x', 'mallory', 1)",
        _HUNDRED_THOUSAND + "INSERT INTO halts (scope, target, reason, set_by, set_at) "
        "SELECT 'run', 'r' || i, 'x', 'y', 1 FROM n",
    )
    for report in reports(store_url, keys[1]):
        victims = [p for p in report.problems if p.run_id == "victim"]
        assert len(victims) == 1, report.problems[:3]
        assert "not in the journal" in victims[0].message
        assert len(report.problems) == 100_001


def test_a_write_between_reading_the_journal_and_the_tables_is_no_forgery(
    store_url: str, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent commits a step after ``verify`` read the journal and before it read the
    steps table: the tables are ahead of the journal read, and verify reads it again."""
    build(store_url, keys[0])
    with oncelog.open(store_url) as ledger, oncelog.open(store_url) as agent:

        @agent.tool(kind="create", name="late")
        def late(*, idempotency_key: str) -> None: ...

        read_rows = type(ledger.store).table_rows
        late_runs = iter(["late-1", "late-2"])  # a write under each of two comparisons

        def rows_after_a_write(store: Any, table: str, after: Any, *rest: Any) -> Any:
            if table == "runs" and after == () and (late_run := next(late_runs, None)):
                with agent.run(late_run) as run:
                    run.effect("n", late)
            return read_rows(store, table, after, *rest)

        monkeypatch.setattr(type(ledger.store), "table_rows", rows_after_a_write)
        report = ledger.verify()
    assert report.ok, report.problems
