"""Value objects read from the store: runs, steps and journal entries."""

from __future__ import annotations

import enum
import operator
from typing import Any

from .._exceptions import CorruptRecord
from ._budgets import Budget
from ._no_result import NO_RESULT
from ._serialization import decode
from ._value import NamedTuple, Value

# ``.value`` as a plain property over the member's stored value: on Python 3.11 an enum's
# own ``value`` runs two Python frames (``enum.property.__get__``, then its getter), and
# the stores read the value of a step's type, state and run status at every write.
_VALUE: Any = property(operator.attrgetter("_value_"))


class RunStatus(str, enum.Enum):
    QUEUED = "queued"  # ready to run: submitted, drained, or released by a person's decision
    RUNNING = "running"
    WAITING = "waiting"
    HALTED = "halted"
    COMPLETED = "completed"
    FAILED = "failed"

    value = _VALUE


class StepState(str, enum.Enum):
    """The effect lifecycle: ``in_flight`` is written before the call, the rest after."""

    IN_FLIGHT = "in_flight"
    DONE = "done"
    FAILED = "failed"  # a definite refusal: it did not happen
    NOT_DONE = "not_done"  # known not to have happened; the next visit runs it again
    UNKNOWN = "unknown"  # in_flight found by someone other than its writer
    ABANDONED = "abandoned"  # a person gave up on it

    value = _VALUE


class StepType(str, enum.Enum):
    EFFECT = "effect"
    READ = "read"
    LLM = "llm"

    value = _VALUE


class HaltScope(str, enum.Enum):
    """Where a kill switch applies: every run, the runs of one agent, or one run."""

    GLOBAL = "global"
    AGENT = "agent"
    RUN = "run"


class ApprovalStatus(str, enum.Enum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    USED = "used"  # an attempt of the effect consumed it
    EXPIRED = "expired"
    SUPERSEDED = "superseded"  # the step was asked again with other arguments before a decision
    EDITED = "edited"  # a person approved other arguments instead: a new request holds them


class Resolution(str, enum.Enum):
    """What a person decided about an effect whose outcome was unknown."""

    DONE = "done"
    NOT_DONE = "not_done"
    ABANDON = "abandon"


class RunRecord(Value):
    """A run as stored: its status, plan, lease and budget."""

    run_id: str
    status: RunStatus
    plan: tuple[str, ...] | None
    reason: str | None
    created_at: float
    updated_at: float
    owner: str | None
    fencing_token: int
    next_seq: int
    agent: str | None = None
    budget: Budget | None = None
    input_json: str | None = None  # what ``submit`` gave the run's handler
    stopped_by: str | None = None  # the error that stopped it (RunHalted, BudgetPaused, ...)
    stop_seq: int | None = None  # the position of the step it is halted at (a sticky stop)
    stop_json: str | None = None  # what stopped it there (``runtime/_stops.Stop``)

    @property
    def input(self) -> Any:
        return None if self.input_json is None else decode(self.input_json)


class StepRecord(NamedTuple):
    """One recorded step. A named tuple: replay builds one per step, and a frozen
    dataclass costs several times as much to build."""

    run_id: str
    seq: int
    step_id: str
    type: StepType
    tool: str
    kind: str
    key: str
    args_hash: str
    args_json: str
    state: StepState
    result_json: str | None
    error_json: str | None
    attempts: int
    tokens_in: int
    tokens_out: int
    started_at: float  # of the latest attempt
    finished_at: float | None
    first_started_at: float | None = None  # of the first attempt, once there is a second
    retry_at: float | None = None  # the next attempt waits until then (a retry policy)
    # Why the effect was in doubt: the first reason recorded since its latest attempt
    # began (the error its call raised, or what recovery found), kept once resolved.
    reason: str | None = None

    @property
    def first_sent_at(self) -> float:
        """When the effect's key was first sent: a provider's deduplication window runs
        from then, however often it is sent again."""
        return self.started_at if self.first_started_at is None else self.first_started_at

    @property
    def result(self) -> Any:
        """The recorded result; ``NO_RESULT`` for an effect resolved ``done`` without
        the provider's answer."""
        if self.result_json is None and self.state is StepState.DONE and self.error_json is None:
            return NO_RESULT
        return self._decode("result", self.result_json)

    @property
    def args_payload(self) -> Any:
        """The recorded arguments: ``{"args": [...], "kwargs": {...}}``."""
        return self._decode("arguments", self.args_json)

    @property
    def error(self) -> dict[str, Any] | None:
        error = self._decode("error", self.error_json)
        if error is not None and not isinstance(error, dict):
            raise self._corrupt("error", "not an object")
        return error

    def _decode(self, what: str, text: str | None) -> Any:
        if text is None:
            return None
        try:
            return decode(text)
        except ValueError as exc:
            raise self._corrupt(what, str(exc)) from exc

    def _corrupt(self, what: str, why: str) -> CorruptRecord:
        return CorruptRecord(
            f"the recorded {what} of step {self.step_id!r} does not decode: {why}",
            run_id=self.run_id,
            step_id=self.step_id,
            key=self.key,
        )


# A recorded step as replay reads it row by row, when a page's columns do not line up
# (``stores._rows.REPLAY_COLUMNS``): seq, step_id, type, tool, whether it is done without
# an error (true or 1), args, result, as stored. Replaying a done step needs no more, and
# building a ``StepRecord`` for each would cost more than the rest of the step.
ReplayRow = tuple[int, str, str, str, Any, str, str | None]


class ReplayPage(NamedTuple):
    """The recorded steps at positions in a range, as replay reads them: how many there
    are, then each column's values joined in one text, in position order. Names are
    joined by U+001F, JSON texts by commas; arguments are ``null`` for a step not done
    with a result, and a NULL result is ``null``."""

    steps: int
    step_ids: str
    types: str
    tools: str
    args: str
    results: str


def owner_shown(owner: str) -> str:
    """A lease owner (``host|pid|start|namespace|nonce``) as a person tells it apart."""
    parts = owner.split("|")
    return f"pid {parts[1]} on {parts[0]}" if len(parts) >= 3 else owner


class EffectInDoubt(NamedTuple):
    """An effect whose outcome is not recorded, with who may still be running it. The
    times are the store's clock, like lease expiry."""

    step: StepRecord
    orphaned: bool  # in flight, and no live lease holds its run: nobody is running it
    lease_owner: str | None  # the run's lease owner, or its last one once it expired
    age: float  # seconds since the effect's intent was written

    @property
    def holder(self) -> str:
        """The lease owner as a person tells it apart (``pid 41 on host-a``), or ``-``."""
        return "-" if self.lease_owner is None else owner_shown(self.lease_owner)

    @property
    def state(self) -> str:
        """``unknown`` (found in doubt), ``orphaned`` or ``in_flight`` (maybe still running)."""
        return "orphaned" if self.orphaned else self.step.state.value


class SubjectClaim(NamedTuple):
    """A subject (``once_per``) and the step of some run that holds it: its state is that
    step's own; ``live`` says whether a process holds the step's run's lease (by the
    store's clock). ``args_hash``, ``result_json`` and ``error_json`` are the step's;
    ``expires_at`` is when a done claim frees its subject (``once_for``), by the store's
    clock, or None: never."""

    subject: str
    run_id: str
    seq: int
    step_id: str
    state: StepState
    live: bool
    claimed_at: float
    args_hash: str
    result_json: str | None
    error_json: str | None
    expires_at: float | None = None


class JournalEntry(Value):
    """One record of a run's journal, with the hash that chains it to the one before."""

    id: int
    run_id: str
    seq: int | None
    event: str
    data: dict[str, Any]
    at: float
    data_json: str = ""  # ``data`` as stored: what the hash covers
    hash: str | None = None  # None for records written before the chain (schema 7)


class Checkpoint(Value):
    """A run's hash chain at a moment: ``entries`` records long, ending in ``head``,
    signed by the key ``key_id`` (base64 Ed25519 over ``_chain.checkpoint_payload``)."""

    id: int
    run_id: str
    entries: int
    head: str
    at: float
    key_id: str
    signature: str


class Halt(Value):
    """A kill switch, set by code or a person; cleared only by a named person."""

    id: int
    scope: HaltScope
    target: str  # the agent or run id; "" for global
    reason: str
    set_by: str
    set_at: float
    cleared_by: str | None
    cleared_at: float | None
    note: str | None

    @property
    def active(self) -> bool:
        return self.cleared_at is None


class Approval(Value):
    """A request to run one effect with exactly these arguments, and a person's decision."""

    id: int
    run_id: str
    step_id: str
    tool: str
    args_hash: str
    args_json: str
    status: ApprovalStatus
    requested_at: float
    decided_by: str | None
    decided_at: float | None
    expires_at: float | None
    note: str | None
    used_at: float | None


class ApprovalEdit(Value):
    """A person's approval of other arguments than a request asked (journalled as
    ``approval_edited``): the step runs the edited call, under its own request and key.
    ``args_json`` and ``edited_args_json`` are the arguments by parameter name, as shown."""

    request: int
    step_id: str
    args_hash: str  # of the request as the agent asked it
    args_json: str
    edited_request: int
    edited_args_hash: str  # of the edited call's recorded arguments
    edited_args_json: str
    by: str
    note: str | None
    at: float


class ApprovalHistory(Value):
    """What the journal says a step's approvals were: whether it ever asked a person (a
    per-call policy's "yes" holds for good), and the edits people approved, in order."""

    asked: bool
    edits: tuple[ApprovalEdit, ...]
    shapes: dict[int, str]  # request id -> the tool's parameters it journalled (JSON)


class HoldRecord(Value):
    """A resource a run holds, or held last. ``state``: ``held`` (its holder's lease
    runs), ``blocked`` (the lease is gone but an effect its holder began under it is in
    doubt), ``lapsed`` (neither: anyone may take it), ``free`` (released)."""

    resource: str  # the name as canonical JSON, e.g. ["host","db-1"]
    holder: str  # the run that has it, or had it last
    token: int  # grows with every taking: the fencing token providers check
    since: float  # store clock
    released_at: float | None
    state: str


class UsedLink(NamedTuple):
    """A decision link that decided: its signed nonce, the run, what it decided, who used
    it and when (store clock)."""

    nonce: str
    run_id: str
    decision: str
    by: str
    at: float
