"""The outcome half of a live step: what its call returned or raised, recorded after it.
The engine (``_effects.Engine``) decides the step and writes its intent before the call;
its ``Outcomes`` record the call's end: ``complete``, which the run calls, and ``fail``,
through ``Engine.fail``, which makes an effect marked unknown the run's stop.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from .._exceptions import (
    InvalidPayload,
    OnceLogError,
    ResendLater,
    ResultNotRecorded,
    effect_refused,
    in_doubt,
)
from .._log import log
from ..failures import Failure
from ..records._records import StepState, StepType
from ..records._serialization import encode_decoded
from ..signals import _crashpoints as crashpoints
from ..stores._protocol import Lease, Outcome, new_outcome, timed_step
from ._calls import Again, Pending, Surroundings, error_json, failure_of, usage
from ._decide import IN_DOUBT, KEY_REFUSED, Action, Situation, decide, deduplicated, key_age
from ._probes import CANNOT_TELL, Conflict, Found
from ._reconcile import ask
from ._replay import ReplayCursor
from ._run_store import RunStore
from ._stops import Stop

# Module constants: on Python 3.11 reading an enum member off its class costs several
# times reading a global.
_EFFECT, _LLM, _DONE = StepType.EFFECT, StepType.LLM, StepState.DONE


class Outcomes:
    """Records the end of one run's live steps, with the run's store, lease and cursor."""

    def __init__(
        self,
        store: RunStore,
        lease: Lease,
        cursor: ReplayCursor,
        payload_limit: int,
        surroundings: Surroundings,
    ) -> None:
        self.store = store
        self.lease = lease
        self.cursor = cursor
        self.payload_limit = payload_limit
        self.surroundings = surroundings
        self.run_id = lease.run_id

    def complete(self, pending: Pending, result: Any) -> Any:
        """Record what the call returned; hand back what replay would hand back."""
        call = pending.call
        step_type = call.step_type
        if step_type is _EFFECT and crashpoints.ARMED:  # crash points mark effect boundaries
            crashpoints.reach("after_call", pending.step.step_id)
        try:
            result_json, returned = encode_decoded(
                result if call.secret_key is None else call.recordable(result),
                what="result", limit=self.payload_limit,
            )  # fmt: skip
        except InvalidPayload as exc:
            # The effect happened: record it as done so it never runs again, and say why
            # its result is missing, now and on every replay.
            self._write(pending, Outcome(StepState.DONE, error_json=error_json(exc)))
            pending.ended(self.run_id, "done")
            raise ResultNotRecorded(
                f"the call succeeded but its result cannot be recorded: {exc.message}",
                run_id=self.run_id,
                step_id=pending.step.step_id,
                key=pending.step.key,
            ) from exc
        tokens_in, tokens_out, cost = (0, 0, None)
        if step_type is _LLM:
            tokens_in, tokens_out, cost = usage(result)
        outcome = new_outcome(_DONE, result_json, None, tokens_in, tokens_out, cost, None)
        self._write(pending, outcome)
        if pending.observed is not None:
            pending.ended(self.run_id, "done")
        return returned

    def fail(self, pending: Pending, exc: Exception) -> Exception | Again:
        """Record a call that raised; return the exception the agent should see, or
        ``Again`` when the attempt is to be made again at this position."""
        step, call, spec = pending.step, pending.call, pending.call.spec
        clock = self.surroundings.clock
        failure = failure_of(spec, exc)
        earlier_in_doubt = pending.previous in IN_DOUBT
        doubted = failure is Failure.IN_DOUBT or (
            failure is Failure.NOT_PERFORMED and earlier_in_doubt
        )
        aged = spec.dedupe_window is not None and doubted
        situation = Situation(
            call.step_type, call.idempotent, StepState.IN_FLIGHT,
            attempts=pending.attempt,
            max_attempts=None if spec.retry is None else spec.retry.attempts,
            probe_declared=spec.probe is not None,
            key_age=self.key_age(step.seq) if aged else 0.0,
            dedupe_window=spec.dedupe_window, failure=failure,
            earlier_in_doubt=earlier_in_doubt,
        )  # fmt: skip
        action = decide(situation)
        said = ""
        if action is Action.ASK_PROBE:
            answer, said = ask(spec.probe, step.key, call.payload, "probe")
            probed = CANNOT_TELL if isinstance(answer, Conflict) else answer  # not a probe's
            situation = replace(situation, probe=probed)
            action = decide(situation)
        if action is Action.SETTLE_DONE:
            assert isinstance(situation.probe, Found)
            self._settle(pending, situation.probe)
            pending.ended(self.run_id, "done")
            self.cursor.reread()
            return Again()  # replays what the probe found
        if action is Action.RAISE:
            pending.ended(self.run_id, "error", exc)
            return exc
        if action is Action.RECORD_NOT_DONE:
            self._write(pending, Outcome(StepState.NOT_DONE, error_json=error_json(exc)))
            pending.ended(self.run_id, "not_done", exc)
            return exc
        if action is Action.RETRY_LATER:
            retry_at = clock() + self._backoff(pending)
            outcome = Outcome(StepState.NOT_DONE, error_json=error_json(exc), retry_at=retry_at)
            self._write(pending, outcome)
            pending.ended(self.run_id, "not_done", exc)
            self.cursor.reread()
            return Again()
        if action in (Action.RECORD_REFUSED, Action.RECORD_FAILED):
            self._write(pending, Outcome(StepState.FAILED, error_json=error_json(exc)))
            pending.ended(self.run_id, "refused", exc)
            why = "the provider refused"
            if action is Action.RECORD_FAILED:
                why = f"not performed in {pending.attempt} attempts (the retry policy's limit)"
            return effect_refused(
                f"{why}: {exc}", self.run_id, step.step_id, step.key, type(exc).__qualname__
            )
        pending.ended(self.run_id, "unknown", exc)
        doubt = f"{call.kind} effect {step.step_id!r} raised {type(exc).__name__}: {exc}"
        if said:
            doubt += f"; {said}"
        if action is Action.RESEND_LATER:
            log.warning("%s; sending it again with the same key", doubt)
            self.surroundings.sleep(self._backoff(pending))
            self.cursor.reread()
            return Again()
        if action is Action.STOP_RESEND_LATER:
            busy = situation.failure is Failure.IN_PROGRESS
            later = ("sends it again with the same key" if deduplicated(situation)
                     else "asks the probe or a person")  # fmt: skip
            return ResendLater(
                f"{doubt}{'; the provider still processes an earlier send' if busy else ''}; "
                f"it stays in flight, and a later start of the run {later}",
                run_id=self.run_id, step_id=step.step_id, key=step.key,
            )  # fmt: skip
        reason = f"{doubt}; it may or may not have happened"
        if failure is Failure.KEY_MISMATCH:  # read back by a later start: see _decide
            reason = f"{KEY_REFUSED}: {reason}"
        error = in_doubt(reason, self.run_id, step.step_id, step.key, pending.attempt)
        stop = Stop.of(step.seq, error).to_json()  # the run halts at it, in the same write
        self.store.mark_unknown(self.lease, step.seq, reason, stop)
        return error

    def key_age(self, seq: int) -> float | None:
        """The age of the key of the step at ``seq``, by the clock that wrote its first send,
        the store's (one read), or by a test's own clock (``Surroundings.key_clock``)."""
        times = self.store.key_times(self.run_id, seq)
        if times is None:
            return None
        key_clock = self.surroundings.key_clock
        if key_clock is None:
            return key_age(*times)
        # A test's clock is the authority: a reading before the first send is no time passed.
        return max(0.0, key_clock() - times.first_sent_at)

    def _settle(self, pending: Pending, found: Found) -> None:
        """The probe found the effect whose answer the call lost: record it done with the
        provider's answer, which the next ``prepare`` replays."""
        call = pending.call
        try:
            result_json, _ = encode_decoded(
                call.recordable(found.result), what="probe result", limit=self.payload_limit
            )
            outcome = Outcome(StepState.DONE, result_json)
        except InvalidPayload as exc:  # replayed as ResultNotRecorded
            outcome = Outcome(StepState.DONE, error_json=error_json(exc))
        self.store.settle(self.lease, pending.step.seq, pending.attempt, outcome)

    def _backoff(self, pending: Pending) -> float:
        retry = pending.call.spec.retry
        assert retry is not None
        return retry.delay(pending.attempt, self.surroundings.random())

    def _write(self, pending: Pending, outcome: Outcome) -> None:
        effect = pending.call.step_type is _EFFECT
        try:
            if effect:
                self.store.write_outcome(self.lease, pending.step, pending.attempt, outcome)
            else:
                # Started as long before the commit as its call took.
                timed = timed_step(pending.step, time.monotonic() - pending.began)
                self.store.record_step(self.lease, timed, pending.previous, outcome)
        except OnceLogError as exc:  # fenced off, or the disk: the call's end is not recorded
            pending.ended(self.run_id, "unrecorded", exc)
            raise
        if not effect:
            self.cursor.advance_frontier(pending.step.seq)
        elif crashpoints.ARMED:
            crashpoints.reach("after_outcome_commit", pending.step.step_id)
