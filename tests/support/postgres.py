"""The PostgreSQL server the tests use: is it up, a fresh schema per test, and its
backends as the server sees them.

The server is ``$ONCELOG_TEST_POSTGRES`` (default: the CI machine's, trust auth as root).
Each test gets its own schema, named in the ledger URL with the libpq option
``options=-csearch_path=NAME``, and dropped afterwards, so tests never see each other's
runs and need no database of their own.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

ADMIN_URL = os.environ.get("ONCELOG_TEST_POSTGRES", "postgresql://root@127.0.0.1:5432/test")
POSTGRES_REASON = (
    "PostgreSQL on 127.0.0.1:5432 (user root, database test, trust auth) and psycopg "
    "(pip install -e '.[dev]'), or $ONCELOG_TEST_POSTGRES"
)


def _connect(url: str = ADMIN_URL) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


@functools.cache
def postgres_is_up() -> bool:
    try:
        with _connect() as conn:
            conn.execute("SELECT 1")
    except Exception:  # no driver, no server, no database: all mean "not here"
        return False
    return True


def schema_url(schema: str, url: str = ADMIN_URL, **params: str) -> str:
    """``url`` with the ledger in ``schema`` (and any other libpq parameters)."""
    options = {"options": f"-csearch_path={schema}", **params}
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in options.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def execute(sql: str, params: tuple[Any, ...] = (), *, admin: str = ADMIN_URL) -> list[Any]:
    """One statement as the administrator, outside any ledger; its rows, if any."""
    with _connect(admin) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@contextmanager
def fresh_schema(admin: str = ADMIN_URL) -> Iterator[str]:
    """A new, empty schema for one test (on the server ``admin`` names); yields its ledger
    URL and drops it afterwards."""
    schema = f"oncelog_test_{secrets.token_hex(6)}"
    execute(f"CREATE SCHEMA {schema}", admin=admin)
    try:
        yield schema_url(schema, admin)
    finally:
        execute(f"DROP SCHEMA {schema} CASCADE", admin=admin)
