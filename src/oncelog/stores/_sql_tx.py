"""Statements every write transaction of the ledger shares: the journal append and the
fencing check.

Locks, always taken in this order within a transaction, so that on PostgreSQL they cannot
deadlock (on SQLite the database's single writer makes them all no-ops):
1. the kill switch (shared by intents, exclusive for setting or clearing a halt); then a
   resource's hold row, when a hold is taken, given up or released (``_sql_holds.py``);
2. runs' rows (``FOR UPDATE``): every write that checks a fencing token or changes a
   run's steps, so writers of one run serialize and each sees the last commit;
3. an agent's budget row, when an intent is charged against it;
   3a. a subject's claim row, when an intent names a subject (``_sql_subjects``);
4. a run's journal, held from each append to the commit.
"""

from __future__ import annotations

from ..records._chain import GENESIS, link
from ._protocol import Lease
from ._shared import lease_needs_extending
from ._sql import NOW, Tx


def append(
    tx: Tx, run_id: str, seq: int | None, event: str, data: str, at: float | None = None
) -> None:
    """Add an entry to the journal, chained to the run's last one, in the caller's
    transaction. The journal lock is taken by a statement of its own: the previous hash
    is read by a later statement, whose snapshot includes the commit of whoever held the
    lock before. ``at``: the time the caller wrote into a row in this transaction (a
    run's creation, a step's start), so that ``verify`` can hold the row to it exactly;
    SQLite's clock moves between statements of one transaction."""
    tx.lock_journal(run_id)
    prev, now = tx.execute(
        f"SELECT (SELECT hash FROM journal WHERE run_id = ? ORDER BY id DESC LIMIT 1), {NOW}",
        (run_id,),
    ).fetchone()
    at = now if at is None else at
    tx.execute(
        "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, seq, event, data, at, link(prev or GENESIS, run_id, seq, event, data, at)),
    )


def lock_run(tx: Tx, run_id: str) -> bool:
    """Serialize with every other writer of the run; False if there is no such run."""
    found = tx.execute(
        f"SELECT 1 FROM runs WHERE run_id = ?{tx.dialect.for_update}", (run_id,)
    ).fetchone()
    return found is not None


def fence(tx: Tx, lease: Lease, *, renew: bool = False) -> None:
    """Refuse a stale owner, holding the run's row until the commit. The lease is extended
    only once half of it is used (or when asked to ``renew``), so most commits leave the
    run row unchanged."""
    row = tx.execute(
        f"SELECT owner, fencing_token, {LEASE_LEFT} FROM runs WHERE run_id = ?"
        f"{tx.dialect.for_update}",
        (lease.run_id,),
    ).fetchone()
    if lease_needs_extending(row, lease) or renew:
        extend(tx, lease)


# Seconds left on a run's lease, by the store's clock (NULL once released).
LEASE_LEFT = f"lease_expires_at - {NOW}"


def extend(tx: Tx, lease: Lease) -> None:
    """Give the lease its whole ``ttl`` again (the caller has fenced it)."""
    tx.execute(
        f"UPDATE runs SET lease_expires_at = {NOW} + ? WHERE run_id = ?",
        (lease.ttl, lease.run_id),
    )
