"""The storage contract. Every method is one atomic transaction unless it says otherwise;
every write that carries a ``Lease`` is refused with ``LeaseLost`` once another worker
has taken the run over."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..controls._budgets import AgentBudget, AgentBudgetSetting, Budget, BudgetAlert, Usage
from ..process import _drain as drain
from ..records._records import (
    Approval,
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
    SubjectClaim,
)
from ..records._retention import LedgerSize, PruneBatch, PrunedRun

# What a commit survives (docs/guarantees.md): ``intent`` fsyncs intents and every other
# commit but outcomes and model/read records; ``full`` fsyncs every commit; ``process``
# none (a commit survives its process being killed, not a power loss).
DURABILITY = ("intent", "full", "process")


@dataclass(frozen=True)
class Lease:
    """Proof of ownership of a run: the fencing token grows with every takeover."""

    run_id: str
    owner: str
    token: int
    ttl: float
    agent: str | None = None  # the run's agent, whose kill switch covers it
    budgeted: bool = False  # the run had a budget when this lease was taken


@dataclass(frozen=True)
class NewStep:
    """Everything known about a step before it runs."""

    seq: int
    step_id: str
    type: StepType
    tool: str
    kind: str
    key: str
    args_hash: str
    args_json: str
    needs_approval: bool = False  # the intent must consume an approval of these arguments
    cost: float = 0.0  # reserved against the run's budget with the intent
    irreversible: bool = False
    # A step recorded after it ran (a model call, a read): the seconds it took, so that its
    # recorded start is that long before the commit, and its duration is the call's.
    elapsed: float = 0.0
    # What the effect acts on (``runtime/_subjects``): its intent claims it for the step in
    # one ledger across runs, or is refused with ``SubjectHeld``; None for most steps.
    subject: str | None = None
    subject_for: float | None = None  # seconds a done claim holds (None: for ever)


class SubjectHeld(Exception):
    """Raised inside an intent's transaction (rolled back) when another step holds its
    subject: the engine decides what that means (``_decide.decide_subject``)."""

    def __init__(self, holder: SubjectClaim) -> None:
        super().__init__(holder.subject)
        self.holder = holder


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, as written after its call."""

    state: StepState
    result_json: str | None = None
    error_json: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None  # settles the reserved cost (a model call's, from its usage)
    retry_at: float | None = None  # not done: the next attempt waits until then (epoch s)


# A live step makes a ``NewStep`` or two and an ``Outcome``; a frozen dataclass's
# generated ``__init__`` calls ``object.__setattr__`` once per field. These make the same
# instances (equal, hashable, immutable, ``replace`` works) by filling the instance's
# ``__dict__`` at once (tests/test_step_records.py holds them to the classes' fields).
_NEW = object.__new__


def new_step(
    seq: int, step_id: str, type_: StepType, tool: str, kind: str, key: str, args_hash: str,
    args_json: str, needs_approval: bool, cost: float, irreversible: bool, elapsed: float,
) -> NewStep:  # fmt: skip
    """``NewStep(...)`` with every field given, for the hot path."""
    step: NewStep = _NEW(NewStep)
    step.__dict__.update({
        "seq": seq, "step_id": step_id, "type": type_, "tool": tool, "kind": kind, "key": key,
        "args_hash": args_hash, "args_json": args_json, "needs_approval": needs_approval,
        "cost": cost, "irreversible": irreversible, "elapsed": elapsed, "subject": None,
        "subject_for": None,
    })  # fmt: skip
    return step


def timed_step(step: NewStep, elapsed: float) -> NewStep:
    """``replace(step, elapsed=elapsed)`` for the hot path (a model call or a read, timed
    when it is recorded)."""
    made: NewStep = _NEW(NewStep)
    fields = made.__dict__
    fields.update(step.__dict__)
    fields["elapsed"] = elapsed
    return made


def new_outcome(
    state: StepState, result_json: str | None, error_json: str | None, tokens_in: int,
    tokens_out: int, cost: float | None, retry_at: float | None,
) -> Outcome:  # fmt: skip
    """``Outcome(...)`` with every field given, for the hot path."""
    made: Outcome = _NEW(Outcome)
    made.__dict__.update({
        "state": state, "result_json": result_json, "error_json": error_json,
        "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost, "retry_at": retry_at,
    })  # fmt: skip
    return made


class BudgetDrift(NamedTuple):
    """A budget's running totals, as kept and as counted afresh from the steps: a run's
    ``steps, tokens, cost, irreversible`` or an agent's ``calls, cost, irreversible``
    of today or of a day to come."""

    scope: str  # run | agent
    target: str  # the run id or the agent's name
    kept: tuple[float, ...]
    counted: tuple[float, ...]
    day: int | None = None  # an agent's day to come (midnight UTC), None for today's

    @property
    def agrees(self) -> bool:
        """Equal, but for the rounding of costs added up in another order."""
        if len(self.kept) != len(self.counted):
            return False
        pairs = zip(self.kept, self.counted, strict=True)
        return all(abs(k - c) <= 1e-9 * max(1.0, abs(c)) for k, c in pairs)


class Intent(NamedTuple):
    """A written intent: its attempt number, and the budget limits it brought past their
    warning threshold."""

    attempt: int
    warnings: tuple[BudgetAlert, ...] = ()


class KeyTimes(NamedTuple):
    """A step's key's times, by the store's clock: now, its first send, its latest start."""

    now: float
    first_sent_at: float
    last_started_at: float


class DecisionFeed(Protocol):
    def wait(self, timeout: float) -> None:
        """Return when a person may have decided something, after ``timeout`` seconds
        at most, or at once when this process starts draining."""
        ...


class PollingFeed:
    """A feed that knows nothing: its waiter looks again after each timeout."""

    def wait(self, timeout: float) -> None:
        drain.wait(timeout)


class Store(Protocol):
    durability: str
    where: str  # the ledger's place as a person reads it: a path, a URL without password
    created: bool  # opening it made a new ledger

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
        """Create the run (plan and agent stored with it) or take it over; bump the
        fencing token.
        Raises ``RunLeased`` if a live owner holds an unexpired lease, ``UnknownRun`` if
        ``create`` is false and it does not exist, ``PlanMismatch`` on another plan."""
        ...

    def submit(
        self,
        run_id: str,
        *,
        agent: str | None,
        input_json: str,
        plan: tuple[str, ...] | None,
        budget: Budget | None,
    ) -> bool:
        """Queue a new run for workers, with its input; True if it is new. The same
        submission again changes nothing; other agent or input raises ``InputMismatch``."""
        ...

    def claim(
        self,
        *,
        owner: str,
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> tuple[Lease, RunRecord] | None:
        """Take the lease (next fencing token) of the submitted run of one of ``agents``
        (None: any; a None in it: runs without an agent) that has waited longest and is
        ``queued``, or ``running`` with no live owner; None if there is none. Two workers
        never claim the same run (PostgreSQL: ``FOR UPDATE SKIP LOCKED``)."""
        ...

    def heartbeat(self, lease: Lease) -> None:
        """Extend the lease by its TTL; ``LeaseLost`` if another worker took the run."""
        ...

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        """Recorded steps at positions ``>= from_seq``, in order (a read, no lock)."""
        ...

    def key_times(self, run_id: str, seq: int) -> KeyTimes | None:
        """The times a key's age is measured from, read with the store's clock's now in
        one read (no lock); None if nothing is recorded at ``seq``."""
        ...

    def replay_page(self, run_id: str, from_seq: int, to_seq: int) -> ReplayPage:
        """The steps at positions ``from_seq`` to ``to_seq`` (excluded) as replay reads
        them: ``ReplayPage``, a read, no lock."""
        ...

    def replay_rows(self, run_id: str, from_seq: int, limit: int) -> list[ReplayRow]:
        """``steps`` as replay reads them when a page's texts do not decode: rows of
        ``REPLAY_COLUMNS``, values as stored but for one flag, done without an error."""
        ...

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        """Record that the step is about to run (``in_flight``); return its attempt number.
        ``previous`` is the state it must still be in (``None``: not recorded yet);
        ``reason`` says why a step in doubt runs again (journalled). Refuses with
        ``RunHalted`` when a kill switch covers the run, and with ``BudgetExceeded`` or
        ``BudgetPaused`` when the step would go past a budget of the run or its agent."""
        ...

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        """Record the outcome of the attempt whose intent was written."""
        ...

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        """Intent and outcome in one commit, for steps without external consequences."""
        ...

    def adopt_subject(
        self, lease: Lease, step: NewStep, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        """Record the step done with the result of ``holder``, the step of another run that
        did its subject's effect, in one commit (its intent journalled with the holder as
        its reason, then its outcome); ``SubjectHeld`` with what holds it now if that is
        no longer ``holder`` done."""
        ...

    def subjects(self, run_id: str | None, limit: int) -> list[SubjectClaim]:
        """Claimed subjects with their holders' states (only ``run_id``'s, if given), most
        recently claimed first (a read)."""
        ...

    def request_approval(self, lease: Lease, step: NewStep) -> Approval:
        """The approval request for this step and these arguments: the live one if there
        is one (pending, approved and unexpired, or denied), else a new pending one. A
        denied one names the person and note of its journalled decision (no one, and no
        note, if the journal holds none)."""
        ...

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
    ) -> Approval:
        """A person approves or denies one pending request of a step, named by its id
        and/or its arguments hash; ``UnknownApproval`` if that request is not pending (it
        was decided, or superseded by a request with other arguments), or if neither is
        given and the step was ever asked with other arguments."""
        ...

    def approvals(self, status: ApprovalStatus | None, limit: int) -> list[Approval]: ...

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        """The run's budget and what it has used (a read)."""
        ...

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        """A person changes a run's budget (journalled)."""
        ...

    def agent_budgets(self) -> list[AgentBudgetSetting]:
        """Every agent's daily budget, by agent (a read of the table, not the journal)."""
        ...

    def budget_drift(self, run_id: str | None) -> list[BudgetDrift]:
        """Where the budgets' running totals (kept as steps are written, read by every
        intent) disagree with the steps they count: each run with a budget (or only
        ``run_id``), and, without ``run_id``, the totals of each agent with one for today
        and for each day to come that has a row (the day it comes, a budget reads it).
        One read; for ``verify``."""
        ...

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        """Set (or, with None, remove) an agent's daily budget (journalled)."""
        ...

    def record_alert(self, alert: BudgetAlert) -> bool:
        """Journal a budget alert unless the same (kind, scope, target, limit) is journalled
        since that budget was last set (for an agent: also today); True if it is new."""
        ...

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        """A probe's answer for an effect in doubt (``in_flight`` or ``unknown``)."""
        ...

    def mark_unknown(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        """The step's outcome cannot be known: mark it and halt the run for a person at
        its position, ``stop`` (JSON) saying what stopped it (``runtime/_stops``)."""
        ...

    def hold(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        """A stop that wrote no step (drift, a budget stop) halts the run for a person at
        ``seq``: no later position of it starts until that one gets past it."""
        ...

    def lift_stop(self, lease: Lease, seq: int) -> None:
        """A later start of the run got past the step at ``seq`` that stopped it."""
        ...

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        """Set the run's status and release the lease (the token is kept); ``stopped_by``
        names the error that stopped it, so a person's decision on that (``resolve``,
        ``decide_approval``, ``set_budget``, ``set_agent_budget``, ``clear_halt``) queues
        the run again, in the same transaction as the decision."""
        ...

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
        owner_is_dead: OwnerCheck = ...,
        attempt: int | None = None,
    ) -> StepRecord:
        """A person's decision on an effect in doubt; ``result_json`` None with ``done``
        means without the provider's answer. ``RunLeased`` while a live owner holds the
        run's lease (by the store's clock), unless ``force``: then, as always, the
        decision fences off any current owner, and the journal names the one overridden.
        ``AttemptMismatch`` if ``attempt`` (the attempt the person saw) is not the step's
        latest; None checks none."""
        ...

    def correct_resolution(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution,
        *,
        result_json: str | None,
        by: str,
        note: str | None,
        force: bool = False,
        owner_is_dead: OwnerCheck = ...,
        attempt: int | None = None,
    ) -> StepRecord:
        """Change a person's resolution of the run's last step, before anything acted on
        it (``InvalidResolution`` otherwise), as ``resolve`` decides: ``RunLeased`` while a
        live owner holds the run, unless ``force``; ``attempt`` as for ``resolve``. Journalled
        as ``corrected``."""
        ...

    def set_result_contract(self, tool: str, contract_json: str) -> None:
        """Declare (or replace) what a person's result for ``tool`` must look like
        (journalled when it changes)."""
        ...

    def result_contract(self, tool: str) -> str | None:
        """What a person's result for ``tool`` must look like, as last journalled (as
        stored, if declared before contracts were journalled); None if undeclared."""
        ...

    def get_run(self, run_id: str) -> RunRecord: ...

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]: ...

    def released_runs(self, limit: int) -> list[RunRecord]:
        """Queued runs a person's decision released that no process has leased since,
        found without reading their journals through."""
        ...

    def steps_in_doubt(self, limit: int) -> list[StepRecord]:
        """Effects recorded ``in_flight`` or ``unknown``, across runs."""
        ...

    def effects_in_doubt(self, limit: int) -> list[EffectInDoubt]:
        """``steps_in_doubt``, each with its run's lease owner, whether that lease has
        lapsed by the store's clock (an in-flight effect is then orphaned) and its age."""
        ...

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]: ...

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        """The first active kill switch covering the run (a read, no lock). Writes of new
        steps check the same inside their transaction and raise ``RunHalted``."""
        ...

    def set_halt(self, scope: HaltScope, target: str, *, reason: str, by: str) -> Halt:
        """Turn a switch on (a no-op returning the active halt if it is on already)."""
        ...

    def clear_halt(self, scope: HaltScope, target: str, *, by: str, note: str | None) -> Halt:
        """Turn a switch off, recording who did; ``UnknownHalt`` if it is not on."""
        ...

    def halts(self, *, active_only: bool, limit: int) -> list[Halt]: ...

    def take_hold(self, lease: Lease, resource: str) -> int:
        """Take the hold on ``resource`` (canonical JSON) for the lease's run and return its
        token (the same one if this lease has it); ``ResourceHeld`` while another run's
        hold is live (stores/_sql_holds.py)."""
        ...

    def give_up_hold(self, lease: Lease, resource: str, token: int) -> bool:
        """Release the hold taken with ``token``, unless it lapsed and was taken, or an
        effect begun under it is in doubt (False: it stays as it is)."""
        ...

    def release_hold(self, resource: str, *, by: str, why: str, force: bool) -> HoldRecord:
        """A person frees a hold, journalled in the holder's run: ``UnknownHold`` if none,
        ``ResourceHeld`` while the holder's lease runs, unless ``force``."""
        ...

    def holds(self, limit: int) -> list[HoldRecord]:
        """Every resource ever held, with its holder and state, by name."""
        ...

    def awaiting_person(self, run_id: str) -> bool:
        """True while the run is ``halted`` or ``waiting`` and no person's decision that
        could let it go on (a resolution, an approval or denial, a budget set, a kill
        switch cleared, the run queued again) is journalled since its lease was last
        taken (a read). ``UnknownRun`` if there is no such run."""
        ...

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        """Listen for people's decisions (PostgreSQL: LISTEN) until the block ends; enter
        it before looking with ``awaiting_person``, so no decision falls between."""
        ...

    def record_notice(self, run_id: str, notice_id: str, data_json: str) -> bool:
        """Journal that the run needs a person (the notice ``notice_id``), unless it is
        journalled already; True until ``confirm_notice`` says it was delivered."""
        ...

    def confirm_notice(self, run_id: str, notice_id: str) -> None:
        """Journal that the notice was delivered: it is not delivered again."""
        ...

    def checkpoint(self, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
        """Sign the run's chain as it stands (its length and head) and keep the signature;
        None if its chain is empty or that head is already checkpointed."""
        ...

    def checkpoints(self, run_id: str | None, after_id: int, limit: int) -> list[Checkpoint]: ...

    def table_rows(
        self, table: str, after: tuple[Any, ...], limit: int, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Rows of a table replay or the controls read (``_sql_evidence.STATE_TABLES``), as
        stored, in key order after the key ``after`` (``()``: from the first); with
        ``run_id``, only that run's. For ``verify`` (a read)."""
        ...

    def ledger_meta(self) -> dict[str, int]:
        """Facts the migrations recorded about the ledger (``chain_from``)."""
        ...

    def prune_candidates(
        self, older_than: float | None, agents: Mapping[str, float], limit: int
    ) -> list[str]:
        """Up to ``limit`` runs that retention may remove (``stores/_sql_prune``) and that
        ended more than their window ago: an agent's in ``agents`` (seconds), else
        ``older_than`` (None: only the named agents' runs); the longest ended first.
        ``UnknownName`` for an agent the ledger does not know. A read."""
        ...

    def prune_runs(
        self,
        runs: Sequence[PrunedRun],
        archive: str,
        archive_sha256: str,
        signer: tuple[str, Callable[[str], str]] | None,
    ) -> PruneBatch:
        """Remove each of ``runs`` that still may go and whose chain is still as
        archived, with every row of it, and journal what was removed under no run
        (``runs_pruned``: the archive's name and SHA-256, each run's chain length and
        head); with ``signer`` (key id, sign), a checkpoint of that chain."""
        ...

    def set_retention(self, agent: str, keep: float | None, *, by: str) -> None:
        """Set (None: remove) how many seconds after their end runs are kept, for
        ``agent`` ('' the ledger's window), journalled (``retention_set``);
        ``UnknownName`` for an agent the ledger does not know."""
        ...

    def retention(self) -> dict[str, float]:
        """The retention policy: seconds by agent, '' the ledger's (a read)."""
        ...

    def ledger_size(self) -> LedgerSize:
        """Runs, steps and journal records held, the oldest run's creation, bytes on disk."""
        ...

    def close(self) -> None: ...


class OwnerCheck(Protocol):
    def __call__(self, owner: str) -> bool:
        """True if the process named by ``owner`` is certainly gone."""
        ...
