"""Reconciliation: a tool's probe settles an effect whose outcome is unknown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import oncelog
from oncelog.testing import FakeClock, FakeProvider, use_clock


class Killed(BaseException):
    """Stands in for a kill inside the call; the process tests use SIGKILL."""


DAY = 24 * 3600.0


def declare(
    ledger: oncelog.Ledger, provider: FakeProvider, probe: Callable[..., Any] | None = None
) -> oncelog.Tool[..., dict[str, Any]]:
    if probe is None:
        return provider.tool(kind="payment", name="charge")
    return ledger.tool(kind="payment", name="charge", probe=probe)(
        lambda cents, *, idempotency_key: provider.call(idempotency_key, cents)
    )


def crash_then_resume(ledger: oncelog.Ledger, charge: oncelog.Tool[..., dict[str, Any]]) -> object:
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", charge, 500)
    with ledger.run("r") as run:
        return run.effect("pay", charge, 500)


def test_found_settles_as_done_without_calling_again(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider()
    provider.fail_next("after", Killed())
    result = crash_then_resume(ledger, declare(ledger, provider))
    assert result == {"id": "fx_1", "request": 500}
    assert len(provider.requests) == 1
    [step] = ledger.steps("r")
    assert (step.state, step.attempts, step.result) == (oncelog.StepState.DONE, 1, result)
    assert "probed" in [e.event for e in ledger.journal("r")]


def test_not_found_retries_with_the_same_key(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider()
    provider.fail_next("before", Killed())
    assert crash_then_resume(ledger, declare(ledger, provider)) == {"id": "fx_1", "request": 500}
    [step] = ledger.steps("r")
    assert provider.requests == [step.key, step.key]
    assert provider.times_performed(step.key) == 1
    assert step.attempts == 2
    intents = [e.data for e in ledger.journal("r") if e.event == "intent"]
    assert intents[1]["reason"] == "the probe answered not_found"


def test_not_found_after_the_key_expired_halts(ledger: oncelog.Ledger) -> None:
    clock = FakeClock()  # the key ages by the provider's clock: no sleep
    provider = FakeProvider(key_ttl=DAY, clock=clock)
    use_clock(ledger, clock)
    pay = provider.tool(kind="payment", name="pay")
    provider.fail_next("before")
    with pytest.raises(oncelog.ResendLater), ledger.run("r") as run:
        run.effect("pay", pay, 500)
    clock.advance(DAY + 1)
    expired = pytest.raises(oncelog.AmbiguousOutcome, match="no longer honours the key")
    with expired, ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert len(provider.requests) == 1
    assert provider.performed == []


@pytest.mark.parametrize("answer", [oncelog.CANNOT_TELL, "maybe", RuntimeError("down")])
def test_a_probe_that_cannot_tell_halts_for_a_person(
    ledger: oncelog.Ledger, answer: object
) -> None:
    provider = FakeProvider()
    provider.fail_next("after", Killed())

    def probe(key: str, cents: int) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    charge = declare(ledger, provider, probe=probe)
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", charge, 500)
    for _ in range(2):  # and again on the next restart: only a person settles it
        with pytest.raises(oncelog.AmbiguousOutcome, match="probe"), ledger.run("r") as run:
            run.effect("pay", charge, 500)
    assert len(provider.requests) == 1
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    [unknown, *_] = [e for e in ledger.journal("r") if e.event == "unknown"]
    assert "probe" in unknown.data["reason"]


def keyed_pay(cents: int, *, idempotency_key: str) -> int:
    return cents


def test_a_dedupe_window_must_be_positive(ledger: oncelog.Ledger) -> None:
    with pytest.raises(oncelog.ConfigurationError, match="must be > 0"):
        ledger.tool(kind="payment", dedupe_window=0)(keyed_pay)


def test_a_dedupe_window_needs_a_tool_that_takes_the_key(ledger: oncelog.Ledger) -> None:
    """Sent again without a key, a resend is a new request to the provider."""
    with pytest.raises(oncelog.ConfigurationError, match="takes no idempotency_key"):
        ledger.tool(kind="payment", name="pay", dedupe_window=60)(lambda cents: cents)


def test_key_ttl_warns_that_it_now_resends(ledger: oncelog.Ledger) -> None:
    """Once it only bounded a probe's "not found"; as ``dedupe_window`` it resends an effect
    in doubt without a probe, where a tool so declared used to halt."""
    with pytest.warns(DeprecationWarning, match="sent again with the same key"):
        pay = ledger.tool(kind="payment", key_ttl=60)(keyed_pay)
    assert pay.spec.dedupe_window == 60
