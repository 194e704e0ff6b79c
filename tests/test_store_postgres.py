"""The PostgreSQL store's settings, read back from the server itself, and the bound on
every call (a stopped server and a partition are in ``test_postgres_faults.py``)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import oncelog
from oncelog.records._records import StepType
from oncelog.stores import open_store
from oncelog.stores._postgres import PostgresStore
from oncelog.stores._protocol import Lease, NewStep

from .support.postgres import execute


def setting(store: PostgresStore, name: str) -> str:
    with store._calls.pool.connection() as conn:
        row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    ("durability", "url_says", "expected"),
    [("intent", "off", "on"), ("full", "off", "on"), ("process", "on", "off")],
)
def test_commits_wait_for_the_wal_flush_as_the_mode_says_whatever_the_url_says(
    pg_url: str, durability: str, url_says: str, expected: str
) -> None:
    """The session's setting; the commits that differ from it in ``intent`` mode are in
    ``test_postgres_durability.py``."""
    store = open_store(f"{pg_url}%20-csynchronous_commit%3D{url_says}", durability=durability)
    assert isinstance(store, PostgresStore)
    try:
        assert setting(store, "synchronous_commit") == expected
        assert setting(store, "application_name") == "oncelog"
    finally:
        store.close()


def test_the_schema_in_the_url_holds_every_table(pg_url: str) -> None:
    schema = pg_url.rsplit("%3D", 1)[1]
    oncelog.open(pg_url.replace("postgresql://", "postgres://", 1)).close()
    tables = {
        row[0]
        for row in execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
    }
    assert {"runs", "steps", "journal", "halts", "approvals", "schema_migrations"} <= tables


def test_a_named_application_is_kept(pg_url: str) -> None:
    store = open_store(f"{pg_url}&application_name=billing-agent")
    assert isinstance(store, PostgresStore)
    try:
        assert setting(store, "application_name") == "billing-agent"
    finally:
        store.close()


def connection_parameters(store: PostgresStore) -> dict[str, str]:
    with store._calls.pool.connection() as conn:
        return conn.info.get_parameters()


def test_every_wait_is_bounded_by_default(pg_url: str) -> None:
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        assert store.timeout == 10.0
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
            assert setting(store, name) == "10s", name
        libpq = connection_parameters(store)
        assert libpq["connect_timeout"] == "10"
        assert libpq["keepalives"] == "1"
        assert libpq["tcp_user_timeout"] == "10000"
    finally:
        store.close()


def test_the_timeout_is_taken_from_the_url_or_from_open(pg_url: str) -> None:
    with oncelog.open(f"{pg_url}&oncelog_timeout=2.5") as ledger:
        assert isinstance(ledger.store, PostgresStore)
        assert ledger.store.timeout == 2.5
        assert setting(ledger.store, "lock_timeout") == "2500ms"
        assert connection_parameters(ledger.store)["connect_timeout"] == "3"
    with oncelog.open(f"{pg_url}&oncelog_timeout=2.5", store_timeout=4) as ledger:
        assert isinstance(ledger.store, PostgresStore)
        assert ledger.store.timeout == 4.0
        assert setting(ledger.store, "statement_timeout") == "4s"


def test_settings_the_url_names_are_kept(pg_url: str) -> None:
    store = open_store(f"{pg_url}&keepalives_idle=77&connect_timeout=9", timeout=3)
    assert isinstance(store, PostgresStore)
    try:
        libpq = connection_parameters(store)
        assert (libpq["keepalives_idle"], libpq["connect_timeout"]) == ("77", "9")
        assert libpq["tcp_user_timeout"] == "3000"
    finally:
        store.close()


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(pg_url: str, value: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match="timeout"):
        open_store(f"{pg_url}&oncelog_timeout={value}")
    with pytest.raises(oncelog.ConfigurationError, match="timeout"):
        open_store(pg_url, timeout=float(value) if value != "soon" else 0)


def test_a_lock_held_elsewhere_ends_the_call_within_the_timeout(pg_url: str) -> None:
    """Another session holds the run's row (as a process stopped inside its transaction
    would): the next write gives up after the store timeout with ``StoreUnavailable``,
    having recorded nothing, and the run goes on once the lock is released."""
    with oncelog.open(pg_url, store_timeout=2) as ledger:

        @ledger.tool(kind="upsert")
        def put(n: int, *, idempotency_key: str) -> int:
            return n

        with psycopg.connect(pg_url) as blocker, ledger.run("r") as run:
            run.effect("first", put, 1)
            blocker.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
            began = time.monotonic()
            # The server (statement or lock timeout) or the client deadline, whichever first.
            with pytest.raises(oncelog.StoreUnavailable, match="timeout"):
                run.effect("second", put, 2)
            # Only a deadline that never fires goes past this (the blocker holds the row
            # for ever); how soon it fires is a timing, not a test's business.
            assert time.monotonic() - began < 2 + 60.0
            blocker.rollback()
        assert [s.step_id for s in ledger.steps("r")] == ["first"]
        with ledger.run("r") as run:
            assert (run.effect("first", put, 1), run.effect("second", put, 2)) == (1, 2)


def test_a_call_cut_at_its_deadline_leaves_the_calls_beside_it_alone(pg_url: str) -> None:
    """Deadlines are per call: while one thread waits for a lock until its timeout (and
    its connection is cut), reads on the other connections go on and succeed."""
    with oncelog.open(pg_url, store_timeout=2) as ledger:
        with ledger.run("r") as run:
            run.read("x", lambda: 1)
        failures: list[Exception] = []
        with psycopg.connect(pg_url) as blocker:
            blocker.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")

            def blocked() -> None:
                try:
                    ledger.set_budget("r", oncelog.Budget(steps=5), by="ops")
                except oncelog.OnceLogError as exc:
                    failures.append(exc)

            waiter = threading.Thread(target=blocked)
            waiter.start()
            reads = 0
            while waiter.is_alive():
                assert ledger.get_run("r").run_id == "r"
                reads += 1
            blocker.rollback()
        assert reads > 0
        assert [type(f) for f in failures] == [oncelog.StoreUnavailable]


def test_a_session_stopped_inside_a_transaction_frees_its_locks_after_the_timeout(
    pg_url: str,
) -> None:
    """A process stopped (SIGSTOP, a paused VM) inside a transaction holds its run's row
    and sends nothing more: the server ends that session after the store timeout, and a
    writer waiting for the row goes on instead of failing."""
    with (
        oncelog.open(pg_url, store_timeout=1) as stopped,
        oncelog.open(pg_url, store_timeout=8) as other,
    ):
        with other.run("r") as run:
            run.read("x", lambda: 1)
        assert isinstance(stopped.store, PostgresStore)
        pool = stopped.store._calls.pool
        conn = pool.getconn()
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
            # Done within other's own 8 s store timeout, or it raises StoreUnavailable: the
            # server ended the stopped session, as nothing else would free the row.
            other.set_budget("r", oncelog.Budget(steps=5), by="ops")
        finally:
            pool.putconn(conn)
        assert other.budget_usage("r")[0] == oncelog.Budget(steps=5)


@pytest.mark.parametrize("budgeted", [False, True], ids=["function", "transaction"])
def test_no_step_is_written_for_a_run_that_is_not_there_without_a_foreign_key(
    pg_url: str, budgeted: bool
) -> None:
    """Every writer of a step locks its run's row first and is refused without it
    (``LeaseLost``), the intent's function as the store's transaction; so the foreign key
    from a step to its run, which checked the row again at every intent, is gone."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        lease = Lease("nowhere", "me", 1, 30.0, budgeted=budgeted)
        step = NewStep(1, "s", StepType.EFFECT, "t", "create", "k", "h", "[]")
        with pytest.raises(oncelog.LeaseLost):
            store.write_intent(lease, step, None)
        schema = pg_url.rsplit("%3D", 1)[1]
        keys = execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'f' AND conrelid = %s::regclass",
            (f"{schema}.steps",),
        )
        assert keys == []
        assert execute(f"SELECT count(*) FROM {schema}.steps") == [(0,)]
    finally:
        store.close()


def test_the_functions_plan_generically_by_the_sessions_setting(pg_url: str) -> None:
    """Every connection plans generically; the transition functions carry no SET clause,
    which saved and restored the setting at each call."""
    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    try:
        assert setting(store, "plan_cache_mode") == "force_generic_plan"
        schema = pg_url.rsplit("%3D", 1)[1]
        configs = execute(
            "SELECT DISTINCT proname, proconfig FROM pg_proc WHERE pronamespace = "
            "%s::regnamespace AND proname IN ('oncelog_intent', 'oncelog_outcome', "
            "'oncelog_recorded') ORDER BY proname",
            (schema,),
        )
        assert configs == [
            ("oncelog_intent", None), ("oncelog_outcome", None), ("oncelog_recorded", None),
        ]  # fmt: skip
    finally:
        store.close()


@pytest.mark.parametrize("trigger", ["steps_count_insert", "steps_count_update"])
def test_the_budget_triggers_ask_the_setting_first_without_a_when(
    pg_url: str, trigger: str
) -> None:
    """A trigger's WHEN is parsed again at every statement that writes steps: the triggers
    that count a step have none, and their function asks first the setting by which a
    writer says there is nothing to count. The totals it keeps are held to the steps by
    ``test_budget_totals.py``."""
    oncelog.open(pg_url).close()
    schema = pg_url.rsplit("%3D", 1)[1]
    [(definition, source)] = execute(
        "SELECT pg_get_triggerdef(t.oid), p.prosrc FROM pg_trigger t "
        "JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgname = %s AND t.tgrelid = %s::regclass",
        (trigger, f"{schema}.steps"),
    )
    assert " WHEN " not in definition
    first = source.split("BEGIN", 1)[1].split("END IF;", 1)[0].split()
    assert first[:3] == ["IF", "current_setting('oncelog.uncounted',", "true)"], first


@oncelog.tool(kind="create", name="send")
def send(n: int, *, idempotency_key: str) -> int:
    return n


@pytest.mark.parametrize("hint", ["past the run's last record", "another run's record"])
def test_a_wrong_hint_for_the_chains_head_leaves_the_chain_whole(pg_url: str, hint: str) -> None:
    """Each call tells the server where to start looking for the run's chain head: the id
    of the journal record its previous call appended. From past the run's last record the
    server finds none, and the call takes the store's transaction, which reads the head
    itself; from another run's record it finds this run's last one all the same. Either
    way the chain verifies, and the next calls are told where to look again."""
    with oncelog.open(pg_url) as ledger:
        store = ledger.store
        assert isinstance(store, PostgresStore)
        with ledger.run("other") as other:
            other.effect("o-1", send, 0)
        schema = pg_url.rsplit("%3D", 1)[1]
        [(foreign,)] = execute(f"SELECT MAX(id) FROM {schema}.journal WHERE run_id = 'other'")
        with ledger.run("r") as run:
            run.effect("e-1", send, 1)
            [key] = [key for key in store._appended if key[0] == "r"]
            last = store._appended[key]
            assert last is not None
            store._appended[key] = last + 1000 if hint.startswith("past") else foreign
            assert run.effect("e-2", send, 2) == 2
            assert run.llm("m-1", lambda: "ok") == "ok"
            appended = store._appended[key]
            assert appended is not None
            assert appended > last
        assert ledger.verify().problems == []
