"""Stores hold the ledger. Open one from a URL with ``open_store``."""

from __future__ import annotations

import os
from typing import Any

from .._exceptions import ConfigurationError
from .._extras import install_line
from ._protocol import Intent, Lease, NewStep, Outcome, Store

# The columns of the rows ``Store.table_rows`` hands out, table by table, and the reader
# of an approval's row: part of the contract, as ``verify`` reads the rows by them.
from ._rows import HALT_COLUMNS, STEP_COLUMNS, approval_record
from ._sql_evidence import STATE_TABLES
from ._sqlite import SQLiteStore

__all__ = [
    "DEFAULT_PATH",
    "HALT_COLUMNS",
    "STATE_TABLES",
    "STEP_COLUMNS",
    "Intent",
    "Lease",
    "NewStep",
    "Outcome",
    "SQLiteStore",
    "Store",
    "approval_record",
    "open_store",
]

# A string, not a pathlib.Path: pathlib (and the urllib.parse it imports) is not needed to
# open a ledger.
DEFAULT_PATH = os.path.join(".oncelog", "ledger.db")


def open_store(
    url: str | None,
    *,
    durability: str = "intent",
    create: bool = True,
    timeout: float | None = None,
) -> Store:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db``, a plain path,
    ``postgresql://user@host/db`` (``postgres://`` too; add ``?options=-csearch_path=NAME``
    for a schema of its own), or None for ``$ONCELOG_URL`` and then ``./.oncelog/ledger.db``.
    With ``create=False`` only an existing ledger is opened (else ``LedgerNotFound``), and
    nothing is created: no folder, no file, no table. ``timeout`` bounds each store call,
    in seconds: SQLite's busy timeout, PostgreSQL's deadline (default: the URL's
    ``oncelog_timeout``, else 10)."""
    url = url or os.environ.get("ONCELOG_URL") or DEFAULT_PATH
    sqlite_options: dict[str, Any] = {"durability": durability, "create": create}
    if timeout is not None:
        from ._postgres_settings import checked_timeout

        sqlite_options["busy_timeout"] = checked_timeout(timeout)
    if ":" not in url:  # a path: nothing to parse (urllib.parse is not imported for it)
        return SQLiteStore(url, **sqlite_options)
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.scheme in ("postgresql", "postgres"):
        return _postgres_store(url, durability, create, timeout)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path[1:] if parsed.path.startswith("/") else parsed.path)
        if not path:
            raise ConfigurationError(f"{url!r} names no file; e.g. sqlite:///agents.db")
        return SQLiteStore(path, **sqlite_options)
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ConfigurationError(f"unsupported ledger URL scheme {parsed.scheme!r} in {url!r}")
    return SQLiteStore(url, **sqlite_options)


def _postgres_store(url: str, durability: str, create: bool, timeout: float | None) -> Store:
    """psycopg is an optional extra, imported only when a PostgreSQL URL is opened."""
    try:
        from ._postgres import PostgresStore
    except ImportError as exc:
        raise ConfigurationError(
            f"a PostgreSQL ledger needs psycopg: {install_line('postgres')} ({exc})"
        ) from exc
    return PostgresStore(url, durability=durability, create=create, timeout=timeout)
