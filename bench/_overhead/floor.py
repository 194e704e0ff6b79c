"""The physical floor of an effect: two committed transactions on a raw connection.

Which of them must be durable when it returns is the durability mode's promise: ``FULL``
fsyncs both (durability ``full``); ``INTENT`` fsyncs the first only, as the store does
(``synchronous=NORMAL``, then one ``fdatasync`` of the WAL after the intent's commit: the
outcome rides on the next one); ``NORMAL`` fsyncs neither (durability ``process``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Protocol

from .workload import EffectInput


class Executes(Protocol):
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor: ...


SYNCHRONOUS = {"FULL": 2, "NORMAL": 1}


def raw_connection(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection set up as the store sets up its own: WAL, autocommit, checked pragmas."""
    db = sqlite3.connect(path, isolation_level=None)
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    db.execute(f"PRAGMA synchronous = {synchronous}")
    got = db.execute("PRAGMA synchronous").fetchone()[0]
    if mode != "wal" or got != SYNCHRONOUS[synchronous]:
        raise RuntimeError(f"{path}: journal_mode={mode}, synchronous={got}")
    return db


class Floor:
    """Two committed transactions per effect, nothing else: one INSERT of the intent row,
    one UPDATE writing the result, rows of the size the ledger writes; ``mode`` is
    ``FULL``, ``INTENT`` or ``NORMAL`` (the module's docstring)."""

    def __init__(self, path: Path, mode: str) -> None:
        self.connection = raw_connection(path, "NORMAL" if mode == "INTENT" else mode)
        self._wal = f"{path}-wal" if mode == "INTENT" else ""
        self._wal_fd: int | None = None  # opened at the first sync, as the store's
        # Replaced by a timing wrapper when the statements are broken down.
        self.db: Executes = self.connection
        self.connection.execute(
            "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, run_id TEXT, "
            "step_id TEXT, key TEXT, args_hash TEXT, args TEXT, state TEXT, result TEXT, "
            "started_at REAL, finished_at REAL)"
        )

    def effect(self, item: EffectInput) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "INSERT INTO effects (run_id, step_id, key, args_hash, args, state, started_at) "
            "VALUES (?, ?, ?, ?, ?, 'in_flight', ?)",
            (item.run_id, item.step_id, item.key, item.args_hash, item.args_json, 0.0),
        ).lastrowid
        db.execute("COMMIT")
        if self._wal:
            self._sync_wal()
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE effects SET state = 'done', result = ?, finished_at = ? WHERE id = ?",
            (item.result_json, 0.0, row),
        )
        db.execute("COMMIT")

    def _sync_wal(self) -> None:
        if self._wal_fd is None:
            self._wal_fd = os.open(self._wal, os.O_RDWR | os.O_CLOEXEC)
        os.fdatasync(self._wal_fd)

    def close(self) -> None:
        self.connection.close()
        if self._wal_fd is not None:
            os.close(self._wal_fd)
