"""What every store must do the same way, run against each of them (``store_url`` is
parametrized over SQLite and PostgreSQL in conftest): fencing, concurrent acquisition,
migrations, the journal's order, and the controls that live in the ledger."""

from __future__ import annotations

import functools
import itertools
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import pytest

import oncelog
from oncelog import StepState, StepType
from oncelog.records._serialization import digest
from oncelog.stores import Lease, NewStep, Outcome, Store, open_store
from oncelog.stores._migrations import migrations

from .conftest import require
from .support.postgres import POSTGRES_REASON, postgres_is_up, schema_url

T = TypeVar("T")


def alive(owner: str) -> bool:
    return False  # every owner is a live worker elsewhere: only expiry frees its lease


def dead(owner: str) -> bool:
    return True


def sql(store_url: str, statement: str) -> list[Any]:
    """One statement on the store's own tables, outside oncelog, in either dialect."""
    if store_url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []
    with closing(sqlite3.connect(store_url)) as db, db:
        return db.execute(statement).fetchall()


@contextmanager
def opened(store_url: str) -> Iterator[Store]:
    store = open_store(store_url)
    try:
        yield store
    finally:
        store.close()


def acquire(store: Store, run_id: str, owner: str, *, ttl: float = 30.0, **options: Any) -> Lease:
    lease, _ = store.acquire(
        run_id, owner=owner, ttl=ttl, plan=None, replace_plan=False, create=True,
        owner_is_dead=options.pop("owner_is_dead", alive), **options,
    )  # fmt: skip
    return lease


def effect(seq: int, step_id: str, **options: Any) -> NewStep:
    return NewStep(
        seq, step_id, StepType.EFFECT, "send", "create", f"key-{step_id}", "hash", '{"args":[]}',
        **options,
    )  # fmt: skip


def together(count: int, work: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``work(i)`` in ``count`` threads released at the same instant."""
    barrier = threading.Barrier(count)

    def one(i: int) -> T | BaseException:
        barrier.wait()
        try:
            return work(i)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


# -- leases and fencing ------------------------------------------------------------------


def test_the_token_grows_with_every_takeover_and_a_stale_lease_cannot_write(
    store_url: str,
) -> None:
    with opened(store_url) as store:
        first = acquire(store, "r", "worker-1")
        store.write_intent(first, effect(0, "a"), None)
        with pytest.raises(oncelog.RunLeased):
            acquire(store, "r", "worker-2")  # a live owner with an unexpired lease
        second = acquire(store, "r", "worker-2", owner_is_dead=dead)
        third = acquire(store, "r", "worker-3", ttl=-1.0, owner_is_dead=dead)
        fourth = acquire(store, "r", "worker-4")  # worker-3's lease expired by the store's clock
        assert [first.token, second.token, third.token, fourth.token] == [1, 2, 3, 4]
        for stale in (first, second, third):
            with pytest.raises(oncelog.LeaseLost):
                store.write_outcome(stale, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
            with pytest.raises(oncelog.LeaseLost):
                store.write_intent(stale, effect(1, "b"), None)
            with pytest.raises(oncelog.LeaseLost):
                store.finish(stale, oncelog.RunStatus.COMPLETED, None)
        assert [s.state for s in store.steps("r", 0, 10)] == [StepState.IN_FLIGHT]
        store.write_outcome(fourth, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
        tokens = [
            e.data["token"] for e in store.journal("r", 0, 100) if e.event == "lease_acquired"
        ]
        assert tokens == [1, 2, 3, 4]


def test_a_persons_resolution_fences_the_worker_that_ran_the_step(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker")
        store.write_intent(lease, effect(0, "a"), None)
        decide = functools.partial(
            store.resolve, "r", "a", oncelog.Resolution.DONE, result_json='"ok"', by="alice",
            note=None,
        )  # fmt: skip
        with pytest.raises(oncelog.RunLeased):  # its lease is live: it may be running "a"
            decide()
        assert store.steps("r", 0, 10)[0].state is StepState.IN_FLIGHT
        decide(force=True)
        [resolved] = [e.data for e in store.journal("r", 0, 100) if e.event == "resolved"]
        assert resolved["forced"] == "worker"
        with pytest.raises(oncelog.LeaseLost):
            store.write_outcome(lease, effect(0, "a"), 1, Outcome(StepState.DONE, '"late"'))
        assert store.get_run("r").fencing_token == 2
        assert store.steps("r", 0, 10)[0].result == "ok"


def test_concurrent_acquisitions_of_a_new_run_leave_one_owner(store_url: str) -> None:
    racers = 6
    stores = [open_store(store_url) for _ in range(racers)]
    try:
        outcomes = together(racers, lambda i: acquire(stores[i], "race", f"worker-{i}"))
    finally:
        for store in stores:
            store.close()
    leases = [o for o in outcomes if isinstance(o, Lease)]
    assert len(leases) == 1, outcomes
    assert all(isinstance(o, oncelog.RunLeased) for o in outcomes if o is not leases[0])
    with opened(store_url) as store:
        events = [e.event for e in store.journal("race", 0, 100)]
        assert events == ["run_created", "lease_acquired"]
        assert store.get_run("race").owner == leases[0].owner


def test_concurrent_writers_of_one_run_are_serialized_by_the_fence(store_url: str) -> None:
    """Many threads with one lease each write a new step: every write sees the previous
    commit, so positions and step ids collide only as typed errors, never silently."""
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker")
        outcomes = together(
            8, lambda i: store.write_intent(lease, effect(i % 4, f"s{i % 4}"), None)
        )
        written = [o for o in outcomes if isinstance(o, oncelog.stores.Intent)]
        assert len(written) == 4, outcomes
        assert all(isinstance(o, oncelog.DuplicateStep) for o in outcomes if o not in written)
        assert [s.step_id for s in store.steps("r", 0, 10)] == ["s0", "s1", "s2", "s3"]


# -- migrations ----------------------------------------------------------------------------


def versions(store_url: str) -> list[int]:
    return [row[0] for row in sql(store_url, "SELECT version FROM schema_migrations ORDER BY 1")]


def test_migrations_are_idempotent_and_safe_to_run_at_once(store_url: str) -> None:
    outcomes = together(5, lambda _: open_store(store_url))
    for store in outcomes:
        assert not isinstance(store, BaseException), store
        store.close()
    applied = versions(store_url)
    dialect = "postgres" if store_url.startswith("postgresql") else "sqlite"
    assert applied == [m.version for m in migrations(dialect)]  # each once, in order
    assert len(applied) >= 5
    open_store(store_url).close()
    assert versions(store_url) == applied


def test_migrations_are_numbered_without_gaps_and_alike_for_both_dialects() -> None:
    """A ledger applies the versions above its own, so a version slotted in below one
    already applied (a gap filled later) would never reach it."""
    for dialect in ("sqlite", "postgres"):
        numbers = [m.version for m in migrations(dialect)]
        assert numbers == list(range(1, len(numbers) + 1)), (dialect, numbers)
    names = {d: [m.name for m in migrations(d)] for d in ("sqlite", "postgres")}
    assert names["sqlite"] == names["postgres"]


def test_a_newer_schema_is_refused(store_url: str) -> None:
    open_store(store_url).close()
    sql(store_url, "INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)")
    with pytest.raises(oncelog.SchemaTooNew, match="Upgrade oncelog"):
        open_store(store_url)


# -- the journal ---------------------------------------------------------------------------


def test_the_journal_keeps_each_runs_entries_in_order(store_url: str) -> None:
    with oncelog.open(store_url) as ledger:
        send = ledger.tool(kind="create", name="send")(lambda n, *, idempotency_key: n)
        for run_id in ("a", "b"):
            with ledger.run(run_id, plan=["one", "two"]) as run:
                run.effect("one", send, 1)
                run.effect("two", send, 2)
        entries = ledger.journal("a")
        assert [e.event for e in entries] == [
            "run_created", "lease_acquired", "intent", "outcome", "intent", "outcome",
            "run_completed",
        ]  # fmt: skip
        assert [e.seq for e in entries if e.event in ("intent", "outcome")] == [0, 0, 1, 1]
        assert sorted(e.id for e in entries) == [e.id for e in entries]
        assert all(a.at <= b.at for a, b in itertools.pairwise(entries))
        everything = ledger.journal(None, limit=1000)
        assert {e.run_id for e in everything} == {"a", "b"}
        page = ledger.journal(None, after=everything[3].id, limit=2)
        assert page == everything[4:6]


# -- the controls that live in the ledger --------------------------------------------------


def test_halts_round_trip(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker", agent="billing")
        on = store.set_halt(oncelog.HaltScope.AGENT, "billing", reason="loop", by="ops")
        assert store.set_halt(oncelog.HaltScope.AGENT, "billing", reason="again", by="x") == on
        assert store.active_halt("r", "billing") == on
        assert store.active_halt("r", None) is None
        with pytest.raises(oncelog.RunHalted, match="loop"):
            store.write_intent(lease, effect(0, "a"), None)
        cleared = store.clear_halt(oncelog.HaltScope.AGENT, "billing", by="alice", note="ok")
        assert (cleared.id, cleared.cleared_by, cleared.note, cleared.active) == (
            on.id, "alice", "ok", False,
        )  # fmt: skip
        with pytest.raises(oncelog.UnknownHalt):
            store.clear_halt(oncelog.HaltScope.AGENT, "billing", by="alice", note=None)
        assert store.halts(active_only=True, limit=10) == []
        assert store.halts(active_only=False, limit=10) == [cleared]
        store.write_intent(lease, effect(0, "a"), None)
        events = [e.event for e in store.journal("", 0, 100)]
        assert events == ["halt_set", "halt_cleared"]


def test_approvals_round_trip(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker")
        # A request's hash is that of its arguments: a person approves what they read.
        step = replace(effect(0, "delete", needs_approval=True), args_hash=digest('{"args":[]}'))
        with pytest.raises(oncelog.ApprovalRequired):
            store.write_intent(lease, step, None)
        asked = store.request_approval(lease, step)
        assert store.request_approval(lease, step) == asked  # the live request, not another
        assert store.approvals(oncelog.ApprovalStatus.PENDING, 10) == [asked]
        approved = store.decide_approval(
            "r", "delete", oncelog.ApprovalStatus.APPROVED, by="alice", expires_in=None, note=None
        )
        assert (approved.status, approved.decided_by, approved.expires_at) == (
            oncelog.ApprovalStatus.APPROVED, "alice", None,
        )  # fmt: skip
        with pytest.raises(oncelog.UnknownApproval):
            store.decide_approval(
                "r", "delete", oncelog.ApprovalStatus.DENIED, by="bob", expires_in=None, note=None
            )
        assert store.write_intent(lease, step, None).attempt == 1
        [used] = store.approvals(None, 10)
        assert (used.id, used.status) == (asked.id, oncelog.ApprovalStatus.USED)
        with pytest.raises(oncelog.ApprovalRequired):  # used once: a retry asks again
            store.write_intent(lease, step, StepState.IN_FLIGHT)


def test_budgets_round_trip(store_url: str) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker", budget=oncelog.Budget(steps=2, cost=5.0))
        store.write_intent(lease, effect(0, "a", cost=2.0, irreversible=True), None)
        budget, used = store.budget_usage("r")
        assert budget == oncelog.Budget(steps=2, cost=5.0)
        assert (used.steps, used.cost, used.irreversible) == (1, 2.0, 1)
        assert used.wall_clock >= 0
        store.write_intent(lease, effect(1, "b", cost=2.0), None)
        with pytest.raises(oncelog.BudgetExceeded):
            store.write_intent(lease, effect(2, "c"), None)
        store.set_budget("r", oncelog.Budget(steps=3, cost=5.0), by="alice")
        with pytest.raises(oncelog.BudgetExceeded, match="cost"):
            store.write_intent(lease, effect(2, "c", cost=1.5), None)
        store.write_intent(lease, effect(2, "c", cost=1.0), None)
        with pytest.raises(oncelog.UnknownRun):
            store.set_budget("nope", None, by="alice")
        with pytest.raises(oncelog.UnknownRun):
            store.budget_usage("nope")

        store.set_agent_budget("billing", oncelog.AgentBudget(calls=1), by="ops")
        other = acquire(store, "o", "worker", agent="billing")
        store.write_intent(other, effect(0, "x"), None)
        with pytest.raises(oncelog.BudgetExceeded, match="daily budget"):
            store.write_intent(other, effect(1, "y"), None)
        store.set_agent_budget("billing", None, by="ops")
        store.write_intent(other, effect(1, "y"), None)
        events = [e.event for e in store.journal("", 0, 100)]
        assert events == ["agent_budget_set", "agent_budget_set"]


def test_a_budget_alert_is_journalled_once_until_the_budget_is_set_again(
    store_url: str,
) -> None:
    with opened(store_url) as store:
        lease = acquire(store, "r", "worker", budget=oncelog.Budget(steps=4, warn_at=0.5))
        store.write_intent(lease, effect(0, "a"), None)
        [warning] = store.write_intent(lease, effect(1, "b"), None).warnings
        assert (warning.kind, warning.limit, warning.used) == ("warning", "steps", 2)
        assert store.record_alert(warning) is True
        assert store.record_alert(warning) is False
        store.set_budget("r", oncelog.Budget(steps=4, warn_at=0.5), by="alice")
        assert store.record_alert(warning) is True
        events = [e.event for e in store.journal("r", 0, 100)]
        assert events.count("budget_alert") == 2


# -- opening -------------------------------------------------------------------------------


def test_bad_postgres_urls_are_refused_with_typed_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    require(postgres_is_up(), POSTGRES_REASON)
    with pytest.raises(oncelog.ConfigurationError, match="not a PostgreSQL URL"):
        oncelog.open("postgresql://127.0.0.1/test?no_such_option=1")
    with pytest.raises(oncelog.ConfigurationError, match="CREATE SCHEMA"):
        oncelog.open(schema_url("oncelog_no_such_schema"))
    with pytest.raises(oncelog.StoreUnavailable, match="Connection refused"):
        oncelog.open("postgresql://root@127.0.0.1:1/test")
    with pytest.raises(oncelog.ConfigurationError, match="durability"):
        oncelog.open(schema_url("public"), durability="sometimes")  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed
    for module in ("_postgres", "_postgres_pool", "_postgres_migrate"):
        monkeypatch.delitem(sys.modules, f"oncelog.stores.{module}", raising=False)
    with pytest.raises(oncelog.ConfigurationError, match=r"pip install .*\[postgres\]"):
        oncelog.open("postgres://127.0.0.1/test")


def test_released_runs_are_the_ones_a_decision_queued_that_nothing_took_since(
    store_url: str,
) -> None:
    with oncelog.open(store_url) as ledger:

        @ledger.tool(kind="read")
        def look() -> int:
            return 1

        ledger.submit("submitted", {})  # queued, but by no person's decision
        for run_id in ("released", "taken"):
            ledger.halt("checking", by="ops", run=run_id, ahead=True)
            with pytest.raises(oncelog.RunHalted), ledger.run(run_id) as run:
                run.read("look", look)
            for _ in range(3):  # a longer journal after the decision changes nothing
                ledger.halt("again", by="ops", run=run_id)
                ledger.clear_halt(by="ops", run=run_id)
        # An agent took it up and let it go again (a drain's exit 75): it moved.
        lease = acquire(ledger.store, "taken", "worker")
        ledger.store.finish(lease, oncelog.RunStatus.QUEUED, "draining")
        assert ledger.get_run("taken").status is oncelog.RunStatus.QUEUED
        assert [r.run_id for r in ledger.released_runs()] == ["released"]
        assert ledger.store.released_runs(0) == []
