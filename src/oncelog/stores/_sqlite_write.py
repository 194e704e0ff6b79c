"""SQLite's hot path: an intent, an outcome, and a step recorded after it ran (a model
call, a read), each one statement for the step's row and one for its journal entry,
between ``BEGIN IMMEDIATE`` and ``COMMIT``.

The checks the general path (``_sql_store``) makes with statements of their own ride in
the write: the fence (owner and token), the kill switch and, for an effect of an agent,
that no daily budget applies; in an update's ``WHERE``, in an insert's new state. The
database's single writer holds everything still from ``BEGIN IMMEDIATE`` to the commit,
so a check in the write sees exactly what a separate ``SELECT`` before it would. When a
write matches no row, the caller takes the general path in the same transaction, which
says which check refused, or charges the budget. The journal entry is one insert after
one read (``head``): the run's chain head and the store's clock, from which the step's
start and the record's link are computed in the process (``_chain.link``, over the data's
text as it is bound).

No write here has a ``RETURNING``: SQLite serves one through a temporary b-tree it opens
and closes for each execution, about 48 k instructions, more than twice the insert
itself. A write says whether it matched by its row count; the step's start time is the
clock ``head`` read, less the call's elapsed time, bound into both the row and its
journal entry.
The fence also asks that at least half of the lease is left, so a write that matches
needs no extension; once half is used the write matches nothing and the caller takes the
general path, whose fence extends the lease.
"""

from __future__ import annotations

import time

from ..records._chain import GENESIS, link
from ..records._transitions import INTENT, OUTCOME
from ._protocol import Lease, NewStep, Outcome
from ._sql import NOW, Tx
from ._sql_controls import HALT_ON
from ._sql_guards import enters, leaves
from ._sql_tx import LEASE_LEFT

# The name the journal's link function had when SQLite computed it in the insert (until
# migration 30); nothing registers it any more.
LINK_FUNCTION = "oncelog_link"
# A record is linked in the process (``_chain.link``, over the data's text as it is bound),
# with no function SQLite calls back into Python for the row, after the hash this process
# last appended to the run (``_HEADS``). The insert checks that hash is still the run's
# head, in the subquery the callback's insert had: another writer of the run (a person's
# decision, another process) or a rolled-back transaction makes the check fail, and with
# it the insert (``OR IGNORE``: a NULL time breaks a NOT NULL constraint, nothing is
# written), and the head is read, then the record linked to it inserted. The check
# compares hashes, not ids: SQLite may give a rolled-back id to the next record.
_CHECKED_APPEND = (
    "INSERT OR IGNORE INTO journal (run_id, seq, event, data, at, hash) VALUES "
    "(?1, {seq}, ?2, ?3, CASE WHEN (SELECT hash FROM journal WHERE run_id = ?1 "
    "ORDER BY id DESC LIMIT 1) = ?4 THEN ?5 END, ?6)"
)
_CHECKED = {True: _CHECKED_APPEND.format(seq="?7"), False: _CHECKED_APPEND.format(seq="NULL")}
_HEAD = "SELECT hash FROM journal WHERE run_id = ? ORDER BY id DESC LIMIT 1"
_APPEND = "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (?, ?, ?, ?, ?, ?)"
_HEADS: dict[str, str] = {}  # by run id: the hash this process last appended to its chain
_REMEMBERED = 4096  # runs whose heads are kept; past it, all are forgotten


def remember(run_id: str, hash_: str) -> None:
    """``hash_`` is the head of the run's chain this process just appended."""
    if len(_HEADS) >= _REMEMBERED:
        _HEADS.clear()
    _HEADS[run_id] = hash_


def clock() -> float:
    """The store's clock (``NOW``) read in the process, to the bit: SQLite's ``'now'`` is
    the system clock in whole milliseconds, as a Julian day. A record's time must be known
    before its link is computed."""
    return ((time.time_ns() // 1_000_000 + 210866760000000) / 86400000.0 - 2440587.5) * 86400.0


def append(tx: Tx, run_id: str, seq: int | None, event: str, data: str, at: float) -> None:
    """The run's next record, at ``at``, linked in the process."""
    prev = _HEADS.get(run_id)
    if prev is not None:
        hash_ = link(prev, run_id, seq, event, data, at)
        params: tuple[object, ...] = (run_id, event, data, prev, at, hash_)
        if tx.execute(
            _CHECKED[seq is not None], params if seq is None else (*params, seq)
        ).rowcount:
            _HEADS[run_id] = hash_
            return
    row = tx.execute(_HEAD, (run_id,)).fetchone()
    # No record, or records from before the chain (schema 7), whose hash is NULL: the
    # chain starts here, as ``_sql_tx.append`` starts it.
    hash_ = link((row and row[0]) or GENESIS, run_id, seq, event, data, at)
    tx.execute(_APPEND, (run_id, seq, event, data, at, hash_))
    remember(run_id, hash_)


# Parameters: run_id, owner, token, half the lease's ttl.
_FENCED = (
    "EXISTS (SELECT 1 FROM runs WHERE run_id = ? AND owner = ? AND fencing_token = ? "
    f"AND {LEASE_LEFT} >= ?)"
)


# A row whose checks fail is given no state: ``OR IGNORE`` skips a row that breaks a NOT
# NULL constraint, so the write matches nothing, as a ``WHERE`` would. Not ``INSERT ...
# SELECT ... WHERE``: on a table with triggers (the budget totals', where a budget brought
# them), SQLite runs such an insert through a temporary b-tree, about 36 k instructions,
# more than the insert. ``OR IGNORE`` skips a duplicate step too; the general path, taken
# when nothing was written, raises the unique violation.
def _insert_step(check_agent: bool) -> str:
    """Parameters: the row's, the fence's, then the agent (``check_agent``: an effect of
    an agent, which no daily budget may cover), then the kill switch's."""
    return (
        "INSERT OR IGNORE INTO steps (run_id, seq, step_id, type, tool, kind, key, "
        "args_hash, args, attempts, started_at, cost, irreversible, state) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, CASE WHEN {_FENCED}"
        + (" AND NOT EXISTS (SELECT 1 FROM agent_budgets WHERE agent = ?)" if check_agent else "")
        + f" AND NOT EXISTS (SELECT 1 FROM halts WHERE {HALT_ON}) THEN {enters(INTENT)} END)"
    )


_INSERTS = {check_agent: _insert_step(check_agent) for check_agent in (False, True)}
_END_WHERE = f"WHERE run_id = ? AND seq = ? AND attempts = ? AND {leaves(OUTCOME)} AND {_FENCED}"
_END_STEP = (
    "UPDATE steps SET state = ?, result = ?, error = ?, tokens_in = ?, tokens_out = ?, "
    f"cost = COALESCE(?, cost), finished_at = {NOW}, retry_at = ? {_END_WHERE}"
)
# The usual outcome: no error, no cost of its own, no time to retry at.
_END_PLAIN = (
    "UPDATE steps SET state = ?, result = ?, error = NULL, tokens_in = ?, tokens_out = ?, "
    f"finished_at = {NOW}, retry_at = NULL {_END_WHERE}"
)


# A model call or a read, recorded after it ran: its row written once, in its final state
# (its journal entry one ``recorded`` record), started ``elapsed`` before it finished. Both
# times are the process's reading of the store's clock, so that they lie exactly ``elapsed``
# apart: ``NOW`` read by the statement may be a millisecond later than the reading.
def _record_step(plain: bool) -> str:
    """Parameters: the row's, its outcome's (``plain``: without error, cost and retry
    time, which are NULL, and the step's own cost), the fence's, the state."""
    error, cost, retry_at = ("NULL", "?", "NULL") if plain else ("?", "COALESCE(?, ?)", "?")
    return (
        "INSERT OR IGNORE INTO steps (run_id, seq, step_id, type, tool, kind, key, "
        "args_hash, args, result, error, attempts, tokens_in, tokens_out, started_at, "
        "finished_at, cost, irreversible, retry_at, state) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {error}, 1, ?, ?, ?, ?, {cost}, "
        f"?, {retry_at}, CASE WHEN {_FENCED} THEN ? END)"
    )


_RECORD_STEP = _record_step(plain=False)
_RECORD_PLAIN = _record_step(plain=True)


def _plain(outcome: Outcome) -> bool:
    return outcome.error_json is None and outcome.cost is None and outcome.retry_at is None


def insert_step(tx: Tx, lease: Lease, step: NewStep, started: float) -> bool:
    """Write a new step ``in_flight`` (its first attempt), ``started`` then, if the lease
    holds with half of it left, no switch is on and no agent's budget applies: False if a
    check did not pass or the step is a duplicate (nothing is written)."""
    run_id = lease.run_id
    params: tuple[object, ...] = (
        run_id, step.seq, step.step_id, step.type.value, step.tool, step.kind, step.key,
        step.args_hash, step.args_json, started, step.cost, int(step.irreversible),
        run_id, lease.owner, lease.token, lease.ttl / 2,
    )  # fmt: skip
    check_agent = lease.agent is not None and step.type.value == "effect"
    if check_agent:
        params = (*params, lease.agent)
    params = (*params, lease.agent or "", run_id)
    return bool(tx.execute(_INSERTS[check_agent], params).rowcount == 1)


def end_step(tx: Tx, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> bool:
    """Record the outcome of the attempt in flight if the lease holds with half of it
    left: False if nothing was written (the lease is lost or half used, or the step
    changed under the worker)."""
    run_id = lease.run_id
    where = (run_id, seq, attempt, run_id, lease.owner, lease.token, lease.ttl / 2)
    params: tuple[object, ...]
    if _plain(outcome):
        sql, params = _END_PLAIN, (
            outcome.state.value, outcome.result_json, outcome.tokens_in, outcome.tokens_out,
            *where,
        )  # fmt: skip
    else:
        sql, params = _END_STEP, (
            outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
            outcome.tokens_out, outcome.cost, outcome.retry_at, *where,
        )  # fmt: skip
    return bool(tx.execute(sql, params).rowcount == 1)


def insert_recorded(
    tx: Tx, lease: Lease, step: NewStep, outcome: Outcome, started: float, finished: float
) -> bool:
    """Write a new model call's or read's row as it ended (its first attempt), ``started``
    and ``finished`` then, if the lease holds with half of it left: False if not, or if the
    step is a duplicate (nothing is written)."""
    run_id = lease.run_id
    row = (
        run_id, step.seq, step.step_id, step.type.value, step.tool, step.kind, step.key,
        step.args_hash, step.args_json, outcome.result_json,
    )  # fmt: skip
    fence = (run_id, lease.owner, lease.token, lease.ttl / 2, outcome.state.value)
    irreversible = int(step.irreversible)
    params: tuple[object, ...]
    if _plain(outcome):
        sql, params = _RECORD_PLAIN, (
            *row, outcome.tokens_in, outcome.tokens_out, started, finished, step.cost,
            irreversible, *fence,
        )  # fmt: skip
    else:
        sql, params = _RECORD_STEP, (
            *row, outcome.error_json, outcome.tokens_in, outcome.tokens_out, started,
            finished, outcome.cost, step.cost, irreversible, outcome.retry_at, *fence,
        )  # fmt: skip
    return bool(tx.execute(sql, params).rowcount == 1)
