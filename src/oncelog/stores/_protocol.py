"""The storage contract. Every method is one atomic transaction unless it says otherwise;
every write that carries a ``Lease`` is refused with ``LeaseLost`` once another worker
has taken the run over."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .._exceptions import RunPruned
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
    SubjectClaim,
    UsedLink,
)
from ..records._value import NamedTuple, Value
from ..signals import _drain as drain

if TYPE_CHECKING:  # retention's values: an open does not import them
    from ..records._retention import LedgerSize, PruneBatch, PrunedRun

# What a commit survives (docs/guarantees.md): ``intent`` fsyncs intents and every other
# commit but outcomes and model/read records; ``full`` fsyncs every commit; ``process``
# none (a commit survives its process being killed, not a power loss).
DURABILITY = ("intent", "full", "process")


class Lease(Value):
    """Proof of ownership of a run: the fencing token grows with every takeover."""

    run_id: str
    owner: str
    token: int
    ttl: float
    agent: str | None = None  # the run's agent, whose kill switch covers it
    budgeted: bool = False  # the run had a budget when this lease was taken


class NewStep(Value):
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
    # Seconds a person's approval holds after the decision (``tool(approval_expires=)``),
    # by the store's clock; None: as long as the decision itself says.
    approval_lasts: float | None = None
    # The texts older versions wrote for the same subject (``42.0`` for ``42``): a claim
    # under one of them holds the subject too, so an upgrade does not act again.
    subject_spellings: tuple[str, ...] = ()


class SubjectHeld(Exception):
    """Raised inside an intent's transaction (rolled back) when another step holds its
    subject: the engine decides what that means (``_decide.decide_subject``)."""

    def __init__(self, holder: SubjectClaim) -> None:
        super().__init__(holder.subject)
        self.holder = holder


class Outcome(Value):
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
        "subject_for": None, "approval_lasts": None, "subject_spellings": (),
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
        drain.wait_for_drain(timeout)


class Store(Protocol):
    """The ledger's storage, written once for both stores (``_sql_store.SQLStore``).

    Words every method below uses:

    - *One transaction*: everything the method writes commits together or not at all;
      locks are taken in the order ``_sql_tx`` writes down. A write with a ``Lease`` first
      fences it (``LeaseLost`` if another owner has the run, the run's row then held until
      the commit) and extends it once half of it is used.
    - *Journals* ``event``: the transaction appends that record to the run's hash-chained
      journal (run id ``""`` for records outside any run).
    - *A read*: no write and no lock; PostgreSQL reads one snapshot, SQLite reads each
      statement in its own (a read of several statements may see a commit between them).
    - *A link*: a person's decision made through a notice's signed link (``link``, its
      nonce) takes the link in its own transaction, before anything else it writes: the
      ``used_links`` row ``_sql_links.take`` writes, ``LinkUsed`` (nothing written) if a
      committed decision took it first; a decision that fails leaves the link unused.
    - Every method may raise ``StoreUnavailable`` (the ledger cannot be reached or written
      now; a failed commit may or may not have landed, and a restart finds out) and
      ``CorruptRecord`` (a stored value does not decode).
    """

    durability: str
    where: str  # the ledger's place as a person reads it: a path, a URL without password
    created: bool  # opening it made a new ledger

    # -- runs and their leases -------------------------------------------------------

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
        """Create the run (with its plan, agent and budget; journals ``run_created``) or
        take an existing one over, and give ``owner`` its lease with the next fencing
        token for ``ttl`` seconds (journals ``lease_acquired``, with ``origin``, what
        started it, when given; a new plan journals
        ``plan_replaced``), in one transaction, committed without its own flush (it rides
        on the next durable commit). A ``halted`` run stays halted, any other becomes
        ``running``. Returns the lease and the run as it was read under the lock.
        Raises ``RunLeased`` if an owner that ``owner_is_dead`` does not know to be gone
        holds an unexpired lease, ``UnknownRun`` if ``create`` is false and there is no
        such run, ``PlanMismatch`` on another plan without ``replace_plan``,
        ``ConfigurationError`` if the run belongs to another agent."""
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
        """Queue a new run for workers, with its input, plan, agent and budget (journals
        ``run_submitted``); one transaction. True if it is new; the same submission again
        changes nothing and returns False; other agent or input under the same id raises
        ``InputMismatch``."""
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
        ``queued``, or ``running`` with no live owner, as ``acquire`` takes it (journals
        ``lease_acquired``); one transaction. None if there is none. Two workers never
        claim the same run (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite: one writer)."""
        ...

    def claim_many(
        self,
        *,
        owners: Sequence[str],
        ttl: float,
        agents: tuple[str | None, ...] | None,
        owner_is_dead: OwnerCheck,
    ) -> list[tuple[Lease, RunRecord]]:
        """``claim`` for up to ``len(owners)`` runs in one transaction: the runs that many
        claims one after another would take, in that order, the n-th under ``owners[n]``,
        each with a lease, a fencing token and a ``lease_acquired`` of its own, as if
        claimed alone (a crash after it leaves each as a crash after its own claim). Fewer,
        or none, if fewer are runnable."""
        ...

    def heartbeat(self, lease: Lease) -> None:
        """Give the lease its whole TTL again, by the store's clock; one transaction that
        journals nothing. ``LeaseLost`` if another owner took the run."""
        ...

    def finish(
        self, lease: Lease, status: RunStatus, reason: str | None, stopped_by: str | None = None
    ) -> None:
        """Set the run's status and reason and release the lease (owner and expiry
        cleared, the token kept); journals ``run_<status>``; one transaction.
        ``stopped_by`` names the error that stopped it, so that a person's decision on
        that (``resolve``, ``decide_approval``, ``set_budget``, ``set_agent_budget``,
        ``clear_halt``) queues the run again, in the same transaction as the decision
        (journals ``run_queued``). ``LeaseLost`` if another owner took the run."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run as stored (a read); ``UnknownRun`` if there is none."""
        ...

    def list_runs(self, status: RunStatus | None, limit: int) -> list[RunRecord]:
        """Runs (of ``status`` only, if given), most recently updated first (a read)."""
        ...

    def released_runs(self, limit: int) -> list[RunRecord]:
        """Queued runs a person's decision released that no process has leased since,
        most recently updated first, found without reading their journals through (a
        read)."""
        ...

    # -- steps: what a run records -----------------------------------------------------

    def steps(self, run_id: str, from_seq: int, limit: int) -> list[StepRecord]:
        """Recorded steps at positions ``>= from_seq``, in order (a read)."""
        ...

    def step_named(self, run_id: str, step_id: str) -> StepRecord | None:
        """The step recorded under ``step_id`` in the run, or None (a read of one row)."""
        ...

    def first_unsettled(self, run_id: str, before: int) -> int:
        """The first position below ``before`` whose step is not an effect recorded
        ``done``, ``failed`` or ``abandoned`` (``before`` when there is none): where a
        replay that skips settled effects must begin (a read of one statement)."""
        ...

    def key_times(self, run_id: str, seq: int) -> KeyTimes | None:
        """The times a key's age is measured from, with the store's clock's now, in one
        statement (a read); None if nothing is recorded at ``seq``."""
        ...

    def replay_page(self, run_id: str, from_seq: int, to_seq: int) -> ReplayPage:
        """The steps at positions ``from_seq`` to ``to_seq`` (excluded) as replay reads
        them, aggregated into one row (a read of one statement)."""
        ...

    def replay_rows(self, run_id: str, from_seq: int, limit: int) -> list[ReplayRow]:
        """``steps`` as replay reads them when a page's texts do not decode: rows of
        ``REPLAY_COLUMNS``, values as stored but for one flag, done without an error (a
        read)."""
        ...

    def write_intent(
        self, lease: Lease, step: NewStep, previous: StepState | None, reason: str | None = None
    ) -> Intent:
        """Record that the step is about to run: in one durable transaction, its checks
        (the fence; the kill switch, under the shared halts lock; the approval it uses
        up, if ``needs_approval``; the budgets of the run and its agent, the step's cost
        reserved against them; the claim of its ``subject``), then its row written
        ``in_flight`` (inserted, or, with ``previous``, the attempt after the last),
        journals ``intent`` (``reason`` says why a step in doubt runs again). Returns its
        attempt number and the budget limits it brought past their warning threshold.
        ``previous`` is the state the step must still be in (``None``: not recorded yet).
        Refuses, writing nothing, with ``LeaseLost`` (also when the step is no longer in
        ``previous``), ``RunHalted`` when a kill switch covers the run,
        ``ApprovalRequired`` with no usable approval, ``BudgetExceeded`` or
        ``BudgetPaused`` past a budget, ``SubjectHeld`` when another step holds its
        subject, ``DuplicateStep`` when ``seq`` is recorded already."""
        ...

    def write_outcome(self, lease: Lease, step: NewStep, attempt: int, outcome: Outcome) -> None:
        """Record the outcome of the attempt whose intent was written: the row's state,
        result or error, usage and settled cost, journals ``outcome``; one transaction,
        committed without its own flush under ``intent`` durability. ``LeaseLost`` if
        another owner took the run or the step is no longer that attempt in flight."""
        ...

    def record_step(
        self, lease: Lease, step: NewStep, previous: StepState | None, outcome: Outcome
    ) -> None:
        """A step without external consequences (a model call, a read) recorded after it
        ran: ``write_intent``'s checks but the kill switch (asked before the call), its
        row and its outcome, journals ``recorded``, timed by its start (``elapsed``);
        one transaction, committed without its own flush under ``intent`` durability.
        Raises as ``write_intent`` does."""
        ...

    def adopt_subject(
        self, lease: Lease, step: NewStep, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        """Record the step done with the result of ``holder``, the step of another run that
        did its subject's effect, in one transaction: ``write_intent``'s checks and row
        (journals ``intent``, the holder named as its reason), then its outcome (journals
        ``outcome``). ``SubjectHeld`` with what holds it now if that is no longer
        ``holder`` done; otherwise raises as ``write_intent`` does."""
        ...

    def subjects(self, run_id: str | None, limit: int) -> list[SubjectClaim]:
        """Claimed subjects with their holders' states (only ``run_id``'s, if given), most
        recently claimed first (a read)."""
        ...

    def settle(self, lease: Lease, seq: int, attempt: int, outcome: Outcome) -> None:
        """A probe's answer for an effect in doubt (``in_flight`` or ``unknown``): the
        outcome written on that attempt, journals ``probed``; one transaction.
        ``LeaseLost`` if another owner took the run or the step changed."""
        ...

    def mark_unknown(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        """The step's outcome cannot be known: in one transaction, mark it ``unknown`` (the
        first reason kept), halt the run for a person at its position, ``stop`` (JSON)
        saying what stopped it (``runtime/_stops``), journals ``unknown``. ``LeaseLost``
        if another owner took the run."""
        ...

    def hold(self, lease: Lease, seq: int, reason: str, stop: str) -> None:
        """A stop that wrote no step (drift, a budget stop) halts the run for a person at
        ``seq``: no later position of it starts until that one gets past it. Journals
        ``run_stopped``; one transaction; ``LeaseLost`` if another owner took the run."""
        ...

    def lift_stop(self, lease: Lease, seq: int) -> None:
        """A later start of the run got past the step at ``seq`` that stopped it: the stop
        cleared if it is the one at ``seq`` (journals ``stop_lifted``, else writes
        nothing); one transaction; ``LeaseLost`` if another owner took the run."""
        ...

    def effects_in_doubt(self, limit: int) -> list[EffectInDoubt]:
        """Effects recorded ``in_flight`` or ``unknown`` in runs not completed, oldest
        first, each with its run's lease owner, whether that lease has lapsed by the
        store's clock (an in-flight effect is then orphaned) and its age, in one statement
        (a read)."""
        ...

    # -- a person's decisions on an effect in doubt -------------------------------------

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
        correct: bool = False,
        link: str | None = None,
    ) -> StepRecord:
        """A person's decision on an effect in doubt, in one transaction: the run's lease
        fenced off (token bumped, owner cleared), the step's state and result written
        (``result_json`` None with ``done``: without the provider's answer), the run's
        stop at that step lifted (journals ``stop_lifted``), the run queued again if an
        unknown outcome stopped it and none is left (journals ``run_queued``); journals
        ``resolved``, naming the owner a ``force`` overrode. With ``correct``, it instead
        changes a person's resolution of the run's last step, before anything acted on
        it: the lease fenced off and the step written as above, journals ``corrected``
        (the decision it replaces stays in the journal). Returns the step as the
        decision leaves it.
        Raises ``UnknownRun``, ``UnknownStep``; ``AlreadyResolved`` if the step is not in
        doubt (``InvalidResolution`` with ``correct`` if it is not the last step's
        resolution, or something acted on it); ``RunLeased`` while an owner that
        ``owner_is_dead`` does not know to be gone holds the run's lease (by the store's
        clock), unless ``force``; ``AttemptMismatch`` if ``attempt`` (the attempt the
        person saw) is not the step's latest (None checks none)."""
        ...

    def retry_step(
        self,
        run_id: str,
        step_id: str,
        *,
        by: str,
        why: str,
        force: bool = False,
        owner_is_dead: OwnerCheck = ...,
        link: str | None = None,
    ) -> StepRecord:
        """A person's fresh set of attempts for an effect known not to have happened
        (``failed``: refused, or its retry policy ran out; ``not_done``: waiting for its
        next attempt), in one transaction: the run's lease fenced off, the step written
        ``not_done`` with its attempts at zero and no retry time (the same key), a run
        that ended ``failed`` queued again (journals ``run_queued``); journals
        ``retried`` with ``by``, ``why``, the state and attempts it had and the owner a
        ``force`` overrode. Returns the step as it leaves it.
        Raises ``UnknownRun``, ``UnknownStep``; ``NotRetryable`` for a step done, in
        doubt or abandoned, or one the run went on past (a later step, or completed);
        ``RunLeased`` as ``resolve``, unless ``force``. A pause of the step's retries
        ends with it (journals ``retries_resumed``)."""
        ...

    def pause_retries(
        self, run_id: str, step_id: str, *, paused: bool, by: str, why: str
    ) -> StepRecord:
        """A person pauses (``paused``) or resumes an effect's retries, in one
        transaction holding the run's row: journals ``retries_paused`` or
        ``retries_resumed`` with ``by`` and ``why``; a resume queues a run the pause halted
        (``stopped_by`` ``RetriesPaused``, journals ``run_queued``) and is a decision a
        waiting process sees. Raises ``UnknownRun``, ``UnknownStep``; ``NotRetryable`` for
        a pause of a step that has no retries left to make (done, in doubt, abandoned) or
        is paused already, and for a resume of one that is not paused."""
        ...

    def retries_paused(self, run_id: str, seq: int) -> str | None:
        """Who paused the retries of the step at ``seq`` and why, while they are paused;
        else None (a read)."""
        ...

    def set_result_contract(self, tool: str, contract_json: str) -> None:
        """Declare (or replace) what a person's result for ``tool`` must look like, in one
        transaction; journals ``result_declared`` (run ``""``) unless it is the contract
        journalled last, when it writes nothing."""
        ...

    def result_contract(self, tool: str) -> str | None:
        """What a person's result for ``tool`` must look like, as last journalled (as
        stored, if declared before contracts were journalled); None if undeclared (a
        read)."""
        ...

    # -- approvals ----------------------------------------------------------------------

    def request_approval(self, lease: Lease, step: NewStep, shape: str | None = None) -> Approval:
        """The approval request for this step and these arguments, in one transaction:
        the live one if there is one (pending, approved and unexpired, or denied), else
        a new pending one (journals ``approval_requested``, with ``shape``, the tool's
        parameters a person may edit) that supersedes the step's pending requests with
        other arguments; approvals past their expiry (their decision's, or older than
        ``step.approval_lasts``) are marked ``expired``, and the new request names them.
        A denied one names the person and note of its journalled decision (no one, and
        no note, if the journal holds none). ``LeaseLost`` if another owner took the run."""
        ...

    def approval_history(self, run_id: str, step_id: str) -> ApprovalHistory:
        """Whether the journal holds a request of this step, and the edits people approved
        of its requests, in order (a read)."""
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
        edited: dict[str, Any] | None = None,
        link: str | None = None,
    ) -> Approval:
        """A person approves or denies one pending request of a step, named by its id
        and/or its arguments hash, in one transaction: journals ``approval_approved`` or
        ``approval_denied``, and queues the run again if it stopped for it (journals
        ``run_queued``). Returns the decided request. ``edited`` (an approval only) is
        the call by parameter name the person approves instead: the request becomes
        ``edited`` and a new one, approved, holds the edited call (journals
        ``approval_edited``, then the new request and its approval); ``InvalidPayload``
        if it does not fit the tool's parameters (see ``records._argument_edits``).
        ``UnknownApproval`` if there is no such run, if that request is not pending (it was
        decided, or superseded by a request with other arguments), or if neither is given
        and the step was ever asked with other arguments."""
        ...

    def used_link(self, nonce: str) -> UsedLink | None:
        """The decision the link ``nonce`` made, who made it and when; None while it made
        none (a read)."""
        ...

    def approvals(self, status: ApprovalStatus | None, limit: int) -> list[Approval]:
        """Approval requests (of ``status`` only, if given), newest first (a read)."""
        ...

    # -- budgets ------------------------------------------------------------------------

    def budget_usage(self, run_id: str) -> tuple[Budget | None, Usage]:
        """The run's budget and what it has used (a read); ``UnknownRun`` if none."""
        ...

    def set_budget(self, run_id: str, budget: Budget | None, *, by: str) -> None:
        """A person sets (None: removes) a run's budget, in one transaction: its totals
        counted afresh from its steps, journals ``budget_set``, lifts the run's budget
        stop (``stop_lifted``) and queues it again if a budget stopped it
        (``run_queued``). ``UnknownRun`` if there is no such run."""
        ...

    def agent_budgets(self) -> list[AgentBudgetSetting]:
        """Every agent's daily budget, by agent (a read of the table, not the journal)."""
        ...

    def set_agent_budget(self, agent: str, budget: AgentBudget | None, *, by: str) -> None:
        """Set (None: remove) an agent's daily budget, in one transaction: today's totals
        counted afresh, the budget stops of its runs lifted and those runs queued again
        (journals ``stop_lifted``, ``run_queued``); journals ``agent_budget_set`` (run
        ``""``)."""
        ...

    def budget_drift(self, run_id: str | None) -> list[BudgetDrift]:
        """Where the budgets' running totals (kept as steps are written, read by every
        intent) disagree with the steps they count: each run with a budget (or only
        ``run_id``), and, without ``run_id``, the totals of each agent with one for today
        and for each day to come that has a row (the day it comes, a budget reads it).
        A read, for ``verify``."""
        ...

    def record_alert(self, alert: BudgetAlert) -> bool:
        """Journal ``budget_alert`` unless the same (kind, scope, target, limit) is
        journalled since that budget was last set (for an agent: also today), in one
        transaction holding the journal's lock while it looks; True if it is new."""
        ...

    # -- kill switches ------------------------------------------------------------------

    def active_halt(self, run_id: str, agent: str | None) -> Halt | None:
        """The first active kill switch covering the run (a read). Writes of new steps
        check the same inside their transaction and raise ``RunHalted``."""
        ...

    def set_halt(
        self, scope: HaltScope, target: str, *, reason: str, by: str, ahead: bool = False
    ) -> Halt:
        """Turn a switch on, in one transaction holding the halts lock exclusively (every
        intent either saw it or committed before it); journals ``halt_set``. Returns the
        switch; a no-op returning the active one if it is on already (the first reason
        stands). A switch for a run or agent no row names is refused (``UnknownRun``,
        ``UnknownAgent``, listing the nearest names) unless ``ahead``."""
        ...

    def clear_halt(
        self, scope: HaltScope, target: str, *, by: str, note: str | None, link: str | None = None,
        switch: int | None = None,
    ) -> Halt:  # fmt: skip
        """Turn a switch off, recording who did, in one transaction: journals
        ``halt_cleared`` and queues again the runs it stopped (``run_queued``). Returns
        the cleared switch; ``UnknownHalt`` if it is not on, or if ``switch`` names
        another than the one on."""
        ...

    def halts(self, *, active_only: bool, limit: int) -> list[Halt]:
        """Kill switches (only those on, with ``active_only``), newest first (a read)."""
        ...

    # -- holds on a resource ------------------------------------------------------------

    def take_hold(self, lease: Lease, resource: str) -> int:
        """Take the hold on ``resource`` (canonical JSON) for the lease's run, in one
        transaction (journals ``hold_acquired``), and return its token (the same one, with
        nothing written, if this lease has it; a new lease of the holder's run takes it
        again with a new token). ``ResourceHeld`` while another run's hold is live,
        ``HoldInDoubt`` while it is blocked by an effect in doubt (stores/_sql_holds.py);
        ``LeaseLost`` if another owner took the run."""
        ...

    def give_up_hold(self, lease: Lease, resource: str, token: int) -> bool:
        """Release the hold taken with ``token`` (journals ``hold_released``), in one
        transaction; False, with nothing written, if it lapsed and was taken, or an
        effect begun under it is in doubt (it stays blocked until a person decides)."""
        ...

    def release_hold(self, resource: str, *, by: str, why: str, force: bool) -> HoldRecord:
        """A person frees a hold, in one transaction, journalled (``hold_released``) in
        the holder's run; returns it as freed. ``UnknownHold`` if none, ``ResourceHeld``
        while the holder's lease runs, unless ``force``."""
        ...

    def holds(self, limit: int) -> list[HoldRecord]:
        """Every resource ever held, with its holder and state, by name (a read)."""
        ...

    # -- waiting for a person -----------------------------------------------------------

    def awaiting_person(self, run_id: str) -> bool:
        """True while the run is ``halted``, ``waiting`` or ``failed`` and no person's
        decision that could let it go on (a resolution, an approval or denial, a budget
        set, a kill switch cleared, the run queued again by a retry or redrive) is
        journalled since its lease was last taken (a read). ``UnknownRun`` if there is no
        such run."""
        ...

    def decisions(self) -> AbstractContextManager[DecisionFeed]:
        """Listen for people's decisions (PostgreSQL: LISTEN; SQLite: a feed that polls)
        until the block ends; enter it before looking with ``awaiting_person``, so no
        decision falls between. Writes nothing."""
        ...

    def record_notice(self, run_id: str, notice_id: str, data_json: str) -> bool:
        """Journal ``person_needed`` for the notice ``notice_id`` unless it is journalled
        already, in one transaction holding the run's journal lock while it looks; True
        until ``confirm_notice`` says it was delivered."""
        ...

    def record_waiting(self, run_id: str, data_json: str) -> None:
        """Journal ``waiting_for_person``: a process waits in place for a decision on the
        run (``run_main(wait_for_person=...)``), with its identity and until when, so that
        whoever decides knows that nothing needs restarting (one transaction)."""
        ...

    def confirm_notice(self, run_id: str, notice_id: str) -> None:
        """Journal ``person_notified``: the notice is not delivered again (one
        transaction)."""
        ...

    # -- the journal and its evidence ---------------------------------------------------

    def journal(self, run_id: str | None, after_id: int, limit: int) -> list[JournalEntry]:
        """Journal records after id ``after_id`` (of ``run_id`` only, if given), in id
        order (a read)."""
        ...

    def checkpoint(self, run_id: str, key_id: str, sign: Callable[[str], str]) -> Checkpoint | None:
        """Sign the run's chain as it stands (its length and head, read under the run's
        journal lock) and keep the signature, in one transaction; None, with nothing
        written, if its chain is empty or that head is already checkpointed."""
        ...

    def checkpoints(self, run_id: str | None, after_id: int, limit: int) -> list[Checkpoint]:
        """Signed checkpoints after id ``after_id`` (of ``run_id`` only, if given), in id
        order (a read)."""
        ...

    def table_rows(
        self, table: str, after: tuple[Any, ...], limit: int, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Rows of a table replay or the controls read (``STATE_TABLES``), as
        stored, in key order after the key ``after`` (``()``: from the first); with
        ``run_id``, only that run's. For ``verify`` (a read)."""
        ...

    def ledger_meta(self) -> dict[str, int]:
        """Facts the migrations recorded about the ledger (``chain_from``) (a read)."""
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

    def forget_pruned(self, run_id: str, *, by: str) -> RunPruned:
        """Remove the tombstone a prune left for ``run_id``, so that the id may start a
        new run, journalled under no run (``pruned_run_forgotten``, naming ``by``): the
        refusal entering it gave until now. ``UnknownRun`` if no prune removed it."""
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

    def close(self) -> None:
        """Close the store's connections (SQLite: its file's, PostgreSQL: its pool); the
        store is not used afterwards."""
        ...


class OwnerCheck(Protocol):
    def __call__(self, owner: str) -> bool:
        """True if the process named by ``owner`` is certainly gone."""
        ...
