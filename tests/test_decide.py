"""The effect state machine's table: every row of ``oncelog._decide.decide``.

Each row is a situation (what is recorded, what the tool declares, what the provider
said) and the one action the engine must take. The engine's own behaviour is tested
through the ledger elsewhere (test_state_machine, test_probes, the kill tests); this
file pins the decisions themselves, without a store or a process.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from oncelog import CANNOT_TELL, NOT_FOUND, Found, StepState
from oncelog._decide import Action, Situation, decide
from oncelog._records import StepType

EFFECT = Situation(StepType.EFFECT, idempotent=False)
UPSERT = Situation(StepType.EFFECT, idempotent=True)
LLM = Situation(StepType.LLM, idempotent=True)
PROBED = replace(EFFECT, probe_declared=True)
IN_FLIGHT, UNKNOWN = StepState.IN_FLIGHT, StepState.UNKNOWN

# (row name, situation, action)
TABLE: list[tuple[str, Situation, Action]] = [
    # -- nothing recorded: run it, unless this process may start nothing new -----------
    ("new effect", EFFECT, Action.RUN),
    ("new model call", LLM, Action.RUN),
    ("new step while draining", replace(EFFECT, draining=True), Action.STOP_DRAINING),
    ("new step, lease lost", replace(LLM, lease_lost=True), Action.STOP_LEASE_LOST),
    ("draining wins over lease lost",
     replace(EFFECT, draining=True, lease_lost=True), Action.STOP_DRAINING),
    # -- settled: replay what is recorded ----------------------------------------------
    ("done", replace(EFFECT, recorded=StepState.DONE), Action.REPLAY),
    ("done while draining", replace(EFFECT, recorded=StepState.DONE, draining=True),
     Action.REPLAY),
    ("done, result not recordable",
     replace(EFFECT, recorded=StepState.DONE, result_missing=True), Action.REPLAY_UNRECORDED),
    ("failed", replace(EFFECT, recorded=StepState.FAILED, result_missing=True),
     Action.REPLAY_REFUSED),
    ("abandoned", replace(EFFECT, recorded=StepState.ABANDONED), Action.REPLAY_ABANDONED),
    ("model call recorded", replace(LLM, recorded=StepState.DONE), Action.REPLAY),
    # -- known not done: run again (same key) ------------------------------------------
    ("not_done", replace(EFFECT, recorded=StepState.NOT_DONE), Action.RUN),
    ("not_done while draining",
     replace(EFFECT, recorded=StepState.NOT_DONE, draining=True), Action.STOP_DRAINING),
    # -- in doubt, idempotent kind: run again ------------------------------------------
    ("upsert in flight", replace(UPSERT, recorded=IN_FLIGHT), Action.RUN),
    ("upsert unknown", replace(UPSERT, recorded=UNKNOWN), Action.RUN),
    ("upsert in doubt, lease lost",
     replace(UPSERT, recorded=IN_FLIGHT, lease_lost=True), Action.STOP_LEASE_LOST),
    # -- in doubt, no probe: a person decides ------------------------------------------
    ("create in flight, no probe", replace(EFFECT, recorded=IN_FLIGHT), Action.HALT),
    ("create unknown, no probe", replace(EFFECT, recorded=UNKNOWN), Action.HALT),
    # -- in doubt with a probe: ask, then act on the answer ----------------------------
    ("in flight, probe not asked", replace(PROBED, recorded=IN_FLIGHT), Action.ASK_PROBE),
    ("unknown, probe not asked", replace(PROBED, recorded=UNKNOWN), Action.ASK_PROBE),
    ("probe found it", replace(PROBED, recorded=IN_FLIGHT, probe=Found({"id": 1})),
     Action.SETTLE_DONE),
    ("probe: not found, key for ever", replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND),
     Action.RUN),
    ("probe: not found, key young",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, key_ttl=60, key_age=59),
     Action.RUN),
    ("probe: not found, key expired",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, key_ttl=60, key_age=60),
     Action.HALT),
    ("probe: not found, draining",
     replace(PROBED, recorded=IN_FLIGHT, probe=NOT_FOUND, draining=True),
     Action.STOP_DRAINING),
    ("probe cannot tell", replace(PROBED, recorded=IN_FLIGHT, probe=CANNOT_TELL), Action.HALT),
    # -- the call raised ---------------------------------------------------------------
    ("effect raised a declared refusal", replace(EFFECT, refused=True),
     Action.RECORD_REFUSED),
    ("effect raised something else", replace(EFFECT, refused=False), Action.HALT),
    ("upsert raised", replace(UPSERT, refused=False), Action.RECORD_NOT_DONE),
    ("upsert refused", replace(UPSERT, refused=True), Action.RECORD_REFUSED),
    ("model call raised", replace(LLM, refused=False), Action.RAISE),
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
