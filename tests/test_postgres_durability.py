"""PostgreSQL's durability modes, read at each commit by the server itself: which commits
wait for their WAL flush (``synchronous_commit`` in force when the transaction commits),
and a run whose commits not flushed yet a server crash may have lost is written no
further by its process. A real crash of a private server is in ``test_postgres_faults.py``.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

import oncelog
from oncelog.stores._postgres import PostgresStore

from .support.postgres import execute

# A deferred trigger fires as its transaction commits, with the settings the commit uses.
_NOTE_COMMITS = """
CREATE TABLE {schema}.commits (id SERIAL, tx BIGINT, backend INTEGER, event TEXT,
                               synchronous_commit TEXT);
CREATE FUNCTION {schema}.note_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.commits (tx, backend, event, synchronous_commit)
    VALUES (txid_current(), pg_backend_pid(), NEW.event, current_setting('synchronous_commit'));
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER note_commit AFTER INSERT ON {schema}.journal
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.note_commit();
"""


def schema_of(url: str) -> str:
    return url.rsplit("%3D", 1)[1]


def commits(url: str) -> list[tuple[str, str, int]]:
    """Each transaction that wrote the journal, in commit order: its events joined by
    '+', the synchronous_commit it committed with, and its backend."""
    rows = execute(
        f"SELECT string_agg(event, '+' ORDER BY id), min(synchronous_commit), min(backend) "
        f"FROM {schema_of(url)}.commits GROUP BY tx ORDER BY min(id)"
    )
    return [(str(events), str(setting), int(backend)) for events, setting, backend in rows]


def noop(n: int, *, idempotency_key: str) -> int:
    return n


# What each kind of commit waits for, by mode: the run's start and a lease taken, an
# effect's intent, its outcome, a model call or a read (one record, in one commit), the
# run's end.
KINDS = ("run_created+lease_acquired", "intent", "outcome", "recorded", "run_completed")
EXPECTED = {
    "intent": dict(zip(KINDS, ["off", "on", "off", "off", "on"], strict=True)),
    "full": dict.fromkeys(KINDS, "on"),
    "process": dict.fromkeys(KINDS, "off"),
}


@pytest.mark.parametrize("budget", [None, oncelog.Budget(steps=50)], ids=["calls", "budgeted"])
@pytest.mark.parametrize("durability", ["intent", "full", "process"])
def test_each_commit_waits_for_its_flush_as_the_mode_says_and_only_itself(
    pg_url: str, durability: Literal["intent", "full", "process"], budget: oncelog.Budget | None
) -> None:
    """With ``intent``, an outcome and a model call's or a read's record commit without
    waiting for the WAL flush, every other commit waits; the setting is the commit's
    alone: the intent that follows an outcome on the same connection waits again. A run
    with a budget takes the store's transactions instead of the functions: the same."""
    oncelog.open(pg_url).close()  # the tables, to hang the trigger on
    execute(_NOTE_COMMITS.format(schema=schema_of(pg_url)))
    with oncelog.open(pg_url, durability=durability) as ledger:
        assert isinstance(ledger.store, PostgresStore)
        ledger.store._calls.pool.resize(1, 1)  # every commit on one connection
        tool = ledger.tool(kind="create")(noop)
        with ledger.run("r", budget=budget) as run:
            for n in range(3):
                run.effect(f"effect-{n}", tool, n)
                run.llm(f"model-{n}", lambda: {"text": "ok"})
                run.read(f"read-{n}", len, "abc")
    seen = commits(pg_url)
    events = [events for events, _, _ in seen]
    assert events == [
        "run_created+lease_acquired",
        *["intent", "outcome", "recorded", "recorded"] * 3,
        "run_completed",
    ]
    assert [(events, setting) for events, setting, _ in seen] == [
        (events, EXPECTED[durability][events]) for events in events
    ]
    # On one connection, a commit that waits came after one that did not: the setting
    # ended with its transaction.
    assert len({backend for _, _, backend in seen}) == 1, seen


def restart_the_server(url: str, schema: str, *, crashed: bool) -> None:
    """As a restart looks to the store: every backend of its schema's connections ended;
    after a crash, a new life of the server (crash recovery empties unlogged tables)."""
    if crashed:
        execute(f"TRUNCATE {schema}.server_life")
    execute(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        (schema,),
    )


@pytest.mark.parametrize(
    ("durability", "crashed", "goes_on"),
    [
        ("intent", True, False),
        ("process", True, False),
        ("full", True, True),  # nothing it wrote was unflushed
        ("intent", False, True),  # a clean restart flushes everything first
    ],
)
@pytest.mark.parametrize("budget", [None, oncelog.Budget(steps=50)], ids=["calls", "budgeted"])
def test_a_run_with_unflushed_commits_goes_no_further_after_a_server_crash(
    pg_url: str,
    durability: Literal["intent", "full", "process"],
    crashed: bool,
    goes_on: bool,
    budget: oncelog.Budget | None,
) -> None:
    """The server restarts between two effects of a run. After a crash (a new life of the
    server), a run whose last commits did not wait for the flush may have lost them: its
    next write raises ``StoreUnavailable`` before anything is written or called, and the
    next process takes the run from what is durable. A run whose commits were all
    flushed, or a clean restart, goes on."""
    calls: list[int] = []

    def tool(n: int, *, idempotency_key: str) -> int:
        calls.append(n)
        return n

    schema = schema_of(pg_url)
    url = f"{pg_url}&application_name={schema}"
    with oncelog.open(url, durability=durability) as ledger:
        guarded = ledger.tool(kind="create")(tool)
        stopped: Any = None
        try:
            with ledger.run("r", budget=budget) as run:
                run.effect("first", guarded, 1)
                restart_the_server(url, schema, crashed=crashed)
                run.effect("second", guarded, 2)
        except oncelog.StoreUnavailable as exc:
            stopped = exc
        assert (stopped is None) is goes_on, stopped
        assert calls == ([1, 2] if goes_on else [1])
        if not goes_on:
            assert "restarted after a crash" in str(stopped)
            assert [s.step_id for s in ledger.steps("r")] == ["first"]
            with ledger.run("r") as run:  # the next process, as a supervisor would start
                assert (run.effect("first", guarded, 1), run.effect("second", guarded, 2)) == (
                    1,
                    2,
                )
            assert calls == [1, 2]
        assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED
        assert isinstance(ledger.store, PostgresStore)
        assert ledger.store._unflushed == {}
