"""The SQL of runs handed to workers, for PostgreSQL: submitting, claiming (one row lock
at a time, ``FOR UPDATE SKIP LOCKED``, so two workers never claim the same run and never
wait for each other), and queueing a run again once a person has decided what stopped it.
Each function runs inside its caller's transaction."""

from __future__ import annotations

from typing import Any

from .._exceptions import InputMismatch
from .._records import HaltScope
from ._postgres_pool import Cursor
from ._postgres_tx import NOW, append
from ._protocol import OwnerCheck
from ._rows import journal_json, text
from ._sqlite_queue import AFTER_HALT_CLEARED, CLAIM_WINDOW

_RUNNABLE = "status IN ('queued', 'running') AND input IS NOT NULL"


def submit(
    cur: Cursor,
    run_id: str,
    agent: str | None,
    input_json: str,
    plan_json: str | None,
    budget_json: str | None,
) -> bool:
    """Queue a new run with its input; True if it is new. The same submission again (a
    redelivered message) changes nothing; other input under the same id is refused."""
    created = cur.execute(
        "INSERT INTO runs (run_id, status, plan, agent, budget, input, created_at, updated_at) "
        f"VALUES (%s, 'queued', %s, %s, %s, %s, {NOW}, {NOW}) "
        "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
        (run_id, plan_json, agent, budget_json, input_json),
    ).fetchone()
    if created is None:
        row = cur.execute(
            "SELECT agent, input FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone() or (None, None)
        if tuple(row) != (agent, input_json):
            raise InputMismatch(
                f"run {run_id!r} was submitted with agent {row[0]!r} and input "
                f"{str(row[1])[:200]}; now agent {agent!r} and input {input_json[:200]}",
                run_id=run_id,
            )
        return False
    append(cur, run_id, None, "run_submitted",
           journal_json(plan=plan_json, agent=text(agent), input=input_json))  # fmt: skip
    return True


def _agents(agents: tuple[str | None, ...] | None) -> tuple[str, tuple[Any, ...]]:
    if agents is None:
        return "", ()
    named = [a for a in agents if a is not None]
    either = " OR agent IS NULL" if None in agents else ""
    return f" AND (agent = ANY(%s){either})", (named,)


def runnable(
    cur: Cursor, agents: tuple[str | None, ...] | None, owner_is_dead: OwnerCheck
) -> str | None:
    """The submitted run that has waited longest, that no live worker holds and that no
    other claim has locked; its row stays locked until the commit."""
    where, params = _agents(agents)
    rows = cur.execute(
        f"SELECT run_id, owner, lease_expires_at < {NOW} FROM runs WHERE {_RUNNABLE}{where} "
        "ORDER BY updated_at LIMIT %s",
        (*params, CLAIM_WINDOW),
    ).fetchall()
    for run_id, owner, expired in rows:
        if owner is None or expired or owner_is_dead(owner):
            locked = cur.execute(
                f"SELECT owner, lease_expires_at < {NOW} FROM runs WHERE run_id = %s "
                f"AND {_RUNNABLE} FOR UPDATE SKIP LOCKED",
                (run_id,),
            ).fetchone()
            if locked is not None and (locked[0] is None or locked[1] or owner_is_dead(locked[0])):
                return str(run_id)
    return None


def requeue(
    cur: Cursor,
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
        where, params = " AND run_id = %s", (run_id,)
    elif agent is not None:
        where, params = " AND agent = %s", (agent,)
    released = cur.execute(
        f"UPDATE runs SET status = 'queued', reason = NULL, stopped_by = NULL, "
        f"updated_at = {NOW} WHERE status IN ('halted', 'waiting') AND owner IS NULL "
        f"AND stopped_by = ANY(%s){where} RETURNING run_id",
        (list(stopped_by), *params),
    ).fetchall()
    for (released_id,) in released:
        append(cur, released_id, None, "run_queued", journal_json(by=text(by)))


def requeue_after_halt(cur: Cursor, scope: HaltScope, target: str, by: str) -> None:
    if scope is HaltScope.RUN:
        requeue(cur, AFTER_HALT_CLEARED, run_id=target, by=by)
    elif scope is HaltScope.AGENT:
        requeue(cur, AFTER_HALT_CLEARED, agent=target, by=by)
    else:
        requeue(cur, AFTER_HALT_CLEARED, by=by)
