"""Statements every SQLite transaction of the ledger shares."""

from __future__ import annotations

import sqlite3

from .._chain import GENESIS, link
from ._protocol import Lease
from ._shared import lease_needs_extending

# The store's clock, in Unix seconds: lease expiry is judged by it, not by a worker's.
NOW = "((julianday('now') - 2440587.5) * 86400.0)"
# Midnight UTC today by the same clock: agents' daily budgets count from it.
TODAY = f"(CAST({NOW} / 86400 AS INTEGER) * 86400)"


def append(db: sqlite3.Connection, run_id: str, seq: int | None, event: str, data: str) -> None:
    """Add an entry to the journal, chained to the run's last one, in the caller's
    transaction (which holds the database's only write lock)."""
    prev, at = db.execute(
        f"SELECT (SELECT hash FROM journal WHERE run_id = ? ORDER BY id DESC LIMIT 1), {NOW}",
        (run_id,),
    ).fetchone()
    db.execute(
        "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, seq, event, data, at, link(prev or GENESIS, run_id, seq, event, data, at)),
    )


def fence(db: sqlite3.Connection, lease: Lease, *, renew: bool = False) -> None:
    """Refuse a stale owner, inside the write transaction (which holds the write lock).
    The lease is extended only once half of it is used (or when asked to ``renew``), so
    most commits leave the runs table untouched."""
    row = db.execute(
        f"SELECT owner, fencing_token, lease_expires_at - {NOW} FROM runs WHERE run_id = ?",
        (lease.run_id,),
    ).fetchone()
    if lease_needs_extending(row, lease) or renew:
        db.execute(
            f"UPDATE runs SET lease_expires_at = {NOW} + ? WHERE run_id = ?",
            (lease.ttl, lease.run_id),
        )
