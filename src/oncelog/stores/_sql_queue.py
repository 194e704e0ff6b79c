"""The SQL of runs handed to workers: submitting, claiming (up to k runs in one
transaction; on PostgreSQL their rows locked ``FOR UPDATE SKIP LOCKED``, so two workers
never claim the same run and never wait for each other; on SQLite the single writer does
the same), and queueing a run again once a person has decided what stopped it. Each
function runs inside its caller's transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._exceptions import InputMismatch
from ..records._records import HaltScope
from . import _sql_names as names
from ._protocol import OwnerCheck
from ._rows import journal_json, text
from ._sql import NOW, Tx, in_list
from ._sql_tx import append

# What a person's decision releases: the error that stopped the run, by decision.
AFTER_RESOLVE = ("AmbiguousOutcome",)
AFTER_APPROVAL = ("ApprovalRequired",)
AFTER_BUDGET = ("BudgetExceeded", "BudgetPaused")
AFTER_HALT_CLEARED = ("RunHalted",)
# The journal events of a person's decisions that may let a stopped run go on.
DECISIONS = (
    "resolved", "approval_approved", "approval_denied", "budget_set", "agent_budget_set",
    "halt_cleared", "run_queued", "retries_resumed",
)  # fmt: skip
# How many runs held by a live lease one claim asks the owners of (a dead owner's run is
# taken at once on its own host), oldest first.
CLAIM_WINDOW = 64

_RUNNABLE = "status IN ('queued', 'running') AND input IS NOT NULL"


def submit(
    tx: Tx,
    run_id: str,
    agent: str | None,
    input_json: str,
    plan_json: str | None,
    budget_json: str | None,
) -> bool:
    """``Store.submit``, in the caller's transaction."""
    created = tx.execute(
        "INSERT INTO runs (run_id, status, plan, agent, budget, input, created_at, updated_at) "
        f"VALUES (?, 'queued', ?, ?, ?, ?, {NOW}, {NOW}) "
        "ON CONFLICT (run_id) DO NOTHING RETURNING created_at",
        (run_id, plan_json, agent, budget_json, input_json),
    ).fetchone()
    if created is None:
        row = tx.execute(
            "SELECT agent, input FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone() or (None, None)
        if tuple(row) != (agent, input_json):
            raise InputMismatch(
                f"run {run_id!r} was submitted with agent {row[0]!r} and input "
                f"{str(row[1])[:200]}; now agent {agent!r} and input {input_json[:200]}",
                run_id=run_id,
            )
        return False
    append(tx, run_id, None, "run_submitted",
           journal_json(plan=plan_json, agent=text(agent), input=input_json, budget=budget_json),
           at=created[0])  # fmt: skip
    return True


def _agents(agents: tuple[str | None, ...] | None) -> tuple[str, tuple[str, ...]]:
    if agents is None:
        return "", ()
    named = tuple(a for a in agents if a is not None)
    either = " OR agent IS NULL" if None in agents else ""
    return f" AND (agent IN {in_list(named)}{either})", named


def runnable(
    tx: Tx, agents: tuple[str | None, ...] | None, owner_is_dead: OwnerCheck, limit: int
) -> list[str]:
    """Up to ``limit`` submitted runs that no live worker holds and that no other claim has
    locked, those that have waited longest first: the runs ``limit`` claims one after
    another would take. Their rows stay locked until the commit.

    Free runs (no owner, or a lease run out) are found and locked by one statement (on
    PostgreSQL passing over the rows another claim holds, so two claims never wait on
    each other nor take the same run). A run whose lease still runs is looked at only
    among the ``CLAIM_WINDOW`` held longest, whose owners are asked whether they are gone:
    a worker holding more runs than the window still sees the runs queued after them."""
    where, params = _agents(agents)
    free = tx.execute(
        f"SELECT run_id, updated_at FROM runs WHERE {_RUNNABLE}{where} AND "
        f"(owner IS NULL OR lease_expires_at < {NOW}) ORDER BY updated_at LIMIT ?"
        f"{tx.dialect.skip_locked}",
        (*params, limit),
    ).fetchall()
    held = tx.execute(
        f"SELECT run_id, updated_at, owner FROM runs WHERE {_RUNNABLE}{where} AND "
        f"owner IS NOT NULL AND (lease_expires_at IS NULL OR lease_expires_at >= {NOW}) "
        "ORDER BY updated_at LIMIT ?",
        (*params, CLAIM_WINDOW),
    ).fetchall()
    orphans = [(run_id, at) for run_id, at, owner in held if owner_is_dead(owner)]
    if orphans:
        orphans = _locked(tx, orphans, owner_is_dead)
    oldest = sorted([*free, *orphans], key=lambda row: row[1])[:limit]
    return [str(run_id) for run_id, _ in oldest]


def _locked(tx: Tx, rows: list[tuple[str, Any]], owner_is_dead: OwnerCheck) -> list[Any]:
    """Those of the runs a dead owner held still runnable and held by nobody alive once
    their rows are locked (PostgreSQL: passing over those another claim has locked)."""
    run_ids = [run_id for run_id, _ in rows]
    locked = tx.execute(
        f"SELECT run_id, owner, lease_expires_at < {NOW} FROM runs "
        f"WHERE run_id IN {in_list(run_ids)} AND {_RUNNABLE}{tx.dialect.skip_locked}",
        run_ids,
    ).fetchall()
    free = {run_id for run_id, owner, expired in locked if owner is None or expired
            or owner_is_dead(owner)}  # fmt: skip
    return [row for row in rows if row[0] in free]


def requeue(
    tx: Tx,
    stopped_by: tuple[str, ...],
    *,
    run_id: str | None = None,
    agent: str | None = None,
    by: str,
) -> None:
    """Queue again the runs a person's decision released: those stopped by one of
    ``stopped_by`` and held by nobody, of one run, of one agent, or all (both None)."""
    where: str = ""
    params: tuple[str, ...] = ()
    if run_id is not None:
        where, params = " AND run_id = ?", (run_id,)
    elif agent is not None:
        where, params = " AND agent = ?", (agent,)
    tx.announce_decision(run_id or "")
    released = tx.execute(
        f"UPDATE runs SET status = 'queued', reason = NULL, stopped_by = NULL, "
        f"updated_at = {NOW} WHERE status IN ('halted', 'waiting') AND owner IS NULL "
        f"AND stopped_by IN {in_list(stopped_by)}{where} RETURNING run_id",
        (*stopped_by, *params),
    ).fetchall()
    for (released_id,) in released:
        append(tx, released_id, None, "run_queued", journal_json(by=text(by)))


def released(field: Callable[[str, str], str]) -> str:
    """The condition on ``runs`` of a queued run that a person's decision released
    (``run_queued`` with who decided; a drain's has no ``by``) and that no process has
    leased since. Each run's latest record of the two kinds is read backwards through
    ``journal_by_run``, so a long run's journal is not read through."""
    return (
        "WHERE status = 'queued' AND (SELECT event FROM journal "
        "WHERE journal.run_id = runs.run_id AND (event = 'lease_acquired' OR "
        f"(event = 'run_queued' AND {field('data', 'by')} IS NOT NULL)) "
        "ORDER BY id DESC LIMIT 1) = 'run_queued'"
    )


def awaiting_person(tx: Tx, run_id: str) -> bool:
    """``Store.awaiting_person``. A decision that landed while the run was still stopping
    (it could not queue a run still held) is found here, as it is journalled."""
    row = tx.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise names.unknown_run(tx, run_id)
    # A failed run waits for a person's retry or redrive, which queue it again (a status
    # of its own: ``run_queued`` is journalled with it).
    if row[0] not in ("halted", "waiting", "failed"):
        return False
    decided = tx.execute(
        f"SELECT 1 FROM journal WHERE run_id IN (?, '') AND event IN {in_list(DECISIONS)} "
        "AND id > (SELECT COALESCE(MAX(id), 0) FROM journal WHERE run_id = ? "
        "AND event = 'lease_acquired') LIMIT 1",
        (run_id, *DECISIONS, run_id),
    ).fetchone()
    return decided is None


def requeue_after_halt(tx: Tx, scope: HaltScope, target: str, by: str) -> None:
    if scope is HaltScope.RUN:
        requeue(tx, AFTER_HALT_CLEARED, run_id=target, by=by)
    elif scope is HaltScope.AGENT:
        requeue(tx, AFTER_HALT_CLEARED, agent=target, by=by)
    else:
        requeue(tx, AFTER_HALT_CLEARED, by=by)
