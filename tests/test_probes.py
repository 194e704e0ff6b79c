"""Reconciliation: a tool's probe settles an effect whose outcome is unknown."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import oncelog


class Killed(BaseException):
    """Stands in for a kill inside the call; the process tests use SIGKILL."""


class Provider:
    """Charges by key; ``lost`` answers are performed but never returned to the caller."""

    def __init__(self) -> None:
        self.charges: dict[str, dict[str, object]] = {}
        self.calls = 0
        self.lose_answer = False
        self.fail_before_acting = False

    def charge(self, cents: int, *, idempotency_key: str) -> dict[str, object]:
        self.calls += 1
        if self.fail_before_acting:
            self.fail_before_acting = False
            raise Killed
        found = self.charges.setdefault(idempotency_key, {"id": f"ch_{len(self.charges)}"})
        if self.lose_answer:
            self.lose_answer = False
            raise Killed
        return {**found, "cents": cents}

    def probe(self, key: str, cents: int) -> oncelog.ProbeAnswer:
        if key in self.charges:
            return oncelog.Found({**self.charges[key], "cents": cents})
        return oncelog.NOT_FOUND


def declare(
    ledger: oncelog.Ledger,
    provider: Provider,
    key_ttl: float | None = None,
    probe: Callable[..., Any] | None = None,
) -> oncelog.Tool[..., dict[str, object]]:
    declared = ledger.tool(
        kind="payment", name="charge", probe=probe or provider.probe, key_ttl=key_ttl
    )
    return declared(provider.charge)


def crash_then_resume(
    ledger: oncelog.Ledger, charge: oncelog.Tool[..., dict[str, object]]
) -> object:
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", charge, 500)
    with ledger.run("r") as run:
        return run.effect("pay", charge, 500)


def test_found_settles_as_done_without_calling_again(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.lose_answer = True
    result = crash_then_resume(ledger, declare(ledger, provider))
    assert result == {"id": "ch_0", "cents": 500}
    assert provider.calls == 1
    [step] = ledger.steps("r")
    assert (step.state, step.attempts, step.result) == (oncelog.StepState.DONE, 1, result)
    assert "probed" in [e.event for e in ledger.journal("r")]


def test_not_found_retries_with_the_same_key(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.fail_before_acting = True
    assert crash_then_resume(ledger, declare(ledger, provider)) == {"id": "ch_0", "cents": 500}
    assert provider.calls == 2
    assert len(provider.charges) == 1
    [step] = ledger.steps("r")
    assert step.attempts == 2
    assert step.key in provider.charges
    intents = [e.data for e in ledger.journal("r") if e.event == "intent"]
    assert intents[1]["reason"] == "the probe answered not_found"


def test_not_found_after_the_key_expired_halts(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.fail_before_acting = True
    charge = declare(ledger, provider, key_ttl=0.05)
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", charge, 500)
    time.sleep(0.1)
    expired = pytest.raises(oncelog.AmbiguousOutcome, match="no longer honours the key")
    with expired, ledger.run("r") as run:
        run.effect("pay", charge, 500)
    assert provider.calls == 1


@pytest.mark.parametrize("answer", [oncelog.CANNOT_TELL, "maybe", RuntimeError("down")])
def test_a_probe_that_cannot_tell_halts_for_a_person(
    ledger: oncelog.Ledger, answer: object
) -> None:
    provider = Provider()
    provider.lose_answer = True

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
    assert provider.calls == 1
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    [unknown, *_] = [e for e in ledger.journal("r") if e.event == "unknown"]
    assert "probe" in unknown.data["reason"]


def test_key_ttl_must_be_positive(ledger: oncelog.Ledger) -> None:
    with pytest.raises(oncelog.ConfigurationError):
        ledger.tool(kind="payment", key_ttl=0)(Provider().charge)
