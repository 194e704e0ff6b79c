"""The reads of ``oncelog verify``: every row of the tables replay, the controls and holds read,
as stored, page by page in key order (a keyset: no row is skipped or read twice however
many there are), the facts the migrations recorded about the ledger, and the signed
checkpoints of a run's chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..records._records import Checkpoint
from ._rows import APPROVAL_COLUMNS, HALT_COLUMNS, STEP_COLUMNS
from ._shared import new_checkpoint
from ._sql import NOW, Tx

# By table: its key (the order of the pages), its columns, and how to keep one run's rows.
STATE_TABLES: dict[str, tuple[str, str, str | None]] = {
    "runs": (
        "run_id",
        "run_id, status, plan, reason, created_at, owner, fencing_token, agent, budget, "
        f"input, stopped_by, stop_seq, stop, lease_expires_at - {NOW}",
        "run_id = ?",
    ),
    "steps": ("run_id, seq", f"{STEP_COLUMNS}, cost, irreversible", "run_id = ?"),
    "halts": ("id", HALT_COLUMNS, "scope = 'run' AND target = ?"),
    "approvals": ("id", APPROVAL_COLUMNS, "run_id = ?"),
    "agent_budgets": ("agent", "agent, budget, set_by", None),
    "result_contracts": ("tool", "tool, contract", None),
    "subjects": ("subject", "subject, run_id, seq, step_id", "run_id = ?"),
    "retention_policy": ("agent", "agent, keep, set_by", None),
    "pruned_runs": ("run_id", "run_id, anchor", None),
    "holds": (
        "resource",
        "resource, holder, holder_token, token, acquired_at, released_at",
        "holder = ?",
    ),
}


def table_rows(
    tx: Tx, table: str, after: tuple[Any, ...], limit: int, run_id: str | None
) -> list[tuple[Any, ...]]:
    key, columns, of_run = STATE_TABLES[table]
    where: list[str] = []
    params: list[Any] = []
    if after:
        where.append(f"({key}) > ({', '.join('?' * len(after))})")
        params += after
    if run_id is not None:
        if of_run is None:
            return []  # a table of no run
        where.append(of_run)
        params.append(run_id)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    rows = tx.execute(
        f"SELECT {columns} FROM {table}{condition} ORDER BY {key} LIMIT ?", (*params, limit)
    ).fetchall()
    return [tuple(row) for row in rows]


def ledger_meta(tx: Tx) -> dict[str, int]:
    return {str(name): int(value) for name, value in tx.execute(
        "SELECT name, value FROM ledger_meta"
    ).fetchall()}  # fmt: skip


# The length and head of a run's chain (records written before the chain have no hash).
_CHAIN_HEAD = (
    "SELECT COUNT(*), (SELECT hash FROM journal WHERE run_id = ? AND hash IS NOT NULL "
    f"ORDER BY id DESC LIMIT 1), {NOW} FROM journal WHERE run_id = ? AND hash IS NOT NULL"
)


def checkpoint(tx: Tx, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
    """``Store.checkpoint``, in the caller's transaction."""
    tx.lock_journal(run_id)  # the head read is the head kept
    head = tx.execute(_CHAIN_HEAD, (run_id, run_id)).fetchone()
    last = tx.execute(
        "SELECT entries, head FROM checkpoints WHERE run_id = ? ORDER BY id DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    made = new_checkpoint(run_id, head, last, sign)
    if made is None:
        return None
    row = tx.execute(
        "INSERT INTO checkpoints (run_id, entries, head, at, key_id, signature) "
        "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        (run_id, made[0], made[1], made[2], key_id, made[3]),
    ).fetchone()
    assert row is not None
    return Checkpoint(int(row[0]), run_id, made[0], made[1], made[2], key_id, made[3])
