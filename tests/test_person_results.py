"""What a person gives when they resolve an effect: checked against what the tool
declared (``result_schema=``), on every store, and correctable until the run moves on."""

from __future__ import annotations

from typing import Any

import pytest

import oncelog
from oncelog import StepState
from oncelog._schema import problems

RECEIPT = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "cents": {"type": "integer"}},
    "required": ["id"],
    "additionalProperties": False,
}


def leave_in_flight(ledger: oncelog.Ledger, run_id: str) -> None:
    """An effect started whose process stopped before recording an outcome."""

    @ledger.tool(kind="payment", name="charge", result_schema=RECEIPT)
    def charge(*, idempotency_key: str) -> dict[str, Any]:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), ledger.run(run_id) as run:
        run.effect("charge", charge)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ("ch_1", "expected object, got str"),
        ({"cents": 5}, "'id' is required"),
        ({"id": "ch_1", "cents": True}, "$.cents: expected integer, got bool"),
        ({"id": "ch_1", "amount": 5}, "'amount' is not allowed"),
    ],
)
def test_a_result_that_does_not_fit_the_tools_schema_is_refused(
    ledger: oncelog.Ledger, result: Any, why: str
) -> None:
    leave_in_flight(ledger, "r")
    with pytest.raises(oncelog.InvalidResolution, match="not a result of 'charge'") as refused:
        ledger.resolve("r", "charge", "done", result=result, by="alice")
    assert why in refused.value.message
    assert (refused.value.run_id, refused.value.step_id) == ("r", "charge")
    assert ledger.steps("r")[0].state is StepState.IN_FLIGHT
    step = ledger.resolve("r", "charge", "done", result={"id": "ch_1", "cents": 5}, by="alice")
    assert step.result == {"id": "ch_1", "cents": 5}


def test_a_resolution_is_corrected_until_the_run_moves_on(ledger: oncelog.Ledger) -> None:
    leave_in_flight(ledger, "r")
    with pytest.raises(oncelog.InvalidResolution, match="not a person's resolution"):
        ledger.resolve("r", "charge", "done", result={"id": "x"}, by="bo", correct=True)
    ledger.resolve("r", "charge", "done", result={"id": "ch_wrong"}, by="alice")
    fixed = ledger.resolve(
        "r", "charge", "done", result={"id": "ch_1"}, by="bo", note="typo", correct=True
    )
    assert fixed.result == {"id": "ch_1"}
    decided = [e for e in ledger.journal("r") if e.event in ("resolved", "corrected")]
    assert [(e.event, e.data["by"], e.data["result"]) for e in decided] == [
        ("resolved", "alice", {"id": "ch_wrong"}), ("corrected", "bo", {"id": "ch_1"}),
    ]  # fmt: skip

    @ledger.tool(kind="payment", name="charge", result_schema=RECEIPT)
    def charge(*, idempotency_key: str) -> dict[str, Any]:
        raise AssertionError("a resolved effect is not called again")

    with ledger.run("r") as run:
        assert run.effect("charge", charge) == {"id": "ch_1"}
    with pytest.raises(oncelog.InvalidResolution, match="the run has moved past it"):
        ledger.resolve("r", "charge", "not_done", by="cy", correct=True)
    report = ledger.verify()  # the table agrees with the journal, correction included
    assert report.ok, report


def test_the_schema_check_knows_its_keywords() -> None:
    schema = {"type": ["string", "null"], "enum": ["a", None]}
    assert problems("a", schema) == problems(None, schema) == []
    assert problems("b", schema) == ["$: 'b' is not one of ['a', None]"]
    items = {"type": "array", "items": {"type": "number"}}
    assert problems([1, 2.5, "x"], items) == ["$[2]: expected number, got str"]
    assert problems(1.0, {"type": "integer"}) == []
    assert problems(1.5, {"type": "integer"}) == ["$: expected integer, got float"]
    assert problems({"x": 1}, {"additionalProperties": {"type": "string"}}) == [
        "$.x: expected string, got int"
    ]


def test_a_correction_waits_for_a_live_process_as_a_decision_does(ledger: oncelog.Ledger) -> None:
    leave_in_flight(ledger, "r")
    ledger.resolve("r", "charge", "done", result={"id": "ch_wrong"}, by="alice")
    with pytest.raises(KeyboardInterrupt), ledger.run("r"):  # a live process holds the run
        with pytest.raises(oncelog.RunLeased):
            ledger.resolve("r", "charge", "done", result={"id": "ch_1"}, by="bo", correct=True)
        ledger.resolve(
            "r", "charge", "done", result={"id": "ch_1"}, by="bo", correct=True, force=True
        )
        raise KeyboardInterrupt  # the process stops; its lease was taken by the correction
    [entry] = [e for e in ledger.journal("r") if e.event == "corrected"]
    assert entry.data["forced"]
    assert ledger.steps("r")[0].result == {"id": "ch_1"}
