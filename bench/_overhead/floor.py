"""The physical floor of an effect: two committed transactions on a raw connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Protocol

from .workload import EffectInput


class Executes(Protocol):
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor: ...


def raw_connection(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection set up as the store sets up its own: WAL, autocommit, checked pragmas."""
    db = sqlite3.connect(path, isolation_level=None)
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    db.execute(f"PRAGMA synchronous = {synchronous}")
    got = db.execute("PRAGMA synchronous").fetchone()[0]
    if mode != "wal" or got != {"FULL": 2, "NORMAL": 1}[synchronous]:
        raise RuntimeError(f"{path}: journal_mode={mode}, synchronous={got}")
    return db


class Floor:
    """Two committed transactions per effect, nothing else: one INSERT of the intent row,
    one UPDATE writing the result, rows of the size the ledger writes."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.connection = raw_connection(path, synchronous)
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
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "UPDATE effects SET state = 'done', result = ?, finished_at = ? WHERE id = ?",
            (item.result_json, 0.0, row),
        )
        db.execute("COMMIT")
