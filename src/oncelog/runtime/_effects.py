"""The engine: the I/O around the effect state machine (``_decide``). It reads what is
recorded at a position, asks the provider's probe, writes intents, and turns each
``Action`` into a store write, a returned value or an exception.

Every visit of a position is decided by ``decide``: ``replay_done`` (a done step found on
the replay page, no store call) and ``prepare`` (anything else: replay, run live, or
stop; it writes the intent). After the call its ``Outcomes`` (``_outcomes``) write the
outcome: ``complete`` and ``fail``. The store is reached through ``RunStore``
(``_run_store``), the same methods watched for a lost disk or lease. The sync and async
runs share these; only the call differs. What the engine needs from its process (is it
draining, has a heartbeat found the lease lost, who observes steps, the clock) comes in
as ``Surroundings``.
"""

from __future__ import annotations

import functools
from contextlib import suppress
from dataclasses import asdict, replace
from typing import Any, NoReturn

from .. import _numbers as numbers
from .._commands import oncelog_command
from .._exceptions import (
    ApprovalDenied,
    ApprovalRequired,
    ArgumentDrift,
    BudgetExceeded,
    BudgetPaused,
    ConfigurationError,
    Draining,
    EffectAbandoned,
    EffectRefused,
    InvalidPayload,
    LeaseLost,
    NeedsPerson,
    PreflightConflict,
    PreflightUnanswered,
    ResultNotRecorded,
    RetriesPaused,
    StepNotInPlan,
    SubjectBusy,
    SubjectDone,
    SubjectInDoubt,
    decide_text,
    effect_refused,
    halted,
    in_doubt,
)
from .._log import log
from ..controls._alerts import AlertCallback, AlertSender
from ..observe import _observe as observe
from ..records._argument_edits import edited_payload_json, same_by_name
from ..records._budgets import check, refusal
from ..records._display import visible
from ..records._records import ApprovalStatus, StepRecord, StepState, StepType, SubjectClaim
from ..records._serialization import decode, digest, encode_decoded
from ..signals import _crashpoints as crashpoints
from ..stores._protocol import (
    Lease,
    NewStep,
    Outcome,
    Store,
    SubjectHeld,
    new_step,
)
from ._approval_policy import needs_approval, standing_edit
from ._calls import (
    Adopted,
    Again,
    Call,
    Pending,
    Replayed,
    Surroundings,
    edited_step,
    encode_args,
    error_json,
    idempotency_key,
)
from ._decide import (
    IN_DOUBT,
    KEY_REFUSED,
    Action,
    Situation,
    attempts_left,
    decide,
    deduplicated,
    key_honoured,
    key_refused,
)
from ._outcomes import Outcomes
from ._probes import CANNOT_TELL, NOT_FOUND, Conflict, Found
from ._reconcile import ask
from ._replay import MISS, ReplayCursor, divergence
from ._run_store import RunStore
from ._stops import Stop
from ._subjects import older_spellings, subject_key, subject_text

# Module constants: on Python 3.11 reading an enum member off its class costs several
# times reading a global, and a live step reads a few.
_EFFECT, _LLM, _RUN = StepType.EFFECT, StepType.LLM, Action.RUN
_SETTLED = frozenset({StepState.DONE, StepState.FAILED, StepState.ABANDONED})
_NOT_DONE = StepState.NOT_DONE
_REPLAYS = frozenset(
    {Action.REPLAY, Action.REPLAY_UNRECORDED, Action.REPLAY_REFUSED, Action.REPLAY_ABANDONED}
)

_CLAIM_TRIES = 8  # a subject freed, then claimed by a third run, again and again
_NO_STOP = 1 << 62  # the position of a stop in a run that has none: past every step


# Whether ``decide`` replays a done step found on the replay page as it is asked (the
# same step, the same arguments, its result recorded), by whether its tool is idempotent
# and by its type's value: replay's hot path looks it up at every step, in two subscripts
# (building the step's situation would cost more than the rest of its replay).
_DONE_ON_PAGE = tuple(
    {step_type.value: decide(Situation(step_type, idempotent, StepState.DONE)) is Action.REPLAY
     for step_type in StepType}
    for idempotent in (False, True)
)  # fmt: skip


@functools.cache
def _by_record(
    step_type: StepType, idempotent: bool, state: StepState, missing: bool, same_step: bool
) -> Action:
    """A settled step, or another step than the one asked, is decided by its record
    alone: each decision is made once, since replay asks for one per recorded step."""
    return decide(
        Situation(step_type, idempotent, state, same_step=same_step, result_missing=missing)
    )


@functools.cache
def _fresh(
    step_type: str,
    idempotent: bool,
    draining: bool,
    lease_lost: bool,
    max_attempts: int | None,
    preflight_declared: bool,
    probe_declared: bool,
    dedupe_window: float | None,
    drift_error: bool,
) -> tuple[Situation, Action]:
    """The situation of a step with nothing recorded, which its tool and the process alone
    make, and its decision: each is built once (building a ``Situation`` costs more than
    deciding it). Keyed by the step type's value: an enum member's hash is a Python call."""
    situation = Situation(
        StepType(step_type), idempotent, draining=draining, lease_lost=lease_lost,
        max_attempts=max_attempts, preflight_declared=preflight_declared,
        probe_declared=probe_declared, dedupe_window=dedupe_window, drift_error=drift_error,
    )  # fmt: skip
    return situation, decide(situation)


def _why_halted(action: Action, situation: Situation) -> list[str]:
    """What stopped an effect in doubt from being sent again, when something could have."""
    if action is not Action.HALT or situation.failure is not None:
        return []
    if situation.key_refused:
        return [f"not sent again: {KEY_REFUSED}, and would answer a resend the same way"]
    if situation.probe is NOT_FOUND and not key_honoured(situation):
        return ["but the provider no longer honours the key (dedupe_window)"]
    if not attempts_left(situation) and (situation.probe is NOT_FOUND or deduplicated(situation)):
        return [f"but the retry policy's {situation.max_attempts} attempts are used up"]
    return []


class Engine:
    def __init__(
        self,
        store: Store,
        lease: Lease,
        cursor: ReplayCursor,
        plan: tuple[str, ...] | None,
        payload_limit: int,
        key_namespace: str = "",
        on_budget_alert: AlertCallback | None = None,
        surroundings: Surroundings | None = None,
        stop: Stop | None = None,
    ) -> None:
        self.store = store  # as the run's ``Run`` uses it (holds, the run's end)
        self.lease = lease
        self.cursor = cursor
        self.plan = plan
        self.payload_limit = payload_limit
        self.key_namespace = key_namespace
        self.alerts = AlertSender(store, on_budget_alert)
        self.surroundings = surroundings or Surroundings()
        # Every store access of a step, by the store's method names (``_run_store``).
        self.run_store = RunStore(store, cursor, lease.run_id, self.surroundings)
        self.outcomes = Outcomes(self.run_store, lease, cursor, payload_limit, self.surroundings)
        self.stop = stop  # the run's sticky stop (``_stops``), recorded or raised here
        self._stop_from = _NO_STOP if stop is None else stop.seq  # replay's fast path ends

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    def replay_done(
        self,
        seq: int,
        step_id: str | None,
        step_type: StepType,
        tool: str,
        payload: Any,
        idempotent: bool,
    ) -> Any:
        """Replay's hot path, one call per recorded step: the result of the done step at
        ``seq`` when it is the same step asked with the same arguments and ``decide``
        replays it (its row for a done step: tests/test_decide.py). MISS for anything
        else, and for a step not on the page read last: ``prepare`` decides it, with the
        checks and the messages of every other state."""
        # No store call. A broken store (``RunStore``) has emptied the page.
        found = self.cursor.page.get(seq) if seq < self._stop_from else None
        if (
            found is None or found[1] != step_type or found[2] != tool
            or found[0] != (f"{tool}@{seq}" if step_id is None else step_id)
            or found[3] != payload  # comparing decoded arguments runs in C: no encoding
            or not _DONE_ON_PAGE[idempotent][found[1]]
        ):  # fmt: skip
            return MISS
        return found[4]

    def prepare(self, seq: int, call: Call) -> Replayed | Pending:
        """Decide the step at ``seq`` and write its intent; a stop that needs a person
        becomes the run's sticky stop."""
        if self.stop is not None and seq >= self.stop.seq:
            return self._past_stop(seq, call, self.stop)
        try:
            return self._decided(seq, call)
        except NeedsPerson as stop:
            self._stopped(seq, stop)
            raise

    def _past_stop(self, seq: int, call: Call, stop: Stop) -> Replayed | Pending:
        """A step at or after the run's stop. Only the stopped step itself, asked again by
        a later start at its position, is decided afresh (a person may have decided, the
        code been fixed, the probe find it); once it gets past, the stop is lifted."""
        step_id = call.step_id if call.step_id is not None else f"{call.spec.name}@{seq}"
        # A divergence names the step the code asked for, not the one recorded there.
        other = step_id != stop.step_id and stop.kind != "ReplayDivergence"
        if seq > stop.seq or other or stop.kind == "RunHalted":
            raise stop.refusal(self.run_id, step_id)
        try:
            got = self._decided(seq, call)
        except NeedsPerson as again:
            self._stopped(seq, again)
            raise
        if stop.durable:
            self.run_store.lift_stop(self.lease, seq)
        self.stop, self._stop_from = None, _NO_STOP
        return got

    def _stopped(self, seq: int, error: NeedsPerson) -> None:
        """Make ``error`` the run's stop at ``seq``: recorded on the run's row unless its
        own write recorded it (an effect marked unknown) or it is a kill switch's."""
        if self.stop is not None and self.stop.seq < seq:
            return  # a later step refused by the stop: the stop stays the first one
        stop = Stop.of(seq, error)
        if stop.durable and stop != self.stop:
            self.run_store.hold(self.lease, seq, error.message, stop.to_json())
        self.stop, self._stop_from = stop, seq

    def _decided(self, seq: int, call: Call) -> Replayed | Pending:
        """``_prepare``, with the result of another run's step on the subject handed back
        as this step's."""
        try:
            return self._prepare(seq, call)
        except Adopted as adopted:
            return adopted.replayed

    def _prepare(self, seq: int, call: Call) -> Replayed | Pending:
        step_id = call.step_id if call.step_id is not None else f"{call.spec.name}@{seq}"
        if call.spec.approval is not False and call.step_type is _EFFECT:
            self._read_approvals(call, step_id)
        # Past what is recorded, ``cursor.row`` would say None: no call.
        if seq < self.cursor.frontier or self.run_store.broken is not None:
            found = self._recorded(seq, step_id, call)
            if found is not None:
                return found
        if self.plan is not None:
            self._check_plan(call, step_id)
        situation, action = self._situation_new(call)
        if action is _RUN:
            # The common step: nothing to ask anyone, nothing to say, nothing in doubt.
            step = self._new_step(seq, step_id, call)
            return self._go_live(_RUN, step, call, None, None)
        return self._visit(seq, step_id, call, None, situation)

    def _read_approvals(self, call: Call, step_id: str) -> None:
        """What the journal says of this step's approvals (``_approval_policy``): whether
        it asked a person, and the edit that stands for these arguments, which the call
        then becomes."""
        history = self.run_store.approval_history(self.run_id, step_id)
        call.asked = history.asked
        edit = standing_edit(history.edits, digest(self._args_json(call, step_id)))
        if edit is not None:
            call.edit = edit
            call.args_json = edited_payload_json(decode(edit.edited_args_json))
            call.payload = decode(call.args_json)

    def _recorded(self, seq: int, step_id: str, call: Call) -> Replayed | Pending | None:
        """``prepare`` for a step recorded at ``seq``; None if nothing is."""
        if self.run_store.row(seq) is None:  # reads the page holding seq
            return None
        value = self.replay_done(
            seq, call.step_id, call.step_type, call.tool, call.payload, call.idempotent
        )
        if value is not MISS:
            return Replayed(value)
        record = self.run_store.recorded(seq)
        if record is None:
            return None
        return self._visit(seq, step_id, call, record, None)

    def _new_step(self, seq: int, step_id: str, call: Call) -> NewStep:
        """A step about to run live; a replayed one needs neither key nor hash."""
        args_json = call.args_json
        if args_json is None:
            args_json = self._args_json(call, step_id)
        spec, step_type = call.spec, call.step_type
        if step_type is _EFFECT:
            kind: str = spec.kind._value_
            cost = spec.cost
            if call.edit is None and isinstance(spec.approval, bool):
                approval = spec.approval
            else:
                approval = needs_approval(
                    spec.approval, args_json, call.asked, call.edit is not None, self.run_id,
                    step_id,
                )  # fmt: skip
            if type(cost) is not float:  # a function of the arguments, or an int
                cost = self._cost(call, step_id)
        else:
            kind = "llm" if step_type is _LLM else spec.kind._value_
            approval, cost = False, 0.0
        step = new_step(
            seq, step_id, step_type, spec.name, kind,
            idempotency_key(
                self.lease.run_id, edited_step(step_id, call.edit), spec.name, self.key_namespace
            ),
            digest(args_json), args_json, approval, cost, spec.irreversible, 0.0,
        )  # fmt: skip
        if approval and spec.approval_expires is not None:
            step = replace(step, approval_lasts=spec.approval_expires)
        if spec.once_per is None or step_type is not _EFFECT:
            return step
        subject = subject_text(spec, call.payload, self.run_id, step_id)
        return replace(
            step, key=self._subject_key(call, subject, step_id), subject=subject,
            subject_for=spec.once_for, subject_spellings=older_spellings(subject),
        )  # fmt: skip

    def _subject_key(self, call: Call, subject: str, step_id: str) -> str:
        """A subject's key; one claimed for a time (``once_for``) has one per claim."""
        claim = None if call.spec.once_for is None else (self.run_id, step_id)
        return subject_key(subject, self.key_namespace, claim)

    def _key(self, call: Call, step_id: str, record: StepRecord | None) -> str:
        """The idempotency key of the step: its subject's, if its tool names one (the
        recorded one, if an intent recorded it: a restart never makes a fresh one)."""
        if call.spec.once_per is not None and call.step_type is _EFFECT:
            if record is not None:
                return record.key
            subject = subject_text(call.spec, call.payload, self.run_id, step_id)
            return self._subject_key(call, subject, step_id)
        return idempotency_key(
            self.run_id, edited_step(step_id, call.edit), call.tool, self.key_namespace
        )

    def _cost(self, call: Call, step_id: str) -> float:
        """What an effect's attempt reserves of the run's budget."""
        cost = call.spec.cost
        if not callable(cost):
            return float(cost)
        try:
            return numbers.amount(cost(*call.payload["args"], **call.payload["kwargs"]), "cost")
        except Exception as exc:
            raise ConfigurationError(
                f"the cost function of {call.spec.name!r} failed: {exc}",
                run_id=self.run_id,
                step_id=step_id,
            ) from exc

    def _args_json(self, call: Call, step_id: str) -> str:
        if call.args_json is None:
            call.args_json = encode_args(call.payload, self.payload_limit, self.run_id, step_id)
        return call.args_json

    def _check_plan(self, call: Call, step_id: str) -> None:
        if self.plan is not None and call.step_id is not None and step_id not in self.plan:
            raise StepNotInPlan(
                f"step {step_id!r} is not in the run's stored plan {list(self.plan)}",
                run_id=self.run_id,
                step_id=step_id,
            )

    def _situation_new(self, call: Call) -> tuple[Situation, Action]:
        """What ``decide`` needs about a step with nothing recorded, and its decision."""
        surroundings, spec = self.surroundings, call.spec
        return _fresh(
            call.step_type._value_, spec.idempotent, surroundings.draining(),
            surroundings.lease_lost(self.lease),
            None if spec.retry is None else spec.retry.attempts,
            spec.preflight is not None, spec.probe is not None, spec.dedupe_window,
            spec.drift == "error",
        )  # fmt: skip

    def _situation(self, call: Call, record: StepRecord | None) -> Situation:
        """What ``decide`` needs about this step, before anything is asked of anyone."""
        if record is None:
            return self._situation_new(call)[0]
        surroundings, spec = self.surroundings, call.spec
        in_doubt = record.state in IN_DOUBT
        aged = in_doubt and spec.dedupe_window is not None and not call.idempotent
        return Situation(
            call.step_type,
            call.idempotent,
            record.state,
            result_missing=record.error_json is not None,
            draining=surroundings.draining(),
            lease_lost=surroundings.lease_lost(self.lease),
            attempts=record.attempts,
            max_attempts=None if spec.retry is None else spec.retry.attempts,
            retry_wait=0.0 if record.retry_at is None else record.retry_at - surroundings.clock(),
            preflight_declared=spec.preflight is not None,
            probe_declared=spec.probe is not None,
            key_age=self.outcomes.key_age(record.seq) if aged else 0.0,
            dedupe_window=spec.dedupe_window,
            same_args=not in_doubt or self._same_args(record, call),
            drift_error=call.drift == "error",
            key_refused=in_doubt and key_refused(record.reason),
        )

    def _check_not_paused(self, record: StepRecord) -> None:
        paused = self.store.retries_paused(self.run_id, record.seq)
        if paused is not None:
            resume = oncelog_command(
                "retry", [self.run_id, record.step_id], options="--resume --by NAME --why WHY"
            )
            raise RetriesPaused(
                f"the retries of {record.tool} {record.step_id!r} are {paused}; its next "
                f"attempt waits for a person, who resumes them with: {resume}",
                run_id=self.run_id, step_id=record.step_id, key=record.key,
            )  # fmt: skip

    def _visit(
        self,
        seq: int,
        step_id: str,
        call: Call,
        record: StepRecord | None,
        situation: Situation | None,
    ) -> Replayed | Pending:
        """Decide, ask the provider when the decision says so, decide again; then act."""
        if record is not None:
            same = (
                record.step_id == step_id and record.tool == call.tool
                and record.type is call.step_type
            )  # fmt: skip
            if not same or record.state in _SETTLED:  # decided by the record alone
                missing = record.error_json is not None
                action = _by_record(call.step_type, call.idempotent, record.state, missing, same)
                if action is Action.DIVERGE:
                    raise divergence(record, step_id, call.tool, call.step_type)
                return self._replay(action, record, call)
            if record.state is _NOT_DONE and record.attempts:  # a retry: not while paused
                self._check_not_paused(record)
        if situation is None:
            situation = self._situation(call, record)
        said: list[str] = []
        while True:
            action = decide(situation)
            if action is Action.WAIT:
                self.surroundings.sleep(situation.retry_wait)
                if record is not None:  # paused while it waited: not attempted
                    self._check_not_paused(record)
                situation = self._situation(call, record)
            elif action is Action.ASK_PROBE:
                assert record is not None
                answer, text = ask(call.spec.probe, record.key, record.args_payload, "probe")
                said.append(text)
                probed = CANNOT_TELL if isinstance(answer, Conflict) else answer  # not a probe's
                situation = replace(situation, probe=probed)
            elif action is Action.ASK_PREFLIGHT:
                key = self._key(call, step_id, record)
                answer, text = ask(call.spec.preflight, key, call.payload, "preflight")
                said.append(text)
                situation = replace(situation, preflight=answer)
            else:
                said += _why_halted(action, situation)
                found = next(
                    (a for a in (situation.probe, situation.preflight) if isinstance(a, Found)),
                    None,
                )
                return self._act(action, seq, step_id, call, record, found, "; ".join(said))

    def _act(
        self,
        action: Action,
        seq: int,
        step_id: str,
        call: Call,
        record: StepRecord | None,
        found: Found | None,
        said: str,
    ) -> Replayed | Pending:
        if record is not None and action in _REPLAYS:
            return self._replay(action, record, call)
        previous = None if record is None else record.state
        if record is not None and previous in IN_DOUBT:
            if found is not None:  # the probe's or the preflight's answer settles it
                return self._settle(record, call, found)
            if action is Action.DRIFT:
                self._check_drift(record, call)
            if action in (Action.HALT, Action.HALT_CONFLICT):
                self._halt(action, record, call, said)
        step = self._new_step(seq, step_id, call)
        if record is not None and step.subject is not None and step.key != record.key:
            # The key its intent recorded: its claim's, or one derived before claims had
            # keys of their own (an effect in flight in a ledger of an earlier version).
            step = replace(step, key=record.key)
        if action is Action.RESEND:
            said = (said + "; " if said else "") + (
                "sent again with the same key: the provider deduplicates it for "
                f"{call.spec.dedupe_window:g} s after it was first sent"
            )
        if action is Action.STOP_PREFLIGHT_UNSURE:
            raise PreflightUnanswered(
                f"{step_id!r} was not started: {said}; a later start asks again",
                run_id=self.run_id, step_id=step_id, key=step.key,
            )  # fmt: skip
        if action in (Action.RECORD_FOUND, Action.HALT_CONFLICT):
            return self._before_call(action, step, call, previous, found, said)
        return self._go_live(action, step, call, previous, said or None)

    def _go_live(
        self,
        action: Action,
        step: NewStep,
        call: Call,
        previous: StepState | None,
        reason: str | None,
    ) -> Pending:
        if action is not _RUN:
            if action is Action.STOP_DRAINING:
                raise Draining(
                    f"this process is shutting down; {step.step_id!r} was not started and "
                    "the run is queued for another worker",
                    run_id=self.run_id, step_id=step.step_id,
                )  # fmt: skip
            if action is Action.STOP_LEASE_LOST:
                raise LeaseLost(
                    "another worker took this run over while this one was busy",
                    run_id=self.run_id, step_id=step.step_id,
                )  # fmt: skip
            assert action is Action.RESEND, action
        attempt = 0
        if call.step_type is not _EFFECT:
            # A model call or a query is recorded after it runs; look for a kill switch
            # first so a halted agent spends nothing. Effects check inside their intent.
            lease = self.lease
            halt = self.run_store.active_halt(lease.run_id, lease.agent)
            if halt is not None:
                raise halted(halt, lease.run_id, step.step_id)
            if lease.budgeted:
                self._check_budget(step)
        else:
            attempt = self._write_intent(step, call, previous, reason)
        observers = self.surroundings.observers
        pending = Pending(step, call, attempt, previous, observers)
        if observers:
            pending.observed = observe.started(observers, pending.info(self.run_id))
        return pending

    def _write_intent(
        self, step: NewStep, call: Call, previous: StepState | None, reason: str | None
    ) -> int:
        """Make the attempt durable before its call; return its number."""
        if step.needs_approval:
            self._check_approval(step, call.spec.edit_shape)
        for _ in range(_CLAIM_TRIES):
            try:
                intent = self.run_store.write_intent(self.lease, step, previous, reason)
                break
            except (BudgetExceeded, BudgetPaused) as exc:
                self.alerts.send(exc.alert)
                raise
            except SubjectHeld as held:
                self._subject_held(step, call, previous, held.holder)  # returns if freed
        else:
            raise self._subject_error(SubjectBusy, step, holder=None)
        self.cursor.advance_frontier(step.seq)
        if crashpoints.ARMED:
            crashpoints.reach("after_intent_commit", step.step_id)
        for warning in intent.warnings:
            self.alerts.send(warning)
        return intent.attempt

    def _subject_held(
        self, step: NewStep, call: Call, previous: StepState | None, holder: SubjectClaim
    ) -> None:
        """Another run's step holds the subject: take its result (``Adopted``) or raise
        what its state means; return if it was freed since, to claim it again."""
        while True:
            same = holder.args_hash == step.args_hash or self._holder_same_call(holder, step, call)
            # A declared preflight was asked before this intent: a freed subject is claimed
            # at once.
            situation = replace(
                self._situation_new(call)[0], preflight_declared=False, subject_held=holder.state,
                subject_live=holder.live, repeat_error=call.spec.repeat_error, same_args=same,
            )  # fmt: skip
            action = decide(situation)
            if action is _RUN:
                return
            if action is Action.ADOPT:
                if not same:
                    log.warning(
                        "%s was done by run %r, step %r, with other arguments; returning "
                        "its result", step.subject, holder.run_id, holder.step_id,
                    )  # fmt: skip
                adopted = replace(step, cost=0.0, irreversible=False, needs_approval=False,
                                  subject=None, subject_for=None,
                                  key=self._holder_key(step, call, holder))  # fmt: skip
                try:
                    self.run_store.adopt_subject(self.lease, adopted, previous, holder)
                except SubjectHeld as held:  # it changed hands or was freed meanwhile
                    holder = held.holder
                    continue
                self.cursor.advance_frontier(step.seq)
                record = self.run_store.steps(self.run_id, step.seq, 1)[0]
                missing = record.error_json is not None
                action = _by_record(call.step_type, call.idempotent, record.state, missing, True)
                raise Adopted(self._replay(action, record, call))
            if action is Action.DRIFT:
                raise ArgumentDrift(
                    f"{step.subject} was done by run {holder.run_id!r}, step "
                    f"{holder.step_id!r}, with other arguments; this step asks with "
                    f"{step.args_json[:200]}",
                    run_id=self.run_id, step_id=step.step_id, key=step.key,
                )  # fmt: skip
            if action is Action.SUBJECT_DONE:
                raise self._subject_error(SubjectDone, step, holder)
            if action is Action.SUBJECT_BUSY:
                raise self._subject_error(SubjectBusy, step, holder)
            if action is Action.SUBJECT_IN_DOUBT:
                raise self._subject_error(SubjectInDoubt, step, holder)
            self._go_live(action, step, call, previous, None)  # draining, lease lost: raises
            raise AssertionError(action)

    def _holder_key(self, step: NewStep, call: Call, holder: SubjectClaim) -> str:
        """The key of the effect a step takes the result of: the holder's claim's (one
        subject, one key, when claimed for ever)."""
        if call.spec.once_for is None:
            return step.key
        found = self.run_store.steps(holder.run_id, holder.seq, 1)
        return found[0].key if found and found[0].seq == holder.seq else step.key

    def _subject_error(
        self, error: type[SubjectBusy | SubjectDone | SubjectInDoubt], step: NewStep,
        holder: SubjectClaim | None,
    ) -> SubjectBusy | SubjectDone | SubjectInDoubt:  # fmt: skip
        """The error for a subject held elsewhere, naming the step that holds it."""
        if holder is None:
            said = "changed hands too often; a later start asks again"
        else:
            where = f"run {visible(holder.run_id)}, step {visible(holder.step_id)}"
            # The attempt the person is shown: a decision naming none is refused once the
            # holder's step has had a second (``resolve`` binds it to the one looked at).
            found = self._holder_step(holder) if error is SubjectInDoubt else None
            attempt = None if found is None else found.attempts
            said = {
                SubjectDone: f"was done by {where}; its tool says a repeat is an error",
                # The claim's liveness is its run's lease (stores/_sql_subjects.py), which
                # outlives a killed holder until it lapses: "live" would be a guess.
                SubjectBusy: f"is being acted on by {where}, whose run's lease is held (by a "
                "live process, or by one that died, until its lease lapses); a later start "
                "finds its outcome",
                SubjectInDoubt: f"is held by {where}, whose outcome is in doubt and whose run "
                "no live process holds: restart that run (it probes, resends or halts as "
                "for any effect in doubt) or decide, one of: "
                + decide_text(holder.run_id, holder.step_id, attempt),
            }[error]
        return error(
            f"{step.tool} {step.step_id!r} was not sent: its subject {step.subject} {said}",
            run_id=self.run_id, step_id=step.step_id, key=step.key, subject=step.subject,
            held_by_run=None if holder is None else holder.run_id,
            held_by_step=None if holder is None else holder.step_id,
        )  # fmt: skip

    def _check_budget(self, step: NewStep) -> None:
        """Before a model call or a query: would one more step be over the budget?"""
        budget, used = self.run_store.budget_usage(self.run_id)
        if budget is None:
            return
        over, warnings = check(
            budget, asdict(replace(used, steps=used.steps + 1)),
            scope="run", target=self.run_id, run_id=self.run_id, step_id=step.step_id,
        )  # fmt: skip
        for alert in warnings if over is None else [over]:
            self.alerts.send(alert)
        if over is not None:
            raise refusal(over)

    def _check_approval(self, step: NewStep, shape: str | None) -> None:
        """Ask for approval of these arguments, or find the decision. The intent then
        consumes an approval in its own transaction."""
        approval = self.run_store.request_approval(self.lease, step, shape)
        if approval.status is ApprovalStatus.DENIED:
            # Who and why come from the journalled decision (request_approval): a row
            # edited behind the ledger's back says nothing to the agent.
            said = (
                f"{approval.decided_by} denied {step.step_id!r} with these arguments"
                + (f": {approval.note}" if approval.note else "")
                if approval.decided_by is not None
                else f"request {approval.id} of {step.step_id!r} is marked denied, but the "
                "journal holds no such decision: the row was edited behind the ledger's back"
            )
            raise ApprovalDenied(said, run_id=self.run_id, step_id=step.step_id, key=step.key)
        if approval.status is not ApprovalStatus.APPROVED:
            raise ApprovalRequired(
                f"{step.tool} {step.step_id!r} waits for approval of request {approval.id}: "
                + oncelog_command("approve", [self.run_id, step.step_id],
                                  options=f"--request {approval.id} --by NAME"),
                run_id=self.run_id, step_id=step.step_id, key=step.key,
            )  # fmt: skip

    def _replay(self, action: Action, record: StepRecord, call: Call) -> Replayed:
        if action is not Action.REPLAY_ABANDONED:
            self._check_drift(record, call)
        if action is Action.REPLAY:
            return Replayed(record.result)
        if action is Action.REPLAY_UNRECORDED:
            raise self._not_recorded(record)
        if action is Action.REPLAY_REFUSED:
            raise self._refused(record)
        raise EffectAbandoned(
            "a person abandoned this effect",
            run_id=self.run_id,
            step_id=record.step_id,
            key=record.key,
        )

    def _halt(self, action: Action, record: StepRecord, call: Call, said: str) -> NoReturn:
        """Mark the effect in doubt unknown: the run halts until a person decides."""
        said = said or "no probe is declared"
        if action is Action.HALT_CONFLICT:
            reason = f"{call.kind} effect {record.step_id!r} is held: {said}"
        else:
            reason = (
                f"{call.kind} effect {record.step_id!r} was started (attempt {record.attempts}) "
                f"but its outcome was never recorded; it may or may not have happened ({said})"
            )
        error: NeedsPerson = (
            PreflightConflict(reason, run_id=self.run_id, step_id=record.step_id, key=record.key)
            if action is Action.HALT_CONFLICT
            else in_doubt(reason, self.run_id, record.step_id, record.key, record.attempts)
        )
        stop = Stop.of(record.seq, error)
        self.run_store.mark_unknown(self.lease, record.seq, reason, stop.to_json())
        self.stop, self._stop_from = stop, record.seq
        raise error

    def fail(self, pending: Pending, exc: Exception) -> Exception | Again:
        """Record a call that raised (``Outcomes.fail``): an effect it marks unknown is
        the run's stop."""
        error = self.outcomes.fail(pending, exc)
        if isinstance(error, NeedsPerson):
            self.stop = Stop.of(pending.step.seq, error)
            self._stop_from = pending.step.seq
        return error

    def _before_call(
        self,
        action: Action,
        step: NewStep,
        call: Call,
        previous: StepState | None,
        found: Found | None,
        said: str,
    ) -> Replayed:
        """The preflight found the effect done, or in conflict, before an attempt: the
        intent records what it said, and the tool is not called (so no approval is used)."""
        self._write_intent(replace(step, needs_approval=False), call, previous, said)
        record = self.run_store.steps(self.run_id, step.seq, 1)[0]
        if found is None:
            self._halt(action, record, call, said)
        return self._settle(record, call, found)

    def _settle(self, record: StepRecord, call: Call, found: Found) -> Replayed:
        """The probe or the preflight found the effect: record it done with the
        provider's answer."""
        found = replace(found, result=call.recordable(found.result))
        try:
            result_json, returned = encode_decoded(
                found.result, what="probe result", limit=self.payload_limit
            )
        except InvalidPayload as exc:
            outcome = Outcome(StepState.DONE, error_json=error_json(exc))
            self.run_store.settle(self.lease, record.seq, record.attempts, outcome)
            raise self._not_recorded(record._replace(error_json=outcome.error_json)) from exc
        outcome = Outcome(StepState.DONE, result_json)
        self.run_store.settle(self.lease, record.seq, record.attempts, outcome)
        return Replayed(returned)

    def _same_args(self, record: StepRecord, call: Call) -> bool:
        # Comparing with the decoded record runs in C and needs no encoding or hashing;
        # values JSON would write differently (a tuple for a list) fall to the hash.
        with suppress(ValueError):
            if decode(record.args_json) == call.payload:
                return True
        args_json = self._args_json(call, record.step_id)
        return record.args_hash == digest(args_json) or self._same_by_name(
            call, record.args_json, args_json
        )

    def _holder_same_call(self, holder: SubjectClaim, step: NewStep, call: Call) -> bool:
        """Whether the step holding the subject recorded this very call, its arguments
        perhaps passed otherwise (by position there, by name in a person's edit here)."""
        found = self._holder_step(holder)
        return found is not None and self._same_by_name(call, found.args_json, step.args_json)

    def _holder_step(self, holder: SubjectClaim) -> StepRecord | None:
        """The step of another run that holds a subject, as recorded; None if gone."""
        found = self.run_store.steps(holder.run_id, holder.seq, 1)
        return found[0] if found and found[0].seq == holder.seq else None

    @staticmethod
    def _same_by_name(call: Call, recorded_json: str, args_json: str) -> bool:
        """Two recorded effect calls bound to the tool's parameters, compared: equal calls
        compare equal whether their arguments went by position or by name."""
        if call.step_type is not _EFFECT:
            return False  # a model call or a query: its payload is not a tool's call
        return same_by_name(call.fn, decode(recorded_json), decode(args_json))

    def _check_drift(self, record: StepRecord, call: Call) -> None:
        with suppress(ValueError):  # _same_args's first comparison, inlined for replay
            if decode(record.args_json) == call.payload:
                return
        if self._same_args(record, call):
            return
        args_json = self._args_json(call, record.step_id)
        message = (
            f"step {record.step_id!r} was recorded with other arguments "
            f"(recorded {record.args_json[:200]}, now {args_json[:200]})"
        )
        if call.drift == "error":
            raise ArgumentDrift(
                f"{message}; the code must pass the recorded arguments (see: "
                f"{oncelog_command('show', [self.run_id])}), then restart the agent",
                run_id=self.run_id, step_id=record.step_id, key=record.key,
            )  # fmt: skip
        log.warning("%s; returning the recorded outcome", message)

    def _refused(self, record: StepRecord) -> EffectRefused:
        error = record.error or {}
        return effect_refused(
            f"the provider refused: {error.get('message', '')}", self.run_id, record.step_id,
            record.key, str(error.get("type", "")).rpartition(".")[2] or None,
        )  # fmt: skip

    def _not_recorded(self, record: StepRecord) -> ResultNotRecorded:
        error = record.error or {}
        return ResultNotRecorded(
            f"the call succeeded but its result was not recorded: {error.get('message', '')}",
            run_id=self.run_id,
            step_id=record.step_id,
            key=record.key,
        )
