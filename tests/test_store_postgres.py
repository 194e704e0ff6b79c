"""The PostgreSQL store's settings, read back from the server itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import oncelog
from oncelog.stores import open_store
from oncelog.stores._postgres import PostgresStore

from .conftest import require
from .support.postgres import POSTGRES_REASON, execute, fresh_schema, postgres_is_up


@pytest.fixture
def pg_url() -> Iterator[str]:
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as url:
        yield url


def setting(store: PostgresStore, name: str) -> str:
    with store._calls.pool.connection() as conn:
        row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("durability", ["full", "process"])
def test_commits_wait_for_the_wal_flush_whatever_the_url_or_the_role_says(
    pg_url: str, durability: str
) -> None:
    store = open_store(f"{pg_url}%20-csynchronous_commit%3Doff", durability=durability)
    assert isinstance(store, PostgresStore)
    try:
        assert setting(store, "synchronous_commit") == "on"
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
