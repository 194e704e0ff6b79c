"""Connections to PostgreSQL: one pool per store, every call under a deadline, every
transaction's errors turned into the store's, and a commit that may or may not have
happened said to be unknown.

Connection settings, and why (the timeouts are explained in ``_postgres_settings``):
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
- a call's deadline covers all of it, from waiting for a connection to the COMMIT.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .._exceptions import ConfigurationError, StoreUnavailable
from ._postgres_deadline import WATCHDOG, Guard
from ._postgres_settings import DEFAULT_TIMEOUT, connect_options, session_settings
from ._postgres_text import ADAPTERS, json_field
from ._sql import Dialect

POOL_SIZE = 4  # concurrent store calls of one process (async runs use worker threads)

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
    json_field=json_field,
    unique_violation=(psycopg.errors.UniqueViolation,),
    halts_lock=(
        f"SELECT pg_advisory_xact_lock({_HALTS})",
        f"SELECT pg_advisory_xact_lock_shared({_HALTS})",
    ),
    journal_lock=f"SELECT pg_advisory_xact_lock({_JOURNAL}, hashtext(%s))",
    notify_decision=f"SELECT pg_notify('{DECISIONS_CHANNEL}', %s)",
)

Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]
Pool = ConnectionPool[Connection]
# The deadline of the store call running in this thread: the pool's check of a connection
# (run inside ``getconn``) is bounded by it too.
_DEADLINE: ContextVar[float | None] = ContextVar("oncelog_postgres_deadline", default=None)


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    params = _params(url)
    host, db = params.get("host", "localhost"), params.get("dbname", "")
    return f"postgresql://{params.get('user', '')}@{host}:{params.get('port', 5432)}/{db}"


def _params(url: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"not a PostgreSQL URL: {exc}") from exc


def _options(url: str, timeout: float) -> dict[str, Any]:
    """Every connection's keyword arguments: its settings, and NUL-escaping adapters."""
    return {**connect_options(_params(url), timeout), "context": ADAPTERS}


def _configure(conn: Connection, *, timeout: float) -> None:
    with WATCHDOG.guard(conn, time.monotonic() + timeout):
        conn.execute(session_settings(timeout))


def _check(conn: Connection) -> None:
    deadline = _DEADLINE.get() or time.monotonic() + DEFAULT_TIMEOUT
    with WATCHDOG.guard(conn, deadline):
        ConnectionPool.check_connection(conn)


def connect(url: str, timeout: float) -> Connection:
    """One connection, made at once: a wrong host, database or password is reported now
    with the server's own words, not after a pool gave up waiting."""
    try:
        conn = psycopg.connect(url, **_options(url, timeout))
        _configure(conn, timeout=timeout)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to the ledger at {describe(url)}: {exc}") from exc
    return conn


def open_pool(url: str, timeout: float) -> Pool:
    """A pool of autocommit connections to ``url``, filled in the background."""
    return ConnectionPool(
        url, kwargs=_options(url, timeout), min_size=1, max_size=POOL_SIZE,
        open=True, timeout=timeout, configure=partial(_configure, timeout=timeout),
        check=_check, num_workers=1, name=f"oncelog {describe(url)}",
    )  # fmt: skip


def store_error(
    exc: psycopg.Error, where: str, *, committing: bool = False, cut_after: float | None = None
) -> Exception:
    if isinstance(exc, psycopg.DataError):
        return ConfigurationError(f"PostgreSQL refused a value: {exc}")
    if cut_after is not None:
        # The watchdog closed the connection: psycopg's words would blame the server.
        exc = psycopg.OperationalError(
            f"no answer within the store timeout of {cut_after:g} s (the server is stopped, "
            "out of reach or overloaded, or a lock is held elsewhere); the call was abandoned"
        )
    if committing:
        # The connection broke after COMMIT was sent: the transaction may be durable or
        # not. Nothing may retry it blindly; a restarted run reads back what is there.
        return StoreUnavailable(
            f"the ledger at {where} failed during a commit whose outcome is unknown: {exc}"
        )
    return StoreUnavailable(f"the ledger at {where} cannot be used: {exc}")


class Calls:
    """The store's way to its server: a pool, and how long one call may take."""

    def __init__(self, url: str, timeout: float) -> None:
        self.where = describe(url)
        self.timeout = timeout
        self.pool = open_pool(url, timeout)

    @contextmanager
    def _call(self, guards: list[Guard]) -> Iterator[Connection]:
        """A connection for one call; the call's deadline covers waiting for it."""
        deadline = time.monotonic() + self.timeout
        token = _DEADLINE.set(deadline)
        try:
            with self.pool.connection(self.timeout) as conn, WATCHDOG.guard(conn, deadline) as g:
                guards.append(g)
                yield conn
        finally:
            _DEADLINE.reset(token)

    def _error(self, exc: psycopg.Error, guards: list[Guard], committing: bool) -> Exception:
        cut = any(guard.cut for guard in guards)
        return store_error(
            exc, self.where, committing=committing, cut_after=self.timeout if cut else None
        )

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One write transaction; anything that goes wrong rolls it back whole."""
        committing, guards = False, list[Guard]()
        try:
            with self._call(guards) as conn, conn.transaction(), conn.cursor() as cur:
                yield cur
                committing = True
        except psycopg.Error as exc:
            raise self._error(exc, guards, committing) from exc

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """Reads outside a transaction, each statement in its own snapshot."""
        guards = list[Guard]()
        try:
            with self._call(guards) as conn, conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise self._error(exc, guards, False) from exc

    def close(self) -> None:
        self.pool.close()
