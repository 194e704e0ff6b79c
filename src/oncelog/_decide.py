"""The effect state machine as one pure function: what to do with a step, given what is
recorded for it, what its tool declares and what the provider said. No I/O happens here;
``_effects.Engine`` asks the store and the provider, then asks ``decide`` again.

    (no record) --intent--> in_flight --outcome--> done
                               |   \\----refusal--> failed
                               |    \\--not done--> not_done --next visit--> in_flight
                               \\ found by another process, or the call's end unknown:
                                  probe --found--> done
                                        --not found, key honoured--> in_flight (same key)
                                  else unknown --a person--> done | not_done | abandoned

A visit starts with no ``probe`` answer; ``ASK_PROBE`` means: ask, then decide again with
the answer. A failed call is decided with its ``failure``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._probes import NOT_FOUND, Found, ProbeAnswer
from ._records import StepState, StepType


class Action(enum.Enum):
    """What the engine does next."""

    STOP_DRAINING = "stop_draining"  # this process is shutting down: start nothing
    STOP_LEASE_LOST = "stop_lease_lost"  # another worker owns the run now
    REPLAY = "replay"  # hand back the recorded result
    REPLAY_UNRECORDED = "replay_unrecorded"  # done, but its result could not be recorded
    REPLAY_REFUSED = "replay_refused"  # the provider refused: raise it again
    REPLAY_ABANDONED = "replay_abandoned"  # a person gave up on it
    RUN = "run"  # write the intent (effects only) and call the tool
    ASK_PROBE = "ask_probe"  # in doubt: ask the provider, then decide again
    SETTLE_DONE = "settle_done"  # the provider has it: record it done with its answer
    HALT = "halt"  # in doubt and nobody can tell: mark it unknown, a person decides
    RECORD_REFUSED = "record_refused"  # the call raised a declared refusal
    RECORD_NOT_DONE = "record_not_done"  # an idempotent effect raised: run it next visit
    RAISE = "raise"  # a model call or a query raised: nothing recorded, the agent sees it


@dataclass(frozen=True)
class Situation:
    """Everything the decision depends on, gathered by the engine."""

    step_type: StepType
    idempotent: bool  # the tool's kind is safe to run again (read, upsert)
    recorded: StepState | None = None  # None: nothing recorded at this position
    result_missing: bool = False  # an error is recorded: for a done step, why no result
    draining: bool = False
    lease_lost: bool = False
    probe_declared: bool = False
    probe: ProbeAnswer | None = None  # the probe's answer, once asked
    key_age: float = 0.0  # seconds since the attempt in doubt started
    key_ttl: float | None = None  # seconds the provider honours a key (None: for ever)
    refused: bool | None = None  # the call raised: a declared refusal or not


IN_DOUBT = frozenset({StepState.IN_FLIGHT, StepState.UNKNOWN})


def decide(s: Situation) -> Action:
    """The next action for ``s``; see the table in tests/test_decide.py."""
    if s.refused is not None:
        return _after_failure(s)
    if s.recorded is None or s.recorded is StepState.NOT_DONE:
        return _before_live(s)
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


def _before_live(s: Situation) -> Action:
    if s.draining:
        return Action.STOP_DRAINING
    if s.lease_lost:
        return Action.STOP_LEASE_LOST
    return Action.RUN


def _in_doubt(s: Situation) -> Action:
    if s.idempotent:
        return _before_live(s)
    if not s.probe_declared:
        return Action.HALT
    if s.probe is None:
        return Action.ASK_PROBE
    if isinstance(s.probe, Found):
        return Action.SETTLE_DONE
    if s.probe is NOT_FOUND and key_honoured(s):
        return _before_live(s)
    return Action.HALT


def key_honoured(s: Situation) -> bool:
    """Whether the provider still honours the key of the attempt in doubt, so a retry
    it has not finished processing would be caught as a duplicate."""
    return s.key_ttl is None or s.key_age < s.key_ttl


def _after_failure(s: Situation) -> Action:
    if s.refused:
        return Action.RECORD_REFUSED
    if s.step_type is not StepType.EFFECT:
        return Action.RAISE
    return Action.RECORD_NOT_DONE if s.idempotent else Action.HALT
