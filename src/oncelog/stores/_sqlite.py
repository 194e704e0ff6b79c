"""The embedded store: stdlib ``sqlite3``, safe for several processes on one machine.

Writer settings, and why:
- ``journal_mode=WAL``: readers never block the writer, and a commit appends to one file.
- ``synchronous=FULL`` (durability ``full``): every commit fsyncs the WAL, so a committed
  intent survives a power loss. ``NORMAL`` (durability ``process``) syncs only at
  checkpoints: a commit survives the process being killed, not the OS crashing.
  Both are read back after being set, because a PRAGMA that fails is silently ignored.
- ``BEGIN IMMEDIATE``: a write transaction takes the write lock when it starts, so two
  processes cannot both read a state and then both act on it.
- ``busy_timeout``: a writer waits for another instead of failing at once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from .. import _crashpoints as crashpoints
from .._budgets import AgentBudget, Budget, BudgetAlert, Usage
from .._exceptions import (
    ConfigurationError,
    CorruptRecord,
    InvalidResolution,
    LeaseLost,
    RunLeased,
    StoreUnavailable,
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
from . import _sqlite_controls as controls
from . import _sqlite_queue as queue
from ._migrations import pending
from ._protocol import Intent, Lease, NewStep, Outcome, OwnerCheck
from ._rows import (
    NEXT_SEQ,
    RUN_COLUMNS,
    STEP_COLUMNS,
    journal_json,
    run_record,
    step_record,
    text,
)
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
from ._sqlite_tx import NOW, append, fence

T = TypeVar("T")
_SYNCHRONOUS = {"full": 2, "process": 1}
_SELECT_RUN = f"SELECT {RUN_COLUMNS}, {NEXT_SEQ} FROM runs"
_SELECT_STEP = f"SELECT {STEP_COLUMNS} FROM steps"


def _store_error(exc: sqlite3.Error, path: str) -> Exception:
    message = str(exc)
    if "malformed" in message or "not a database" in message:
        return CorruptRecord(f"the ledger at {path} is damaged: {message}")
    return StoreUnavailable(f"the ledger at {path} cannot be used: {message}")


class SQLiteStore:
    """One connection per store object, shared by its threads under a lock."""

    def __init__(self, path: str, *, durability: str = "full", busy_timeout: float = 30.0) -> None:
        if durability not in _SYNCHRONOUS:
            raise ConfigurationError(f"durability must be 'full' or 'process', not {durability!r}")
        self.path = path
        self.durability = durability
        self._lock = threading.RLock()
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
            self._configure(busy_timeout)
            self._migrate()
        except sqlite3.Error as exc:
            raise _store_error(exc, path) from exc

    def _configure(self, busy_timeout: float) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal" and self.path != ":memory:":
            raise ConfigurationError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
        wanted = _SYNCHRONOUS[self.durability]
        db.execute(f"PRAGMA synchronous = {wanted}")
        got = db.execute("PRAGMA synchronous").fetchone()[0]
        if got != wanted:
            raise ConfigurationError(f"{self.path}: PRAGMA synchronous is {got}, not {wanted}")
        db.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            current = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            for migration in pending("sqlite", current, self.path):
                for statement in migration.statements():
                    db.execute(statement)
                db.execute(
                    f"INSERT INTO schema_migrations VALUES (?, ?, {NOW})",
                    (migration.version, migration.name),
                )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; anything that goes wrong rolls it back whole."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _store_error(exc, self.path) from exc
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                # A failed COMMIT (EIO on fsync, a full disk) can leave the transaction
                # open; roll back so the connection is usable and nothing half-done stays.
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.IntegrityError):
                    raise _store_error(exc, self.path) from exc
                raise

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise _store_error(exc, self.path) from exc

    def _run_row(self, db: sqlite3.Connection, run_id: str) -> RunRecord | None:
        row = db.execute(f"{_SELECT_RUN} WHERE run_id = ?", (run_id,)).fetchone()
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
        with self._tx() as db:
            current = self._run_row(db, run_id)
            if current is None:
                if not create:
                    raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
                db.execute(
                    "INSERT INTO runs (run_id, status, plan, agent, budget, created_at, "
                    f"updated_at) VALUES (?, 'running', ?, ?, ?, {NOW}, {NOW})",
                    (run_id, plan_json, agent, None if budget is None else budget.to_json()),
                )
                append(
                    db, run_id, None, "run_created", journal_json(plan=plan_json, agent=text(agent))
                )
            else:
                if agent is not None and current.agent != agent:
                    raise ConfigurationError(
                        f"run belongs to agent {current.agent!r}, not {agent!r}", run_id=run_id
                    )
                self._check_holder(db, current, owner_is_dead)
                if plan is not None and current.plan != plan:
                    self._replace_plan(db, current, plan_json, replace_plan)
            return self._take(db, run_id, owner, ttl)

    def _take(
        self, db: sqlite3.Connection, run_id: str, owner: str, ttl: float
    ) -> tuple[Lease, RunRecord]:
        """Give ``owner`` the lease, with the next fencing token."""
        db.execute(
            f"UPDATE runs SET owner = ?, lease_expires_at = {NOW} + ?, "
            f"fencing_token = fencing_token + 1, updated_at = {NOW}, "
            # Only a person clears a halt; a completed run entered again is running
            # until it completes again (so a completed run never holds a step in doubt).
            "status = CASE WHEN status = 'halted' THEN status ELSE 'running' END "
            "WHERE run_id = ?",
            (owner, ttl, run_id),
        )
        record = self._run_row(db, run_id)
        assert record is not None
        append(
            db, run_id, None, "lease_acquired",
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
        with self._tx() as db:
            return queue.submit(db, run_id, agent, input_json, plan_json, budget_json)

    def claim(
        self,
        *,
        owner: str,
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> tuple[Lease, RunRecord] | None:
        with self._tx() as db:
            run_id = queue.runnable(db, agents, owner_is_dead)
            return None if run_id is None else self._take(db, run_id, owner, ttl)

    def heartbeat(self, lease: Lease) -> None:
        with self._tx() as db:
            fence(db, lease, renew=True)

    @staticmethod
    def _check_holder(db: sqlite3.Connection, current: RunRecord, gone: OwnerCheck) -> None:
        holder = current.owner
        if holder is None or gone(holder):
            return
        expired = db.execute(
            f"SELECT lease_expires_at < {NOW} FROM runs WHERE run_id = ?", (current.run_id,)
        ).fetchone()[0]
        if not expired:
            raise RunLeased(f"run is owned by live worker {holder}", run_id=current.run_id)

    def _replace_plan(
        self, db: sqlite3.Connection, current: RunRecord, plan_json: str | None, replace: bool
    ) -> None:
        entry = plan_replaced_json(current, plan_json, replace)
        db.execute("UPDATE runs SET plan = ? WHERE run_id = ?", (plan_json, current.run_id))
        append(db, current.run_id, None, "plan_replaced", entry)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        with self._tx() as db:
            fence(db, lease)
            db.execute(
                f"UPDATE runs SET status = ?, reason = ?, stopped_by = ?, owner = NULL, "
                f"lease_expires_at = NULL, updated_at = {NOW} WHERE run_id = ?",
                (status.value, reason, stopped_by, lease.run_id),
            )
            append(db, lease.run_id, None, "run_" + status.value, journal_json(reason=text(reason)))

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._read(f"{_SELECT_RUN} WHERE run_id = ?", (run_id,))
        if not rows:
            raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
        return run_record(rows[0])

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]:
        where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
        rows = self._read(
            f"{_SELECT_RUN} {where} ORDER BY updated_at DESC LIMIT ?", (*params, limit)
        )
        return [run_record(r) for r in rows]

    # -- steps --------------------------------------------------------------------------

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        rows = self._read(
            f"{_SELECT_STEP} WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
            (run_id, from_seq, limit),
        )
        return [step_record(r) for r in rows]

    def steps_in_doubt(self, limit: int) -> list[StepRecord]:
        # A completed run has no step in doubt (completing revisits every step), so only
        # the runs that are not completed are searched, by their primary key.
        rows = self._read(
            f"{_SELECT_STEP} WHERE run_id IN "
            "(SELECT run_id FROM runs WHERE status != 'completed') "
            "AND state IN (?, ?) ORDER BY started_at LIMIT ?",
            (*IN_DOUBT, limit),
        )
        return [step_record(r) for r in rows]

    def _begin_step(
        self,
        db: sqlite3.Connection,
        lease: Lease,
        step: NewStep,
        previous: StepState | None,
        reason: str | None = None,
    ) -> Intent:
        """Write the step as ``in_flight``; return its attempt number. A kill switch is
        checked here, in the transaction that writes the intent, so no effect starts after
        a halt was committed."""
        fence(db, lease)
        halt = controls.active_halt(db, lease.run_id, lease.agent)
        if halt is not None:
            raise halted(halt, lease.run_id, step.step_id)
        if step.needs_approval:
            controls.use_approval(db, lease, step)
        warnings: list[BudgetAlert] = []
        if lease.budgeted:
            warnings += controls.check_budget(db, lease.run_id, step, new=previous is None)
        if lease.agent is not None and step.type == "effect":
            warnings += controls.check_agent_budget(db, lease, step, new=previous is None)
        if previous is None:
            attempt = 1
            try:
                db.execute(
                    f"INSERT INTO steps ({STEP_COLUMNS}, cost, irreversible) VALUES (?, ?, ?, "
                    f"?, ?, ?, ?, ?, ?, 'in_flight', NULL, NULL, 1, 0, 0, {NOW}, NULL, ?, ?)",
                    (lease.run_id, step.seq, step.step_id, step.type, step.tool, step.kind,
                     step.key, step.args_hash, step.args_json, step.cost, step.irreversible),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise duplicate_step(lease, step) from exc
        else:
            attempt = self._restart_step(db, lease, step, previous)
        append(db, lease.run_id, step.seq, "intent", intent_json(lease, step, attempt, reason))
        return Intent(attempt, tuple(warnings))

    @staticmethod
    def _restart_step(
        db: sqlite3.Connection, lease: Lease, step: NewStep, previous: StepState
    ) -> int:
        cur = db.execute(
            f"UPDATE steps SET state = 'in_flight', attempts = attempts + 1, args_hash = ?, "
            f"args = ?, started_at = {NOW}, finished_at = NULL, result = NULL, error = NULL, "
            "cost = cost + ? WHERE run_id = ? AND seq = ? AND state = ?",
            (step.args_hash, step.args_json, step.cost, lease.run_id, step.seq, previous.value),
        )
        if cur.rowcount != 1:
            raise LeaseLost(
                "the step changed under this worker (resolved or taken over)",
                run_id=lease.run_id, step_id=step.step_id, key=step.key,
            )  # fmt: skip
        attempts: int = db.execute(
            "SELECT attempts FROM steps WHERE run_id = ? AND seq = ?", (lease.run_id, step.seq)
        ).fetchone()[0]
        return attempts

    def _end_step(
        self,
        db: sqlite3.Connection,
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
        cur = db.execute(
            f"UPDATE steps SET state = ?, result = ?, error = ?, tokens_in = ?, tokens_out = ?, "
            f"cost = COALESCE(?, cost), finished_at = {NOW} WHERE run_id = ? AND seq = ? "
            "AND attempts = ? AND state IN (?, ?)",
            (outcome.state.value, outcome.result_json, outcome.error_json, outcome.tokens_in,
             outcome.tokens_out, outcome.cost, lease.run_id, seq, attempt, *accepted),
        )  # fmt: skip
        if cur.rowcount != 1:
            raise LeaseLost(
                "the step was resolved or retried by someone else while this worker ran it",
                run_id=lease.run_id,
            )
        append(
            db, lease.run_id, seq, "probed" if probed else "outcome",
            outcome_json(outcome, attempt),
        )  # fmt: skip

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        with self._tx() as db:
            intent = self._begin_step(db, lease, step, previous, reason)
            crashpoints.reach("before_intent_commit", step.step_id)
        return intent

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        with self._tx() as db:
            fence(db, lease)
            self._end_step(db, lease, step.seq, attempt, outcome)
            crashpoints.reach("before_outcome_commit", step.step_id)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        with self._tx() as db:
            attempt = self._begin_step(db, lease, step, previous).attempt
            self._end_step(db, lease, step.seq, attempt, outcome)

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        with self._tx() as db:
            fence(db, lease)
            self._end_step(db, lease, seq, attempt, outcome, probed=True)

    def mark_unknown(self, lease: Lease, seq: int, reason: str) -> None:
        with self._tx() as db:
            fence(db, lease)
            db.execute(
                "UPDATE steps SET state = 'unknown' WHERE run_id = ? AND seq = ? "
                "AND state IN (?, ?)",
                (lease.run_id, seq, *IN_DOUBT),
            )
            db.execute(
                f"UPDATE runs SET status = 'halted', reason = ?, updated_at = {NOW} "
                "WHERE run_id = ?",
                (reason, lease.run_id),
            )
            append(db, lease.run_id, seq, "unknown", journal_json(reason=text(reason)))

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
        with self._tx() as db:
            step = self._step_in_doubt(db, run_id, step_id)
            # A person's decision is a takeover: any worker still running the step is fenced.
            db.execute(
                "UPDATE runs SET fencing_token = fencing_token + 1, owner = NULL, "
                "lease_expires_at = NULL WHERE run_id = ?",
                (run_id,),
            )
            db.execute(
                f"UPDATE steps SET state = ?, result = ?, finished_at = {NOW} "
                "WHERE run_id = ? AND seq = ?",
                (RESOLVED_STATE[resolution].value, result_json, run_id, step.seq),
            )
            if not db.execute(
                "SELECT 1 FROM steps WHERE run_id = ? AND state = 'unknown'", (run_id,)
            ).fetchone():
                queue.requeue(db, queue.AFTER_RESOLVE, run_id=run_id, by=by)
            append(
                db, run_id, step.seq, "resolved",
                journal_json(resolution=text(resolution.value), by=text(by), note=text(note),
                             result=result_json),
            )  # fmt: skip
            row = db.execute(f"{_SELECT_STEP} WHERE run_id = ? AND seq = ?", (run_id, step.seq))
            return step_record(row.fetchone())

    @staticmethod
    def _step_in_doubt(db: sqlite3.Connection, run_id: str, step_id: str) -> StepRecord:
        row = db.execute(
            f"{_SELECT_STEP} WHERE run_id = ? AND step_id = ?", (run_id, step_id)
        ).fetchone()
        if row is None:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise UnknownStep(f"run has no step {step_id!r}", run_id=run_id, step_id=step_id)
            raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
        step = step_record(row)
        if step.state.value not in IN_DOUBT:
            raise InvalidResolution(
                f"step is {step.state.value}; only an effect in doubt can be resolved",
                run_id=run_id, step_id=step_id, key=step.key,
            )  # fmt: skip
        return step

    # -- approvals and the kill switch (SQL in _sqlite_controls) -------------------------

    def request_approval(self, lease: Lease, step: NewStep) -> Approval:
        with self._tx() as db:
            fence(db, lease)
            return controls.request_approval(db, lease, step)

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
        with self._tx() as db:
            approval = controls.decide_approval(
                db, run_id, step_id, status, by=by, expires_in=expires_in, note=note
            )
            queue.requeue(db, queue.AFTER_APPROVAL, run_id=run_id, by=by)
            return approval

    def approvals(self, status: ApprovalStatus | None, limit: int) -> list[Approval]:
        with self._lock:
            return self._guarded(controls.list_approvals, self._db, status, limit)

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        with self._lock:
            return self._guarded(controls.active_halt, self._db, run_id, agent)

    def set_halt(self, scope: HaltScope, target: str, *, reason: str, by: str) -> Halt:
        with self._tx() as db:
            return controls.set_halt(db, scope, target, reason, by)

    def clear_halt(self, scope: HaltScope, target: str, *, by: str, note: str | None) -> Halt:
        with self._tx() as db:
            halt = controls.clear_halt(db, scope, target, by, note)
            queue.requeue_after_halt(db, scope, target, by)
            return halt

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        with self._lock:
            return self._guarded(controls.budget_usage, self._db, run_id)

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        with self._tx() as db:
            controls.set_budget(db, run_id, budget, by)
            queue.requeue(db, queue.AFTER_BUDGET, run_id=run_id, by=by)

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        with self._tx() as db:
            controls.set_agent_budget(db, agent, budget, by)
            queue.requeue(db, queue.AFTER_BUDGET, agent=agent, by=by)

    def record_alert(self, alert: BudgetAlert) -> bool:
        with self._tx() as db:
            return controls.record_alert(db, alert)

    def halts(self, *, active_only: bool, limit: int) -> list[Halt]:
        with self._lock:
            return self._guarded(controls.list_halts, self._db, active_only, limit)

    def _guarded(self, read: Callable[..., T], *args: Any) -> T:
        """A read outside a transaction, with SQLite's errors turned into the store's."""
        try:
            return read(*args)
        except sqlite3.Error as exc:
            raise _store_error(exc, self.path) from exc

    # -- journal ------------------------------------------------------------------------

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]:
        where = "WHERE id > ?" + (" AND run_id = ?" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = self._read(
            f"SELECT {JOURNAL_COLUMNS} FROM journal {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [journal_entry(row) for row in rows]

    def checkpoint(self, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
        with self._tx() as db:
            head = db.execute(CHAIN_HEAD.format(p="?", now=NOW), (run_id, run_id)).fetchone()
            last = db.execute(
                "SELECT entries, head FROM checkpoints WHERE run_id = ? ORDER BY id DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            made = new_checkpoint(run_id, head, last, sign)
            if made is None:
                return None
            cur = db.execute(
                "INSERT INTO checkpoints (run_id, entries, head, at, key_id, signature) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, made[0], made[1], made[2], key_id, made[3]),
            )
            return Checkpoint(int(cur.lastrowid or 0), run_id, made[0], made[1], made[2],
                              key_id, made[3])  # fmt: skip

    def checkpoints(self, run_id: str | None, after_id: int, limit: int) -> list[Checkpoint]:
        where = "WHERE id > ?" + (" AND run_id = ?" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = self._read(
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [checkpoint_record(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
