"""Statements every SQLite transaction of the ledger shares."""

from __future__ import annotations

import sqlite3

from .._exceptions import LeaseLost
from ._protocol import Lease

# The store's clock, in Unix seconds: lease expiry is judged by it, not by a worker's.
NOW = "((julianday('now') - 2440587.5) * 86400.0)"
# Midnight UTC today by the same clock: agents' daily budgets count from it.
TODAY = f"(CAST({NOW} / 86400 AS INTEGER) * 86400)"


def append(db: sqlite3.Connection, run_id: str, seq: int | None, event: str, data: str) -> None:
    """Add an entry to the journal, in the caller's transaction."""
    db.execute(
        f"INSERT INTO journal (run_id, seq, event, data, at) VALUES (?, ?, ?, ?, {NOW})",
        (run_id, seq, event, data),
    )


def fence(db: sqlite3.Connection, lease: Lease) -> None:
    """Refuse a stale owner, inside the write transaction (which holds the write lock).
    The lease is extended only once half of it is used, so most commits leave the
    runs table untouched."""
    row = db.execute(
        f"SELECT owner, fencing_token, lease_expires_at - {NOW} FROM runs WHERE run_id = ?",
        (lease.run_id,),
    ).fetchone()
    if row is None or row[0] != lease.owner or row[1] != lease.token:
        raise LeaseLost(
            "another worker took this run over; this worker may not write to it",
            run_id=lease.run_id,
        )
    if row[2] is None or row[2] < lease.ttl / 2:
        db.execute(
            f"UPDATE runs SET lease_expires_at = {NOW} + ? WHERE run_id = ?",
            (lease.ttl, lease.run_id),
        )
