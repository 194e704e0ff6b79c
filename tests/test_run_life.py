"""A run's start and end: what SQLite's shortcuts (a new run inserted already leased, the
end fenced in its update) write is what the general path writes, and every case they must
not take (an existing run, a live holder, a halted run, another plan, another agent, a
budget, a lost lease) still gives the general path's answer and leaves the ledger as it
was. The ledger is read with SQL of its own, never through the store under test."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

import oncelog
from oncelog import Budget, RunStatus
from oncelog.records._records import RunRecord
from oncelog.stores import Lease, SQLiteStore, Store
from oncelog.stores._sql_store import SQLStore

from .test_store_contract import alive, dead, effect, opened


class GeneralPath(SQLiteStore):
    """SQLite without the shortcuts of a run's start and end: the general path alone."""

    _create_leased = staticmethod(SQLStore._create_leased)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        SQLStore.finish(self, lease, status, reason, stopped_by)


def take(store: Store, run_id: str, owner: str, **options: Any) -> tuple[Lease, RunRecord]:
    defaults: dict[str, Any] = {
        "ttl": 30.0, "plan": None, "replace_plan": False, "create": True,
        "owner_is_dead": alive,
    }  # fmt: skip
    return store.acquire(run_id, owner=owner, **{**defaults, **options})


def written(path: str) -> dict[str, list[Any]]:
    """Everything the ledger holds about runs, read by a connection of the test's own."""
    with closing(sqlite3.connect(path)) as db:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("runs", "journal", "steps", "halts")
        }


def verified(path: str) -> None:
    with oncelog.open(path) as ledger:
        report = ledger.verify()
    assert report.ok, report.problems


def lives(store: Store) -> None:
    """New runs of every kind the shortcut takes, each ended another way; a finished run
    entered again; a budget, which the general path writes from the start."""
    plain, _ = take(store, "plain", "w-plain")
    store.finish(plain, RunStatus.COMPLETED, None)
    planned, _ = take(store, "planned", "w-planned", plan=("a", "b"), agent="billing")
    store.finish(planned, RunStatus.FAILED, "ValueError: no", "ValueError")
    agent, _ = take(store, "agent", "w-agent", agent="billing")
    store.finish(agent, RunStatus.HALTED, "in doubt", "NeedsPerson")
    again, _ = take(store, "plain", "w-again")
    store.finish(again, RunStatus.QUEUED, "TryLater: draining", "TryLater")
    budget, _ = take(store, "budget", "w-budget", budget=Budget(steps=3))
    store.finish(budget, RunStatus.COMPLETED, None)


def test_the_shortcuts_write_what_the_general_path_writes(tmp_path: Any) -> None:
    """Rows and journal records alike, data to the byte; only times and hashes (which
    cover the times) differ."""
    ledgers = {}
    for name, kind in (("short", SQLiteStore), ("general", GeneralPath)):
        path = str(tmp_path / f"{name}.db")
        store = kind(path)
        try:
            lives(store)
        finally:
            store.close()
        verified(path)
        ledgers[name] = written(path)
    untimed = {"runs": (4, 5, 7), "journal": (0, 5, 6)}  # created, updated, lease; id, at, hash
    for table, rows in ledgers["short"].items():
        skip = untimed.get(table, ())
        keep = [[v for i, v in enumerate(row) if i not in skip] for row in rows]
        general = [
            [v for i, v in enumerate(row) if i not in skip] for row in ledgers["general"][table]
        ]
        assert keep == general, table


def test_a_new_run_is_what_its_record_and_its_journal_say(store_url: str) -> None:
    """The record handed back is the row as stored; the run's creation is journalled at
    the row's own creation time, to the bit (verify holds it there)."""
    with opened(store_url) as store:
        lease, record = take(store, "r", "worker", plan=("a", "b"), agent="billing")
        assert record == store.get_run("r")
        assert lease == Lease("r", "worker", 1, 30.0, "billing", False)
        created, leased = store.journal("r", 0, 10)
        assert (created.event, created.data) == (
            "run_created", {"agent": "billing", "budget": None, "plan": ["a", "b"]}
        )  # fmt: skip
        assert created.at == record.created_at
        leased_data = {"owner": "worker", "token": 1, "ttl": 30.0}  # verify bounds its expiry
        assert (leased.event, leased.data) == ("lease_acquired", leased_data)
        store.finish(lease, RunStatus.COMPLETED, None)
        ended = store.get_run("r")
        assert (ended.status, ended.owner, ended.fencing_token) == (RunStatus.COMPLETED, None, 1)
        assert [e.event for e in store.journal("r", 0, 10)][2:] == ["run_completed"]
        assert store.journal("r", 0, 10)[2].data == {"reason": None, "stopped_by": None}


def test_a_run_switched_off_before_it_existed_chains_after_its_switch(db_path: str) -> None:
    """A run's records may precede its creation (a person's halt of a run id): the new
    run's records follow that one in its chain, and its first step is refused."""
    send = oncelog.tool(kind="create", name="send")(lambda *, idempotency_key: 1)
    with oncelog.open(db_path) as ledger:
        ledger.halt("not yet", by="ops", run="r", ahead=True)
        with pytest.raises(oncelog.RunHalted), ledger.run("r") as run:
            run.effect("a", send)
        events = [e.event for e in ledger.journal("r")]
        assert events[:3] == ["halt_set", "run_created", "lease_acquired"]
    verified(db_path)


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("live holder", oncelog.RunLeased),
        ("other plan", oncelog.PlanMismatch),
        ("other agent", oncelog.ConfigurationError),
        ("unknown, create=False", oncelog.UnknownRun),
    ],
)
def test_a_start_refused_writes_nothing(db_path: str, case: str, error: type[Exception]) -> None:
    with closing(SQLiteStore(db_path)) as store:
        take(store, "r", "holder", plan=("a",), agent="billing")
        before = written(db_path)
        cases: dict[str, tuple[str, dict[str, Any]]] = {
            "live holder": ("r", {}),
            "other plan": ("r", {"plan": ("b",), "owner_is_dead": dead}),
            "other agent": ("r", {"agent": "support", "owner_is_dead": dead}),
            "unknown, create=False": ("nobody", {"create": False}),
        }
        run_id, options = cases[case]
        with pytest.raises(error):
            take(store, run_id, "taker", **options)
        assert written(db_path) == before
        assert store.get_run("r").owner == "holder"
    verified(db_path)


def test_an_existing_run_is_taken_over_by_the_general_path(db_path: str) -> None:
    """A dead holder's run is taken with the next token, without a second creation; a
    halted run stays halted; a completed one runs again."""
    with closing(SQLiteStore(db_path)) as store:
        take(store, "r", "first")
        second, record = take(store, "r", "second", owner_is_dead=dead)
        assert (second.token, record.fencing_token, record.owner) == (2, 2, "second")
        store.write_intent(second, effect(0, "a"), None)
        stop = '{"key":null,"kind":"AmbiguousOutcome","message":"crashed","step_id":"a"}'
        store.mark_unknown(second, 0, "crashed", stop)  # the run halted on an effect in doubt
        third, record = take(store, "r", "third", owner_is_dead=dead)
        assert (record.status, record.fencing_token, record.next_seq) == (RunStatus.HALTED, 3, 1)
        store.finish(third, RunStatus.COMPLETED, None)
        fourth, record = take(store, "r", "fourth")
        assert (record.status, fourth.token) == (RunStatus.RUNNING, 4)
        events = [e.event for e in store.journal("r", 0, 100)]
        assert events.count("run_created") == 1
        assert events.count("lease_acquired") == 4
    verified(db_path)


def test_an_end_with_a_lost_lease_writes_nothing(db_path: str) -> None:
    """Taken over by another owner, or by the same owner again (a newer token): the end
    raises LeaseLost and the ledger is as it was."""
    with closing(SQLiteStore(db_path)) as store:
        stale, _ = take(store, "r", "worker")
        take(store, "r", "other", owner_is_dead=dead)
        same, _ = take(store, "s", "worker")
        take(store, "s", "worker", owner_is_dead=dead)
        before = written(db_path)
        for lease in (stale, same):
            for status, reason in ((RunStatus.COMPLETED, None), (RunStatus.FAILED, "boom")):
                with pytest.raises(oncelog.LeaseLost):
                    store.finish(lease, status, reason)
        assert written(db_path) == before
    verified(db_path)


def test_an_end_past_the_lease_of_its_owner_is_written(db_path: str) -> None:
    """An expired lease nobody took over still ends its run (the fence holds)."""
    with closing(SQLiteStore(db_path)) as store:
        lease, _ = take(store, "r", "worker", ttl=-1.0)
        store.finish(lease, RunStatus.COMPLETED, None)
        assert store.get_run("r").status is RunStatus.COMPLETED
    verified(db_path)


class Counting:
    """The store's connection or its cursor, keeping the start of each statement sent
    through it (a script's one by one) in ``sent``, which both share."""

    def __init__(self, db: Any, sent: list[str]) -> None:
        self.db = db
        self.sent = sent

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        self.sent.append(" ".join(sql.split()[:3]))
        return self.db.execute(sql, parameters)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_new_runs_start_and_end_are_a_statement_each_per_table(db_path: str) -> None:
    """Counts, never times: the start inserts the run and both its records and reads its
    time once; the end is its update and its record, checked in its insert to follow the
    head the start wrote."""
    with closing(SQLiteStore(db_path)) as store:
        take(store, "warm", "w")
        sent: list[str] = []
        store._db = Counting(store._db, sent)  # type: ignore[assignment]
        store._cursor = Counting(store._cursor, sent)  # type: ignore[assignment]
        lease, _ = take(store, "r", "worker")
        started = sent[:]
        sent.clear()
        store.finish(lease, RunStatus.COMPLETED, None)
        ended = sent
    assert started == [
        "BEGIN IMMEDIATE", "INSERT INTO runs", "SELECT created_at, (SELECT", "INSERT INTO journal",
        "COMMIT",
    ]  # fmt: skip
    assert ended == ["BEGIN IMMEDIATE", "UPDATE runs SET", "INSERT OR IGNORE", "COMMIT"]
