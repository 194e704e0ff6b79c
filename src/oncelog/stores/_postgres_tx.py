"""Statements every PostgreSQL transaction of the ledger shares, and the locks that make
concurrent writers behave as SQLite's single writer does.

Locks, always taken in this order within a transaction, so they cannot deadlock:
1. the kill switch (an advisory lock): shared by intents, exclusive for setting or clearing
   a halt, so no intent commits after a halt it did not see;
2. runs' rows (``SELECT ... FOR UPDATE``): every write that checks a fencing token or
   changes a run's steps, so writers of one run serialize and each sees the last commit;
3. an agent's budget row, when an intent is charged against it;
4. a run's journal (an advisory lock keyed by run id), held from each append to the
   commit, so a run's journal ids follow commit order.
"""

from __future__ import annotations

from .._chain import GENESIS, link
from ._postgres_pool import Cursor
from ._protocol import Lease
from ._shared import lease_needs_extending

# The server's clock, in Unix seconds: lease expiry is judged by it, never by a worker's.
# clock_timestamp() rather than now(): a transaction that waited for a lock judges expiry
# at the instant it got it, not when it began.
NOW = "date_part('epoch', clock_timestamp())"
# Midnight UTC today by the same clock: agents' daily budgets count from it.
TODAY = f"(floor({NOW} / 86400) * 86400)"

# Advisory lock keys (two 32-bit integers): "once" and a lock number; "onjl" for journals.
_ONCELOG = 0x6F6E6365
MIGRATIONS_LOCK = (_ONCELOG, 1)
HALTS_LOCK = (_ONCELOG, 2)
_JOURNAL = 0x6F6E6A6C


def append(cur: Cursor, run_id: str, seq: int | None, event: str, data: str) -> None:
    """Add an entry to the journal, chained to the run's last one, in the caller's
    transaction. The run's journal lock is taken by a statement of its own: the previous
    hash must be read by a later statement, whose snapshot includes the commit of the
    transaction that held the lock before. The id is drawn under the lock too, so ids of
    one run follow commit order."""
    lock_journal(cur, run_id)
    row = cur.execute(
        f"SELECT (SELECT hash FROM journal WHERE run_id = %s ORDER BY id DESC LIMIT 1), {NOW}",
        (run_id,),
    ).fetchone()
    assert row is not None
    prev, at = row
    cur.execute(
        "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (%s, %s, %s, %s, %s, %s)",
        (run_id, seq, event, data, at, link(prev or GENESIS, run_id, seq, event, data, at)),
    )


def lock_journal(cur: Cursor, run_id: str) -> None:
    """Hold the run's journal lock (as ``append`` does) before reading its journal."""
    cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_JOURNAL, run_id))


def lock_run(cur: Cursor, run_id: str) -> bool:
    """Serialize with every other writer of the run; False if there is no such run."""
    return bool(cur.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,)).rowcount)


def lock_halts(cur: Cursor, *, exclusive: bool) -> None:
    shared = "" if exclusive else "_shared"
    cur.execute(f"SELECT pg_advisory_xact_lock{shared}(%s, %s)", HALTS_LOCK)


def fence(cur: Cursor, lease: Lease, *, renew: bool = False) -> None:
    """Refuse a stale owner, holding the run's row lock until the commit. The lease is
    extended only once half of it is used (or when asked to ``renew``), so most commits
    leave the run row unchanged."""
    row = cur.execute(
        f"SELECT owner, fencing_token, lease_expires_at - {NOW} FROM runs WHERE run_id = %s "
        "FOR UPDATE",
        (lease.run_id,),
    ).fetchone()
    if lease_needs_extending(row, lease) or renew:
        cur.execute(
            f"UPDATE runs SET lease_expires_at = {NOW} + %s WHERE run_id = %s",
            (lease.ttl, lease.run_id),
        )
