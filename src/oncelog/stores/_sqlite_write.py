"""SQLite's hot path: an intent and an outcome, each one statement for the step's row and
one for its journal entry, between ``BEGIN IMMEDIATE`` and ``COMMIT``.

The checks the general path (``_sql_store``) makes with statements of their own ride in
the write: the fence (owner and token), the kill switch and, for an effect of an agent,
that no daily budget applies; in an update's ``WHERE``, in an insert's new state. The
database's single writer holds everything still from ``BEGIN IMMEDIATE`` to the commit,
so a check in the write sees exactly what a separate ``SELECT`` before it would. When a
write matches no row, the caller takes the general path in the same transaction, which
says which check refused, or charges the budget. The journal entry is one statement too
(``JOURNAL_APPEND``): the chain's link is computed by ``oncelog_link``, registered on the
connection.

No write here has a ``RETURNING``: SQLite serves one through a temporary b-tree it opens
and closes for each execution, about 48 k instructions, more than twice the insert
itself. A write says whether it matched by its row count; the step's start time goes
from its row into its journal entry inside the journal's insert (``STEP_JOURNAL_APPEND``).
The fence also asks that at least half of the lease is left, so a write that matches
needs no extension; once half is used the write matches nothing and the caller takes the
general path, whose fence extends the lease.
"""

from __future__ import annotations

from ..audit._chain import GENESIS
from ._protocol import Lease, NewStep, Outcome
from ._sql import NOW, Tx
from ._sql_controls import HALT_ON
from ._sql_tx import LEASE_LEFT

LINK_FUNCTION = "oncelog_link"
# The record's time is the caller's (a step's start) or the clock, as REAL both in the row
# and in the hash, so verify recomputes the hash from the stored value.
_AT = f"CAST(COALESCE(?5, {NOW}) AS REAL)"


def _journal_append(at: str) -> str:
    return (
        "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (?1, ?2, ?3, ?4, "
        f"{at}, {LINK_FUNCTION}(COALESCE((SELECT hash FROM journal WHERE run_id = ?1 "
        f"ORDER BY id DESC LIMIT 1), '{GENESIS}'), ?1, ?2, ?3, ?4, {at}))"
    )


JOURNAL_APPEND = _journal_append(_AT)
# The same for a step's intent: its time is the start written into the step's row in
# this transaction. Parameters: run_id, seq, event, data.
STEP_JOURNAL_APPEND = _journal_append(
    "(SELECT started_at FROM steps WHERE run_id = ?1 AND seq = ?2)"
)

# Parameters: run_id, owner, token, half the lease's ttl.
_FENCED = (
    "EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND owner = ? AND fencing_token = ? "
    f"AND {LEASE_LEFT} >= ?)"
)
# A row whose checks fail is given no state: ``OR IGNORE`` skips a row that breaks a NOT
# NULL constraint, so the write matches nothing, as a ``WHERE`` would. Not ``INSERT ...
# SELECT ... WHERE``: on a table with triggers (the budget totals', 0009), SQLite runs such
# an insert through a temporary b-tree, about 36 k instructions, more than the insert.
# ``OR IGNORE`` skips a duplicate step too; the general path, taken when nothing was
# written, raises the unique violation.
_INSERT_STEP = (
    "INSERT OR IGNORE INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, "
    "args, attempts, started_at, cost, irreversible, state) "
    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, {NOW} - ?, ?, ?, CASE WHEN {_FENCED} "
    "AND NOT EXISTS (SELECT 1 FROM agent_budgets WHERE agent = ?)"
)
_INSERT_UNCHECKED = f"{_INSERT_STEP} THEN 'in_flight' END)"
_INSERT_CHECKED = (
    f"{_INSERT_STEP} AND NOT EXISTS (SELECT 1 FROM halts WHERE {HALT_ON}) THEN 'in_flight' END)"
)
_END_STEP = (
    "UPDATE steps SET state = ?, result = ?, error = ?, tokens_in = ?, tokens_out = ?, "
    f"cost = COALESCE(?, cost), finished_at = {NOW}, retry_at = ? "
    f"WHERE run_id = ? AND seq = ? AND attempts = ? AND state = 'in_flight' AND {_FENCED}"
)

# A model call or a read, recorded after it ran: its row written once, in its final state
# (the journal still holds its intent and its outcome), started ``elapsed`` before now.
_RECORD_STEP = (
    "INSERT OR IGNORE INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, "
    "args, result, error, attempts, tokens_in, tokens_out, started_at, finished_at, cost, "
    "irreversible, retry_at, state) "
    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, {NOW} - ?, {NOW}, COALESCE(?, ?), ?, ?, "
    f"CASE WHEN {_FENCED} THEN ? END)"
)


def insert_step(tx: Tx, lease: Lease, step: NewStep, *, check_halt: bool) -> bool:
    """Write a new step ``in_flight`` (its first attempt) if the lease holds with half of
    it left, no switch is on (with ``check_halt``) and no agent's budget applies: False
    if a check did not pass or the step is a duplicate (nothing is written)."""
    run_id = lease.run_id
    budgeted_agent = lease.agent if step.type.value == "effect" else None
    params: tuple[object, ...] = (
        run_id, step.seq, step.step_id, step.type.value, step.tool, step.kind, step.key,
        step.args_hash, step.args_json, step.elapsed, step.cost, int(step.irreversible),
        run_id, lease.owner, lease.token, lease.ttl / 2, budgeted_agent,
    )  # fmt: skip
    sql = _INSERT_UNCHECKED
    if check_halt:
        sql, params = _INSERT_CHECKED, (*params, lease.agent or "", run_id)
    return bool(tx.execute(sql, params).rowcount == 1)


def end_step(tx: Tx, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> bool:
    """Record the outcome of the attempt in flight if the lease holds with half of it
    left: False if nothing was written (the lease is lost or half used, or the step
    changed under the worker)."""
    run_id = lease.run_id
    cursor = tx.execute(
        _END_STEP,
        (outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
         outcome.tokens_out, outcome.cost, outcome.retry_at, run_id, seq, attempt,
         run_id, lease.owner, lease.token, lease.ttl / 2),
    )  # fmt: skip
    return bool(cursor.rowcount == 1)


def insert_recorded(tx: Tx, lease: Lease, step: NewStep, outcome: Outcome) -> bool:
    """Write a new model call's or read's row as it ended (its first attempt), if the
    lease holds with half of it left: False if not, or if the step is a duplicate
    (nothing is written)."""
    run_id = lease.run_id
    cursor = tx.execute(
        _RECORD_STEP,
        (run_id, step.seq, step.step_id, step.type.value, step.tool, step.kind, step.key,
         step.args_hash, step.args_json, outcome.result_json, outcome.error_json,
         outcome.tokens_in, outcome.tokens_out, step.elapsed, outcome.cost, step.cost,
         int(step.irreversible), outcome.retry_at,
         run_id, lease.owner, lease.token, lease.ttl / 2, outcome.state.value),
    )  # fmt: skip
    return bool(cursor.rowcount == 1)
