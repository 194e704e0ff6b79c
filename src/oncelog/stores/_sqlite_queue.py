"""The SQL of runs handed to workers: submitting, claiming, and queueing a run again once
a person has decided what stopped it. Each function runs inside its caller's transaction."""

from __future__ import annotations

import sqlite3

from .._exceptions import InputMismatch
from .._records import HaltScope
from ._protocol import OwnerCheck
from ._rows import journal_json, text
from ._sqlite_tx import NOW, append

# What a person's decision releases: the error that stopped the run, by decision.
AFTER_RESOLVE = ("AmbiguousOutcome",)
AFTER_APPROVAL = ("ApprovalRequired",)
AFTER_BUDGET = ("BudgetExceeded", "BudgetPaused")
AFTER_HALT_CLEARED = ("RunHalted",)
# How many runnable rows one claim looks at before giving up for this round.
CLAIM_WINDOW = 64


def submit(
    db: sqlite3.Connection,
    run_id: str,
    agent: str | None,
    input_json: str,
    plan_json: str | None,
    budget_json: str | None,
) -> bool:
    """Queue a new run with its input; True if it is new. The same submission again (a
    redelivered message) changes nothing; other input under the same id is refused."""
    row = db.execute("SELECT agent, input FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is not None:
        if tuple(row) != (agent, input_json):
            raise InputMismatch(
                f"run {run_id!r} was submitted with agent {row[0]!r} and input "
                f"{str(row[1])[:200]}; now agent {agent!r} and input {input_json[:200]}",
                run_id=run_id,
            )
        return False
    db.execute(
        "INSERT INTO runs (run_id, status, plan, agent, budget, input, created_at, updated_at) "
        f"VALUES (?, 'queued', ?, ?, ?, ?, {NOW}, {NOW})",
        (run_id, plan_json, agent, budget_json, input_json),
    )
    append(db, run_id, None, "run_submitted",
           journal_json(plan=plan_json, agent=text(agent), input=input_json))  # fmt: skip
    return True


def runnable(
    db: sqlite3.Connection, agents: tuple[str | None, ...] | None, owner_is_dead: OwnerCheck
) -> str | None:
    """The submitted run that has waited longest and that no live worker holds."""
    where: str = ""
    params: tuple[str, ...] = ()
    if agents is not None:
        named = tuple(a for a in agents if a is not None)
        where = f" AND (agent IN ({', '.join('?' * len(named))})" if named else " AND (0"
        where += " OR agent IS NULL)" if None in agents else ")"
        params = named
    rows = db.execute(
        f"SELECT run_id, owner, lease_expires_at < {NOW} FROM runs "
        f"WHERE status IN ('queued', 'running') AND input IS NOT NULL{where} "
        "ORDER BY updated_at LIMIT ?",
        (*params, CLAIM_WINDOW),
    ).fetchall()
    for run_id, owner, expired in rows:
        if owner is None or expired or owner_is_dead(owner):
            return str(run_id)
    return None


def requeue(
    db: sqlite3.Connection,
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
    marks = ", ".join("?" * len(stopped_by))
    released = db.execute(
        f"SELECT run_id FROM runs WHERE status IN ('halted', 'waiting') AND owner IS NULL "
        f"AND stopped_by IN ({marks}){where}",
        (*stopped_by, *params),
    ).fetchall()
    for (released_id,) in released:
        db.execute(
            f"UPDATE runs SET status = 'queued', reason = NULL, stopped_by = NULL, "
            f"updated_at = {NOW} WHERE run_id = ?",
            (released_id,),
        )
        append(db, released_id, None, "run_queued", journal_json(by=text(by)))


def requeue_after_halt(db: sqlite3.Connection, scope: HaltScope, target: str, by: str) -> None:
    if scope is HaltScope.RUN:
        requeue(db, AFTER_HALT_CLEARED, run_id=target, by=by)
    elif scope is HaltScope.AGENT:
        requeue(db, AFTER_HALT_CLEARED, agent=target, by=by)
    else:
        requeue(db, AFTER_HALT_CLEARED, by=by)
