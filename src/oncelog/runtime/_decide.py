"""The effect state machine as one pure function: what to do with a step, given what is
recorded for it, what its tool declares and what the provider said. No I/O happens here;
``_effects.Engine`` asks the store and the provider, then asks ``decide`` again.

    (no record) --intent--> in_flight --outcome--> done
                               |   \\----refusal--> failed
                               |    \\--not performed--> not_done --next visit--> in_flight
                               |                   (retry policy exhausted: failed)
                               \\ found by another process, or the call's end unknown:
                                  probe --found--> done
                                  key still deduplicated --sent again, same key--> in_flight
                                  probe --not found, key honoured--> in_flight (same key)
                                  else unknown --a person--> done | not_done | abandoned

An effect with a subject (its tool's ``once_per``) claims it with its intent; a subject
held by another run's step is decided on that step's state: done, its result is taken
(or ``SUBJECT_DONE``, or ``DRIFT`` with other arguments); in flight in a live run, try
later; in doubt in a dead one, that run's restart or a person settles it; freed since,
claim it.

Every visit of a position is decided here, replay included: a step recorded done is
replayed whatever else holds (the engine still compares its arguments: a drift is an
error or a warning, by the tool's policy); another step recorded at the position
(``DIVERGE``) means the code took another path than the recorded run.

Before any attempt a declared preflight may find the effect done (recorded done without a
call) or in conflict (a person decides). A visit starts with no probe or preflight answer;
``ASK_PROBE`` and ``ASK_PREFLIGHT`` mean: ask, then decide again with the answer. A failed
call is decided with its ``failure``; one that leaves the effect in doubt asks a declared
probe first, as a later start would.

A halt on a key held for other parameters (``Failure.KEY_MISMATCH``) begins its recorded
reason with ``KEY_REFUSED``; a later start reads it back (``key_refused``) and decides as
the failing process did: only a probe's ``Found`` settles the step, nothing is sent again
(the provider would answer the same), and it stays halted until a person decides.

A key's age is measured by one clock, the store's (which wrote the first send), unless a
test hands the engine its own; None when that clock reads earlier than a time it recorded
for the step: the age cannot be known, so the key is not taken as deduplicated.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ..failures import Failure
from ..records._records import StepState, StepType
from ..records._transitions import IN_DOUBT as IN_DOUBT  # the engine's too
from ._probes import NOT_FOUND, Conflict, Found, PreflightAnswer, ProbeAnswer

# How the recorded reason of a halt on ``Failure.KEY_MISMATCH`` begins (see above).
KEY_REFUSED = "the provider holds this key for a request with other parameters"


class Action(enum.Enum):
    """What the engine does next."""

    STOP_DRAINING = "stop_draining"  # this process is shutting down: start nothing
    STOP_LEASE_LOST = "stop_lease_lost"  # another worker owns the run now
    DIVERGE = "diverge"  # another step is recorded at this position: the code must change
    REPLAY = "replay"  # hand back the recorded result
    REPLAY_UNRECORDED = "replay_unrecorded"  # done, but its result could not be recorded
    REPLAY_REFUSED = "replay_refused"  # the provider refused: raise it again
    REPLAY_ABANDONED = "replay_abandoned"  # a person gave up on it
    WAIT = "wait"  # a retry policy set a time for the next attempt: wait, decide again
    ASK_PREFLIGHT = "ask_preflight"  # ask the provider before this attempt
    RECORD_FOUND = "record_found"  # the preflight found it: record it done, call nothing
    HALT_CONFLICT = "halt_conflict"  # the preflight answered a conflict: a person decides
    STOP_PREFLIGHT_UNSURE = "stop_preflight_unsure"  # the preflight could not tell: later
    RUN = "run"  # write the intent (effects only) and call the tool
    RESEND = "resend"  # in doubt, the key still deduplicated: same key, same arguments
    DRIFT = "drift"  # it would be sent again, but with other arguments
    ASK_PROBE = "ask_probe"  # in doubt: ask the provider, then decide again
    SETTLE_DONE = "settle_done"  # the probe found it: record it done with its answer
    HALT = "halt"  # in doubt and nobody can tell: mark it unknown, a person decides
    RECORD_REFUSED = "record_refused"  # the call raised a refusal: failed, for good
    RECORD_NOT_DONE = "record_not_done"  # not performed: the next visit runs it again
    RETRY_LATER = "retry_later"  # not performed: not_done, next attempt at a recorded time
    RECORD_FAILED = "record_failed"  # not performed, and the retry policy is exhausted
    RESEND_LATER = "resend_later"  # in doubt, key deduplicated: send again after a pause
    STOP_RESEND_LATER = "stop_resend_later"  # leave it in flight; a later start resends
    RAISE = "raise"  # a model call or a query raised: nothing recorded, the agent sees it
    ADOPT = "adopt"  # another run's step did the subject's effect: record its result here
    SUBJECT_DONE = "subject_done"  # ... and the tool says a repeat is an error
    SUBJECT_BUSY = "subject_busy"  # a live run is acting on the subject: try again later
    SUBJECT_IN_DOUBT = "subject_in_doubt"  # the holder's run died with it in doubt


@dataclass(frozen=True)
class Situation:
    """Everything the decision depends on, gathered by the engine."""

    step_type: StepType
    idempotent: bool  # the tool's kind is safe to run again (read, upsert)
    recorded: StepState | None = None  # None: nothing recorded at this position
    same_step: bool = True  # what is recorded there is the step asked for (id, tool, type)
    result_missing: bool = False  # an error is recorded: for a done step, why no result
    draining: bool = False
    lease_lost: bool = False
    attempts: int = 0  # intents written so far
    max_attempts: int | None = None  # the retry policy's (None: no policy)
    retry_wait: float = 0.0  # seconds until the recorded time of the next attempt
    preflight_declared: bool = False
    preflight: PreflightAnswer | None = None  # the preflight's answer, once asked
    probe_declared: bool = False
    probe: ProbeAnswer | None = None  # the probe's answer, once asked
    key_age: float | None = 0.0  # seconds since the key was first sent (None: unknown)
    dedupe_window: float | None = None  # seconds the provider deduplicates on the key
    same_args: bool = True  # the step is asked with the arguments recorded for it
    drift_error: bool = True  # the tool's drift policy is "error"
    failure: Failure | None = None  # the call raised: what that means
    # The step was in doubt before this attempt (a resend): an earlier attempt may have
    # been performed, whatever this one's failure says of itself.
    earlier_in_doubt: bool = False
    key_refused: bool = False  # in doubt since the provider held its key for other parameters
    # Another run's step holds the effect's subject (the intent was refused): its state,
    # whether a live process holds its run, and whether the tool refuses a repeat.
    # ``same_args`` then compares with the holder's arguments.
    subject_held: StepState | None = None
    subject_live: bool = False
    repeat_error: bool = False


def decide(s: Situation) -> Action:
    """The next action for ``s``; see the table in tests/test_decide.py."""
    if s.failure is not None:
        return _after_failure(s)
    if s.subject_held is not None:
        return _subject_held(s)
    if s.recorded is None:
        return _live(s, Action.RUN)
    if not s.same_step:
        return Action.DIVERGE
    if s.recorded is StepState.NOT_DONE:
        return _live(s, Action.RUN)
    if s.recorded in IN_DOUBT:
        return _in_doubt(s)
    if s.recorded is StepState.DONE and s.result_missing:
        return Action.REPLAY_UNRECORDED
    return _REPLAYS[s.recorded]


_REPLAYS = {
    StepState.DONE: Action.REPLAY,
    StepState.FAILED: Action.REPLAY_REFUSED,
    StepState.ABANDONED: Action.REPLAY_ABANDONED,
}


def _subject_held(s: Situation) -> Action:
    """The intent found its subject held by a step of another run."""
    if s.subject_held is StepState.DONE:
        if s.repeat_error:
            return Action.SUBJECT_DONE
        if not s.same_args and s.drift_error:
            return Action.DRIFT
        return Action.ADOPT
    if s.subject_held in (StepState.NOT_DONE, StepState.ABANDONED, StepState.FAILED):
        return _live(replace(s, subject_held=None), Action.RUN)  # freed since: claim it
    if s.subject_held is StepState.IN_FLIGHT and s.subject_live:
        return Action.SUBJECT_BUSY
    return Action.SUBJECT_IN_DOUBT


def _live(s: Situation, attempt: Action) -> Action:
    """Before an attempt (``RUN`` or ``RESEND``): may this process make it now?"""
    if s.draining:
        return Action.STOP_DRAINING
    if s.lease_lost:
        return Action.STOP_LEASE_LOST
    if s.retry_wait > 0:
        return Action.WAIT
    if not s.preflight_declared:
        return attempt
    if s.preflight is None:
        return Action.ASK_PREFLIGHT
    if isinstance(s.preflight, Found):
        return Action.RECORD_FOUND
    if isinstance(s.preflight, Conflict):
        return Action.HALT_CONFLICT
    return attempt if s.preflight is NOT_FOUND else Action.STOP_PREFLIGHT_UNSURE


def _in_doubt(s: Situation) -> Action:
    if s.key_refused:  # whatever the tool's kind or window: a resend gets the same answer
        return _key_mismatch(s)
    if s.idempotent:
        return _live(s, Action.RUN)
    if s.probe_declared and s.probe is None:
        return Action.ASK_PROBE
    if isinstance(s.probe, Found):
        return Action.SETTLE_DONE
    if s.probe is NOT_FOUND and key_honoured(s) and attempts_left(s):
        return _live(s, Action.RUN)  # definitely not there: new arguments are no drift
    if deduplicated(s) and attempts_left(s):
        if s.same_args:
            return _live(s, Action.RESEND)
        if s.drift_error:
            return Action.DRIFT
    return Action.HALT


def key_refused(reason: str | None) -> bool:
    """Whether a step's recorded reason says its last attempt halted on its key being held
    for other parameters."""
    return reason is not None and reason.startswith(KEY_REFUSED)


def key_age(now: float, first_sent_at: float, last_started_at: float) -> float | None:
    """The key's age by a clock that reads ``now``; None when that is before a time the
    same clock recorded for the step (it was stepped back, or the step was written by
    another clock): such an age cannot be true."""
    return None if now < max(first_sent_at, last_started_at) else now - first_sent_at


def deduplicated(s: Situation) -> bool:
    """Whether the provider answers a repeat of the key with the first request's result
    (or refuses it while that request runs) instead of acting again."""
    return s.dedupe_window is not None and _within(s.key_age, s.dedupe_window)


def key_honoured(s: Situation) -> bool:
    """After a probe's definite "not found": whether a retry the provider has not finished
    processing would still be caught as a duplicate (no window declared: assumed so)."""
    return s.dedupe_window is None or _within(s.key_age, s.dedupe_window)


def _within(age: float | None, window: float) -> bool:
    """An unknown or negative age is never taken to be inside the window."""
    return age is not None and 0.0 <= age < window


def attempts_left(s: Situation) -> bool:
    return s.max_attempts is None or s.attempts < s.max_attempts


def _after_failure(s: Situation) -> Action:
    if s.step_type is not StepType.EFFECT:
        return Action.RAISE
    if s.failure is Failure.REFUSED:
        return Action.RECORD_REFUSED
    if s.failure is Failure.IN_PROGRESS:
        return Action.STOP_RESEND_LATER
    if s.failure is Failure.KEY_MISMATCH:
        return _key_mismatch(s)
    if s.failure is Failure.NOT_PERFORMED and s.earlier_in_doubt and not s.idempotent:
        # This resend never left, but the first send may have been performed: recorded
        # not done, the step would be sent again as new, even past the key's window.
        return _after_failure(replace(s, failure=Failure.IN_DOUBT))
    if s.failure is Failure.NOT_PERFORMED or s.idempotent:
        if s.max_attempts is None:
            return Action.RECORD_NOT_DONE
        if attempts_left(s):
            return Action.RETRY_LATER
        return (
            Action.RECORD_FAILED if s.failure is Failure.NOT_PERFORMED else Action.RECORD_NOT_DONE
        )
    # In doubt: ask a declared probe now, as a later start would, and act on its answer.
    if s.probe_declared and s.probe is None:
        return Action.ASK_PROBE
    if isinstance(s.probe, Found):
        return Action.SETTLE_DONE
    if not (deduplicated(s) or (s.probe is NOT_FOUND and key_honoured(s))):
        return Action.HALT
    if s.max_attempts is None:
        return Action.STOP_RESEND_LATER
    return Action.RESEND_LATER if attempts_left(s) else Action.HALT


def _key_mismatch(s: Situation) -> Action:
    """The provider answered that the key belongs to a request with other parameters: a
    resend gets the same answer, so only a probe's ``Found`` settles it; else a person."""
    if s.probe_declared and s.probe is None:
        return Action.ASK_PROBE
    return Action.SETTLE_DONE if isinstance(s.probe, Found) else Action.HALT
