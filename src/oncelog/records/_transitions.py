"""The effect state machine's transitions, written once: for each write of a step, the
states it may leave from, the states it may leave the step in, and the journal record it
appends; which states are "in doubt"; and the state each of a person's decisions leaves.

Everything else is derived from this table: the SQL guards of both stores' general path
(``stores/_sql_steps.py``, ``_sql_resolutions.py``), SQLite's fast path
(``stores/_sqlite_write.py``) and the PostgreSQL server functions
(``stores/migrations/postgres/functions.sql``, rendered by ``stores/_sql_guards.py``);
how ``verify`` replays a step's journal (``state_after``); and what the engine, ``_next``
and the store call in doubt. To change a transition, change it here: both stores and
``verify`` follow (``tests/test_transitions.py`` tries each write from every state on
both stores). ``runtime/_decide.py`` says which write the engine makes; this table says
from where each may be made.

    (no row) --intent--> in_flight --outcome--> done | failed | not_done
    not_done, in_flight, unknown --intent (a later attempt)--> in_flight
    (no row), not_done, failed, in_flight, unknown --recorded (a model call, a read)-->
        done | failed | not_done
    in_flight, unknown --probed--> done;  --unknown--> unknown
    in_flight, unknown --a person's decision--> done | not_done | abandoned
    done, not_done, abandoned --a person's correction--> done | not_done | abandoned
    failed, not_done --a person's retry (attempts reset, same key)--> not_done
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ._records import Resolution, StepState
from ._value import NamedTuple

_IN_FLIGHT, _UNKNOWN = StepState.IN_FLIGHT, StepState.UNKNOWN


class Transition(NamedTuple):
    """One write of a step's state."""

    event: str  # the journal record it appends
    sources: frozenset[StepState | None]  # the states it may leave from (None: no row yet)
    targets: frozenset[StepState]  # the states it may leave the step in

    @property
    def target(self) -> StepState:
        """The one state a write with one target leaves."""
        (only,) = self.targets
        return only


# Nobody can tell whether the call happened: its writer may be gone (in flight) or found
# it could not tell (unknown). Only a probe, a resend the provider deduplicates, an
# idempotent kind or a person settles it.
IN_DOUBT: frozenset[StepState] = frozenset({_IN_FLIGHT, _UNKNOWN})
RESOLVED_STATE: Mapping[Resolution, StepState] = MappingProxyType({
    Resolution.DONE: StepState.DONE,
    Resolution.NOT_DONE: StepState.NOT_DONE,
    Resolution.ABANDON: StepState.ABANDONED,
})  # fmt: skip
_DECIDED = frozenset(RESOLVED_STATE.values())
_STARTABLE = frozenset({StepState.NOT_DONE}) | IN_DOUBT  # an attempt may start again here
_ENDS = frozenset({StepState.DONE, StepState.FAILED, StepState.NOT_DONE})  # a call's end

# An intent: a new step's first attempt (its row inserted), or a later one.
INTENT = Transition("intent", frozenset({None}), frozenset({_IN_FLIGHT}))
RESTART = Transition("intent", _STARTABLE, frozenset({_IN_FLIGHT}))
# The end of the attempt in flight, as its writer saw it.
OUTCOME = Transition("outcome", frozenset({_IN_FLIGHT}), _ENDS)
# A probe's (or a preflight's) answer for the attempt in doubt: found, so done.
PROBED = Transition("probed", IN_DOUBT, frozenset({StepState.DONE}))
# A model call or a read, recorded after it ran: an intent and its outcome in one write.
# It changes nothing outside, so one that failed may be asked again.
RECORDED = Transition("recorded", frozenset({None, StepState.FAILED}) | _STARTABLE, _ENDS)
# Nobody can tell: the run stops for a person.
MARK_UNKNOWN = Transition("unknown", IN_DOUBT, frozenset({_UNKNOWN}))
# A person's decision on a step in doubt, and their correction of the last one.
RESOLVE = Transition("resolved", IN_DOUBT, _DECIDED)
CORRECT = Transition("corrected", _DECIDED, _DECIDED)
# A person's fresh set of attempts for an effect known not to have happened (refused, its
# retry policy ran out, or waiting for its next attempt after an outage): the same key,
# the attempts counted from zero. Never from done (it happened) nor in doubt (a person
# resolves it first): either could perform an effect twice.
RETRY = Transition("retried", frozenset({StepState.FAILED, StepState.NOT_DONE}),
                   frozenset({StepState.NOT_DONE}))  # fmt: skip

TRANSITIONS: Mapping[str, Transition] = MappingProxyType({
    "intent": INTENT, "restart": RESTART, "outcome": OUTCOME, "probed": PROBED,
    "recorded": RECORDED, "unknown": MARK_UNKNOWN, "resolved": RESOLVE, "corrected": CORRECT,
    "retried": RETRY,
})  # fmt: skip

# The records whose writer chose the state among the targets: the record names it.
_STATE_NAMED = frozenset({OUTCOME.event, PROBED.event, RECORDED.event})
_DECISIONS = frozenset({RESOLVE.event, CORRECT.event})
_SOLE_TARGET: dict[str, str] = {
    t.event: t.target.value for t in TRANSITIONS.values() if len(t.targets) == 1
}


def decided_state(resolution: str) -> StepState:
    """The state a person's decision (a ``Resolution``'s value) leaves a step in;
    ``ValueError`` for no decision."""
    return RESOLVED_STATE[Resolution(resolution)]


def state_after(event: str, data: Mapping[str, Any]) -> str | None:
    """The state a journal record of ``event`` (its ``data``) left its step in, as the
    write that appended it left the row; None for a record that changes no step's state.
    ``KeyError`` or ``ValueError`` for a record without what it must name."""
    if event in _STATE_NAMED:
        return str(data["state"])
    if event in _DECISIONS:
        decided: str = decided_state(str(data["resolution"])).value
        return decided
    return _SOLE_TARGET.get(event)
