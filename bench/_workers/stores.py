"""The two stores measured. Each gives a fresh, empty ledger per measurement (a new SQLite
file in the benchmark's folder, or a new schema in the PostgreSQL database, dropped
afterwards) and measures its own floor."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import postgres
from .cpu import cluster_cpu
from .floor import postgres_floor, sqlite_floor


@dataclass(frozen=True)
class Store:
    name: str
    # fresh(label): a context yielding the URL of an empty ledger, removed afterwards.
    fresh: Callable[[str], AbstractContextManager[str]]
    # floor(url, commits): nanoseconds of each single-row durable commit on that URL.
    floor: Callable[[str, int], list[int]]
    # The CPU seconds its server (its own cluster) has used so far, when it runs here.
    server_cpu: Callable[[], float] | None = None


def sqlite_store(folder: Path) -> Store:
    @contextmanager
    def fresh(label: str) -> Iterator[str]:
        path = folder / f"{label}.db"
        try:
            yield str(path)
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    return Store("SQLite", fresh, sqlite_floor)


def postgres_store(url: str, local: bool) -> Store:
    @contextmanager
    def fresh(label: str) -> Iterator[str]:
        schema = f"oncelog_bench_{label.replace('-', '_')}_{secrets.token_hex(4)}"
        with postgres.connect(url) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield postgres.schema_url(url, schema)
        finally:
            with postgres.connect(url) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")

    return Store("PostgreSQL", fresh, postgres_floor, cluster_cpu(url) if local else None)
