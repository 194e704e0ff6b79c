"""A role that may only read a PostgreSQL ledger (a dashboard, ``oncelog verify`` or
``show``, an auditor) opens it and reads everything, writes nothing, and reads the same
server life as the writers (migration 19)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import oncelog
from oncelog.console import _queries as queries
from oncelog.stores._migrations import migrations
from oncelog.stores._postgres import PostgresStore

from .conftest import require
from .support.launch import PYTHON
from .support.postgres import (
    POSTGRES_REASON,
    execute,
    fresh_schema,
    postgres_is_up,
    schema_url,
)


def _as(role: str, url: str) -> str:
    """``url`` with ``role`` as its user, over the same host (trust auth on the CI's)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.fixture
def ledger_and_reader() -> Iterator[tuple[str, str, str]]:
    """(the ledger's URL, a read-only role's URL of it, its schema), with one run done."""
    require(postgres_is_up(), POSTGRES_REASON)
    role = f"oncelog_reader_{secrets.token_hex(4)}"
    with fresh_schema() as url:
        with oncelog.open(url) as ledger:

            @ledger.tool(kind="create", name="send")
            def send(to: str, *, idempotency_key: str) -> str:
                return to

            with ledger.run("r1", plan=["send"]) as run:
                run.effect("send", send, "a@example.com")
        schema = execute("SELECT current_schema()", admin=url)[0][0]
        execute(f"CREATE ROLE {role} LOGIN")
        try:
            execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
            yield url, _as(role, url), schema
        finally:
            execute(f"DROP OWNED BY {role}")
            execute(f"DROP ROLE {role}")


def _read_everything(url: str) -> None:
    with oncelog.open(url, create=False) as ledger:
        assert [r.run_id for r in ledger.runs()] == ["r1"]
        assert [s.step_id for s in ledger.steps("r1")] == ["send"]
        assert ledger.what_next("r1")
        assert ledger.in_doubt() == []
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.records > 0
        # The console's pages read through these alone.
        for page in (queries.overview, queries.approvals, queries.doubts, queries.halts):
            assert page(ledger)
        assert queries.timeline(ledger, "r1")["steps"]
        assert queries.budgets(ledger)


def test_a_read_only_role_reads_everything(ledger_and_reader: tuple[str, str, str]) -> None:
    _, reader, _ = ledger_and_reader
    _read_everything(reader)
    for command in (["verify"], ["show", "r1"], ["runs"]):
        done = subprocess.run(
            [PYTHON, "-m", "oncelog", *command, "--db", reader],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stdout, done.stderr)


def test_a_read_only_role_reads_after_a_crash_emptied_the_life_and_writers_agree(
    ledger_and_reader: tuple[str, str, str],
) -> None:
    """Crash recovery empties the unlogged table; the first connection of the new life,
    here the reader's, writes its id through the function, and a writer's connections
    are of that same life: the write path's check reads what the reader wrote."""
    url, reader, _ = ledger_and_reader
    execute("DELETE FROM server_life", admin=url)
    _read_everything(reader)
    [(life,)] = execute("SELECT id FROM server_life", admin=url)
    store = oncelog.open(url).store
    try:
        assert isinstance(store, PostgresStore)
        with store._calls.pool.connection() as conn:
            assert conn.life == life
    finally:
        store.close()


def test_a_read_only_role_writes_nothing(ledger_and_reader: tuple[str, str, str]) -> None:
    url, reader, _ = ledger_and_reader
    before = execute("SELECT count(*) FROM journal", admin=url)
    refused = pytest.raises(oncelog.StoreUnavailable, match="permission denied")
    with oncelog.open(reader, create=False) as ledger, refused:
        ledger.halt("no", by="reader")
    with psycopg.connect(reader, autocommit=True) as conn:
        for statement in ("UPDATE server_life SET id = 'forged'", "DELETE FROM server_life"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert execute("SELECT count(*) FROM journal", admin=url) == before


def test_the_life_is_read_from_the_ledgers_schema_whatever_the_callers_search_path(
    ledger_and_reader: tuple[str, str, str],
) -> None:
    """The function runs as its owner: a table of the caller's named like the ledger's
    must not stand in for it, nor be written through it."""
    url, reader, schema = ledger_and_reader
    [(life,)] = execute("SELECT id FROM server_life", admin=url)
    role = urlsplit(reader).netloc.partition("@")[0]
    decoy = f"{schema}_decoy"
    execute(f"CREATE SCHEMA {decoy} AUTHORIZATION {role}")
    try:
        with psycopg.connect(schema_url(f"{decoy},{schema}", reader), autocommit=True) as conn:
            conn.execute("CREATE TABLE server_life (one BOOLEAN PRIMARY KEY, id TEXT)")
            row = conn.execute(f"SELECT {schema}.oncelog_server_life()").fetchone()
            assert row == (life,)
            assert conn.execute("SELECT count(*) FROM server_life").fetchone() == (0,)
    finally:
        execute(f"DROP SCHEMA {decoy} CASCADE")


def test_a_read_only_role_is_told_why_an_older_schema_cannot_be_opened(
    ledger_and_reader: tuple[str, str, str],
) -> None:
    url, reader, _ = ledger_and_reader
    last = migrations("postgres")[-1].version
    execute(f"DELETE FROM schema_migrations WHERE version = {last}", admin=url)
    with pytest.raises(oncelog.ConfigurationError, match=f"up to version {last}"):
        oncelog.open(reader, create=False)
    with oncelog.open(url, create=False):  # the owner brings it up to date, again
        pass
    _read_everything(reader)


def test_a_role_that_may_not_read_the_ledger_is_told_so(
    ledger_and_reader: tuple[str, str, str],
) -> None:
    _, reader, schema = ledger_and_reader
    role = urlsplit(reader).netloc.partition("@")[0]
    execute(f"REVOKE SELECT ON ALL TABLES IN SCHEMA {schema} FROM {role}")
    with pytest.raises(oncelog.ConfigurationError, match="needs USAGE on its schema and SELECT"):
        oncelog.open(reader, create=False)


def test_the_migration_leaves_the_function_as_it_says_when_run_again(
    ledger_and_reader: tuple[str, str, str],
) -> None:
    url, _, schema = ledger_and_reader
    [migration] = [m for m in migrations("postgres") if m.name == "0019_readonly_life.sql"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(migration.sql)  # without parameters, as migrations are applied
    [(definer, config)] = execute(
        "SELECT prosecdef, proconfig FROM pg_proc "
        "WHERE proname = 'oncelog_server_life' AND pronamespace = %s::regnamespace",
        (schema,),
        admin=url,
    )
    assert definer
    assert config == [f"search_path={schema}, pg_temp"]
