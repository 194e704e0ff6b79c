"""The PostgreSQL server measured: connecting to it, a schema of one's own, its facts."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

DEFAULT_URL = os.environ.get("ONCELOG_BENCH_POSTGRES", "postgresql://root@127.0.0.1:5432/test")
NEEDS = "psycopg (pip install '.[postgres]') and a user who may create schemas"


def connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def schema_url(url: str, schema: str) -> str:
    """``url`` with the ledger's tables in ``schema`` (the libpq option ``search_path``)."""
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


def server_facts(url: str) -> dict[str, str]:
    """Version, data directory and commit settings; SystemExit naming what is needed when
    there is no server to measure."""
    names = ("server_version", "data_directory", "fsync", "synchronous_commit")
    try:
        with connect(url) as conn:
            return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in names}
    except Exception as exc:  # no driver, no server, no rights: all mean "cannot measure"
        raise SystemExit(
            f"PostgreSQL at {url} cannot be measured ({type(exc).__name__}: {exc}); it needs "
            f"{NEEDS}. Pass --postgres URL, or --stores sqlite."
        ) from exc
