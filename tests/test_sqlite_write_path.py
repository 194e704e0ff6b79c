"""SQLite's write path, counted: the statements an effect and a model call send, the work
an approval's lookup does as its run grows, and the checks folded into the writes
(fence, lease extension, kill switch, an agent's budget) still refusing and extending as
separate statements did. Counts, never times."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, Literal

import pytest

import oncelog
from oncelog.records._records import ApprovalStatus, HaltScope, StepState, StepType
from oncelog.records._serialization import digest
from oncelog.stores import SQLiteStore, _sqlite_write
from oncelog.stores._migrations import migrations
from oncelog.stores._protocol import Lease, NewStep, Outcome
from oncelog.stores._sqlite import SQLITE

ARGS = '{"args":[],"kwargs":{"to":"alice@example.com"}}'


def alive(owner: str) -> bool:
    return False


def effect(seq: int, step_id: str, **options: Any) -> NewStep:
    return NewStep(
        seq, step_id, StepType.EFFECT, "send", "create", f"key-{step_id}", digest(ARGS), ARGS,
        **options,
    )  # fmt: skip


def acquire(store: SQLiteStore, run_id: str, **options: Any) -> Lease:
    lease, _ = store.acquire(
        run_id, owner="worker", ttl=options.pop("ttl", 60.0), plan=None, replace_plan=False,
        create=True, owner_is_dead=options.pop("owner_is_dead", alive), **options,
    )  # fmt: skip
    return lease


class Counting:
    """The store's connection or its cursor, keeping the start of each statement sent
    through it in ``sent``, which both share."""

    def __init__(self, db: Any, sent: list[str]) -> None:
        self.db = db
        self.sent = sent

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        self.sent.append(" ".join(sql.split())[:24])
        return self.db.execute(sql, parameters)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@contextmanager
def traced(store: SQLiteStore, counting: type[Counting] = Counting) -> Iterator[list[str]]:
    """The statements the store sends SQLite (its triggers' are SQLite's own), through its
    connection and its cursor."""
    db, cursor = store._db, store._cursor
    sent: list[str] = []
    store._db = counting(db, sent)  # type: ignore[assignment]
    store._cursor = counting(cursor, sent)  # type: ignore[assignment]
    try:
        yield sent
    finally:
        store._db, store._cursor = db, cursor


def effect_statements(db_path: str, durability: Literal["intent", "full"]) -> list[str]:
    ledger = oncelog.open(db_path, durability=durability)
    send = ledger.tool(kind="create", name="send")(lambda to, *, idempotency_key: {"ok": 1})
    store = ledger.store
    assert isinstance(store, SQLiteStore)
    try:
        with ledger.run("r") as run:
            run.effect("first", send, to="alice")
            with traced(store) as sent:
                run.effect("second", send, to="alice")
        return sent
    finally:
        ledger.close()


INTENT = ["BEGIN IMMEDIATE", "INSERT OR IGNORE INTO st", "INSERT OR IGNORE INTO jo", "COMMIT"]
OUTCOME = ["BEGIN IMMEDIATE", "UPDATE steps SET state =", "INSERT OR IGNORE INTO jo", "COMMIT"]


@pytest.mark.parametrize("durability", ["intent", "full"])
def test_an_effect_is_eight_statements(db_path: str, durability: Literal["intent", "full"]) -> None:
    """Whatever the durability: the sync level is the connection's, never switched (the
    intent's fsync by default is counted in ``test_power_loss``)."""
    assert effect_statements(db_path, durability) == INTENT + OUTCOME


def test_a_write_never_commits_a_transaction_left_open(db_path: str) -> None:
    """With a transaction left open on the connection, a write is refused and the
    transaction stays open, its work uncommitted."""
    with closing(SQLiteStore(db_path)) as store:
        lease = acquire(store, "r")
        store.write_intent(lease, effect(0, "first"), None)
        think = NewStep(1, "think", StepType.LLM, "model", "llm", "key-think", digest(ARGS), ARGS)
        done = Outcome(StepState.DONE, '{"text":"hi"}')
        store._db.execute("BEGIN IMMEDIATE")
        store._db.execute("CREATE TABLE left_open (x)")
        with pytest.raises(oncelog.StoreUnavailable, match="within a transaction"):
            store.record_step(lease, think, None, done)
        assert store._db.in_transaction
        store._db.execute("ROLLBACK")
        tables = store._db.execute("SELECT name FROM sqlite_master WHERE name = 'left_open'")
        assert tables.fetchall() == []
        store.record_step(lease, think, None, done)
        assert [step.state for step in store.steps("r", 0, 10)] == [
            StepState.IN_FLIGHT, StepState.DONE,
        ]  # fmt: skip


def test_a_model_call_checks_the_kill_switch_once_and_writes_its_row_and_record_once(
    db_path: str,
) -> None:
    ledger = oncelog.open(db_path, durability="full")
    store = ledger.store
    assert isinstance(store, SQLiteStore)
    try:
        with ledger.run("r") as run:
            run.llm("warm", lambda: {"text": "hi"})
            with traced(store) as sent:
                run.llm("ask", lambda: {"text": "hi"})
    finally:
        ledger.close()
    assert sent == [
        # Before the call (the halts table itself only if the file changed since the
        # last look); not again when it is recorded.
        "PRAGMA data_version",
        # Its row and its one journal record ("recorded"), not an intent and an outcome.
        "BEGIN IMMEDIATE", "INSERT OR IGNORE INTO st", "INSERT OR IGNORE INTO jo", "COMMIT",
    ]  # fmt: skip


def test_the_kill_switch_is_read_again_whenever_the_file_changed(db_path: str) -> None:
    """No switch on: asked again, only the file's data version is read, until a commit of
    another connection or a switch set through this store."""
    store = SQLiteStore(db_path, durability="process")
    other = SQLiteStore(db_path, durability="process")
    try:
        assert store.active_halt("r", "a") is None
        with traced(store) as sent:
            assert store.active_halt("r", "a") is None
        assert sent == ["PRAGMA data_version"]
        other.set_halt(HaltScope.RUN, "r", reason="stop", by="ann", ahead=True)
        assert store.active_halt("r", "a") is not None
        assert store.active_halt("r", "a") is not None  # a switch on is never remembered
        other.clear_halt(HaltScope.RUN, "r", by="ann", note=None)
        assert store.active_halt("r", "a") is None
        assert store.active_halt("other-run", "a") is None  # remembered for one run only
        store.set_halt(HaltScope.AGENT, "a", reason="stop", by="ann", ahead=True)
        assert store.active_halt("other-run", "a") is not None
        other.set_halt(HaltScope.GLOBAL, "", reason="all", by="ann")
        assert store.active_halt("r", None) is not None
    finally:
        other.close()
        store.close()


def vm_steps(store: SQLiteStore, work: Any) -> int:
    """Virtual machine instructions SQLite runs for ``work``, in thousands."""
    count = [0]

    def tick() -> int:
        count[0] += 1
        return 0

    store._db.set_progress_handler(tick, 1000)
    try:
        work()
    finally:
        store._db.set_progress_handler(None, 0)
    return count[0]


def approved_intent_work(store: SQLiteStore, recorded: int) -> int:
    """The work of an intent that uses an approval, in a run of ``recorded`` effects."""
    lease = acquire(store, f"run-{recorded}")
    for seq in range(recorded):
        store.write_intent(lease, effect(seq, f"s{seq}"), None)
        store.write_outcome(lease, effect(seq, f"s{seq}"), 1, Outcome(StepState.DONE, "1"))
    step = effect(recorded, "approved", needs_approval=True)
    asked = store.request_approval(lease, step)
    store.decide_approval(
        lease.run_id, "approved", ApprovalStatus.APPROVED, by="ann", expires_in=None,
        note=None, request=asked.id,
    )  # fmt: skip
    return vm_steps(store, lambda: store.write_intent(lease, step, None))


def test_an_approval_is_found_without_reading_the_run_s_journal(db_path: str) -> None:
    store = SQLiteStore(db_path, durability="process")
    try:
        short, long = approved_intent_work(store, 5), approved_intent_work(store, 2_000)
    finally:
        store.close()
    # A pass over the run's 4,000 records costs hundreds of thousands of instructions.
    assert long <= short + 5, (short, long)


def lease_left(db_path: str, run_id: str) -> float:
    with sqlite3.connect(db_path) as db:
        clock = "(julianday('now') - 2440587.5) * 86400.0"
        row = db.execute(
            f"SELECT lease_expires_at - {clock} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    return float(row[0])


def shorten_lease(db_path: str, run_id: str, seconds: float) -> None:
    with sqlite3.connect(db_path) as db:
        db.execute(
            "UPDATE runs SET lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + ? "
            "WHERE run_id = ?",
            (seconds, run_id),
        )


def test_an_intent_and_an_outcome_extend_a_lease_half_used(db_path: str) -> None:
    store = SQLiteStore(db_path, durability="process")
    try:
        lease = acquire(store, "r", ttl=600.0)
        shorten_lease(db_path, "r", 100.0)
        store.write_intent(lease, effect(0, "a"), None)
        assert lease_left(db_path, "r") > 500
        shorten_lease(db_path, "r", 100.0)
        store.write_outcome(lease, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
        assert lease_left(db_path, "r") > 500
        shorten_lease(db_path, "r", 400.0)  # two thirds left: the row is left alone
        store.write_intent(lease, effect(1, "b"), None)
        assert lease_left(db_path, "r") < 401
    finally:
        store.close()


def test_a_model_call_recorded_under_a_lease_half_used_extends_it(db_path: str) -> None:
    """The recorded step's fence asks for half the lease; short of it, the general path
    extends the lease and writes the same row and journal entry."""
    store = SQLiteStore(db_path, durability="process")
    try:
        lease = acquire(store, "r", ttl=600.0)
        shorten_lease(db_path, "r", 100.0)
        model = NewStep(0, "ask", StepType.LLM, "model", "llm", "key-ask", digest(ARGS), ARGS)
        store.record_step(lease, model, None, Outcome(StepState.DONE, '{"text":"hi"}'))
        assert lease_left(db_path, "r") > 500
        (recorded,) = store.steps("r", 0, 10)
        assert (recorded.state, recorded.attempts) == (StepState.DONE, 1)
        assert [e.event for e in store.journal("r", 0, 10) if e.seq == 0] == ["recorded"]
    finally:
        store.close()
    with oncelog.open(db_path) as ledger:
        report = ledger.verify(run_id="r")
    assert report.ok, report.problems


def test_the_folded_checks_refuse_as_the_statements_they_replace(db_path: str) -> None:
    store = SQLiteStore(db_path, durability="process")
    try:
        stale = acquire(store, "r")
        acquire(store, "r", owner_is_dead=lambda owner: True)  # taken over
        with pytest.raises(oncelog.LeaseLost, match="another worker took this run over"):
            store.write_intent(stale, effect(0, "a"), None)
        lease = acquire(store, "s")
        store.write_intent(lease, effect(0, "a"), None)
        with pytest.raises(oncelog.LeaseLost, match="another worker took this run over"):
            store.write_outcome(stale, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
        with pytest.raises(oncelog.LeaseLost, match="resolved or retried"):
            store.write_outcome(lease, effect(0, "a"), 2, Outcome(StepState.DONE, "1"))
        with pytest.raises(oncelog.DuplicateStep):
            store.write_intent(lease, effect(1, "a"), None)
        model = NewStep(1, "a", StepType.LLM, "model", "llm", "key-m", digest(ARGS), ARGS)
        with pytest.raises(oncelog.DuplicateStep):
            store.record_step(lease, model, None, Outcome(StepState.DONE, "1"))
        store.set_halt(HaltScope.RUN, "s", reason="stop", by="ann", ahead=True)
        with pytest.raises(oncelog.RunHalted):
            store.write_intent(lease, effect(1, "b"), None)
        assert [s.step_id for s in store.steps("s", 0, 10)] == ["a"]
    finally:
        store.close()


def test_an_agent_s_effect_is_charged_to_its_daily_budget(db_path: str) -> None:
    """An agent with a budget takes the general path, which counts and refuses."""
    store = SQLiteStore(db_path, durability="process")
    try:
        store.set_agent_budget("bot", oncelog.AgentBudget(calls=1), by="ann")
        lease = acquire(store, "r", agent="bot")
        store.write_intent(lease, effect(0, "a"), None)
        with pytest.raises(oncelog.BudgetExceeded):
            store.write_intent(lease, effect(1, "b"), None)
        free = acquire(store, "s", agent="other")
        store.write_intent(free, effect(0, "a"), None)
    finally:
        store.close()


NEW_ROWS = [
    *_sqlite_write._INSERTS.values(),
    _sqlite_write._RECORD_STEP,
    _sqlite_write._RECORD_PLAIN,
]


@pytest.mark.parametrize("statement", NEW_ROWS)
def test_a_new_step_s_row_is_written_without_a_temporary_b_tree(
    db_path: str, statement: str
) -> None:
    """An INSERT ... SELECT into a table with triggers fills a temporary b-tree first
    (OpenEphemeral), which cost more than the insert; the rows are written from VALUES."""
    store = SQLiteStore(db_path)
    try:
        store.set_agent_budget("bot", oncelog.AgentBudget(calls=5), by="ann")  # the triggers
        sql = SQLITE.translate(statement)
        program = store._db.execute(f"EXPLAIN {sql}", (None,) * sql.count("?")).fetchall()
    finally:
        store.close()
    opcodes = {row[1] for row in program}
    assert "Program" in opcodes  # the budget trigger is there
    assert "OpenEphemeral" not in opcodes


def test_an_effect_s_outcome_leaves_the_budget_totals_untouched(db_path: str) -> None:
    """The totals' update trigger runs its body only where a counted value changes: an
    outcome changes only the step's row and adds its journal entry (0017)."""
    store = SQLiteStore(db_path, durability="process")
    try:
        store.set_agent_budget("bot", oncelog.AgentBudget(calls=5), by="ann")
        lease = acquire(store, "r", agent="bot")
        store.write_intent(lease, effect(0, "a"), None)
        before = store._db.total_changes
        store.write_outcome(lease, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
        assert store._db.total_changes - before == 2
        assert store.budget_drift(None) == []
    finally:
        store.close()


def totals_triggers(db: sqlite3.Connection) -> list[str]:
    found = db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    return [name for (name,) in found if name.startswith("steps_count")]


BUDGETED = ["steps_count_change", "steps_count_new"]


def test_a_ledger_without_a_budget_writes_steps_without_the_totals_triggers(
    db_path: str,
) -> None:
    """No trigger program is entered where there is nothing to count (0020)."""
    store = SQLiteStore(db_path)
    try:
        assert totals_triggers(store._db) == []
        sql = SQLITE.translate(_sqlite_write._INSERTS[False])
        program = store._db.execute(f"EXPLAIN {sql}", (None,) * sql.count("?")).fetchall()
        assert "Program" not in {row[1] for row in program}
    finally:
        store.close()


@pytest.mark.parametrize("how", ["run", "agent", "acquire", "submit"])
def test_the_first_budget_brings_the_totals_triggers(db_path: str, how: str) -> None:
    """Whatever writes the ledger's first budget also creates the triggers, in its own
    transaction, before any step of a budgeted run or agent is written."""
    store = SQLiteStore(db_path, durability="process")
    try:
        lease = acquire(store, "before", agent="bot")
        store.write_intent(lease, effect(0, "a"), None)
        if how == "run":
            store.set_budget("before", oncelog.Budget(steps=5), by="ann")
        elif how == "agent":
            store.set_agent_budget("bot", oncelog.AgentBudget(calls=5), by="ann")
        elif how == "acquire":
            acquire(store, "budgeted", budget=oncelog.Budget(steps=5))
        else:
            store.submit("budgeted", agent=None, input_json="{}", plan=None,
                         budget=oncelog.Budget(steps=5))  # fmt: skip
        assert totals_triggers(store._db) == BUDGETED
        assert store.budget_drift(None) == []
    finally:
        store.close()


def test_a_writer_that_prepared_without_the_triggers_counts_once_a_budget_exists(
    db_path: str,
) -> None:
    """Another connection's statements, prepared before the triggers existed, are
    prepared again once they do (the schema changed), so its next steps are counted."""
    writer = SQLiteStore(db_path, durability="process")
    setter = SQLiteStore(db_path, durability="process")
    try:
        lease = acquire(writer, "r", agent="bot")
        writer.write_intent(lease, effect(0, "a"), None)
        writer.write_outcome(lease, effect(0, "a"), 1, Outcome(StepState.DONE, "1"))
        setter.set_budget("r", oncelog.Budget(steps=10), by="ann")
        setter.set_agent_budget("bot", oncelog.AgentBudget(calls=10), by="ann")
        for seq, step_id in ((1, "b"), (2, "c")):
            writer.write_intent(lease, effect(seq, step_id), None)
            writer.write_outcome(lease, effect(seq, step_id), 1, Outcome(StepState.DONE, "1"))
        assert writer.budget_usage("r")[1].steps == 3
        assert writer.budget_drift(None) == []
    finally:
        writer.close()
        setter.close()


@pytest.mark.parametrize("budgeted", [True, False])
def test_migration_20_keeps_the_triggers_of_a_ledger_with_a_budget(
    db_path: str, budgeted: bool
) -> None:
    """A ledger written before 0020 keeps its triggers, and its totals, if it holds a
    budget; otherwise it loses them."""
    store = SQLiteStore(db_path, durability="process")
    try:
        lease = acquire(store, "r", agent="bot")
        store.set_agent_budget("bot", oncelog.AgentBudget(calls=10), by="ann")
        if not budgeted:
            store.set_agent_budget("bot", None, by="ann")
        store.write_intent(lease, effect(0, "a"), None)
    finally:
        store.close()
    with sqlite3.connect(db_path) as db:  # back to schema 19, triggers and all
        db.execute("ALTER TABLE runs DROP COLUMN stop_seq")  # what 0024 adds
        db.execute("ALTER TABLE runs DROP COLUMN stop")
        db.execute("DELETE FROM schema_migrations WHERE version >= 20")
    store = SQLiteStore(db_path, durability="process")
    try:
        assert totals_triggers(store._db) == (BUDGETED if budgeted else [])
        if budgeted:
            lease = acquire(store, "r2", agent="bot")
            store.write_intent(lease, effect(0, "a"), None)
            assert store.budget_drift(None) == []
    finally:
        store.close()


def test_the_triggers_a_first_budget_brings_are_the_migrations_own(
    db_path: str, tmp_path: Path
) -> None:
    """``_sqlite_totals`` restates the triggers migrations 0009 and 0017 define (0020 drops
    them): the text a first budget creates must be the text the migrations left, so a later
    migration that changes a trigger cannot leave the restated copy behind unnoticed."""
    migrated = sqlite3.connect(tmp_path / "by-the-migrations.db")
    try:
        for migration in migrations("sqlite"):
            if migration.version < 20:
                for statement in migration.statements():
                    migrated.execute(statement)
        by_migrations = trigger_texts(migrated)
    finally:
        migrated.close()
    assert sorted(by_migrations) == BUDGETED
    store = SQLiteStore(db_path, durability="process")
    try:
        store.set_agent_budget("bot", oncelog.AgentBudget(calls=10), by="ann")
        assert trigger_texts(store._db) == by_migrations
    finally:
        store.close()


def trigger_texts(db: sqlite3.Connection) -> dict[str, str]:
    """The budget totals' triggers by name, their text with its spacing and the words
    ``IF NOT EXISTS`` (which SQLite keeps as written) set aside."""
    found = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    return {
        name: " ".join(sql.replace("IF NOT EXISTS ", "").split())
        for name, sql in found
        if name in BUDGETED
    }


def test_an_effect_and_a_model_call_bind_no_none(db_path: str) -> None:
    """Python's sqlite3 tries to adapt each None it binds and fails (an exception made and
    cleared, about 3 k instructions): the hot statements write their NULLs themselves."""
    ledger = oncelog.open(db_path)
    send = ledger.tool(kind="create", name="send")(lambda to, *, idempotency_key: {"ok": 1})
    store = ledger.store
    assert isinstance(store, SQLiteStore)
    bound: list[tuple[str, Any]] = []

    class Binding(Counting):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            bound.extend((sql[:24], value) for value in parameters)
            return self.db.execute(sql, parameters)  # type: ignore[no-any-return]

    try:
        with ledger.run("r", agent="bot") as run:
            run.effect("first", send, to="alice")
            with traced(store, Binding):
                run.effect("second", send, to="alice")
                run.llm("think", lambda: {"usage": {"input_tokens": 3, "output_tokens": 1}})
    finally:
        ledger.close()
    assert bound
    assert [where for where, value in bound if value is None] == []
