"""SQLite's start and end of a run, in the fewest statements, between ``BEGIN IMMEDIATE``
and ``COMMIT``; the general path (``SQLStore.acquire`` and ``_finish``) takes over, in
the same transaction, whenever a write here matches nothing.

A new run is inserted already leased: owner, lease and fencing token 1, which is what
the general path's insert followed by its lease update (``SQLStore._take``) leaves, in
one statement instead of two, without a ``RETURNING`` (SQLite serves one through a
temporary b-tree, about 48 k instructions). ``ON CONFLICT DO NOTHING`` writes nothing
when the run exists; the general path then reads it and checks its holder, its agent
and its plan. A budget (whose totals' triggers may have to be created first) takes the
general path from the start. One read gives the new row's time and the head of the
run's chain, so both journal records are linked here and written by one insert, instead
of two inserts each reading the head again.

A run's end writes its row with the fence in the update's ``WHERE``: the single writer
holds everything still from ``BEGIN IMMEDIATE``, so it sees what the general path's
fencing ``SELECT`` would. When it matches nothing, the general path's fence raises
``LeaseLost``. The fence's extension of a half-used lease is not needed: the end clears
the lease.

The journal records (``run_created``, ``lease_acquired``, ``run_<status>``) and their
data are the general path's, to the byte. A new run's statements and a completed run's
end bind no None (each costs Python's ``sqlite3`` an exception raised and cleared): a
NULL is written in the SQL.
"""

from __future__ import annotations

from ..records._chain import GENESIS, link
from ..records._records import RunRecord, RunStatus
from . import _sql_tombstones as tombstones
from . import _sqlite_write as write
from ._protocol import Lease
from ._rows import journal_json, leased, text
from ._sql import NOW, Tx

# Module constants: on Python 3.11 reading an enum member off its class costs about 1,000
# instructions.
_RUNNING, _COMPLETED = RunStatus.RUNNING, RunStatus.COMPLETED


def _create(plan: bool, agent: bool) -> str:
    """Parameters: run_id, the plan's JSON (``plan``), the agent (``agent``), the owner,
    the lease's ttl."""
    return (
        "INSERT INTO runs (run_id, status, plan, agent, created_at, updated_at, owner, "
        "lease_expires_at, fencing_token) VALUES (?, 'running', "
        f"{'?' if plan else 'NULL'}, {'?' if agent else 'NULL'}, {NOW}, {NOW}, ?, "
        f"{NOW} + ?, 1) ON CONFLICT (run_id) DO NOTHING"
    )


_CREATES = {
    (plan, agent): _create(plan, agent) for plan in (False, True) for agent in (False, True)
}
# The new row's time, the head of the run's chain (records of a run id may precede its
# creation: a person's halt of it, say), and whether a prune removed a run of its id.
_CREATED = (
    "SELECT created_at, (SELECT hash FROM journal WHERE run_id = ?1 ORDER BY id DESC LIMIT 1), "
    f"{tombstones.IS_PRUNED.replace('?', '?1')} FROM runs WHERE run_id = ?1"
)
# Both records of the start, their links made here: the chain's head is known, and the
# lease was taken at the creation's instant, by the same statement.
_STARTED = (
    "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES "
    "(?1, NULL, 'run_created', ?2, ?3, ?4), (?1, NULL, 'lease_acquired', ?5, ?3, ?6)"
)

# The usual run's ``run_created`` data: no plan, no agent, no budget.
_PLAIN_CREATED = journal_json(plan=None, agent=None, budget=None)


def create_leased(
    tx: Tx,
    run_id: str,
    owner: str,
    ttl: float,
    plan: tuple[str, ...] | None,
    plan_json: str | None,
    agent: str | None,
    origin: str | None,
) -> tuple[Lease, RunRecord] | None:
    """Insert the run, leased to ``owner``, with its two journal records: None if it
    exists (nothing is written)."""
    params: tuple[object, ...] = (run_id,)
    if plan_json is not None:
        params += (plan_json,)
    if agent is not None:
        params += (agent,)
    sql = _CREATES[plan_json is not None, agent is not None]
    if tx.execute(sql, (*params, owner, ttl)).rowcount != 1:
        return None
    created, head, was_pruned = tx.execute(_CREATED, (run_id,)).fetchone()
    if was_pruned:  # its effects are not run again: the row is rolled back
        raise tombstones.refusal(tx, run_id)
    if plan_json is None and agent is None:
        created_entry = _PLAIN_CREATED
    else:
        created_entry = journal_json(plan=plan_json, agent=text(agent), budget=None)
    created_hash = link(
        GENESIS if head is None else head, run_id, None, "run_created", created_entry, created
    )
    leased_entry = leased(owner, "1", ttl, origin)
    leased_hash = link(created_hash, run_id, None, "lease_acquired", leased_entry, created)
    tx.execute(_STARTED, (run_id, created_entry, created, created_hash, leased_entry, leased_hash))
    write.remember(run_id, leased_hash)
    # One statement wrote both times: the row was created and last updated at once.
    record = RunRecord(
        run_id, _RUNNING, plan, None, created, created, owner, 1, 0, agent
    )  # fmt: skip
    return Lease(run_id, owner, 1, ttl, agent, False), record


_FENCED = "WHERE run_id = ? AND owner = ? AND fencing_token = ?"
_END = (
    "UPDATE runs SET status = ?, reason = ?, stopped_by = ?, owner = NULL, "
    f"lease_expires_at = NULL, updated_at = {NOW} {_FENCED}"
)
# The usual end: completed, with no reason and nothing that stopped it.
_COMPLETE = (
    "UPDATE runs SET status = 'completed', reason = NULL, stopped_by = NULL, owner = NULL, "
    f"lease_expires_at = NULL, updated_at = {NOW} {_FENCED}"
)
_COMPLETED_ENTRY = journal_json(reason=None, stopped_by=None)


def finish(
    tx: Tx, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None
) -> bool:
    """Write the run's end and its journal record if the lease holds: False if it does
    not (nothing is written)."""
    fence = (lease.run_id, lease.owner, lease.token)
    if status is _COMPLETED and reason is None and stopped_by is None:
        if tx.execute(_COMPLETE, fence).rowcount != 1:
            return False
        write.append(tx, lease.run_id, None, "run_completed", _COMPLETED_ENTRY, write.clock())
        return True
    if tx.execute(_END, (status.value, reason, stopped_by, *fence)).rowcount != 1:
        return False
    entry = journal_json(reason=text(reason), stopped_by=text(stopped_by))
    write.append(tx, lease.run_id, None, "run_" + status.value, entry, write.clock())
    return True
