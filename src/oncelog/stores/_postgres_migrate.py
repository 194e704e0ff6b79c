"""Bring a PostgreSQL schema up to this oncelog's version, safely from many processes.

Every migration runs in one transaction that first takes a transaction-level advisory
lock: two processes opening a new database at once apply each version once, the second
finding it recorded. A schema newer than this oncelog knows is refused, as SQLite's is.
A run that applied any migration, or that finds the ledger's server functions other than
this oncelog's (by their digest, ``oncelog_functions_version()``), applies them last, in
the same transaction (``migrations/postgres/functions.sql``, its guards filled in from the
transition table by ``_sql_guards.functions``): whatever an older migration or an older
oncelog defined, the functions a ledger ends with are this file's.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .._exceptions import ConfigurationError, LedgerNotFound
from ._migrations import pending
from ._postgres_pool import MIGRATIONS_LOCK, POSTGRES
from ._sql import NOW
from ._sql_guards import functions, functions_version

log = logging.getLogger("oncelog")


def migrate(conn: psycopg.Connection[tuple[Any, ...]], where: str, *, create: bool) -> bool:
    """With ``create=False`` a schema that holds no ledger is refused before anything is
    written to it: a read-only command pointed at the wrong database creates nothing. A
    role without the rights it needs is told so (``ConfigurationError``), not to try
    again later: it never will be able to. True if it made a new ledger."""
    try:
        return _migrate(conn, where, create)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigurationError(
            f"{where}: this role may not open the ledger ({exc}); a role that only reads "
            "needs USAGE on its schema and SELECT on its tables"
        ) from None


def _migrate(conn: psycopg.Connection[tuple[Any, ...]], where: str, create: bool) -> bool:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", MIGRATIONS_LOCK)
        # The schema, and whether it holds a ledger, read from the catalogue in one
        # statement (information_schema's view costs a millisecond to plan).
        schema = conn.execute(
            "SELECT current_schema(), "
            "to_regclass(quote_ident(current_schema()) || '.schema_migrations') IS NOT NULL"
        ).fetchone()
        if schema is None or schema[0] is None:
            if not create:
                raise LedgerNotFound(f"no ledger at {where}: no schema of its search_path exists")
            raise ConfigurationError(
                f"{where}: no schema of the search_path exists; create it first "
                "(CREATE SCHEMA name) or name an existing one in options=-csearch_path=name"
            )
        if not schema[1]:
            if not create:
                raise LedgerNotFound(f"no ledger at {where} (schema {schema[0]}): it holds none")
            # Only where there is none: even with IF NOT EXISTS, CREATE needs the right to
            # create in the schema, which a role that only reads the ledger lacks.
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        current = (row[0] if row else None) or 0
        migrations = pending("postgres", current, f"{where} (schema {schema[0]})")
        for migration in migrations:
            # One execute for the whole file: psycopg sends a parameterless query as is,
            # and a function body's semicolons must not split it. A migration that changes
            # nothing here (a no-op kept for the other dialect) is refused at its record.
            try:
                conn.execute(migration.sql)
                conn.execute(
                    POSTGRES.translate(f"INSERT INTO schema_migrations VALUES (?, ?, {NOW})"),
                    (migration.version, migration.name),
                )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise _behind(where, migration.version, exc) from None
        if migrations:
            try:
                conn.execute(functions())
            except psycopg.errors.InsufficientPrivilege as exc:
                raise _behind(where, migrations[-1].version, exc) from None
        elif not _functions_current(conn):
            _refresh_functions(conn, where)
    return current == 0


def _refresh_functions(conn: psycopg.Connection[tuple[Any, ...]], where: str) -> None:
    """Apply this oncelog's server functions to a ledger whose schema is current, in a
    savepoint: a role that may not replace them (one that only reads the ledger never
    calls them) opens the ledger as before, and the next open by its owner brings them."""
    try:
        with conn.transaction():
            conn.execute(functions())
    except psycopg.errors.InsufficientPrivilege:
        log.warning(
            "%s: the ledger's server functions are an older oncelog's and this role may not "
            "replace them; open it once as the role that owns the schema",
            where,
        )


def _functions_current(conn: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """Whether the ledger's server functions are this oncelog's (their digest, which
    ``oncelog_functions_version()`` answers; a ledger from before it has none)."""
    # Its body read from the catalogue: a call would not parse where it does not exist.
    row = conn.execute(
        "SELECT prosrc FROM pg_proc WHERE proname = 'oncelog_functions_version' "
        "AND pronamespace = current_schema()::regnamespace"
    ).fetchone()
    return row is not None and f"'{functions_version()}'" in row[0]


def _behind(where: str, version: int, exc: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"{where}: the ledger's schema is older than this oncelog, and this role may not "
        f"bring it up to version {version} ({exc}); open it once as the role that owns "
        "the schema"
    )
