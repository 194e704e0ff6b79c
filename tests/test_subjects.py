"""Subjects (``once_per``) in one process: what a subject held elsewhere means for a step
(a typed refusal, drift, try later), a claim that expires, the key that derives from the
subject, bad declarations and values refused with the ledger unchanged, and ``verify``
holding the claims to the journal. The attacks with real processes and a provider process
are in ``test_attack_subjects.py``."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import oncelog

from .test_verify_forgeries import tamper


def refunds(ledger: oncelog.Ledger, calls: list[str], **declared: Any) -> oncelog.Tool[..., Any]:
    """A refund of an order whose subject is ``("refund", order)``; ``calls`` gets the key
    of each call made."""

    @ledger.tool(kind="payment", name="refund", once_per=lambda order, amount: ("refund", order),
                 **declared)  # fmt: skip
    def refund(order: int, amount: int, *, idempotency_key: str) -> dict[str, Any]:
        calls.append(idempotency_key)
        return {"order": order, "amount": amount, "call": len(calls)}

    return refund


def test_a_repeat_the_tool_calls_an_error_is_refused_and_records_nothing(
    ledger: oncelog.Ledger,
) -> None:
    calls: list[str] = []
    refund = refunds(ledger, calls, repeat="error")
    with ledger.run("a") as run:
        run.effect("refund", refund, 42, 10)
    with pytest.raises(oncelog.SubjectDone) as refused, ledger.run("b") as run:
        run.effect("refund", refund, 42, 10)
    assert (refused.value.held_by_run, refused.value.held_by_step) == ("a", "refund")
    assert refused.value.subject == '["refund",42]'
    assert len(calls) == 1
    assert ledger.steps("b") == []


def test_other_arguments_under_a_done_subject_follow_the_drift_policy(
    ledger: oncelog.Ledger,
) -> None:
    calls: list[str] = []
    strict, lenient = refunds(ledger, calls), refunds(ledger, calls, drift="warn")
    with ledger.run("a") as run:
        first = run.effect("refund", strict, 42, 10)
    with pytest.raises(oncelog.ArgumentDrift, match="run 'a'"), ledger.run("b") as run:
        run.effect("refund", strict, 42, 99)
    with ledger.run("c") as run:
        assert run.effect("refund", lenient, 42, 99) == first
    assert len(calls) == 1


def test_a_subject_in_flight_in_a_live_run_is_tried_again_later(
    ledger: oncelog.Ledger,
) -> None:
    """While run a's call is in progress, run b is told to try later and sends nothing;
    once a is done, b gets its result."""
    calls: list[str] = []
    seen: list[BaseException] = []

    def other_run() -> None:
        try:
            with ledger.run("b") as run:
                run.effect("refund", refund, 42, 10)
        except oncelog.OnceLogError as exc:
            seen.append(exc)

    @ledger.tool(kind="payment", name="refund", once_per=lambda order, amount: ("refund", order))
    def refund(order: int, amount: int) -> str:
        calls.append("a")
        if len(calls) == 1:  # a's own call: b starts while it is in flight
            worker = threading.Thread(target=other_run)
            worker.start()
            worker.join()
        return "refunded"

    with ledger.run("a") as run:
        run.effect("refund", refund, 42, 10)
    [busy] = seen
    assert isinstance(busy, oncelog.SubjectBusy)
    assert busy.exit_code == 75
    assert busy.held_by_run == "a"
    with ledger.run("b") as run:
        assert run.effect("refund", refund, 42, 10) == "refunded"
    assert calls == ["a"]


def test_a_done_claim_for_a_time_frees_the_subject_once_it_passed(
    ledger: oncelog.Ledger,
) -> None:
    calls: list[str] = []
    refund = refunds(ledger, calls, once_for=0.5)
    with ledger.run("a") as run:
        run.effect("refund", refund, 42, 10)
    with ledger.run("b") as run:
        assert run.effect("refund", refund, 42, 10)["call"] == 1
    time.sleep(0.6)  # the store's clock is the subject here
    with ledger.run("c") as run:
        assert run.effect("refund", refund, 42, 10)["call"] == 2
    assert ledger.verify().ok


def test_the_key_derives_from_the_subject_across_runs(ledger: oncelog.Ledger) -> None:
    """Two orders, two keys; the run that takes the first order's result holds its key."""
    calls: list[str] = []
    refund = refunds(ledger, calls)
    with ledger.run("a") as run:
        run.effect("refund", refund, 1, 10)
        run.effect("other", refund, 2, 10)
    with ledger.run("b") as run:
        run.effect("again", refund, 1, 10)
    first, second = calls
    assert first != second
    [taken] = ledger.steps("b")
    assert taken.key == first
    assert taken.state is oncelog.StepState.DONE


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ({"once_per": "refund"}, "once_per must be a function"),
        ({"once_for": 60}, "need once_per"),
        ({"repeat": "error"}, "need once_per"),
        ({"once_per": lambda order: order, "repeat": "twice"}, "repeat must be"),
        ({"once_per": lambda order: order, "once_for": 0}, "once_for must be positive"),
        ({"once_per": lambda order: order, "once_for": 60, "dedupe_window": 60},
         "longer than the dedupe_window"),
    ],
)  # fmt: skip
def test_a_bad_subject_declaration_is_refused(declared: dict[str, Any], said: str) -> None:
    with pytest.raises(oncelog.ConfigurationError, match=said):

        @oncelog.tool(kind="payment", **declared)
        def refund(order: int, idempotency_key: str = "") -> None: ...


@pytest.mark.parametrize(
    "subject",
    [{"order": 1}, ("refund", [1]), (), ("refund", float("nan")), b"42", ("x" * 600,),
     ("refund", "\x00")],
)  # fmt: skip
def test_a_subject_that_is_no_tuple_of_json_scalars_is_refused_with_the_ledger_unchanged(
    ledger: oncelog.Ledger, subject: Any
) -> None:
    calls: list[int] = []

    @ledger.tool(kind="payment", once_per=lambda order: subject)
    def refund(order: int) -> None:
        calls.append(order)

    with pytest.raises(oncelog.ConfigurationError) as refused, ledger.run("a") as run:
        run.effect("refund", refund, 1)
    assert refused.value.step_id == "refund"
    assert calls == []
    assert ledger.steps("a") == []
    assert ledger.verify().ok


def test_a_once_per_that_raises_is_a_configuration_error(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="payment", once_per=lambda order: order["id"])
    def refund(order: int) -> None: ...

    with (
        pytest.raises(oncelog.ConfigurationError, match="once_per function"),
        ledger.run("a") as run,
    ):
        run.effect("refund", refund, 1)
    assert ledger.steps("a") == []


def test_verify_holds_the_claims_to_the_journal(store_url: str) -> None:
    """A claim moved to another step, or deleted, is found; so is a subject done twice."""
    calls: list[str] = []
    with oncelog.open(store_url) as ledger:
        refund = refunds(ledger, calls)
        for run_id in ("a", "b"):
            with ledger.run(run_id) as run:
                run.effect("refund", refund, 42, 10)
        with ledger.run("c") as run:
            run.effect("refund", refund, 7, 10)
        assert ledger.verify().ok
    tamper(store_url, "UPDATE subjects SET run_id = 'b' WHERE subject = '[\"refund\",42]'")
    with oncelog.open(store_url) as ledger:
        found = ledger.verify().problems
    assert [p.kind for p in found] == ["state"]
    assert "did not claim it last" in found[0].message
    tamper(store_url, "DELETE FROM subjects WHERE subject = '[\"refund\",7]'",
           "UPDATE subjects SET run_id = 'a' WHERE subject = '[\"refund\",42]'")  # fmt: skip
    with oncelog.open(store_url) as ledger:
        [deleted] = ledger.verify().problems
    assert "holds no claim on it" in deleted.message


def test_a_refusal_or_an_abandoned_effect_frees_the_subject(ledger: oncelog.Ledger) -> None:
    """The holder refused by the provider, then abandoned by a person: each time the next
    run claims the subject and calls."""
    outcomes: list[str] = ["refuse", "fail", "ok"]

    class Declined(Exception):
        pass

    @ledger.tool(kind="payment", name="refund", refusals=(Declined,),
                 once_per=lambda order: ("refund", order))  # fmt: skip
    def refund(order: int) -> str:
        outcome = outcomes.pop(0)
        if outcome == "refuse":
            raise Declined("card declined")
        if outcome == "fail":
            raise TimeoutError("no answer")  # in doubt: run b halts
        return "refunded"

    with pytest.raises(oncelog.EffectRefused), ledger.run("a") as run:
        run.effect("refund", refund, 42)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("b") as run:
        run.effect("refund", refund, 42)
    with pytest.raises(oncelog.SubjectInDoubt, match="run b, step refund"), ledger.run("c") as run:
        run.effect("refund", refund, 42)
    ledger.resolve("b", "refund", "abandon", by="ops")
    with ledger.run("c") as run:
        assert run.effect("refund", refund, 42) == "refunded"
    assert outcomes == []
    assert ledger.verify().ok


def test_one_run_asking_twice_for_a_subject_acts_once(ledger: oncelog.Ledger) -> None:
    calls: list[str] = []
    refund = refunds(ledger, calls)
    with ledger.run("a") as run:
        first = run.effect("refund", refund, 42, 10)
        assert run.effect("again", refund, 42, 10) == first
    assert len(calls) == 1
