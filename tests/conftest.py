from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog

from .support.engine_workers import Processes
from .support.postgres import ADMIN_URL, POSTGRES_REASON, fresh_schema, postgres_is_up
from .support.provider_process import Provider, running_provider

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
STORES = ("sqlite", "postgres")


def require(condition: bool, reason: str) -> None:
    """Skip on a laptop that lacks a tool; under CI a missing tool is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required under CI=true: {reason}")
    pytest.skip(reason)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of a ledger URL runs on each store, except a test that also reads the
    SQLite file itself (it asks for ``db_path``): that one stays on SQLite."""
    if "store_kind" in metafunc.fixturenames:
        sqlite_only = "db_path" in metafunc.fixturenames
        metafunc.parametrize("store_kind", STORES[:1] if sqlite_only else STORES)


@pytest.fixture(autouse=True)
def sigterm_restored() -> Iterator[None]:
    """A test that calls ``run_main`` installs its SIGTERM drain in the test process; the
    next test gets SIGTERM as it was."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "ledger.db")


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path) -> Iterator[str]:
    """A ledger URL: the SQLite file ``db_path`` names, or a fresh PostgreSQL schema."""
    if store_kind == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    require(postgres_is_up(), POSTGRES_REASON)
    with fresh_schema() as url:
        yield url


@pytest.fixture
def ledger(store_url: str) -> Iterator[oncelog.Ledger]:
    with oncelog.open(store_url) as opened:
        yield opened


@pytest.fixture
def pg_admin() -> str:
    """The PostgreSQL server ``pg_url`` makes its schema on: the shared one; a test file
    that runs a server of its own overrides this."""
    require(postgres_is_up(), POSTGRES_REASON)
    return ADMIN_URL


@pytest.fixture
def pg_url(pg_admin: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL schema's ledger URL, dropped afterwards."""
    with fresh_schema(pg_admin) as url:
        yield url


@pytest.fixture
def provider_mode() -> str:
    """How ``provider`` treats idempotency keys: it ignores them, so that each performance
    counts; a test file overrides this (or parametrizes it) to have them honoured."""
    return "ignores_keys"


@pytest.fixture
def provider(tmp_path: Path, provider_mode: str) -> Iterator[Provider]:
    """A provider in a process of its own, which keeps its own record of what it did: a
    test counts the effects really performed there, never from the ledger."""
    with running_provider(tmp_path / "provider", provider_mode) as running:
        yield running


@pytest.fixture
def engine_provider(provider: Provider) -> Provider:
    """``provider``, ignoring idempotency keys, for an engine integration's test."""
    return provider


@pytest.fixture
def engine_workers(engine_provider: Provider, tmp_path: Path, db_path: str) -> Iterator[Processes]:
    """An engine's worker processes, against the ledger ``db_path`` and ``engine_provider``."""
    processes = Processes(
        tmp_path, {"ONCELOG_URL": db_path, "ENGINE_PROVIDER": engine_provider.url}
    )
    try:
        yield processes
    finally:
        processes.stop_all()
