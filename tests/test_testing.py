"""``oncelog.testing``: the fake provider and its clock behave as a provider with
idempotency keys does, so that agents' tests (and ours) need no sleeps and no copies."""

from __future__ import annotations

import pytest

import oncelog
from oncelog.testing import FakeClock, FakeProvider

DAY = 24 * 3600.0


def test_a_key_it_honours_performs_once_and_an_expired_key_performs_again() -> None:
    clock = FakeClock(1000.0)
    provider = FakeProvider(key_ttl=DAY, clock=clock)
    first = provider.call("k", {"cents": 5})
    assert provider.call("k", {"cents": 5}) == first
    assert provider.probe("k") == oncelog.Found(first)
    clock.advance(DAY)
    assert provider.probe("k") is oncelog.NOT_FOUND
    assert provider.call("k", {"cents": 5}) != first  # a provider that forgot performs again
    assert provider.times_performed("k") == 2
    assert provider.requests == ["k", "k", "k"]
    with pytest.raises(oncelog.ConfigurationError, match="does not go back"):
        clock.advance(-1)


def test_a_lost_answer_is_found_by_the_probe_at_once(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider()
    pay = provider.tool(kind="payment", name="pay")
    provider.fail_next("after")
    with ledger.run("r") as run:
        assert run.effect("pay", pay, {"cents": 5})["id"] == "fx_1"
    assert len(provider.performed) == 1
    assert ledger.steps("r")[0].attempts == 1


def test_a_refusal_and_a_failure_before_acting(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider()
    send = provider.tool()
    provider.fail_next("refuse")
    with pytest.raises(oncelog.EffectRefused), ledger.run("a") as run:
        run.effect("send", send)
    provider.fail_next("before", TimeoutError("no answer"))
    # The probe, asked at once, answers not found: it stays in flight for a later start.
    with pytest.raises(oncelog.ResendLater, match="not_found"), ledger.run("b") as run:
        run.effect("send", send)
    with ledger.run("b") as run:  # the probe answers not found again: run again, same key
        run.effect("send", send)
    assert provider.requests == [provider.requests[0], *[provider.requests[1]] * 2]
    assert len(provider.performed) == 1
