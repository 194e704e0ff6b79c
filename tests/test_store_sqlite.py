"""The SQLite store's settings and migrations, read back from SQLite itself."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

import pytest

import oncelog
from oncelog.stores import SQLiteStore, open_store
from oncelog.stores._migrations import migrations

from .support.launch import python


@pytest.mark.parametrize(
    ("durability", "synchronous"), [("intent", 1), ("full", 2), ("process", 1)]
)
def test_durability_sets_and_verifies_synchronous(
    db_path: str, durability: str, synchronous: int
) -> None:
    store = SQLiteStore(db_path, durability=durability)
    try:
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    finally:
        store.close()


def test_migrations_are_recorded_and_reapplied_idempotently(db_path: str) -> None:
    for _ in range(2):
        oncelog.open(db_path).close()
    with sqlite3.connect(db_path) as db:
        versions = db.execute("SELECT version FROM schema_migrations").fetchall()
    assert versions == [(m.version,) for m in migrations("sqlite")]


def test_a_newer_schema_is_refused(db_path: str) -> None:
    oncelog.open(db_path).close()
    with sqlite3.connect(db_path) as db:
        db.execute("INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)")
    with pytest.raises(oncelog.SchemaTooNew, match="Upgrade oncelog"):
        oncelog.open(db_path)


def test_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = tmp_path / "a.db"
    open_store(f"sqlite:///{absolute}").close()
    assert absolute.exists()
    monkeypatch.chdir(tmp_path)
    open_store("sqlite:///relative.db").close()
    assert (tmp_path / "relative.db").exists()
    monkeypatch.setenv("ONCELOG_URL", str(tmp_path / "env.db"))
    open_store(None).close()
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("ONCELOG_URL")
    open_store(None).close()
    assert (tmp_path / ".oncelog" / "ledger.db").exists()
    with pytest.raises(oncelog.ConfigurationError, match="unsupported"):
        open_store("mysql://localhost/agents")


def test_several_store_objects_share_one_file(db_path: str) -> None:
    first, second = oncelog.open(db_path), oncelog.open(db_path)
    try:
        with first.run("a") as run:
            run.read("q", lambda: 1)
        with second.run("a") as run:
            assert run.read("q", lambda: 2) == 1
    finally:
        first.close()
        second.close()


def test_processes_opening_a_new_ledger_at_the_same_instant_all_succeed(tmp_path: Path) -> None:
    """Switching a new file to WAL needs it to itself for an instant, and SQLite does not
    wait for that: before the store waited itself, one of two agents started together on
    a new ledger failed about one time in five with "database is locked"."""
    opener = (
        "import os, sys, time, oncelog\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.001)\n"
        "oncelog.open(sys.argv[2]).close()\n"
    )
    for round_no in range(8):
        go, db = tmp_path / f"go-{round_no}", tmp_path / f"ledger-{round_no}.db"
        openers = [
            subprocess.Popen(
                python("-c", opener, str(go), str(db)), stderr=subprocess.PIPE, text=True
            )
            for _ in range(4)
        ]
        time.sleep(0.3)  # all started and spinning
        go.touch()
        for process in openers:
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, stderr


def test_the_store_timeout_is_sqlites_busy_timeout(db_path: str) -> None:
    """``oncelog.open(..., store_timeout=S)``: a write that waits for another writer's
    lock gives up after S seconds with ``StoreUnavailable``."""
    with oncelog.open(db_path, store_timeout=0.5) as ledger:
        assert isinstance(ledger.store, SQLiteStore)
        assert ledger.store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 500
        with sqlite3.connect(db_path, isolation_level=None) as other:
            other.execute("BEGIN IMMEDIATE")
            began = time.monotonic()
            with pytest.raises(oncelog.StoreUnavailable, match="locked"):
                ledger.halt("stop", by="ops")
            assert time.monotonic() - began < 0.5 + 60.0  # only a wait without limit
            other.execute("ROLLBACK")
    with pytest.raises(oncelog.ConfigurationError, match="timeout"):
        oncelog.open(db_path, store_timeout=0)


def synced_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the store's own WAL syncs reach, by the path of each synced descriptor."""
    from oncelog.stores import _group_sync

    synced: list[str] = []

    def fdatasync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        os.fdatasync(fd)

    monkeypatch.setattr(_group_sync, "_fdatasync", fdatasync)
    return synced


def send_once(ledger: oncelog.Ledger) -> None:
    send = ledger.tool(kind="create", name="send")(lambda *, idempotency_key: {"sent": 1})
    with ledger.run("r") as run:
        assert run.effect("send", send) == {"sent": 1}


def test_a_ledger_opened_through_a_symbolic_link_syncs_the_wal_sqlite_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite keeps the WAL beside the file a link points to, not beside the link: an
    intent's sync must reach that file, or it would sync nothing (or fail)."""
    real = tmp_path / "real" / "ledger.db"
    real.parent.mkdir()
    oncelog.open(str(real)).close()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    synced = synced_files(monkeypatch)
    with oncelog.open(str(link)) as ledger:
        send_once(ledger)
    assert set(synced) == {f"{real}-wal"}  # and not empty
    assert not (tmp_path / "link.db-wal").exists()


def test_an_in_memory_ledger_has_no_wal_to_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    synced = synced_files(monkeypatch)
    with oncelog.open(":memory:") as ledger:
        send_once(ledger)
    assert synced == []


def test_an_up_to_date_ledger_opens_while_another_writer_holds_the_lock(db_path: str) -> None:
    """Opening reads the schema's version and writes only to migrate: a writer stopped
    inside its transaction does not hold every open back for the busy timeout."""
    oncelog.open(db_path).close()
    with closing(sqlite3.connect(db_path, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        with oncelog.open(db_path, store_timeout=120) as ledger:
            assert ledger.runs() == []
        # An open that waited for the lock would wait out the whole busy timeout.
        assert time.monotonic() - began < 60.0
        writer.execute("ROLLBACK")
