"""The facade users meet: open a ledger, declare tools, run agents, resolve what is in doubt."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from . import _next as next_steps
from ._exceptions import ConfigurationError, InvalidPayload, InvalidResolution, UnknownRun
from ._person_results import Form, ResultContract
from .audit import _pages as pages
from .audit._export import export_lines
from .controls import _waiting as waiting
from .controls._alerts import AlertCallback
from .controls._budgets import AgentBudget, AgentBudgetSetting, Budget, Usage
from .controls._notices import AnyAlertCallback, Notices
from .process import _leases as leases
from .process._heartbeat import HEARTBEATS
from .records._no_result import NO_RESULT
from .records._records import (
    Approval,
    ApprovalStatus,
    Checkpoint,
    EffectInDoubt,
    Halt,
    HaltScope,
    JournalEntry,
    Resolution,
    RunRecord,
    RunStatus,
    StepRecord,
)
from .records._serialization import encode
from .runtime._calls import Surroundings
from .runtime._effects import Engine
from .runtime._names import check_name, check_text
from .runtime._replay import ReplayCursor
from .runtime._run import RunContext
from .runtime._run_options import PlanArg, RunOptions
from .runtime._tools import tool
from .stores import DEFAULT_PATH, Lease, Store, open_store

if TYPE_CHECKING:
    from pathlib import Path

    from .audit._signing import Signer
    from .audit._verify import Report

P = ParamSpec("P")
R = TypeVar("R")

_UNSET: Any = object()  # resolve() given no result at all, which None cannot stand for


class Ledger:
    """A handle on one store. Thread-safe; open one per process and pass it around."""

    def __init__(
        self,
        store: Store,
        *,
        lease_ttl: float = 30.0,
        max_payload_bytes: int = 1 << 20,
        approval_poll: float = 1.0,
        key_namespace: str = "",
        on_budget_alert: AlertCallback | None = None,
        signer: Signer | None = None,
        redaction_key: bytes | None = None,
        on_alert: AnyAlertCallback | None = None,
        alert_webhook: str | None = None,
        url: str | None = None,
    ) -> None:
        if lease_ttl <= 0 or max_payload_bytes <= 0:
            raise ConfigurationError("lease_ttl and max_payload_bytes must be positive")
        self.store = store
        # The process's drain flag, heartbeats and observers, handed to each run's engine.
        self.surroundings = Surroundings()
        self.lease_ttl = lease_ttl
        self.max_payload_bytes = max_payload_bytes
        self.approval_poll = approval_poll  # seconds between looks, while async code waits
        self.key_namespace = key_namespace
        self.on_budget_alert = on_budget_alert
        self.notices = Notices(store, on_alert, alert_webhook)
        self.url = url  # what the store was opened from, if it was opened from a URL
        self.closed = False
        self.signer = signer  # signs a checkpoint of each run's chain when the run ends
        self._redaction_key = redaction_key
        # tool -> (schema object, form, contract) this process stored
        self._declared_results: dict[str, tuple[object, str, str]] = {}

    # -- declaring tools ----------------------------------------------------------------

    # Tools belong to no ledger: ``oncelog.tool`` is the same decorator, for modules that
    # declare tools before any ledger is open (a worker's handlers).
    tool = staticmethod(tool)

    # -- running ------------------------------------------------------------------------

    def run(
        self,
        run_id: str,
        *,
        plan: PlanArg = None,
        replace_plan: bool = False,
        create: bool = True,
        agent: str | None = None,
        budget: Budget | None = None,
    ) -> RunContext:
        """Start or resume the run named ``run_id``: take it from outside the process (the
        Job name, the queue message id, the ticket id), never from a fresh UUID.

        ``plan`` (a list of step ids, or a function returning one, called only when the
        run has no plan yet) is stored before the first step. A different plan for an
        existing run raises ``PlanMismatch`` unless ``replace_plan``. With ``create=False``
        an unknown ``run_id`` raises ``UnknownRun``. ``agent`` names the scope the run
        belongs to (its kill switch covers the run); it is fixed when the run is created.
        ``budget`` is stored when the run is created and ignored afterwards, so that no
        restart resets it; ``set_budget`` is how a person changes it."""
        check_name(run_id, "run_id")
        if agent is not None:
            check_name(agent, "agent", run_id=run_id)
        options = RunOptions(plan, replace_plan, create, agent, budget)
        return RunContext(self, run_id, options)

    def submit(
        self,
        run_id: str,
        input: Any = None,
        *,
        agent: str | None = None,
        plan: Sequence[str] | None = None,
        budget: Budget | None = None,
    ) -> bool:
        """Queue a run for workers (``oncelog worker``), with the ``input`` its handler
        gets; True if it is new. Submitting the same run id with the same agent and input
        again (a redelivered message) changes nothing; other input raises
        ``InputMismatch``."""
        check_name(run_id, "run_id")
        if agent is not None:
            check_name(agent, "agent", run_id=run_id)
        input_json = encode(input, what="input", limit=self.max_payload_bytes)
        return self.store.submit(
            run_id, agent=agent, input_json=input_json,
            plan=None if plan is None else tuple(plan), budget=budget,
        )  # fmt: skip

    def claim(self, agents: Sequence[str | None] | None = None) -> RunContext | None:
        """Take the lease of a runnable submitted run (of one of ``agents``, None standing
        for runs of no agent; of any agent without them), ready to be entered; or None.
        What ``oncelog worker`` does between runs."""
        if agents is not None:
            agents = tuple(agents)
        owner = leases.new_owner()
        try:
            claimed = self.store.claim(
                owner=owner, ttl=self.lease_ttl, agents=agents, owner_is_dead=leases.is_dead
            )
        except BaseException:
            leases.forget(owner)
            raise
        if claimed is None:
            leases.forget(owner)
            return None
        return RunContext(self, claimed[0].run_id, RunOptions(claimed=claimed))

    def _start(self, run_id: str, options: RunOptions) -> tuple[Engine, RunRecord]:
        if options.claimed is not None:
            lease, record = options.claimed
        else:
            lease, record = self._acquire(run_id, options)
        cursor = ReplayCursor(self.store, run_id, record.next_seq)
        engine = Engine(
            self.store, lease, cursor, record.plan, self.max_payload_bytes, self.key_namespace,
            on_budget_alert=self.notices.budget_callback(self.on_budget_alert),
            surroundings=self.surroundings,
        )  # fmt: skip
        HEARTBEATS.hold(self.store, lease)
        return engine, record

    def _acquire(self, run_id: str, options: RunOptions) -> tuple[Lease, RunRecord]:
        stored = self._resolve_plan(run_id, options.plan)
        owner = leases.new_owner()
        try:
            return self.store.acquire(
                run_id,
                owner=owner,
                ttl=self.lease_ttl,
                plan=stored,
                replace_plan=options.replace_plan,
                create=options.create,
                owner_is_dead=leases.is_dead,
                agent=options.agent,
                budget=options.budget,
            )
        except BaseException:
            leases.forget(owner)
            raise

    def _resolve_plan(self, run_id: str, plan: PlanArg) -> tuple[str, ...] | None:
        if callable(plan):
            try:
                existing = self.store.get_run(run_id).plan
            except UnknownRun:
                existing = None
            plan = existing if existing is not None else plan()
        if plan is None:
            return None
        steps = tuple(plan)
        if not all(isinstance(s, str) and s for s in steps) or len(set(steps)) != len(steps):
            raise ConfigurationError(f"a plan is a list of distinct non-empty step ids: {steps}")
        for step_id in steps:
            check_name(step_id, "a plan's step id", run_id=run_id)
        return steps

    # -- a person's decisions -----------------------------------------------------------

    def resolve(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution | Literal["done", "not_done", "abandon"],
        *,
        by: str,
        result: Any = _UNSET,
        note: str | None = None,
        force: bool = False,
        correct: bool = False,
    ) -> StepRecord:
        """Decide an effect in doubt: ``done`` with ``result``, the provider's answer (or
        ``result=oncelog.NO_RESULT`` if it cannot be known: the agent then gets
        ``NO_RESULT`` there, now and on every replay); ``not_done`` (safe to run again,
        with the same key) or ``abandon``. ``by`` names the person. While a live process
        holds the run's lease it may be running the step: ``RunLeased``, unless
        ``force`` (journalled, with the owner overridden).

        A ``done`` result must fit what the tool declared (``result_schema=``, or an MCP
        tool's output schema; an MCP tool also takes a plain text), else
        ``InvalidResolution`` says why. ``correct=True`` replaces a person's earlier
        resolution of the run's last step, as long as nothing has acted on it (no later
        step, the run not completed); the journal keeps both."""
        _check_decision("resolve", by, note, run_id, step_id)
        resolution = _resolution(resolution, run_id, step_id)
        if resolution is Resolution.DONE and result is not _UNSET and result is not NO_RESULT:
            result = self._person_result(run_id, step_id, result)
        result_json = self._resolution_result(resolution, result, run_id, step_id)
        decide = self.store.correct_resolution if correct else self.store.resolve
        return decide(
            run_id, step_id, resolution, result_json=result_json, by=by, note=note,
            force=force, owner_is_dead=leases.is_dead,
        )  # fmt: skip

    def _resolution_result(
        self, resolution: Resolution, result: Any, run_id: str, step_id: str
    ) -> str | None:
        """The recorded result of a decision: given with ``done`` only, and never left
        out by accident (a forgotten result would reach the agent as None)."""
        if resolution is not Resolution.DONE:
            if result is not _UNSET and result is not None:
                raise InvalidResolution(
                    f"a result goes with 'done' only, not {resolution.value!r}",
                    run_id=run_id, step_id=step_id,
                )  # fmt: skip
            return None
        if result is _UNSET:
            raise InvalidResolution(
                "'done' needs the provider's result (result=...), or result=oncelog.NO_RESULT "
                "if it cannot be known",
                run_id=run_id, step_id=step_id,
            )  # fmt: skip
        if result is NO_RESULT:
            return None
        try:
            return encode(result, what="result", limit=self.max_payload_bytes)
        except InvalidPayload as exc:
            raise type(exc)(exc.message, run_id=run_id, step_id=step_id) from None

    def wait_for_decision(self, run_id: str, *, timeout: float | timedelta) -> bool:
        """Wait until a person's decision may let the run ``run_id``, stopped for a person
        (halted or waiting), go on: then True, and running the agent's code again
        continues it. False if no decision came within ``timeout``; ``Draining`` if this
        process starts draining (SIGTERM) meanwhile. The run holds no lease while it
        waits. On PostgreSQL the decision wakes the waiter at once (LISTEN/NOTIFY);
        otherwise it looks every ``approval_poll`` seconds."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        return waiting.wait_for_decision(
            self.store, run_id, seconds, self.approval_poll, self.notices.redeliver
        )

    async def wait_for_decision_async(self, run_id: str, *, timeout: float | timedelta) -> bool:
        """``wait_for_decision`` for async code: the event loop goes on meanwhile."""
        import asyncio  # only async code pays for it (see _run._in_thread)

        return await asyncio.to_thread(self.wait_for_decision, run_id, timeout=timeout)

    def _person_result(self, run_id: str, step_id: str, result: Any) -> Any:
        """A person's result, shaped and checked as the step's tool declared."""
        step = next((s for s in self.steps(run_id) if s.step_id == step_id), None)
        contract = None if step is None else self.store.result_contract(step.tool)
        if step is None or contract is None:
            return result
        try:
            return ResultContract.from_json(contract).shape(result)
        except ValueError as exc:
            raise InvalidResolution(
                f"not a result of {step.tool!r}: {exc}", run_id=run_id, step_id=step_id,
                key=step.key,
            ) from None  # fmt: skip

    def declare_result(
        self, tool: str, schema: dict[str, Any] | None = None, *, form: Form = "json"
    ) -> None:
        """Store what a person's result for ``tool`` must look like, so that ``resolve``
        checks it in whatever process a person decides in: a value matching the JSON
        Schema ``schema`` (``form="json"``), or an MCP tool result (``form="mcp"``,
        ``schema`` the tool's output schema). A tool's ``result_schema=`` is declared at
        its first use; stored once per process."""
        declared = self._declared_results.get(tool)
        if declared is not None and declared[0] is schema and declared[1] == form:
            return  # a tool's own schema, asked at each of its steps: encoded once
        stored = ResultContract(form, schema).to_json()
        if declared is None or declared[2] != stored:
            self.store.set_result_contract(tool, stored)
        self._declared_results[tool] = (schema, form, stored)

    # -- budgets ------------------------------------------------------------------------

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        """A run's budget (None without one) and what the run has used of it."""
        return self.store.budget_usage(run_id)

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        """Change a run's budget (raise it to let a stopped run go on); journalled."""
        _check_decision("set_budget", by, None, run_id)
        self.store.set_budget(run_id, budget, by=by)

    def agent_budgets(self) -> list[AgentBudgetSetting]:
        """Every agent's daily budget as it stands, by agent, with who set it and when."""
        return self.store.agent_budgets()

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        """Daily limits for every run started with ``agent=agent`` together; checked in
        each effect's intent transaction. ``None`` removes them. Journalled."""
        check_name(agent, "agent")
        _check_decision("set_agent_budget", by, None)
        self.store.set_agent_budget(agent, budget, by=by)

    # -- approvals ----------------------------------------------------------------------

    def approve(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        request: int | None = None,
        args_hash: str | None = None,
        expires_in: timedelta | float | None = None,
        note: str | None = None,
    ) -> Approval:
        """Approve one pending request of a step, for exactly the arguments it was made
        with, once: the next attempt uses it up. ``expires_in`` bounds how long it holds.

        Name the request you read by its id (``request``) and/or its ``args_hash``;
        naming neither is refused (``UnknownApproval``) once the step was asked with more
        than one set of arguments, and a request superseded by a newer one can no longer
        be decided."""
        _check_decision("approve", by, note, run_id, step_id)
        seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in
        return self.store.decide_approval(
            run_id, step_id, ApprovalStatus.APPROVED, by=by, expires_in=seconds, note=note,
            request=request, args_hash=args_hash,
        )  # fmt: skip

    def deny(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        request: int | None = None,
        args_hash: str | None = None,
        note: str | None = None,
    ) -> Approval:
        """Deny one pending request of a step (named as for ``approve``): the agent gets
        ``ApprovalDenied`` there, now and on every replay, for those arguments."""
        _check_decision("deny", by, note, run_id, step_id)
        return self.store.decide_approval(
            run_id, step_id, ApprovalStatus.DENIED, by=by, expires_in=None, note=note,
            request=request, args_hash=args_hash,
        )  # fmt: skip

    def approvals(
        self, status: ApprovalStatus | str | None = "pending", *, limit: int = 100
    ) -> list[Approval]:
        """Approval requests, newest first (by default the pending ones)."""
        return self.store.approvals(None if status is None else ApprovalStatus(status), limit)

    # -- the kill switch ----------------------------------------------------------------

    def halt(
        self, reason: str, *, by: str, run: str | None = None, agent: str | None = None
    ) -> Halt:
        """Turn a durable kill switch on: for one ``run``, every run of an ``agent``, or,
        with neither, every run. From then on no new step of a covered run starts (it
        raises ``RunHalted``, exit code 3), in this process or any other, across restarts,
        until a person clears it. ``by`` names who or what set it (a person, a detector)."""
        scope, target = _switch(run, agent)
        if not reason or not by:
            raise ConfigurationError("a halt needs a reason and by=... naming who set it")
        _check_decision("halt", by, reason)
        return self.store.set_halt(scope, target, reason=reason, by=by)

    def clear_halt(
        self,
        *,
        by: str,
        run: str | None = None,
        agent: str | None = None,
        note: str | None = None,
    ) -> Halt:
        """Turn a kill switch off. Only a person should: ``by`` names them, and it is
        recorded with the halt and in the journal. ``UnknownHalt`` if it is not on."""
        scope, target = _switch(run, agent)
        _check_decision("clear_halt", by, note)
        return self.store.clear_halt(scope, target, by=by, note=note)

    def halts(self, *, active_only: bool = True, limit: int = 100) -> list[Halt]:
        """Kill switches, newest first; with ``active_only=False`` the cleared ones too."""
        return self.store.halts(active_only=active_only, limit=limit)

    # -- reading ------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        return self.store.get_run(run_id)

    def runs(self, status: RunStatus | str | None = None, *, limit: int = 100) -> list[RunRecord]:
        return self.store.list_runs(None if status is None else RunStatus(status), limit)

    def steps(self, run_id: str) -> list[StepRecord]:
        """Every recorded step of a run, in order."""
        self.store.get_run(run_id)
        out: list[StepRecord] = []
        while True:
            page = self.store.steps(run_id, out[-1].seq + 1 if out else 0, 1000)
            out.extend(page)
            if len(page) < 1000:
                return out

    def in_doubt(self, *, limit: int = 100) -> list[StepRecord]:
        """Effects whose outcome is unknown or not yet recorded, oldest first."""
        return self.store.steps_in_doubt(limit)

    def effects_in_doubt(self, *, limit: int = 100) -> list[EffectInDoubt]:
        """``in_doubt()`` with who may still be running each effect: an in-flight effect
        whose run's lease has lapsed (by the store's clock) is orphaned, since nobody is
        running it; each comes with the lease's last owner and its age."""
        return self.store.effects_in_doubt(limit)

    def what_next(self, run_id: str) -> list[str]:
        """What happens next for the run, in words a person acts on: the first line says
        what the run does by itself; any others are the commands, arguments filled in,
        that move it (``oncelog show`` prints them, the console shows them)."""
        return next_steps.what_next(self, run_id)

    def released_runs(self) -> list[RunRecord]:
        """Queued runs that a person's decision released and nothing has taken up since:
        they still need attention until one moves."""
        return self.store.released_runs(next_steps.LISTED)

    def journal(
        self, run_id: str | None = None, *, after: int = 0, limit: int = 1000
    ) -> list[JournalEntry]:
        """One page of the journal: at most ``limit`` records after id ``after``."""
        return self.store.journal(run_id, after, limit)

    def iter_journal(
        self, run_id: str | None = None, *, after: int = 0, page: int = pages.PAGE
    ) -> Iterator[JournalEntry]:
        """Every journal record after id ``after`` (of one run; ``""`` for those of no
        run, such as kill switches and agent budgets; all with None), in order, read
        ``page`` at a time as the iterator advances: nothing is left out however long."""
        return pages.journal(self.store, run_id, after, page)

    def verify(
        self,
        *,
        public_keys: Iterable[str | Path] = (),
        against: Iterable[Checkpoint] = (),
        run_id: str | None = None,
    ) -> Report:
        """Check the journal's hash chains (of one run, or all), the signed checkpoints
        (with ``public_keys``, and those of an earlier export ``against``), and that the
        tables hold what the journal says."""
        from .audit._verify import verify  # imported when asked: it brings the signing code

        return verify(self.store, public_keys=public_keys, against=against, run_id=run_id)

    def export(
        self, *, run_id: str | None = None, after_id: int = 0, checkpoints: bool = True
    ) -> Iterator[str]:
        """The journal as JSON lines (records after ``after_id``, then the checkpoints),
        for keeping it outside this machine and verifying it there."""
        return export_lines(self.store, run_id=run_id, after_id=after_id, checkpoints=checkpoints)

    def redaction_key_for(self, tool_name: str) -> bytes:
        """The key that hashes secret fields; a tool with secrets needs one."""
        if self._redaction_key is None:
            raise ConfigurationError(
                f"tool {tool_name!r} declares secret fields, which are recorded as a keyed "
                "hash: give oncelog.open(redaction_key=...) or $ONCELOG_REDACTION_KEY (keep "
                "it stable: another key makes every recorded secret look changed)"
            )
        return self._redaction_key

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        """Sign the run's journal chain as it stands now (needs a signing key); None if
        nothing was added since the last checkpoint."""
        if self.signer is None:
            raise ConfigurationError(
                "no signing key: oncelog.open(signing_key=...) or $ONCELOG_SIGNING_KEY "
                "(make one with `oncelog keys new`)"
            )
        return self.store.checkpoint(run_id, self.signer.key_id, self.signer.sign)

    def checkpoints(
        self, run_id: str | None = None, *, after_id: int = 0, limit: int = 1000
    ) -> list[Checkpoint]:
        return self.store.checkpoints(run_id, after_id, limit)

    def close(self) -> None:
        HEARTBEATS.release_store(self.store)
        self.closed = True
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolution(value: Resolution | str, run_id: str, step_id: str) -> Resolution:
    try:
        return Resolution(value)
    except ValueError:
        raise InvalidResolution(
            f"{value!r} is not a resolution; use one of {[r.value for r in Resolution]}",
            run_id=run_id,
            step_id=step_id,
        ) from None


def _switch(run: str | None, agent: str | None) -> tuple[HaltScope, str]:
    if run is not None and agent is not None:
        raise ConfigurationError("a kill switch is for one run or one agent, not both")
    if run is not None:
        return HaltScope.RUN, check_name(run, "run")
    if agent is not None:
        return HaltScope.AGENT, check_name(agent, "agent")
    return HaltScope.GLOBAL, ""


def _check_decision(
    verb: str, by: str, text: str | None, run_id: str | None = None, step_id: str | None = None
) -> None:
    """What every change a person (or code) makes gives: who, and what it is about."""
    if not by:
        raise ConfigurationError(f"{verb}(..., by=...) must name who decides", run_id=run_id)
    if run_id is not None:
        check_name(run_id, "run_id")
    if step_id is not None:
        check_name(step_id, "step_id", run_id=run_id)
    check_text(by, "by", run_id=run_id, step_id=step_id)
    check_text(text, "the note" if verb != "halt" else "the reason", run_id=run_id)


def open(
    url: str | None = None,
    *,
    durability: Literal["intent", "full", "process"] = "intent",
    lease_ttl: float = 30.0,
    max_payload_bytes: int = 1 << 20,
    approval_poll: float = 1.0,
    key_namespace: str | None = None,
    on_budget_alert: AlertCallback | None = None,
    signing_key: str | os.PathLike[str] | None = None,
    redaction_key: str | bytes | None = None,
    create: bool = True,
    on_alert: AnyAlertCallback | None = None,
    alert_webhook: str | None = None,
    store_timeout: float | None = None,
) -> Ledger:
    """Open the ledger at ``url``: a SQLite path or ``sqlite:///`` URL; by default
    ``$ONCELOG_URL``, else ``./.oncelog/ledger.db``. A new ledger is created there unless
    ``create=False``: then only an existing one is opened, nothing is created (no folder,
    file or table), and a place without a ledger raises ``LedgerNotFound``.

    ``durability="intent"`` (one fsync per effect) keeps every intent through a power
    loss, and an outcome once the next intent or the run's end is committed; an outcome
    lost that way leaves its effect in doubt (docs/guarantees.md). ``"full"`` fsyncs
    every commit; ``"process"`` survives a process kill but not an OS crash.
    ``approval_poll`` is how often async code waiting for a person (an approval, a higher
    budget) looks again, in seconds.
    ``on_budget_alert`` is called with a ``BudgetAlert`` when a budget's warning threshold
    is crossed, or when its ``escalate`` limit is reached. ``on_alert`` is called with
    those and with a ``PersonNeeded`` once per halt or approval request of a run that
    needs a person; ``alert_webhook`` (default ``$ONCELOG_ALERT_WEBHOOK``) receives the
    ``PersonNeeded`` notices as JSON by POST. ``signing_key`` (default
    ``$ONCELOG_SIGNING_KEY``) is an Ed25519 private key file (``oncelog keys new``): with
    it, each run's journal chain is signed at the run's end. ``redaction_key`` (default
    ``$ONCELOG_REDACTION_KEY``) keys the hash that replaces tools' secret fields.
    ``key_namespace`` (default ``$ONCELOG_KEY_NAMESPACE``, else none) goes into every
    idempotency key: give each service its own if two could use the same run ids at one
    provider account. ``store_timeout`` bounds every call to the store, in seconds: past
    it the call raises ``StoreUnavailable`` (on PostgreSQL the default is the URL's
    ``oncelog_timeout``, else 10; on SQLite it is the busy timeout, 30 by default)."""
    if key_namespace is None:
        key_namespace = os.environ.get("ONCELOG_KEY_NAMESPACE", "")
    key = signing_key or os.environ.get("ONCELOG_SIGNING_KEY") or None
    secret = redaction_key or os.environ.get("ONCELOG_REDACTION_KEY") or None
    url = url or os.environ.get("ONCELOG_URL") or None
    signer = None
    if key is not None:  # only then: most agents do not sign, and need not load the code
        from .audit._signing import Signer

        signer = Signer(key)
    return Ledger(
        open_store(url, durability=durability, create=create, timeout=store_timeout),
        lease_ttl=lease_ttl,
        max_payload_bytes=max_payload_bytes,
        approval_poll=approval_poll,
        key_namespace=key_namespace,
        on_budget_alert=on_budget_alert,
        signer=signer,
        redaction_key=secret.encode() if isinstance(secret, str) else secret,
        on_alert=on_alert,
        alert_webhook=alert_webhook or os.environ.get("ONCELOG_ALERT_WEBHOOK") or None,
        url=url or DEFAULT_PATH,
    )
