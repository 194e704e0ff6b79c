"""Connections to PostgreSQL: one pool per store, every call under a deadline, every
transaction's errors turned into the store's, and a commit that may or may not have
happened said to be unknown.

Connection settings, and why (the timeouts are explained in ``_postgres_settings``):
- ``synchronous_commit``, set on every pooled connection: ``on`` (``off`` only with
  durability ``process``), so a commit returns only once its WAL is flushed to disk and a
  committed intent survives a server crash (and, with storage that honours flushes, a
  power loss). A role or database default is overridden here rather than trusted. A
  transaction that may ride on the next flush turns it off for itself alone.
- the server's life (``oncelog_server_life``, migration 18) read by every pooled
  connection when it is opened: a crash of the server begins a new one, and a caller that
  made commits not flushed yet writes nothing more on a connection of another life. The
  function runs as its owner (migration 19), so a role that may only read connects too.
- ``application_name = oncelog`` (unless the URL names one): an operator, or a test, finds
  the ledger's backends in ``pg_stat_activity``.
- autocommit: every read is one statement in its own snapshot, as SQLite's reads are; a
  write runs inside an explicit transaction (``transaction`` below), or is one call of a
  server-side function, its own transaction (``call``: an intent, an outcome).
- no round trip to check a pooled connection before it is handed out: a connection the
  server closed (a restart, a terminated backend) has something to read while idle, which
  costs one ``poll`` to see; such a connection is replaced. One that breaks at its BEGIN,
  before anything was written, is replaced and the BEGIN tried once more.
- a call's deadline covers all of it, from waiting for a connection to the COMMIT.
- one cursor per connection for the calls and reads, kept (``PooledConnection``).
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .._exceptions import ConfigurationError, StoreUnavailable
from ._postgres_deadline import WATCHDOG, Guard
from ._postgres_settings import APPLICATION_NAME, connect_options, session_settings
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


class PooledConnection(psycopg.Connection[tuple[Any, ...]]):
    """A pooled connection that keeps one cursor for its calls and reads (``Calls.call``,
    ``Calls.reading``): a new cursor per call looked up every parameter's dumper again,
    about a tenth of the worker's instructions per effect. ``life``: the server's life it
    was opened in."""

    kept_cursor: Cursor | None = None
    life = ""
    _poller: select.poll | None = None

    def reused_cursor(self) -> Cursor:
        if self.kept_cursor is None:
            self.kept_cursor = self.cursor()
        return self.kept_cursor

    def poller(self) -> select.poll:
        """A poller of its socket, which stays the same for the connection's life."""
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.fileno(), select.POLLIN)
        return self._poller


Pool = ConnectionPool[PooledConnection]
# A transaction whose commit may ride on the next flush: the setting lasts until its end.
_UNFLUSHED = "BEGIN; SET LOCAL synchronous_commit = off"
# What an error the server raised in a call means to the store, if anything.
Refusal = Callable[[psycopg.Error], Exception | None]


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


def _options(url: str, timeout: float, name: str = APPLICATION_NAME) -> dict[str, Any]:
    """Every connection's keyword arguments: its settings, and NUL-escaping adapters;
    ``name``: its ``application_name`` unless the URL gives one."""
    return {**connect_options(_params(url), timeout, name), "context": ADAPTERS}


def _configure(conn: Connection, *, timeout: float) -> None:
    with WATCHDOG.guard(conn, time.monotonic() + timeout):
        conn.execute(session_settings(timeout))


def _configure_pooled(conn: PooledConnection, *, timeout: float, flushed: bool) -> None:
    """A pooled connection's settings, and the server's life, in one round trip."""
    with WATCHDOG.guard(conn, time.monotonic() + timeout):
        cur = conn.execute(
            f"SELECT oncelog_server_life(); {session_settings(timeout, flushed=flushed)}"
        )
        row = cur.fetchone()
    assert row is not None, "the server's life has one row"
    conn.life = str(row[0])


def _closed_by_server(conn: PooledConnection) -> bool:
    """Whether an idle connection was closed or broken: the server's farewell (or the end
    of the stream) waits to be read on it. Nothing else arrives on an idle connection of
    the store (none of them LISTENs); a rare notice only costs a new connection."""
    return conn.closed or conn.broken or bool(conn.poller().poll(0))


def _gone(conn: Connection, exc: psycopg.Error) -> bool:
    """Whether ``exc`` says the connection is lost: broken, or its backend ending (an
    operator's intervention, SQLSTATE class 57, sent as the answer to whatever came next)."""
    return conn.broken or (exc.sqlstate or "").startswith("57")


def connect(url: str, timeout: float, name: str = APPLICATION_NAME) -> Connection:
    """One connection, made at once: a wrong host, database or password is reported now
    with the server's own words, not after a pool gave up waiting."""
    try:
        conn = psycopg.connect(url, **_options(url, timeout, name))
        _configure(conn, timeout=timeout)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to the ledger at {describe(url)}: {exc}") from exc
    return conn


def open_pool(url: str, timeout: float, *, flushed: bool) -> Pool:
    """A pool of autocommit connections to ``url``, filled in the background; ``flushed``:
    their commits wait for the WAL flush unless a transaction says otherwise."""
    configure = partial(_configure_pooled, timeout=timeout, flushed=flushed)
    return ConnectionPool(
        url, connection_class=PooledConnection, kwargs=_options(url, timeout), min_size=1,
        max_size=POOL_SIZE, open=True, timeout=timeout, configure=configure,
        num_workers=1, name=f"oncelog {describe(url)}",
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

    def __init__(self, url: str, timeout: float, *, flushed: bool = True) -> None:
        self.where = describe(url)
        self.timeout = timeout
        self.pool = open_pool(url, timeout, flushed=flushed)

    def _connection(self, deadline: float, life: str | None) -> PooledConnection:
        """A pooled connection the server has not closed, got within ``deadline``; of the
        server's ``life``, if the caller names one."""
        while True:
            conn = self.pool.getconn(max(0.0, deadline - time.monotonic()))
            if not _closed_by_server(conn):
                break
            conn.close()
            self.pool.putconn(conn)  # a closed connection is replaced in the background
        if life is not None and conn.life != life:
            self.pool.putconn(conn)
            raise StoreUnavailable(
                f"the ledger at {self.where} was restarted after a crash (or failed over) "
                "since this run committed what was not flushed yet; that may be lost, so "
                "this process writes the run no further: the next one reads back what "
                "is durable"
            )
        return conn

    @contextmanager
    def _call(
        self, guards: list[Guard], deadline: float | None = None, life: str | None = None
    ) -> Iterator[PooledConnection]:
        """A connection for one call; the call's deadline covers waiting for it."""
        deadline = time.monotonic() + self.timeout if deadline is None else deadline
        conn = self._connection(deadline, life)
        try:
            with WATCHDOG.guard(conn, deadline) as guard:
                guards.append(guard)
                yield conn
        finally:
            self.pool.putconn(conn)

    @staticmethod
    def _began(conn: Connection, guard: Guard, retry: bool, flushed: bool) -> bool:
        """BEGIN; False if the connection broke before the transaction started (nothing
        was written on it) and another may be tried."""
        try:
            conn.execute("BEGIN" if flushed else _UNFLUSHED)
            return True
        except psycopg.OperationalError as exc:
            if retry and _gone(conn, exc) and not guard.cut:
                return False
            raise

    def _error(self, exc: psycopg.Error, guards: list[Guard], committing: bool) -> Exception:
        cut = any(guard.cut for guard in guards)
        return store_error(
            exc, self.where, committing=committing, cut_after=self.timeout if cut else None
        )

    @contextmanager
    def transaction(
        self, *, flushed: bool = True, life: str | None = None
    ) -> Iterator[tuple[Cursor, str]]:
        """One write transaction, and the server's life it is written in; anything that
        goes wrong rolls it back whole. Not ``flushed``: its commit does not wait for the
        WAL flush. ``life``: the one it must be written in. A BEGIN that meets a broken
        connection is tried once more on another, within the same deadline."""
        committing, guards = False, list[Guard]()
        deadline = time.monotonic() + self.timeout
        try:
            for retry in (True, False):
                with self._call(guards, deadline, life) as conn:
                    if not self._began(conn, guards[-1], retry, flushed):
                        continue  # the broken connection goes back, to be replaced
                    try:
                        with conn.cursor() as cur:
                            yield cur, conn.life
                    except BaseException:
                        if not conn.broken:
                            conn.rollback()
                        raise
                    committing = True
                    conn.commit()
                    return
        except psycopg.Error as exc:
            raise self._error(exc, guards, committing) from exc

    def call(
        self, sql: str, params: tuple[Any, ...], refused: Refusal, life: str | None = None
    ) -> tuple[str, int | None]:
        """One statement in autocommit, its own transaction: a server-side function that
        writes, in the server's ``life`` if one is named; the life it was written in and
        the integer the function returned, if any. An error the server raised is the
        store's (``refused``) or unavailability; a connection that breaks during the call
        leaves its commit unknown."""
        # Written out, without _call's context managers: the call an effect makes twice.
        deadline = time.monotonic() + self.timeout
        try:
            conn = self._connection(deadline, life)
        except psycopg.Error as exc:
            raise self._error(exc, [], False) from exc
        guard = WATCHDOG.watch(conn, deadline)
        try:
            cursor = conn.reused_cursor()
            cursor.execute(sql, params, prepare=True)
            # Read from the result as sent (text) rather than through fetchone's loaders;
            # a function that returns void sends an empty text.
            value = cursor.pgresult.get_value(0, 0) if cursor.pgresult else None
            return conn.life, int(value) if value else None
        except psycopg.Error as exc:
            if _gone(conn, exc):
                raise self._error(exc, [guard], True) from exc
            raise refused(exc) or self._error(exc, [guard], False) from exc
        finally:
            WATCHDOG.release(guard)
            self.pool.putconn(conn)

    @contextmanager
    def reading(self) -> Iterator[Cursor]:
        """Reads outside a transaction, each statement in its own snapshot."""
        guards = list[Guard]()
        try:
            with self._call(guards) as conn:
                yield conn.reused_cursor()
        except psycopg.Error as exc:
            raise self._error(exc, guards, False) from exc

    def close(self) -> None:
        self.pool.close()
