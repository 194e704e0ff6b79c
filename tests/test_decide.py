"""The effect state machine's table: every row of ``oncelog.runtime._decide.decide``.

Each row is a situation (what is recorded, what the tool declares, what the provider
said) and the one action the engine must take. The engine's own behaviour is tested
through the ledger elsewhere (test_state_machine, test_probes, the kill tests); this
file pins the decisions themselves, without a store or a process.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog import CANNOT_TELL, NOT_FOUND, Conflict, Found, StepState
from oncelog.failures import Failure
from oncelog.records._records import StepType
from oncelog.runtime._decide import Action, Situation, decide

EFFECT = Situation(StepType.EFFECT, idempotent=False)
UPSERT = Situation(StepType.EFFECT, idempotent=True)
LLM = Situation(StepType.LLM, idempotent=True)
PROBED = replace(EFFECT, probe_declared=True)
PREFLIGHT = replace(EFFECT, preflight_declared=True)
DEDUPED = replace(EFFECT, dedupe_window=60.0, key_age=59.0)
IN_FLIGHT, UNKNOWN = StepState.IN_FLIGHT, StepState.UNKNOWN

HELD = replace(EFFECT, subject_held=StepState.DONE)
REFUSED_KEY = replace(EFFECT, recorded=UNKNOWN, key_refused=True)

# (row name, situation, action)
TABLE: list[tuple[str, Situation, Action]] = [
    # -- the intent found the subject held by a step of another run -----------------------
    ("subject done elsewhere", HELD, Action.ADOPT),
    ("subject done elsewhere, repeat is an error", replace(HELD, repeat_error=True),
     Action.SUBJECT_DONE),
    ("subject done elsewhere with other arguments", replace(HELD, same_args=False),
     Action.DRIFT),
    ("subject done elsewhere with other arguments, drift warns",
     replace(HELD, same_args=False, drift_error=False), Action.ADOPT),
    ("subject in flight in a live run",
     replace(HELD, subject_held=IN_FLIGHT, subject_live=True), Action.SUBJECT_BUSY),
    ("subject in flight in a dead run", replace(HELD, subject_held=IN_FLIGHT),
     Action.SUBJECT_IN_DOUBT),
    ("subject unknown in a live run", replace(HELD, subject_held=UNKNOWN, subject_live=True),
     Action.SUBJECT_IN_DOUBT),
    ("subject freed since (not done)", replace(HELD, subject_held=StepState.NOT_DONE),
     Action.RUN),
    ("subject freed since (abandoned), draining",
     replace(HELD, subject_held=StepState.ABANDONED, draining=True), Action.STOP_DRAINING),
    # -- nothing recorded: run it, unless this process may start nothing new -----------
    ("new effect", EFFECT, Action.RUN),
    ("new model call", LLM, Action.RUN),
    ("new step while draining", replace(EFFECT, draining=True), Action.STOP_DRAINING),
    ("new step, lease lost", replace(LLM, lease_lost=True), Action.STOP_LEASE_LOST),
    ("draining wins over lease lost",
     replace(EFFECT, draining=True, lease_lost=True), Action.STOP_DRAINING),
    # -- a preflight is asked before every attempt -------------------------------------
    ("new effect, preflight not asked", PREFLIGHT, Action.ASK_PREFLIGHT),
    ("preflight: not found", replace(PREFLIGHT, preflight=NOT_FOUND), Action.RUN),
    ("preflight found it", replace(PREFLIGHT, preflight=Found(1)), Action.RECORD_FOUND),
    ("preflight: conflict", replace(PREFLIGHT, preflight=Conflict("patched")),
     Action.HALT_CONFLICT),
    ("preflight cannot tell", replace(PREFLIGHT, preflight=CANNOT_TELL),
     Action.STOP_PREFLIGHT_UNSURE),
    ("preflight, draining: nothing asked", replace(PREFLIGHT, draining=True),
     Action.STOP_DRAINING),
    ("preflight before a retry", replace(PREFLIGHT, recorded=StepState.NOT_DONE),
     Action.ASK_PREFLIGHT),
    # -- settled: replay what is recorded ----------------------------------------------
    ("done", replace(EFFECT, recorded=StepState.DONE), Action.REPLAY),
    ("done while draining", replace(EFFECT, recorded=StepState.DONE, draining=True),
     Action.REPLAY),
    ("done, asked with other arguments (the engine checks the drift)",
     replace(EFFECT, recorded=StepState.DONE, same_args=False), Action.REPLAY),
    ("query recorded, found on the replay page", replace(LLM, step_type=StepType.READ,
     recorded=StepState.DONE), Action.REPLAY),
    ("done, result not recordable",
     replace(EFFECT, recorded=StepState.DONE, result_missing=True), Action.REPLAY_UNRECORDED),
    ("failed", replace(EFFECT, recorded=StepState.FAILED, result_missing=True),
     Action.REPLAY_REFUSED),
    ("abandoned", replace(EFFECT, recorded=StepState.ABANDONED), Action.REPLAY_ABANDONED),
    ("model call recorded", replace(LLM, recorded=StepState.DONE), Action.REPLAY),
    ("done, preflight declared: not asked", replace(PREFLIGHT, recorded=StepState.DONE),
     Action.REPLAY),
    # -- another step recorded at the position: the code took another path -----------
    ("another step recorded done", replace(EFFECT, recorded=StepState.DONE, same_step=False),
     Action.DIVERGE),
    ("another step recorded in flight, draining",
     replace(EFFECT, recorded=IN_FLIGHT, same_step=False, draining=True), Action.DIVERGE),
    ("another step recorded not done",
     replace(LLM, recorded=StepState.NOT_DONE, same_step=False), Action.DIVERGE),
    # -- known not done: run again (same key), at the recorded time --------------------
    ("not_done", replace(EFFECT, recorded=StepState.NOT_DONE), Action.RUN),
    ("not_done while draining",
     replace(EFFECT, recorded=StepState.NOT_DONE, draining=True), Action.STOP_DRAINING),
    ("not_done, retry time not reached",
     replace(EFFECT, recorded=StepState.NOT_DONE, retry_wait=0.5), Action.WAIT),
    ("not_done, waiting, then draining",
     replace(EFFECT, recorded=StepState.NOT_DONE, retry_wait=0.5, draining=True),
     Action.STOP_DRAINING),
    # -- in doubt, idempotent kind: run again ------------------------------------------
    ("upsert in flight", replace(UPSERT, recorded=IN_FLIGHT), Action.RUN),
    ("upsert unknown", replace(UPSERT, recorded=UNKNOWN), Action.RUN),
    ("upsert in doubt, lease lost",
     replace(UPSERT, recorded=IN_FLIGHT, lease_lost=True), Action.STOP_LEASE_LOST),
    # -- in doubt, no probe, no deduplication: a person decides ------------------------
    ("create in flight, no probe", replace(EFFECT, recorded=IN_FLIGHT), Action.HALT),
    ("create unknown, no probe", replace(EFFECT, recorded=UNKNOWN), Action.HALT),
    # -- in doubt, the provider deduplicates the key -----------------------------------
    ("in doubt, key young: resend", replace(DEDUPED, recorded=IN_FLIGHT), Action.RESEND),
    ("unknown, key young: resend", replace(DEDUPED, recorded=UNKNOWN), Action.RESEND),
    ("in doubt, key too old", replace(DEDUPED, recorded=IN_FLIGHT, key_age=60), Action.HALT),
    ("in doubt, key's age unknown (the store's clock is behind its first send)",
     replace(DEDUPED, recorded=IN_FLIGHT, key_age=None), Action.HALT),
    ("in doubt, key's age negative", replace(DEDUPED, recorded=IN_FLIGHT, key_age=-1.0),
     Action.HALT),
    ("in doubt, key young, other arguments",
     replace(DEDUPED, recorded=IN_FLIGHT, same_args=False), Action.DRIFT),
    ("in doubt, key young, other arguments, drift warns",
     replace(DEDUPED, recorded=IN_FLIGHT, same_args=False, drift_error=False), Action.HALT),
    ("in doubt, key young, attempts used up",
     replace(DEDUPED, recorded=IN_FLIGHT, attempts=3, max_attempts=3), Action.HALT),
    ("in doubt, key young, attempts left",
     replace(DEDUPED, recorded=IN_FLIGHT, attempts=2, max_attempts=3), Action.RESEND),
    ("in doubt, key young, draining",
     replace(DEDUPED, recorded=IN_FLIGHT, draining=True), Action.STOP_DRAINING),
    ("in doubt, key young, preflight asked first",
     replace(DEDUPED, recorded=IN_FLIGHT, preflight_declared=True), Action.ASK_PREFLIGHT),
    ("in doubt, key young, preflight found it",
     replace(DEDUPED, recorded=IN_FLIGHT, preflight_declared=True, preflight=Found(1)),
     Action.RECORD_FOUND),
    ("in doubt, key young, probe asked first",
     replace(DEDUPED, recorded=IN_FLIGHT, probe_declared=True), Action.ASK_PROBE),
    ("in doubt, key young, probe cannot tell",
     replace(DEDUPED, recorded=IN_FLIGHT, probe_declared=True, probe=CANNOT_TELL),
     Action.RESEND),
    ("in doubt, key too old, probe cannot tell",
     replace(DEDUPED, recorded=IN_FLIGHT, probe_declared=True, probe=CANNOT_TELL, key_age=60),
     Action.HALT),
    # -- in doubt with a probe: ask, then act on the answer ----------------------------
    ("in flight, probe not asked", replace(PROBED, recorded=IN_FLIGHT), Action.ASK_PROBE),
    ("unknown, probe not asked", replace(PROBED, recorded=UNKNOWN), Action.ASK_PROBE),
    ("probe found it", replace(PROBED, recorded=IN_FLIGHT, probe=Found({"id": 1})),
     Action.SETTLE_DONE),
    ("probe: not found, no window declared",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND), Action.RUN),
    ("probe: not found, key young",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, dedupe_window=60, key_age=59),
     Action.RUN),
    ("probe: not found, key young, other arguments",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, dedupe_window=60, key_age=59,
             same_args=False), Action.RUN),
    ("probe: not found, key expired",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, dedupe_window=60, key_age=60),
     Action.HALT),
    ("probe: not found, key's age unknown",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, dedupe_window=60, key_age=None),
     Action.HALT),
    ("probe: not found, attempts used up",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, attempts=2, max_attempts=2),
     Action.HALT),
    ("probe: not found, draining",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, draining=True),
     Action.STOP_DRAINING),
    ("probe cannot tell", replace(PROBED, recorded=IN_FLIGHT, probe=CANNOT_TELL), Action.HALT),
    # -- the call raised ---------------------------------------------------------------
    ("model call raised", replace(LLM, failure=Failure.IN_DOUBT), Action.RAISE),
    ("refused", replace(EFFECT, failure=Failure.REFUSED), Action.RECORD_REFUSED),
    ("refused, retries left", replace(EFFECT, failure=Failure.REFUSED, max_attempts=5),
     Action.RECORD_REFUSED),
    ("upsert refused", replace(UPSERT, failure=Failure.REFUSED), Action.RECORD_REFUSED),
    ("not performed, no policy", replace(EFFECT, failure=Failure.NOT_PERFORMED),
     Action.RECORD_NOT_DONE),
    ("not performed, attempts left",
     replace(EFFECT, failure=Failure.NOT_PERFORMED, attempts=1, max_attempts=3),
     Action.RETRY_LATER),
    ("not performed, attempts used up",
     replace(EFFECT, failure=Failure.NOT_PERFORMED, attempts=3, max_attempts=3),
     Action.RECORD_FAILED),
    # ... a resend of a step in doubt that never left: the first send may have happened
    ("not performed resend, key young, no policy",
     replace(DEDUPED, failure=Failure.NOT_PERFORMED, earlier_in_doubt=True),
     Action.STOP_RESEND_LATER),
    ("not performed resend, key young, attempts left",
     replace(DEDUPED, failure=Failure.NOT_PERFORMED, earlier_in_doubt=True, attempts=1,
             max_attempts=3), Action.RESEND_LATER),
    ("not performed resend, key too old",
     replace(DEDUPED, failure=Failure.NOT_PERFORMED, earlier_in_doubt=True, key_age=60),
     Action.HALT),
    ("not performed resend, probe declared", replace(PROBED, failure=Failure.NOT_PERFORMED,
     earlier_in_doubt=True), Action.ASK_PROBE),
    ("not performed resend, upsert",
     replace(UPSERT, failure=Failure.NOT_PERFORMED, earlier_in_doubt=True),
     Action.RECORD_NOT_DONE),
    ("in doubt, effect", replace(EFFECT, failure=Failure.IN_DOUBT), Action.HALT),
    ("in doubt, upsert", replace(UPSERT, failure=Failure.IN_DOUBT), Action.RECORD_NOT_DONE),
    ("in doubt, upsert, attempts left",
     replace(UPSERT, failure=Failure.IN_DOUBT, attempts=1, max_attempts=2),
     Action.RETRY_LATER),
    ("in doubt, upsert, attempts used up",
     replace(UPSERT, failure=Failure.IN_DOUBT, attempts=2, max_attempts=2),
     Action.RECORD_NOT_DONE),
    ("in doubt, key young, no policy", replace(DEDUPED, failure=Failure.IN_DOUBT),
     Action.STOP_RESEND_LATER),
    ("in doubt, key young, attempts left",
     replace(DEDUPED, failure=Failure.IN_DOUBT, attempts=1, max_attempts=3),
     Action.RESEND_LATER),
    ("in doubt, key young, attempts used up",
     replace(DEDUPED, failure=Failure.IN_DOUBT, attempts=3, max_attempts=3), Action.HALT),
    ("in doubt, key too old",
     replace(DEDUPED, failure=Failure.IN_DOUBT, key_age=60, max_attempts=3), Action.HALT),
    ("in doubt, key's age unknown",
     replace(DEDUPED, failure=Failure.IN_DOUBT, key_age=None, max_attempts=3), Action.HALT),
    ("in doubt, key's age negative",
     replace(DEDUPED, failure=Failure.IN_DOUBT, key_age=-1.0), Action.HALT),
    # -- the call raised in doubt, a probe declared: asked at once, as a restart would --
    ("in doubt, probe not asked", replace(PROBED, failure=Failure.IN_DOUBT), Action.ASK_PROBE),
    ("in doubt, probe found it",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=Found({"id": 1})), Action.SETTLE_DONE),
    ("in doubt, probe: not found, no policy",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=NOT_FOUND), Action.STOP_RESEND_LATER),
    ("in doubt, probe: not found, attempts left",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=NOT_FOUND, attempts=1, max_attempts=3),
     Action.RESEND_LATER),
    ("in doubt, probe: not found, attempts used up",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=NOT_FOUND, attempts=3, max_attempts=3),
     Action.HALT),
    ("in doubt, probe: not found, key expired",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=NOT_FOUND, dedupe_window=60, key_age=60),
     Action.HALT),
    ("in doubt, probe cannot tell",
     replace(PROBED, failure=Failure.IN_DOUBT, probe=CANNOT_TELL), Action.HALT),
    ("in doubt, probe cannot tell, key young",
     replace(DEDUPED, failure=Failure.IN_DOUBT, probe_declared=True, probe=CANNOT_TELL),
     Action.STOP_RESEND_LATER),
    ("refused, probe declared: not asked", replace(PROBED, failure=Failure.REFUSED),
     Action.RECORD_REFUSED),
    ("not performed, probe declared: not asked",
     replace(PROBED, failure=Failure.NOT_PERFORMED), Action.RECORD_NOT_DONE),
    ("still in progress at the provider", replace(EFFECT, failure=Failure.IN_PROGRESS),
     Action.STOP_RESEND_LATER),
    # -- the provider holds the key for a request with other parameters ----------------
    ("key mismatch, key young: never resent", replace(DEDUPED, failure=Failure.KEY_MISMATCH,
     max_attempts=3), Action.HALT),
    ("key mismatch, probe not asked", replace(PROBED, failure=Failure.KEY_MISMATCH),
     Action.ASK_PROBE),
    ("key mismatch, probe found it",
     replace(PROBED, failure=Failure.KEY_MISMATCH, probe=Found({"id": 1})), Action.SETTLE_DONE),
    ("key mismatch, probe found nothing",
     replace(PROBED, failure=Failure.KEY_MISMATCH, probe=NOT_FOUND, dedupe_window=60.0),
     Action.HALT),
    # ... read back by a later start from the halt's recorded reason: decided the same way
    ("halted on its key, key young: not resent", replace(REFUSED_KEY, dedupe_window=60.0,
     key_age=1.0), Action.HALT),
    ("halted on its key, an upsert: not run again", replace(REFUSED_KEY, idempotent=True),
     Action.HALT),
    ("halted on its key, probe not asked", replace(REFUSED_KEY, probe_declared=True),
     Action.ASK_PROBE),
    ("halted on its key, probe found it",
     replace(REFUSED_KEY, probe_declared=True, probe=Found({"id": 1})), Action.SETTLE_DONE),
    ("halted on its key, probe found nothing, key honoured",
     replace(REFUSED_KEY, probe_declared=True, probe=NOT_FOUND), Action.HALT),
    ("halted on its key, then decided not done by a person: run",
     replace(REFUSED_KEY, recorded=StepState.NOT_DONE), Action.RUN),
]  # fmt: skip


@pytest.mark.parametrize(
    ("situation", "action"), [pytest.param(s, a, id=name) for name, s, a in TABLE]
)
def test_decide(situation: Situation, action: Action) -> None:
    assert decide(situation) is action


def test_every_action_has_a_row() -> None:
    assert {action for _, _, action in TABLE} == set(Action)


def test_every_recorded_state_has_a_row() -> None:
    assert {s.recorded for _, s, _ in TABLE} == {None, *StepState}


ANSWERS = st.sampled_from([None, NOT_FOUND, CANNOT_TELL, Found(1)])
SITUATIONS = st.builds(
    Situation,
    step_type=st.sampled_from(StepType),
    idempotent=st.booleans(),
    recorded=st.sampled_from([None, *StepState]),
    result_missing=st.booleans(),
    draining=st.booleans(),
    lease_lost=st.booleans(),
    attempts=st.integers(0, 6),
    max_attempts=st.none() | st.integers(1, 5),
    retry_wait=st.sampled_from([0.0, -1.0, 5.0]),
    preflight_declared=st.booleans(),
    preflight=st.sampled_from([None, NOT_FOUND, CANNOT_TELL, Found(1), Conflict("x")]),
    probe_declared=st.booleans(),
    probe=ANSWERS,
    key_age=st.sampled_from([None, -1.0, 0.0, 59.0, 60.0, 1e9]),
    dedupe_window=st.none() | st.just(60.0),
    same_args=st.booleans(),
    drift_error=st.booleans(),
    failure=st.none() | st.sampled_from(Failure),
    key_refused=st.booleans(),
    earlier_in_doubt=st.booleans(),
)
SENDS = {Action.RUN, Action.RESEND}


@given(SITUATIONS)
def test_an_effect_in_doubt_is_sent_again_only_when_something_decided(s: Situation) -> None:
    """Invariant 3 over every situation: a non-idempotent effect in doubt is called again
    only after a probe's "not found" while its key is honoured, or inside the provider's
    deduplication window, with the recorded arguments, and within the retry policy."""
    action = decide(s)
    in_doubt = s.failure is None and s.recorded in (IN_FLIGHT, UNKNOWN)
    # An age that is unknown or negative cannot be true: never inside a window.
    age, window = s.key_age, s.dedupe_window
    young = window is not None and age is not None and 0 <= age < window
    honoured = window is None or young
    if in_doubt and not s.idempotent and action in SENDS:
        assert not s.key_refused
        assert (s.probe is NOT_FOUND and honoured) or (young and s.same_args)
        assert s.max_attempts is None or s.attempts < s.max_attempts
    if action is Action.RESEND:
        assert s.same_args
    if s.failure is Failure.IN_DOUBT and action in {Action.RESEND_LATER, Action.STOP_RESEND_LATER}:
        assert s.idempotent is False
        assert young or (s.probe is NOT_FOUND and honoured)


@given(SITUATIONS)
def test_a_call_failing_in_doubt_asks_a_declared_probe_before_anything(s: Situation) -> None:
    """A non-idempotent effect whose call failed in doubt is neither halted nor sent again
    before its declared probe is asked (as a later start would ask it)."""
    asked = s.probe_declared and s.probe is None and not s.idempotent
    if s.failure is Failure.IN_DOUBT and s.step_type is StepType.EFFECT and asked:
        assert decide(s) is Action.ASK_PROBE


@given(SITUATIONS)
def test_a_key_held_for_other_parameters_is_never_sent_again(s: Situation) -> None:
    """The provider said the key belongs to another request: a resend gets the same
    answer, and only what a probe found settles the effect without a person."""
    if s.failure is Failure.KEY_MISMATCH and s.step_type is StepType.EFFECT:
        assert decide(s) in {Action.ASK_PROBE, Action.SETTLE_DONE, Action.HALT}


@given(SITUATIONS)
def test_a_later_start_sends_nothing_after_a_halt_on_its_key(s: Situation) -> None:
    """The halt's recorded reason said the key is held for other parameters: a later start
    in doubt decides as the failing process did, whatever the tool's kind or window."""
    if s.key_refused and s.failure is None and s.recorded in (IN_FLIGHT, UNKNOWN):
        assert decide(s) in {Action.ASK_PROBE, Action.SETTLE_DONE, Action.HALT}


@given(SITUATIONS)
def test_nothing_is_sent_while_draining_or_after_the_lease_is_lost(s: Situation) -> None:
    if (s.draining or s.lease_lost) and s.failure is None:
        assert decide(s) not in SENDS | {Action.ASK_PREFLIGHT, Action.RECORD_FOUND}


@given(SITUATIONS)
def test_settled_steps_replay_and_failures_record(s: Situation) -> None:
    action = decide(s)
    if s.failure is None and s.recorded in (StepState.DONE, StepState.FAILED):
        assert action.value.startswith("replay")
    if s.failure is Failure.REFUSED and s.step_type is StepType.EFFECT:
        assert action is Action.RECORD_REFUSED
    if s.failure is Failure.NOT_PERFORMED and s.step_type is StepType.EFFECT:
        if s.earlier_in_doubt and not s.idempotent:
            # A resend that never left leaves the step as in doubt as it was: never
            # recorded not done or failed (it would be sent again as new).
            assert action not in {Action.RETRY_LATER, Action.RECORD_NOT_DONE,
                                  Action.RECORD_FAILED}  # fmt: skip
        else:
            # Never halted: retried, recorded not done, or failed with the last error.
            assert action in {Action.RETRY_LATER, Action.RECORD_NOT_DONE, Action.RECORD_FAILED}
    if action in {Action.RETRY_LATER, Action.RESEND_LATER}:
        assert s.max_attempts is not None
        assert s.attempts < s.max_attempts


@given(SITUATIONS)
def test_another_step_recorded_at_the_position_is_neither_run_nor_replayed(s: Situation) -> None:
    """Whatever is recorded at a position, a visit by another step (the code took another
    path) is a divergence: nothing runs there and no other step's result is handed back."""
    if s.failure is None and s.recorded is not None:
        assert decide(replace(s, same_step=False, subject_held=None)) is Action.DIVERGE
