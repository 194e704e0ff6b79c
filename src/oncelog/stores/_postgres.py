"""The store for many machines: PostgreSQL through psycopg 3 and a connection pool, with
exactly the semantics of the SQLite store.

Where SQLite has one writer at a time, PostgreSQL has row locks: every write transaction
that checks a fencing token locks its run's row first (``_postgres_tx.fence``), so writers
of one run serialize and each sees what the previous one committed. Lease expiry is judged
by the server's clock. Open it with a ``postgresql://`` URL; ``options=-csearch_path=NAME``
keeps the ledger in its own schema.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from .. import _crashpoints as crashpoints
from .._budgets import AgentBudget, Budget, BudgetAlert, Usage
from .._exceptions import (
    ConfigurationError,
    InvalidResolution,
    LeaseLost,
    RunLeased,
    UnknownRun,
    UnknownStep,
    halted,
)
from .._records import (
    Approval,
    ApprovalStatus,
    Checkpoint,
    Halt,
    HaltScope,
    JournalEntry,
    Resolution,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
)
from .._serialization import encode
from . import _postgres_controls as controls
from . import _postgres_queue as queue
from ._postgres_migrate import migrate
from ._postgres_pool import Cursor, connect, describe, open_pool, read, reading, transaction
from ._postgres_tx import NOW, append, fence, lock_halts, lock_journal, lock_run
from ._protocol import Intent, Lease, NewStep, Outcome, OwnerCheck
from ._rows import NEXT_SEQ, RUN_COLUMNS, STEP_COLUMNS, journal_json, run_record, step_record, text
from ._shared import (
    CHAIN_HEAD,
    CHECKPOINT_COLUMNS,
    IN_DOUBT,
    JOURNAL_COLUMNS,
    RESOLVED_STATE,
    checkpoint_record,
    duplicate_step,
    intent_json,
    journal_entry,
    new_checkpoint,
    outcome_json,
    plan_replaced_json,
)
from ._sqlite_queue import AFTER_APPROVAL, AFTER_BUDGET, AFTER_RESOLVE

_SELECT_RUN = f"SELECT {RUN_COLUMNS}, {NEXT_SEQ} FROM runs"
_SELECT_STEP = f"SELECT {STEP_COLUMNS} FROM steps"


class PostgresStore:
    """A pool of connections per store object, shared by its threads."""

    def __init__(self, url: str, *, durability: str = "full") -> None:
        if durability not in ("full", "process"):
            raise ConfigurationError(f"durability must be 'full' or 'process', not {durability!r}")
        # Both modes commit with synchronous_commit = on: the server's WAL flush is what
        # makes an intent survive a crash of the server, whatever the agent process does.
        self.durability = durability
        self.where = describe(url)
        with connect(url) as conn:
            migrate(conn, self.where)
        self._pool = open_pool(url)

    def _tx(self) -> AbstractContextManager[Cursor]:
        return transaction(self._pool, self.where)

    def _run_row(self, cur: Cursor, run_id: str, *, lock: bool) -> RunRecord | None:
        row = cur.execute(
            f"{_SELECT_RUN} WHERE run_id = %s{' FOR UPDATE' if lock else ''}", (run_id,)
        ).fetchone()
        return None if row is None else run_record(row)

    # -- runs ---------------------------------------------------------------------------

    def acquire(
        self,
        run_id: str,
        *,
        owner: str,
        ttl: float,
        plan: tuple[str, ...] | None,
        replace_plan: bool,
        create: bool,
        owner_is_dead: OwnerCheck,
        agent: str | None = None,
        budget: Budget | None = None,
    ) -> tuple[Lease, RunRecord]:
        plan_json = None if plan is None else encode(list(plan), what="plan", limit=1 << 24)
        with self._tx() as cur:
            current = self._run_row(cur, run_id, lock=True)
            if current is None:
                if not create:
                    raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
                current = self._create(cur, run_id, plan_json, agent, budget)
            if current is not None:
                if agent is not None and current.agent != agent:
                    raise ConfigurationError(
                        f"run belongs to agent {current.agent!r}, not {agent!r}", run_id=run_id
                    )
                self._check_holder(cur, current, owner_is_dead)
                if plan is not None and current.plan != plan:
                    self._replace_plan(cur, current, plan_json, replace_plan)
            return self._take(cur, run_id, owner, ttl)

    def _take(self, cur: Cursor, run_id: str, owner: str, ttl: float) -> tuple[Lease, RunRecord]:
        """Give ``owner`` the lease, with the next fencing token (the run's row is locked)."""
        cur.execute(
            f"UPDATE runs SET owner = %s, lease_expires_at = {NOW} + %s, "
            f"fencing_token = fencing_token + 1, updated_at = {NOW}, "
            # Only a person clears a halt; a completed run entered again is running
            # until it completes again (so a completed run never holds a step in doubt).
            "status = CASE WHEN status = 'halted' THEN status ELSE 'running' END "
            "WHERE run_id = %s",
            (owner, ttl, run_id),
        )
        record = self._run_row(cur, run_id, lock=False)
        assert record is not None
        append(
            cur, run_id, None, "lease_acquired",
            journal_json(owner=text(owner), token=str(record.fencing_token)),
        )  # fmt: skip
        lease = Lease(
            run_id, owner, record.fencing_token, ttl, record.agent, record.budget is not None
        )
        return lease, record

    def submit(
        self,
        run_id: str,
        *,
        agent: str | None,
        input_json: str,
        plan: tuple[str, ...] | None,
        budget: Budget | None,
    ) -> bool:
        plan_json = None if plan is None else encode(list(plan), what="plan", limit=1 << 24)
        budget_json = None if budget is None else budget.to_json()
        with self._tx() as cur:
            return queue.submit(cur, run_id, agent, input_json, plan_json, budget_json)

    def claim(
        self,
        *,
        owner: str,
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> tuple[Lease, RunRecord] | None:
        with self._tx() as cur:
            run_id = queue.runnable(cur, agents, owner_is_dead)
            return None if run_id is None else self._take(cur, run_id, owner, ttl)

    def heartbeat(self, lease: Lease) -> None:
        with self._tx() as cur:
            fence(cur, lease, renew=True)

    def _create(
        self,
        cur: Cursor,
        run_id: str,
        plan_json: str | None,
        agent: str | None,
        budget: Budget | None,
    ) -> RunRecord | None:
        """Insert the run; if another worker created it first (its insert committed while
        this one waited), return that run, locked, to be acquired like any existing one."""
        created = cur.execute(
            "INSERT INTO runs (run_id, status, plan, agent, budget, created_at, updated_at) "
            f"VALUES (%s, 'running', %s, %s, %s, {NOW}, {NOW}) "
            "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
            (run_id, plan_json, agent, None if budget is None else budget.to_json()),
        ).fetchone()
        if created is None:
            return self._run_row(cur, run_id, lock=True)
        append(cur, run_id, None, "run_created", journal_json(plan=plan_json, agent=text(agent)))
        return None

    @staticmethod
    def _check_holder(cur: Cursor, current: RunRecord, gone: OwnerCheck) -> None:
        holder = current.owner
        if holder is None or gone(holder):
            return
        row = cur.execute(
            f"SELECT lease_expires_at < {NOW} FROM runs WHERE run_id = %s", (current.run_id,)
        ).fetchone()
        if row is None or not row[0]:
            raise RunLeased(f"run is owned by live worker {holder}", run_id=current.run_id)

    @staticmethod
    def _replace_plan(
        cur: Cursor, current: RunRecord, plan_json: str | None, replace: bool
    ) -> None:
        entry = plan_replaced_json(current, plan_json, replace)
        cur.execute("UPDATE runs SET plan = %s WHERE run_id = %s", (plan_json, current.run_id))
        append(cur, current.run_id, None, "plan_replaced", entry)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        with self._tx() as cur:
            fence(cur, lease)
            cur.execute(
                "UPDATE runs SET status = %s, reason = %s, stopped_by = %s, owner = NULL, "
                f"lease_expires_at = NULL, updated_at = {NOW} WHERE run_id = %s",
                (status.value, reason, stopped_by, lease.run_id),
            )
            entry = journal_json(reason=text(reason))
            append(cur, lease.run_id, None, "run_" + status.value, entry)

    def get_run(self, run_id: str) -> RunRecord:
        rows = read(self._pool, self.where, f"{_SELECT_RUN} WHERE run_id = %s", (run_id,))
        if not rows:
            raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
        return run_record(rows[0])

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]:
        where, params = ("WHERE status = %s", (status.value,)) if status else ("", ())
        rows = read(
            self._pool, self.where,
            f"{_SELECT_RUN} {where} ORDER BY updated_at DESC LIMIT %s", (*params, limit),
        )  # fmt: skip
        return [run_record(r) for r in rows]

    # -- steps --------------------------------------------------------------------------

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        rows = read(
            self._pool, self.where,
            f"{_SELECT_STEP} WHERE run_id = %s AND seq >= %s ORDER BY seq LIMIT %s",
            (run_id, from_seq, limit),
        )  # fmt: skip
        return [step_record(r) for r in rows]

    def steps_in_doubt(self, limit: int) -> list[StepRecord]:
        rows = read(
            self._pool, self.where,
            f"{_SELECT_STEP} WHERE run_id IN "
            "(SELECT run_id FROM runs WHERE status != 'completed') "
            "AND state IN (%s, %s) ORDER BY started_at LIMIT %s",
            (*IN_DOUBT, limit),
        )  # fmt: skip
        return [step_record(r) for r in rows]

    def _begin_step(
        self,
        cur: Cursor,
        lease: Lease,
        step: NewStep,
        previous: StepState | None,
        reason: str | None = None,
    ) -> Intent:
        """Write the step as ``in_flight``; return its attempt number. A kill switch is
        checked here, under the shared halts lock, so no effect starts after a halt was
        committed."""
        lock_halts(cur, exclusive=False)
        fence(cur, lease)
        halt = controls.active_halt(cur, lease.run_id, lease.agent)
        if halt is not None:
            raise halted(halt, lease.run_id, step.step_id)
        if step.needs_approval:
            controls.use_approval(cur, lease, step)
        warnings: list[BudgetAlert] = []
        if lease.budgeted:
            warnings += controls.check_budget(cur, lease.run_id, step, new=previous is None)
        if lease.agent is not None and step.type == "effect":
            warnings += controls.check_agent_budget(cur, lease, step, new=previous is None)
        if previous is None:
            attempt = 1
            try:
                cur.execute(
                    f"INSERT INTO steps ({STEP_COLUMNS}, cost, irreversible) VALUES (%s, %s, "
                    "%s, %s, %s, %s, %s, %s, %s, 'in_flight', NULL, NULL, 1, 0, 0, "
                    f"{NOW}, NULL, %s, %s)",
                    (lease.run_id, step.seq, step.step_id, step.type, step.tool, step.kind,
                     step.key, step.args_hash, step.args_json, step.cost, int(step.irreversible)),
                )  # fmt: skip
            except psycopg.errors.UniqueViolation as exc:
                raise duplicate_step(lease, step) from exc
        else:
            attempt = self._restart_step(cur, lease, step, previous)
        append(cur, lease.run_id, step.seq, "intent", intent_json(lease, step, attempt, reason))
        return Intent(attempt, tuple(warnings))

    @staticmethod
    def _restart_step(cur: Cursor, lease: Lease, step: NewStep, previous: StepState) -> int:
        row = cur.execute(
            "UPDATE steps SET state = 'in_flight', attempts = attempts + 1, args_hash = %s, "
            f"args = %s, started_at = {NOW}, finished_at = NULL, result = NULL, error = NULL, "
            "cost = cost + %s WHERE run_id = %s AND seq = %s AND state = %s RETURNING attempts",
            (step.args_hash, step.args_json, step.cost, lease.run_id, step.seq, previous.value),
        ).fetchone()
        if row is None:
            raise LeaseLost(
                "the step changed under this worker (resolved or taken over)",
                run_id=lease.run_id, step_id=step.step_id, key=step.key,
            )  # fmt: skip
        attempts: int = row[0]
        return attempts

    def _end_step(
        self,
        cur: Cursor,
        lease: Lease,
        seq: int,
        attempt: int,
        outcome: Outcome,
        *,
        probed: bool = False,
    ) -> None:
        """Record the outcome of the attempt in flight, or, ``probed``, a probe's answer
        for the attempt in doubt (``in_flight`` or already marked ``unknown``)."""
        accepted = IN_DOUBT if probed else (StepState.IN_FLIGHT.value,) * 2
        cur.execute(
            "UPDATE steps SET state = %s, result = %s, error = %s, tokens_in = %s, "
            f"tokens_out = %s, cost = COALESCE(%s, cost), finished_at = {NOW} "
            "WHERE run_id = %s AND seq = %s AND attempts = %s AND state IN (%s, %s)",
            (outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
             outcome.tokens_out, outcome.cost, lease.run_id, seq, attempt, *accepted),
        )  # fmt: skip
        if cur.rowcount != 1:
            raise LeaseLost(
                "the step was resolved or retried by someone else while this worker ran it",
                run_id=lease.run_id,
            )
        append(
            cur, lease.run_id, seq, "probed" if probed else "outcome",
            outcome_json(outcome, attempt),
        )  # fmt: skip

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        with self._tx() as cur:
            intent = self._begin_step(cur, lease, step, previous, reason)
            crashpoints.reach("before_intent_commit", step.step_id)
        return intent

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        with self._tx() as cur:
            fence(cur, lease)
            self._end_step(cur, lease, step.seq, attempt, outcome)
            crashpoints.reach("before_outcome_commit", step.step_id)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        with self._tx() as cur:
            attempt = self._begin_step(cur, lease, step, previous).attempt
            self._end_step(cur, lease, step.seq, attempt, outcome)

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        with self._tx() as cur:
            fence(cur, lease)
            self._end_step(cur, lease, seq, attempt, outcome, probed=True)

    def mark_unknown(self, lease: Lease, seq: int, reason: str) -> None:
        with self._tx() as cur:
            fence(cur, lease)
            cur.execute(
                "UPDATE steps SET state = 'unknown' WHERE run_id = %s AND seq = %s "
                "AND state IN (%s, %s)",
                (lease.run_id, seq, *IN_DOUBT),
            )
            cur.execute(
                f"UPDATE runs SET status = 'halted', reason = %s, updated_at = {NOW} "
                "WHERE run_id = %s",
                (reason, lease.run_id),
            )
            append(cur, lease.run_id, seq, "unknown", journal_json(reason=text(reason)))

    def resolve(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution,
        *,
        result_json: str | None,
        by: str,
        note: str | None,
    ) -> StepRecord:
        with self._tx() as cur:
            if not lock_run(cur, run_id):
                raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
            step = self._step_in_doubt(cur, run_id, step_id)
            # A person's decision is a takeover: any worker still running the step is fenced.
            cur.execute(
                "UPDATE runs SET fencing_token = fencing_token + 1, owner = NULL, "
                "lease_expires_at = NULL WHERE run_id = %s",
                (run_id,),
            )
            row = cur.execute(
                f"UPDATE steps SET state = %s, result = %s, finished_at = {NOW} "
                f"WHERE run_id = %s AND seq = %s RETURNING {STEP_COLUMNS}",
                (RESOLVED_STATE[resolution].value, result_json, run_id, step.seq),
            ).fetchone()
            if not cur.execute(
                "SELECT 1 FROM steps WHERE run_id = %s AND state = 'unknown'", (run_id,)
            ).fetchone():
                queue.requeue(cur, AFTER_RESOLVE, run_id=run_id, by=by)
            append(
                cur, run_id, step.seq, "resolved",
                journal_json(resolution=text(resolution.value), by=text(by), note=text(note),
                             result=result_json),
            )  # fmt: skip
            return step_record(row or ())

    @staticmethod
    def _step_in_doubt(cur: Cursor, run_id: str, step_id: str) -> StepRecord:
        row = cur.execute(
            f"{_SELECT_STEP} WHERE run_id = %s AND step_id = %s", (run_id, step_id)
        ).fetchone()
        if row is None:
            raise UnknownStep(f"run has no step {step_id!r}", run_id=run_id, step_id=step_id)
        step = step_record(row)
        if step.state.value not in IN_DOUBT:
            raise InvalidResolution(
                f"step is {step.state.value}; only an effect in doubt can be resolved",
                run_id=run_id, step_id=step_id, key=step.key,
            )  # fmt: skip
        return step

    # -- approvals, the kill switch and budgets (SQL in _postgres_controls) -------------

    def request_approval(self, lease: Lease, step: NewStep) -> Approval:
        with self._tx() as cur:
            fence(cur, lease)
            return controls.request_approval(cur, lease, step)

    def decide_approval(
        self,
        run_id: str,
        step_id: str,
        status: ApprovalStatus,
        *,
        by: str,
        expires_in: float | None,
        note: str | None,
    ) -> Approval:
        with self._tx() as cur:
            approval = controls.decide_approval(
                cur, run_id, step_id, status, by=by, expires_in=expires_in, note=note
            )
            queue.requeue(cur, AFTER_APPROVAL, run_id=run_id, by=by)
            return approval

    def approvals(self, status: ApprovalStatus | None, limit: int) -> list[Approval]:
        with reading(self._pool, self.where) as cur:
            return controls.list_approvals(cur, status, limit)

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        with reading(self._pool, self.where) as cur:
            return controls.active_halt(cur, run_id, agent)

    def set_halt(self, scope: HaltScope, target: str, *, reason: str, by: str) -> Halt:
        with self._tx() as cur:
            return controls.set_halt(cur, scope, target, reason, by)

    def clear_halt(self, scope: HaltScope, target: str, *, by: str, note: str | None) -> Halt:
        with self._tx() as cur:
            halt = controls.clear_halt(cur, scope, target, by, note)
            queue.requeue_after_halt(cur, scope, target, by)
            return halt

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        with reading(self._pool, self.where) as cur:
            return controls.budget_usage(cur, run_id)

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        with self._tx() as cur:
            lock_run(cur, run_id)
            controls.set_budget(cur, run_id, budget, by)
            queue.requeue(cur, AFTER_BUDGET, run_id=run_id, by=by)

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        with self._tx() as cur:
            # Runs' rows before the agent's budget row, the order intents lock them in.
            queue.requeue(cur, AFTER_BUDGET, agent=agent, by=by)
            controls.set_agent_budget(cur, agent, budget, by)

    def record_alert(self, alert: BudgetAlert) -> bool:
        with self._tx() as cur:
            return controls.record_alert(cur, alert)

    def halts(self, *, active_only: bool, limit: int) -> list[Halt]:
        with reading(self._pool, self.where) as cur:
            return controls.list_halts(cur, active_only, limit)

    # -- journal ------------------------------------------------------------------------

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]:
        where = "WHERE id > %s" + (" AND run_id = %s" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = read(
            self._pool, self.where,
            f"SELECT {JOURNAL_COLUMNS} FROM journal {where} ORDER BY id LIMIT %s",
            (*params, limit),
        )  # fmt: skip
        return [journal_entry(row) for row in rows]

    def checkpoint(self, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
        with self._tx() as cur:
            lock_journal(cur, run_id)  # the head read is the head kept
            head = cur.execute(CHAIN_HEAD.format(p="%s", now=NOW), (run_id, run_id)).fetchone()
            last = cur.execute(
                "SELECT entries, head FROM checkpoints WHERE run_id = %s ORDER BY id DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            made = new_checkpoint(run_id, head, last, sign)
            if made is None:
                return None
            row = cur.execute(
                "INSERT INTO checkpoints (run_id, entries, head, at, key_id, signature) "
                "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                (run_id, made[0], made[1], made[2], key_id, made[3]),
            ).fetchone()
            assert row is not None
            return Checkpoint(int(row[0]), run_id, made[0], made[1], made[2], key_id, made[3])

    def checkpoints(self, run_id: str | None, after_id: int, limit: int) -> list[Checkpoint]:
        where = "WHERE id > %s" + (" AND run_id = %s" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = read(
            self._pool, self.where,
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints {where} ORDER BY id LIMIT %s",
            (*params, limit),
        )  # fmt: skip
        return [checkpoint_record(row) for row in rows]

    def close(self) -> None:
        self._pool.close()
