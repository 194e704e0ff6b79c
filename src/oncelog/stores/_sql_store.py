"""The store's logic, written once over ``_sql``: both stores are this class with a
connection of their own (``SQLiteStore``, ``PostgresStore``). Every method is one
transaction (``_tx``) or one read (``_read``/``_reading``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from .._exceptions import ConfigurationError, RunPruned
from .._lazy import defer
from ..records._budgets import AgentBudget, AgentBudgetSetting, Budget, BudgetAlert, Usage
from ..records._records import (
    Approval,
    ApprovalHistory,
    ApprovalStatus,
    Checkpoint,
    EffectInDoubt,
    Halt,
    HaltScope,
    HoldRecord,
    JournalEntry,
    ReplayPage,
    ReplayRow,
    Resolution,
    RunRecord,
    RunStatus,
    StepRecord,
    StepState,
    StepType,
    UsedLink,
)
from ..records._serialization import encode
from . import _sql_controls as controls
from ._protocol import (
    BudgetDrift,
    DecisionFeed,
    KeyTimes,
    Lease,
    NewStep,
    OwnerCheck,
    PollingFeed,
)
from ._rows import (
    NEXT_SEQ,
    REPLAY_COLUMNS,
    RUN_COLUMNS,
    STEP_COLUMNS,
    journal_json,
    leased,
    run_record,
    step_record,
    text,
)
from ._shared import (
    CHECKPOINT_COLUMNS,
    JOURNAL_COLUMNS,
    checkpoint_record,
    journal_entry,
)
from ._sql import NOW, Dialect, Tx
from ._sql_guards import in_doubt, states
from ._sql_steps import StepWrites
from ._sql_tx import append, fence, lock_run

# The concerns an open and a run's steps do not use are imported at their first use
# (``_lazy``): each module an open imports is time an agent pays before its first step.
if TYPE_CHECKING:
    from ..records._retention import LedgerSize, PruneBatch, PrunedRun
    from . import _sql_approval_edits as approval_edits
    from . import _sql_approvals as approval_sql
    from . import _sql_contracts as contracts
    from . import _sql_evidence as evidence
    from . import _sql_holds as hold_sql
    from . import _sql_links as links
    from . import _sql_names as names
    from . import _sql_notices as notices
    from . import _sql_prune as prune_sql
    from . import _sql_queue as queue
    from . import _sql_resolutions as resolutions
    from . import _sql_retries as retries
    from . import _sql_runs as runs
    from . import _sql_tombstones as tombstones
else:
    defer(
        globals(),
        approval_edits="._sql_approval_edits",
        approval_sql="._sql_approvals",
        contracts="._sql_contracts",
        evidence="._sql_evidence",
        hold_sql="._sql_holds",
        links="._sql_links",
        names="._sql_names",
        notices="._sql_notices",
        prune_sql="._sql_prune",
        queue="._sql_queue",
        resolutions="._sql_resolutions",
        retries="._sql_retries",
        runs="._sql_runs",
        tombstones="._sql_tombstones",
    )


def _never_dead(owner: str) -> bool:
    """Without a way to tell, every owner whose lease runs is taken to be alive."""
    return False


_SELECT_RUN = f"SELECT {RUN_COLUMNS}, {NEXT_SEQ} FROM runs"
_SELECT_STEP = f"SELECT {STEP_COLUMNS} FROM steps"
# Replaying a settled effect only hands back what is recorded; any other step (in doubt,
# not done, a read or a model call, which are the agent code's to replay) must be asked
# for again at its position.
_SETTLED = (StepState.DONE, StepState.FAILED, StepState.ABANDONED)
_FIRST_UNSETTLED = (
    "SELECT MIN(seq) FROM steps WHERE run_id = ? AND seq < ? AND "
    f"(type <> '{StepType.EFFECT.value}' OR state NOT IN ({states(_SETTLED)}))"
)
_STEP_OF_RUN = ", ".join(f"s.{column.strip()}" for column in STEP_COLUMNS.split(","))


_COMMA = "','"


def _replay_page(concat: Callable[[str, str], str], steps: str) -> str:
    """A page of steps as ``ReplayPage`` reads it: one row of aggregates, so the driver
    converts six values per page instead of seven per step (each a round of the GIL in
    Python's sqlite3). Arguments are JSON null, which no call's arguments equal, unless
    the step is done with a result: every other step is decided whole. The separators
    are literals: SQLite calls a function given as one (``char(31)``) once per row."""
    done = "state = 'done' AND error IS NULL AND result IS NOT NULL"
    columns = [
        *(concat(name, "'\x1f'") for name in ("step_id", "type", "tool")),
        concat(f"CASE WHEN {done} THEN args ELSE 'null' END", _COMMA),
        concat("coalesce(result, 'null')", _COMMA),
    ]
    return (
        f"SELECT count(*), {', '.join(columns)} FROM {steps} "
        "WHERE run_id = ? AND seq >= ? AND seq < ?"
    )


# Every column of a page must list its steps in position order. PostgreSQL's aggregates
# sort their own rows. SQLite's feed every aggregate of the query each row in turn, in the
# order its loop visits them: NOT INDEXED leaves one way to visit them, a search of the
# primary key's b-tree (the table: WITHOUT ROWID), in key order, which only ``PRAGMA
# reverse_unordered_selects`` would reverse (turned off before the first page). A name holding
# DLE is stored escaped by PostgreSQL and its driver unescapes the whole text: the escape
# is a prefix code, so that is each name.
_REPLAY_PAGE = {
    "sqlite": (
        "PRAGMA reverse_unordered_selects = OFF",
        _replay_page(
            lambda column, sep: f"group_concat({column}{'' if sep == _COMMA else ', ' + sep})",
            "steps NOT INDEXED",
        ),
    ),
    "postgres": (
        None,
        _replay_page(
            lambda column, sep: f"string_agg({column}::text, {sep} ORDER BY seq)", "steps"
        ),
    ),
}


class SQLStore(StepWrites):
    """Everything but the connection: a subclass gives ``dialect``, ``_tx`` and
    ``_reading``."""

    dialect: Dialect
    durability: str
    where: str  # the ledger's place as a person reads it: a path, a URL without password
    created = False  # opening it made a new ledger (SQLite: a new file, or an empty one)
    _replays_ordered = False  # ``replay_page``: the connection visits rows in key order

    def _tx(self, *, durable: bool = True) -> AbstractContextManager[Tx]:
        """One write transaction. Not ``durable``: the store may commit it without its own
        flush to disk, to be made durable with the next durable commit (an outcome or a
        model/read record, whose loss in a power cut leaves an effect in doubt, never run
        again blindly, or a read or model call to make again)."""
        raise NotImplementedError

    def _reading(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._reading() as tx:
            return tx.execute(sql, params).fetchall()

    def _run_row(self, tx: Tx, run_id: str, *, lock: bool) -> RunRecord | None:
        row = tx.execute(
            f"{_SELECT_RUN} WHERE run_id = ?{self.dialect.for_update if lock else ''}", (run_id,)
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
        origin: str | None = None,
    ) -> tuple[Lease, RunRecord]:
        plan_json = None if plan is None else encode(list(plan), what="plan", limit=1 << 24)
        # Not durable: the run's start and its lease ride on the next fsync (the first
        # intent's, or the run's end's). Nothing outside the ledger acts on them before
        # that, and a power loss that takes them also ends every process that held the
        # lease (docs/guarantees.md, "A power loss or an OS crash").
        with self._tx(durable=False) as tx:
            if budget is not None:
                self._keep_totals(tx)
            elif create:
                quick = self._create_leased(tx, run_id, owner, ttl, plan, plan_json, agent, origin)
                if quick is not None:
                    return quick
            current = self._run_row(tx, run_id, lock=True)
            if current is None:
                if not create:
                    raise names.unknown_run(tx, run_id)
                if runs.create(tx, run_id, plan_json, agent, budget):
                    return self._take(tx, run_id, owner, ttl, origin)
                # Another worker's insert committed while this one waited: that run is
                # acquired like any existing one.
                current = self._run_row(tx, run_id, lock=True)
                assert current is not None, "a run whose insert conflicted exists"
            if agent is not None and current.agent != agent:
                raise ConfigurationError(
                    f"run belongs to agent {current.agent!r}, not {agent!r}", run_id=run_id
                )
            runs.check_holder(tx, current, owner_is_dead)
            if plan is not None and current.plan != plan:
                runs.replace_plan(tx, current, plan_json, replace_plan)
            return self._take(tx, run_id, owner, ttl, origin)

    @staticmethod
    def _create_leased(
        tx: Tx,
        run_id: str,
        owner: str,
        ttl: float,
        plan: tuple[str, ...] | None,
        plan_json: str | None,
        agent: str | None,
        origin: str | None,
    ) -> tuple[Lease, RunRecord] | None:
        """A new run without a budget, created with its lease taken, where a store can do
        that in fewer statements (SQLite): None, having written nothing, if the run exists
        or the store has no such way; the general path then creates or takes it."""
        return None

    def _take(
        self, tx: Tx, run_id: str, owner: str, ttl: float, origin: str | None
    ) -> tuple[Lease, RunRecord]:
        """Give ``owner`` the lease, with the next fencing token (the run's row is locked)."""
        tx.execute(
            f"UPDATE runs SET owner = ?, lease_expires_at = {NOW} + ?, "
            f"fencing_token = fencing_token + 1, updated_at = {NOW}, "
            # Only a person clears a halt; a completed run entered again is running
            # until it completes again (so a completed run never holds a step in doubt).
            "status = CASE WHEN status = 'halted' THEN status ELSE 'running' END "
            "WHERE run_id = ?",
            (owner, ttl, run_id),
        )
        record = self._run_row(tx, run_id, lock=False)
        assert record is not None
        append(
            tx, run_id, None, "lease_acquired",
            leased(owner, str(record.fencing_token), ttl, origin),
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
        with self._tx() as tx:
            if budget is not None:
                self._keep_totals(tx)
            created = queue.submit(tx, run_id, agent, input_json, plan_json, budget_json)
            refused = tombstones.pruned(tx, run_id) if created else None
            if refused is not None:  # no worker is to run it again: the row is rolled back
                raise refused
            return created

    def claim(
        self,
        *,
        owner: str,
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> tuple[Lease, RunRecord] | None:
        one = (owner,)
        taken = self.claim_many(owners=one, ttl=ttl, agents=agents, owner_is_dead=owner_is_dead)
        return taken[0] if taken else None

    def claim_many(
        self,
        *,
        owners: Sequence[str],
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> list[tuple[Lease, RunRecord]]:
        # Not durable, as ``acquire``'s start of a run: a power loss that takes the claims
        # also ends the process that held them.
        with self._tx(durable=False) as tx:
            run_ids = queue.runnable(tx, agents, owner_is_dead, len(owners))
            taking = zip(run_ids, owners, strict=False)  # as many runs as were found
            return [self._take(tx, run_id, owner, ttl, None) for run_id, owner in taking]

    def heartbeat(self, lease: Lease) -> None:
        with self._tx() as tx:
            fence(tx, lease, renew=True)

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        with self._tx() as tx:
            self._finish(tx, lease, status, reason, stopped_by)

    @staticmethod
    def _finish(
        tx: Tx, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None
    ) -> None:
        """Fence, then write the run's end and its journal record."""
        fence(tx, lease)
        tx.execute(
            "UPDATE runs SET status = ?, reason = ?, stopped_by = ?, owner = NULL, "
            f"lease_expires_at = NULL, updated_at = {NOW} WHERE run_id = ?",
            (status.value, reason, stopped_by, lease.run_id),
        )
        entry = journal_json(reason=text(reason), stopped_by=text(stopped_by))
        append(tx, lease.run_id, None, "run_" + status.value, entry)

    def get_run(self, run_id: str) -> RunRecord:
        with self._reading() as tx:
            row = tx.execute(f"{_SELECT_RUN} WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise names.unknown_run(tx, run_id)
        return run_record(row)

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]:
        where, params = ("WHERE status = ?", (status.value,)) if status else ("", ())
        rows = self._read(
            f"{_SELECT_RUN} {where} ORDER BY updated_at DESC LIMIT ?", (*params, limit),
        )  # fmt: skip
        return [run_record(r) for r in rows]

    def released_runs(self, limit: int) -> list[RunRecord]:
        where = queue.released(self.dialect.json_field)
        rows = self._read(f"{_SELECT_RUN} {where} ORDER BY updated_at DESC LIMIT ?", (limit,))
        return [run_record(r) for r in rows]

    # -- steps --------------------------------------------------------------------------

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        rows = self._read(
            f"{_SELECT_STEP} WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
            (run_id, from_seq, limit),
        )  # fmt: skip
        return [step_record(r) for r in rows]

    def step_named(self, run_id: str, step_id: str) -> StepRecord | None:
        rows = self._read(f"{_SELECT_STEP} WHERE run_id = ? AND step_id = ?", (run_id, step_id))
        return step_record(rows[0]) if rows else None

    def first_unsettled(self, run_id: str, before: int) -> int:
        rows = self._read(_FIRST_UNSETTLED, (run_id, before))
        return before if not rows or rows[0][0] is None else int(rows[0][0])

    def key_times(self, run_id: str, seq: int) -> KeyTimes | None:
        rows = self._read(
            f"SELECT {NOW}, COALESCE(first_started_at, started_at), started_at FROM steps "
            "WHERE run_id = ? AND seq = ?",
            (run_id, seq),
        )
        return KeyTimes(*map(float, rows[0])) if rows else None

    def replay_page(self, run_id: str, from_seq: int, to_seq: int) -> ReplayPage:
        ordered, page = _REPLAY_PAGE[self.dialect.name]
        with self._reading() as tx:
            if ordered is not None and not self._replays_ordered:
                tx.execute(ordered)  # once: the connection is the store's own
                self._replays_ordered = True
            found, *texts = tx.execute(page, (run_id, from_seq, to_seq)).fetchone()
        return ReplayPage(found, *(text or "" for text in texts))  # no rows: NULLs

    def replay_rows(self, run_id: str, from_seq: int, limit: int) -> list[ReplayRow]:
        return self._read(
            f"SELECT {REPLAY_COLUMNS} FROM steps WHERE run_id = ? AND seq >= ? "
            "ORDER BY seq LIMIT ?",
            (run_id, from_seq, limit),
        )

    def effects_in_doubt(self, limit: int) -> list[EffectInDoubt]:
        # A completed run has no step in doubt (completing revisits every step): only the
        # runs that are not completed are searched. An in-flight effect is orphaned once
        # its run's lease has lapsed by the store's clock (or was released): no worker
        # holds the run, so nobody is running it.
        rows = self._read(
            f"SELECT {_STEP_OF_RUN}, r.owner, "
            f"(r.lease_expires_at IS NULL OR r.lease_expires_at < {NOW}), {NOW} - s.started_at "
            "FROM steps s JOIN runs r ON r.run_id = s.run_id WHERE r.status != 'completed' "
            f"AND {in_doubt('s.state')} ORDER BY s.started_at LIMIT ?",
            (limit,),
        )  # fmt: skip
        found = []
        for row in rows:
            step = step_record(row[:-3])
            lapsed = step.state is StepState.IN_FLIGHT and bool(row[-2])
            found.append(EffectInDoubt(step, lapsed, row[-3], max(0.0, float(row[-1]))))
        return found

    def _keep_totals(self, tx: Tx) -> None:
        """Before a budget is written: make sure the budget totals are kept from this
        transaction on. Their triggers always exist on PostgreSQL; SQLite creates them
        when a ledger first has a budget (``_sqlite_totals``)."""

    def resolve(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution,
        *,
        result_json: str | None,
        by: str,
        note: str | None,
        force: bool = False,
        owner_is_dead: OwnerCheck = _never_dead,
        attempt: int | None = None,
        correct: bool = False,
        link: str | None = None,
    ) -> StepRecord:
        decision = resolutions.Decision(
            resolution, result_json, by, note, force, owner_is_dead, attempt
        )
        decide = resolutions.correct if correct else resolutions.resolve
        with self._tx() as tx:
            if link is not None:
                links.take(tx, link, run_id, resolution.value, by)
            return decide(tx, run_id, step_id, decision)

    def retry_step(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        why: str,
        force: bool = False,
        owner_is_dead: OwnerCheck = _never_dead,
        link: str | None = None,
    ) -> StepRecord:
        with self._tx() as tx:
            if link is not None:
                links.take(tx, link, run_id, "retried", by)
            return retries.retry(
                tx, run_id, step_id, by=by, why=why, force=force, gone=owner_is_dead
            )

    def pause_retries(
        self, run_id: str, step_id: str, *, paused: bool, by: str, why: str
    ) -> StepRecord:
        with self._tx() as tx:
            return retries.pause(tx, run_id, step_id, paused=paused, by=by, why=why)

    def retries_paused(self, run_id: str, seq: int) -> str | None:
        with self._reading() as tx:
            return retries.paused_by(tx, run_id, seq)

    def set_result_contract(self, tool: str, contract_json: str) -> None:
        with self._tx() as tx:
            contracts.declare(tx, tool, contract_json)

    def result_contract(self, tool: str) -> str | None:
        with self._reading() as tx:
            return contracts.contract(tx, tool)

    # -- approvals, the kill switch and budgets (SQL in _sql_approvals, _sql_controls) --

    def request_approval(self, lease: Lease, step: NewStep, shape: str | None = None) -> Approval:
        with self._tx() as tx:
            fence(tx, lease)
            return approval_sql.request_approval(tx, lease, step, shape)

    def approval_history(self, run_id: str, step_id: str) -> ApprovalHistory:
        with self._reading() as tx:
            return approval_edits.approval_history(tx, run_id, step_id)

    def decide_approval(
        self,
        run_id: str,
        step_id: str,
        status: ApprovalStatus,
        *,
        by: str,
        expires_in: float | None,
        note: str | None,
        request: int | None = None,
        args_hash: str | None = None,
        edited: dict[str, Any] | None = None,
        link: str | None = None,
    ) -> Approval:
        with self._tx() as tx:
            if link is not None:
                links.take(tx, link, run_id, status.value, by)
            approval = approval_sql.decide_approval(
                tx, run_id, step_id, status, by=by, expires_in=expires_in, note=note,
                request=request, args_hash=args_hash, edited=edited,
            )  # fmt: skip
            queue.requeue(tx, queue.AFTER_APPROVAL, run_id=run_id, by=by)
            return approval

    def used_link(self, nonce: str) -> UsedLink | None:
        with self._reading() as tx:
            return links.used(tx, nonce)

    def approvals(self, status: ApprovalStatus | None, limit: int) -> list[Approval]:
        with self._reading() as tx:
            return controls.list_approvals(tx, status, limit)

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        with self._reading() as tx:
            return controls.active_halt(tx, run_id, agent)

    def set_halt(
        self, scope: HaltScope, target: str, *, reason: str, by: str, ahead: bool = False
    ) -> Halt:
        with self._tx() as tx:
            return controls.set_halt(tx, scope, target, reason, by, ahead=ahead)

    def clear_halt(
        self, scope: HaltScope, target: str, *, by: str, note: str | None, link: str | None = None,
        switch: int | None = None,
    ) -> Halt:  # fmt: skip
        with self._tx() as tx:
            if link is not None:
                links.take(tx, link, target, "cleared", by)
            halt = controls.clear_halt(tx, scope, target, by, note, switch)
            queue.requeue_after_halt(tx, scope, target, by)
            return halt

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        with self._reading() as tx:
            return controls.budget_usage(tx, run_id)

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        with self._tx() as tx:
            if budget is not None:
                self._keep_totals(tx)
            lock_run(tx, run_id)
            controls.set_budget(tx, run_id, budget, by)
            queue.requeue(tx, queue.AFTER_BUDGET, run_id=run_id, by=by)

    def agent_budgets(self) -> list[AgentBudgetSetting]:
        rows = self._read("SELECT agent, budget, set_by, set_at FROM agent_budgets ORDER BY agent")
        return [
            AgentBudgetSetting(agent, AgentBudget.from_json(limits), by, float(at))
            for agent, limits, by, at in rows
        ]

    def budget_drift(self, run_id: str | None) -> list[BudgetDrift]:
        with self._reading() as tx:
            return controls.budget_drift(tx, run_id)

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        with self._tx() as tx:
            if budget is not None:
                self._keep_totals(tx)
            # Runs' rows before the agent's budget row, the order intents lock them in.
            queue.requeue(tx, queue.AFTER_BUDGET, agent=agent, by=by)
            controls.set_agent_budget(tx, agent, budget, by)

    def record_alert(self, alert: BudgetAlert) -> bool:
        with self._tx() as tx:
            return controls.record_alert(tx, alert)

    def halts(self, *, active_only: bool, limit: int) -> list[Halt]:
        with self._reading() as tx:
            return controls.list_halts(tx, active_only, limit)

    # -- holds on a resource ------------------------------------------------------------

    def take_hold(self, lease: Lease, resource: str) -> int:
        with self._tx() as tx:
            return hold_sql.take(tx, lease, resource)

    def give_up_hold(self, lease: Lease, resource: str, token: int) -> bool:
        with self._tx() as tx:
            return hold_sql.give_up(tx, lease, resource, token)

    def release_hold(self, resource: str, *, by: str, why: str, force: bool) -> HoldRecord:
        with self._tx() as tx:
            return hold_sql.release_by_person(tx, resource, by=by, why=why, force=force)

    def holds(self, limit: int) -> list[HoldRecord]:
        sql = f"{hold_sql.SELECT_HOLDS} ORDER BY h.resource LIMIT ?"
        return [hold_sql.hold_record(row) for row in self._read(sql, (limit,))]

    # -- waiting for a person -----------------------------------------------------------

    def awaiting_person(self, run_id: str) -> bool:
        with self._reading() as tx:
            return queue.awaiting_person(tx, run_id)

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        return nullcontext(PollingFeed())

    def record_notice(self, run_id: str, notice_id: str, data_json: str) -> bool:
        with self._tx() as tx:
            return notices.record_notice(tx, run_id, notice_id, data_json)

    def record_waiting(self, run_id: str, data_json: str) -> None:
        with self._tx() as tx:
            notices.record_waiting(tx, run_id, data_json)

    def confirm_notice(self, run_id: str, notice_id: str) -> None:
        with self._tx() as tx:
            notices.confirm_notice(tx, run_id, notice_id)

    # -- journal ------------------------------------------------------------------------

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]:
        where = "WHERE id > ?" + (" AND run_id = ?" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = self._read(
            f"SELECT {JOURNAL_COLUMNS} FROM journal {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )  # fmt: skip
        return [journal_entry(row) for row in rows]

    def checkpoint(self, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
        with self._tx() as tx:
            return evidence.checkpoint(tx, run_id, key_id, sign)

    def checkpoints(self, run_id: str | None, after_id: int, limit: int) -> list[Checkpoint]:
        where = "WHERE id > ?" + (" AND run_id = ?" if run_id is not None else "")
        params: tuple[Any, ...] = (after_id,) if run_id is None else (after_id, run_id)
        rows = self._read(
            f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )  # fmt: skip
        return [checkpoint_record(row) for row in rows]

    def table_rows(
        self, table: str, after: tuple[Any, ...], limit: int, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        with self._reading() as tx:
            return evidence.table_rows(tx, table, after, limit, run_id)

    def ledger_meta(self) -> dict[str, int]:
        with self._reading() as tx:
            return evidence.ledger_meta(tx)

    # -- retention ----------------------------------------------------------------------

    def prune_candidates(
        self, older_than: float | None, agents: Mapping[str, float], limit: int
    ) -> list[str]:
        with self._reading() as tx:
            return prune_sql.candidates(tx, older_than, agents, limit)

    def prune_runs(
        self,
        runs: Sequence[PrunedRun],
        archive: str,
        archive_sha256: str,
        signer: tuple[str, Callable[[str], str]] | None,
    ) -> PruneBatch:
        with self._tx() as tx:
            return prune_sql.remove(tx, runs, archive, archive_sha256, signer)

    def forget_pruned(self, run_id: str, *, by: str) -> RunPruned:
        with self._tx() as tx:
            return tombstones.forget(tx, run_id, by)

    def set_retention(self, agent: str, keep: float | None, *, by: str) -> None:
        with self._tx() as tx:
            if agent:
                prune_sql.check_agents(tx, [agent])
            prune_sql.set_policy(tx, agent, keep, by)

    def retention(self) -> dict[str, float]:
        with self._reading() as tx:
            return prune_sql.policy(tx)

    def ledger_size(self) -> LedgerSize:
        with self._reading() as tx:
            return prune_sql.size(tx)

    def close(self) -> None:
        raise NotImplementedError
