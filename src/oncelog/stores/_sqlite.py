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
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .. import _crashpoints as crashpoints
from .._exceptions import (
    ConfigurationError,
    CorruptRecord,
    DuplicateStep,
    InvalidResolution,
    LeaseLost,
    PlanMismatch,
    RunLeased,
    SchemaTooNew,
    StoreUnavailable,
    UnknownRun,
    UnknownStep,
)
from .._records import (
    JournalEntry,
    Resolution,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    StepType,
)
from .._serialization import decode, encode
from ._migrations import migrations
from ._protocol import Lease, NewStep, Outcome, OwnerCheck

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_SYNCHRONOUS = {"full": 2, "process": 1}
_JSON_LIMIT = 1 << 30
_IN_DOUBT = (StepState.IN_FLIGHT.value, StepState.UNKNOWN.value)
_RUN_COLUMNS = (
    "run_id, status, plan, reason, created_at, updated_at, owner, fencing_token, next_seq"
)
_STEP_COLUMNS = (
    "run_id, seq, step_id, type, tool, kind, key, args_hash, args, state, result, error, "
    "attempts, tokens_in, tokens_out, started_at, finished_at"
)


def _json(value: Any) -> str:
    return encode(value, what="journal entry", limit=_JSON_LIMIT)


def _plan(value: Any) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not all(isinstance(step, str) and step for step in value)
        or len(set(value)) != len(value)
    ):
        raise ValueError(f"the stored plan is not a list of distinct step ids: {value!r}")
    return tuple(value)


def _run_record(row: sqlite3.Row) -> RunRecord:
    try:
        plan = None if row["plan"] is None else _plan(decode(row["plan"]))
        return RunRecord(
            run_id=row["run_id"],
            status=RunStatus(row["status"]),
            plan=plan,
            reason=row["reason"],
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            owner=row["owner"],
            fencing_token=int(row["fencing_token"]),
            next_seq=int(row["next_seq"]),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecord(f"run row does not decode: {exc}", run_id=row["run_id"]) from exc


def _step_record(row: sqlite3.Row) -> StepRecord:
    try:
        return StepRecord(
            run_id=row["run_id"],
            seq=int(row["seq"]),
            step_id=row["step_id"],
            type=StepType(row["type"]),
            tool=row["tool"],
            kind=row["kind"],
            key=row["key"],
            args_hash=row["args_hash"],
            args_json=row["args"],
            state=StepState(row["state"]),
            result_json=row["result"],
            error_json=row["error"],
            attempts=int(row["attempts"]),
            tokens_in=int(row["tokens_in"]),
            tokens_out=int(row["tokens_out"]),
            started_at=float(row["started_at"]),
            finished_at=None if row["finished_at"] is None else float(row["finished_at"]),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptRecord(
            f"step row does not decode: {exc}", run_id=row["run_id"], step_id=row["step_id"]
        ) from exc


def _store_error(exc: sqlite3.Error, path: str) -> Exception:
    text = str(exc)
    if "malformed" in text or "not a database" in text:
        return CorruptRecord(f"the ledger at {path} is damaged: {text}")
    return StoreUnavailable(f"the ledger at {path} cannot be used: {text}")


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
            self._db.row_factory = sqlite3.Row
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
        known = migrations("sqlite")
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            current = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            if known and current > known[-1].version:
                raise SchemaTooNew(
                    f"{self.path} has schema version {current}; this oncelog knows up to "
                    f"{known[-1].version}. Upgrade oncelog."
                )
            for migration in known:
                if migration.version <= current:
                    continue
                for statement in migration.statements():
                    db.execute(statement)
                db.execute(
                    f"INSERT INTO schema_migrations VALUES (?, ?, {_NOW})",
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
                if isinstance(exc, sqlite3.IntegrityError):
                    raise
                if isinstance(exc, sqlite3.Error):
                    raise _store_error(exc, self.path) from exc
                raise

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise _store_error(exc, self.path) from exc

    @staticmethod
    def _append(
        db: sqlite3.Connection, run_id: str, seq: int | None, event: str, data: dict[str, Any]
    ) -> None:
        db.execute(
            f"INSERT INTO journal (run_id, seq, event, data, at) VALUES (?, ?, ?, ?, {_NOW})",
            (run_id, seq, event, _json(data)),
        )

    @staticmethod
    def _fence(db: sqlite3.Connection, lease: Lease) -> None:
        """Refuse a stale owner and extend a current one's lease, inside the write."""
        cur = db.execute(
            f"UPDATE runs SET lease_expires_at = {_NOW} + ?, updated_at = {_NOW} "
            "WHERE run_id = ? AND owner = ? AND fencing_token = ?",
            (lease.ttl, lease.run_id, lease.owner, lease.token),
        )
        if cur.rowcount != 1:
            raise LeaseLost(
                "another worker took this run over; this worker may not write to it",
                run_id=lease.run_id,
            )

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
    ) -> tuple[Lease, RunRecord]:
        with self._tx() as db:
            row = db.execute(
                f"SELECT {_RUN_COLUMNS}, lease_expires_at < {_NOW} AS expired "
                "FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None:
                if not create:
                    raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
                plan_json = None if plan is None else _json(list(plan))
                db.execute(
                    f"INSERT INTO runs (run_id, status, plan, created_at, updated_at) "
                    f"VALUES (?, 'running', ?, {_NOW}, {_NOW})",
                    (run_id, plan_json),
                )
                self._append(db, run_id, None, "run_created", {"plan": plan})
            else:
                current = _run_record(row)
                holder = current.owner
                if holder and not row["expired"] and not owner_is_dead(holder):
                    raise RunLeased(f"run is owned by live worker {holder}", run_id=run_id)
                if plan is not None and current.plan != plan:
                    if not replace_plan and current.plan is not None:
                        raise PlanMismatch(
                            f"run has plan {list(current.plan)}, asked for {list(plan)}; "
                            "pass replace_plan=True to replace it",
                            run_id=run_id,
                        )
                    db.execute(
                        "UPDATE runs SET plan = ? WHERE run_id = ?", (_json(list(plan)), run_id)
                    )
                    self._append(
                        db,
                        run_id,
                        None,
                        "plan_replaced",
                        {
                            "old": None if current.plan is None else list(current.plan),
                            "new": list(plan),
                        },
                    )
            db.execute(
                f"UPDATE runs SET owner = ?, lease_expires_at = {_NOW} + ?, "
                "fencing_token = fencing_token + 1, updated_at = " + _NOW + ", "
                "status = CASE WHEN status = 'completed' THEN status ELSE 'running' END "
                "WHERE run_id = ?",
                (owner, ttl, run_id),
            )
            record = _run_record(
                db.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
            )
            self._append(
                db,
                run_id,
                None,
                "lease_acquired",
                {"owner": owner, "token": record.fencing_token},
            )
        return Lease(run_id, owner, record.fencing_token, ttl), record

    def finish(self, lease: Lease, status: RunStatus, reason: str | None) -> None:
        with self._tx() as db:
            self._fence(db, lease)
            db.execute(
                f"UPDATE runs SET status = ?, reason = ?, owner = NULL, lease_expires_at = NULL, "
                f"updated_at = {_NOW} WHERE run_id = ?",
                (status.value, reason, lease.run_id),
            )
            self._append(db, lease.run_id, None, "run_" + status.value, {"reason": reason})

    def get_run(self, run_id: str) -> RunRecord:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
        return _run_record(rows[0])

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]:
        where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs {where} ORDER BY updated_at DESC LIMIT ?",
            (*params, limit),
        )
        return [_run_record(r) for r in rows]

    # -- steps --------------------------------------------------------------------------

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        rows = self._read(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
            (run_id, from_seq, limit),
        )
        return [_step_record(r) for r in rows]

    def get_step(self, run_id: str, step_id: str) -> StepRecord:
        rows = self._read(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? AND step_id = ?",
            (run_id, step_id),
        )
        if not rows:
            self.get_run(run_id)
            raise UnknownStep(f"run has no step {step_id!r}", run_id=run_id, step_id=step_id)
        return _step_record(rows[0])

    def steps_in_doubt(self, limit: int) -> list[StepRecord]:
        rows = self._read(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE state IN (?, ?) ORDER BY started_at LIMIT ?",
            (*_IN_DOUBT, limit),
        )
        return [_step_record(r) for r in rows]

    def _begin_step(
        self, db: sqlite3.Connection, lease: Lease, step: NewStep, previous: StepState | None
    ) -> int:
        """Write the step as ``in_flight``; return its attempt number."""
        self._fence(db, lease)
        if previous is None:
            try:
                db.execute(
                    f"INSERT INTO steps ({_STEP_COLUMNS}) VALUES "
                    f"(?, ?, ?, ?, ?, ?, ?, ?, ?, 'in_flight', NULL, NULL, 1, 0, 0, {_NOW}, NULL)",
                    (
                        lease.run_id,
                        step.seq,
                        step.step_id,
                        step.type,
                        step.tool,
                        step.kind,
                        step.key,
                        step.args_hash,
                        step.args_json,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise DuplicateStep(
                    f"step id {step.step_id!r} is already recorded at another position "
                    f"(asked at position {step.seq}): step ids must be unique in a run",
                    run_id=lease.run_id,
                    step_id=step.step_id,
                    key=step.key,
                ) from exc
            db.execute(
                "UPDATE runs SET next_seq = MAX(next_seq, ?) WHERE run_id = ?",
                (step.seq + 1, lease.run_id),
            )
            attempt = 1
        else:
            cur = db.execute(
                f"UPDATE steps SET state = 'in_flight', attempts = attempts + 1, "
                f"args_hash = ?, args = ?, started_at = {_NOW}, finished_at = NULL, "
                "result = NULL, error = NULL WHERE run_id = ? AND seq = ? AND state = ?",
                (step.args_hash, step.args_json, lease.run_id, step.seq, previous.value),
            )
            if cur.rowcount != 1:
                raise LeaseLost(
                    "the step changed under this worker (resolved or taken over)",
                    run_id=lease.run_id,
                    step_id=step.step_id,
                    key=step.key,
                )
            attempt = int(
                db.execute(
                    "SELECT attempts FROM steps WHERE run_id = ? AND seq = ?",
                    (lease.run_id, step.seq),
                ).fetchone()[0]
            )
        self._append(
            db,
            lease.run_id,
            step.seq,
            "intent",
            {
                "step_id": step.step_id,
                "type": step.type,
                "tool": step.tool,
                "kind": step.kind,
                "key": step.key,
                "args_hash": step.args_hash,
                "args": decode(step.args_json),
                "attempt": attempt,
                "token": lease.token,
            },
        )
        return attempt

    def _end_step(
        self, db: sqlite3.Connection, lease: Lease, seq: int, attempt: int, outcome: Outcome
    ) -> None:
        cur = db.execute(
            f"UPDATE steps SET state = ?, result = ?, error = ?, tokens_in = ?, tokens_out = ?, "
            f"finished_at = {_NOW} WHERE run_id = ? AND seq = ? AND attempts = ? "
            "AND state = 'in_flight'",
            (
                outcome.state.value,
                outcome.result_json,
                outcome.error_json,
                outcome.tokens_in,
                outcome.tokens_out,
                lease.run_id,
                seq,
                attempt,
            ),
        )
        if cur.rowcount != 1:
            raise LeaseLost(
                "the step was resolved or retried by someone else while this worker ran it",
                run_id=lease.run_id,
            )
        self._append(
            db,
            lease.run_id,
            seq,
            "outcome",
            {
                "state": outcome.state.value,
                "attempt": attempt,
                "result": None if outcome.result_json is None else decode(outcome.result_json),
                "error": None if outcome.error_json is None else decode(outcome.error_json),
                "tokens_in": outcome.tokens_in,
                "tokens_out": outcome.tokens_out,
            },
        )

    def write_intent(self, lease: Lease, step: NewStep, previous: StepState | None) -> int:
        with self._tx() as db:
            attempt = self._begin_step(db, lease, step, previous)
            crashpoints.reach("before_intent_commit", step.step_id)
        return attempt

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        with self._tx() as db:
            self._fence(db, lease)
            self._end_step(db, lease, step.seq, attempt, outcome)
            crashpoints.reach("before_outcome_commit", step.step_id)

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        with self._tx() as db:
            attempt = self._begin_step(db, lease, step, previous)
            self._end_step(db, lease, step.seq, attempt, outcome)

    def mark_unknown(self, lease: Lease, seq: int, reason: str) -> None:
        with self._tx() as db:
            self._fence(db, lease)
            db.execute(
                "UPDATE steps SET state = 'unknown' WHERE run_id = ? AND seq = ? "
                "AND state IN (?, ?)",
                (lease.run_id, seq, *_IN_DOUBT),
            )
            db.execute(
                f"UPDATE runs SET status = 'halted', reason = ?, updated_at = {_NOW} "
                "WHERE run_id = ?",
                (reason, lease.run_id),
            )
            self._append(db, lease.run_id, seq, "unknown", {"reason": reason})

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
        state = {
            Resolution.DONE: StepState.DONE,
            Resolution.NOT_DONE: StepState.NOT_DONE,
            Resolution.ABANDON: StepState.ABANDONED,
        }[resolution]
        with self._tx() as db:
            rows = db.execute(
                f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? AND step_id = ?",
                (run_id, step_id),
            ).fetchall()
            if not rows:
                if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                    raise UnknownStep(
                        f"run has no step {step_id!r}", run_id=run_id, step_id=step_id
                    )
                raise UnknownRun(f"no run named {run_id!r}", run_id=run_id)
            step = _step_record(rows[0])
            if step.state.value not in _IN_DOUBT:
                raise InvalidResolution(
                    f"step is {step.state.value}; only an effect in doubt can be resolved",
                    run_id=run_id,
                    step_id=step_id,
                    key=step.key,
                )
            # A person's decision is a takeover: any worker still running the step is fenced.
            db.execute(
                "UPDATE runs SET fencing_token = fencing_token + 1, owner = NULL, "
                "lease_expires_at = NULL WHERE run_id = ?",
                (run_id,),
            )
            db.execute(
                f"UPDATE steps SET state = ?, result = ?, finished_at = {_NOW} "
                "WHERE run_id = ? AND seq = ?",
                (state.value, result_json, run_id, step.seq),
            )
            left = db.execute(
                "SELECT COUNT(*) FROM steps WHERE run_id = ? AND state = 'unknown'", (run_id,)
            ).fetchone()[0]
            if left == 0:
                db.execute(
                    f"UPDATE runs SET status = 'running', reason = NULL, updated_at = {_NOW} "
                    "WHERE run_id = ? AND status = 'halted'",
                    (run_id,),
                )
            self._append(
                db,
                run_id,
                step.seq,
                "resolved",
                {
                    "resolution": resolution.value,
                    "by": by,
                    "note": note,
                    "result": None if result_json is None else decode(result_json),
                },
            )
            row = db.execute(
                f"SELECT {_STEP_COLUMNS} FROM steps WHERE run_id = ? AND seq = ?",
                (run_id, step.seq),
            ).fetchone()
        return _step_record(row)

    # -- journal ------------------------------------------------------------------------

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]:
        where = "WHERE id > ?" + (" AND run_id = ?" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = self._read(
            f"SELECT id, run_id, seq, event, data, at FROM journal {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        out = []
        for r in rows:
            try:
                data = decode(r["data"])
            except ValueError as exc:
                raise CorruptRecord(
                    f"journal entry {r['id']} does not decode", run_id=r["run_id"]
                ) from exc
            out.append(JournalEntry(r["id"], r["run_id"], r["seq"], r["event"], data, r["at"]))
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
