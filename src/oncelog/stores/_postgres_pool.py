"""Connections to PostgreSQL: one pool per store, every transaction's errors turned into
the store's, and a commit that may or may not have happened said to be unknown.

Connection settings, and why:
- ``synchronous_commit = on``, set on every pooled connection: a commit returns only once
  its WAL is flushed to disk, so a committed intent survives a server crash (and, with
  storage that honours flushes, a power loss). A role or database default of ``off`` is
  overridden here rather than trusted.
- ``application_name = oncelog`` (unless the URL names one): an operator, or a test, finds
  the ledger's backends in ``pg_stat_activity``.
- autocommit: every read is one statement in its own snapshot, as SQLite's reads are; every
  write runs inside an explicit transaction (``transaction`` below).
- ``check``: a pooled connection is tried before it is handed out, so one broken by a server
  restart is replaced instead of failing the next step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .._exceptions import ConfigurationError, StoreUnavailable
from ._sql import Dialect

APPLICATION_NAME = "oncelog"
POOL_SIZE = 4  # concurrent store calls of one process (async runs use worker threads)
WAIT = 10.0  # seconds a call waits for a connection before the store is unavailable

# Advisory lock keys (two 32-bit integers): "once" and a lock number; "onjl" for journals.
_ONCELOG = 0x6F6E6365
MIGRATIONS_LOCK = (_ONCELOG, 1)
_HALTS = f"{_ONCELOG}, 2"
_JOURNAL = 0x6F6E6A6C
# What processes waiting for a person LISTEN on; a decision's transaction NOTIFYs it.
DECISIONS_CHANNEL = "oncelog_decisions"
# The server's clock, in Unix seconds. clock_timestamp() rather than now(): a transaction
# that waited for a lock judges lease expiry at the instant it got it, not when it began.
_CLOCK = "date_part('epoch', clock_timestamp())"
POSTGRES = Dialect(
    name="postgres",
    now=_CLOCK,
    today=f"(floor({_CLOCK} / 86400) * 86400)",
    placeholder="%s",
    for_update=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    json_prefix="::jsonb",
    unique_violation=(psycopg.errors.UniqueViolation,),
    halts_lock=(
        f"SELECT pg_advisory_xact_lock({_HALTS})",
        f"SELECT pg_advisory_xact_lock_shared({_HALTS})",
    ),
    journal_lock=f"SELECT pg_advisory_xact_lock({_JOURNAL}, hashtext(%s))",
    notify_decision=f"SELECT pg_notify('{DECISIONS_CHANNEL}', %s)",
)

Cursor = psycopg.Cursor[tuple[Any, ...]]
Pool = ConnectionPool[psycopg.Connection[tuple[Any, ...]]]


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"not a PostgreSQL URL: {exc}") from exc
    host, db = params.get("host", "localhost"), params.get("dbname", "")
    return f"postgresql://{params.get('user', '')}@{host}:{params.get('port', 5432)}/{db}"


def _configure(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    conn.execute("SET synchronous_commit = on")


def _options(url: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"autocommit": True}
    if "application_name" not in conninfo_to_dict(url):
        extra["application_name"] = APPLICATION_NAME
    return extra


def connect(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    """One connection, made at once: a wrong host, database or password is reported now
    with the server's own words, not after a pool gave up waiting."""
    try:
        conn = psycopg.connect(url, **_options(url))
        _configure(conn)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to the ledger at {describe(url)}: {exc}") from exc
    return conn


def open_pool(url: str) -> Pool:
    """A pool of autocommit connections to ``url``, filled in the background."""
    return ConnectionPool(
        url, kwargs=_options(url), min_size=1, max_size=POOL_SIZE, open=True, timeout=WAIT,
        configure=_configure, check=ConnectionPool.check_connection, num_workers=1,
        name=f"oncelog {describe(url)}",
    )  # fmt: skip


def store_error(exc: psycopg.Error, where: str, *, committing: bool = False) -> Exception:
    if isinstance(exc, psycopg.DataError):
        return ConfigurationError(f"PostgreSQL refused a value: {exc}")
    if committing:
        # The connection broke after COMMIT was sent: the transaction may be durable or
        # not. Nothing may retry it blindly; a restarted run reads back what is there.
        return StoreUnavailable(
            f"the ledger at {where} failed during a commit whose outcome is unknown: {exc}"
        )
    return StoreUnavailable(f"the ledger at {where} cannot be used: {exc}")


@contextmanager
def transaction(pool: Pool, where: str) -> Iterator[Cursor]:
    """One write transaction; anything that goes wrong rolls it back whole."""
    committing = False
    try:
        with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur
            committing = True
    except psycopg.Error as exc:
        raise store_error(exc, where, committing=committing) from exc


@contextmanager
def reading(pool: Pool, where: str) -> Iterator[Cursor]:
    """Reads outside a transaction, each statement in its own snapshot."""
    try:
        with pool.connection() as conn, conn.cursor() as cur:
            yield cur
    except psycopg.Error as exc:
        raise store_error(exc, where) from exc
