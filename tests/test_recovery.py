"""Recovering without a person where the provider can decide (issue 16): a provider that
deduplicates keys, failures that mean "not performed" under a retry policy, and a
preflight asked before each attempt. In-process, on every store; the kill tests
(test_recovery_kills.py) do the same with real processes and SIGKILL."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import oncelog
from oncelog import StepState
from oncelog.audit._verify import verify
from oncelog.failures import Failure, first
from oncelog.failures import urllib as urllib_failures
from oncelog.runtime._calls import Surroundings


class Killed(BaseException):
    """Stands in for a kill inside the call; the kill tests use SIGKILL."""


class Provider:
    """Performs effects by key. ``honours_keys``: a repeated key returns the first answer."""

    def __init__(self, *, honours_keys: bool = True) -> None:
        self.honours_keys = honours_keys
        self.performed: Counter[str] = Counter()
        self.calls = 0
        self.answers: dict[str, dict[str, Any]] = {}
        self.script: list[BaseException | None] = []  # raised (after acting) per call

    def act(self, cents: int, *, idempotency_key: str) -> dict[str, Any]:
        self.calls += 1
        if not (self.honours_keys and idempotency_key in self.answers):
            self.performed[idempotency_key] += 1
            self.answers[idempotency_key] = {"id": f"ch_{len(self.answers)}", "cents": cents}
        failure = self.script.pop(0) if self.script else None
        if failure is not None:
            raise failure
        return self.answers[idempotency_key]


def refused_unsent(exc: BaseException) -> Failure | None:
    """The scripted ``ConnectionRefusedError`` as a client's classifier reads a refused
    first connection (urllib's calls a bare one, raised it cannot see where, in doubt)."""
    if isinstance(exc, ConnectionRefusedError):
        return Failure.NOT_PERFORMED
    return urllib_failures.classify(exc)


def fake_time(ledger: oncelog.Ledger) -> list[float]:
    """Retries wait no wall-clock time: the ledger's engines get a clock that a sleep moves
    on. Returns the waits, as they are slept."""
    now, slept = [time.time()], []

    def sleep(seconds: float) -> bool:
        slept.append(seconds)
        now[0] += seconds
        return False

    ledger.surroundings = Surroundings(clock=lambda: now[0], sleep=sleep)
    return slept


def kill_then_resume(ledger: oncelog.Ledger, tool: oncelog.Tool[..., Any]) -> Any:
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", tool, 500)
    with ledger.run("r") as run:
        return run.effect("pay", tool, 500)


# -- 16.1: a provider that deduplicates ----------------------------------------------


def test_an_effect_in_doubt_is_sent_again_within_the_window(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [Killed()]  # performed, then the process "dies" before the answer
    pay = ledger.tool(kind="payment", name="pay", dedupe_window=timedelta(hours=24))(provider.act)
    result = kill_then_resume(ledger, pay)
    step = ledger.steps("r")[0]
    assert provider.performed == Counter({step.key: 1})
    assert (step.state, step.attempts, step.result) == (StepState.DONE, 2, result)
    intents = [e for e in ledger.journal("r") if e.event == "intent"]
    assert "sent again with the same key" in intents[-1].data["reason"]
    assert step.first_started_at == intents[0].at  # the window runs from the first send
    assert verify(ledger.store).problems == []


def test_without_the_declaration_it_halts_as_before(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [Killed()]
    pay = ledger.tool(kind="payment", name="pay")(provider.act)
    with pytest.raises(oncelog.AmbiguousOutcome):
        kill_then_resume(ledger, pay)
    assert provider.calls == 1


def test_past_the_window_it_halts(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [Killed()]
    pay = ledger.tool(kind="payment", name="pay", dedupe_window=60)(provider.act)
    ledger.surroundings = Surroundings(key_clock=lambda: 1e12)  # keys aged: far later
    with pytest.raises(oncelog.AmbiguousOutcome):
        kill_then_resume(ledger, pay)
    assert provider.calls == 1


def test_a_resend_with_other_arguments_is_drift(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [Killed()]
    pay = ledger.tool(kind="payment", name="pay", dedupe_window=60)(provider.act)
    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("pay", pay, 500)
    with pytest.raises(oncelog.ArgumentDrift), ledger.run("r") as run:
        run.effect("pay", pay, 900)
    assert provider.calls == 1


def test_a_timeout_in_process_is_sent_again_under_the_policy(ledger: oncelog.Ledger) -> None:
    fake_time(ledger)
    provider = Provider()
    provider.script = [TimeoutError("read timed out"), TimeoutError("read timed out")]
    pay = ledger.tool(
        kind="payment", name="pay", dedupe_window=60, retry=oncelog.Retry(attempts=3)
    )(provider.act)
    with ledger.run("r") as run:
        result = run.effect("pay", pay, 500)
    assert provider.calls == 3
    assert sum(provider.performed.values()) == 1
    assert ledger.steps("r")[0].attempts == 3
    assert result["cents"] == 500


def test_in_doubt_without_a_policy_is_left_for_a_later_start(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [TimeoutError("read timed out")]
    pay = ledger.tool(kind="payment", name="pay", dedupe_window=60)(provider.act)
    with pytest.raises(oncelog.ResendLater) as stopped, ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert stopped.value.exit_code == oncelog.EXIT_TRY_LATER
    assert ledger.get_run("r").status is oncelog.RunStatus.QUEUED
    assert ledger.steps("r")[0].state is StepState.IN_FLIGHT
    with ledger.run("r") as run:
        assert run.effect("pay", pay, 500) == provider.answers[ledger.steps("r")[0].key]
    assert sum(provider.performed.values()) == 1


def test_still_in_progress_is_try_later_never_a_new_attempt(ledger: oncelog.Ledger) -> None:
    class KeyInUse(Exception):
        pass

    provider = Provider()
    provider.script = [KeyInUse("409 idempotency_key_in_use")]
    classify = first(lambda exc: Failure.IN_PROGRESS if isinstance(exc, KeyInUse) else None)
    pay = ledger.tool(
        kind="payment", name="pay", failures=classify, retry=oncelog.Retry(attempts=5)
    )(provider.act)
    busy = pytest.raises(oncelog.ResendLater, match=r"still processes an earlier send.*a person")
    with busy, ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert provider.calls == 1
    assert ledger.steps("r")[0].state is StepState.IN_FLIGHT


# -- 16.2: failures that mean "not performed", and the retry policy -------------------


def refused_port() -> str:
    """A URL nothing listens on: connecting is refused before anything is sent."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/charge"


def test_connection_refused_is_retried_then_failed_never_halted(
    ledger: oncelog.Ledger,
) -> None:
    fake_time(ledger)
    url, tries = refused_port(), []

    @ledger.tool(kind="payment", name="pay", failures=urllib_failures.classify,
                 retry=oncelog.Retry(attempts=4, backoff=0.01))  # fmt: skip
    def pay(cents: int, *, idempotency_key: str) -> Any:
        tries.append(idempotency_key)
        return urllib.request.urlopen(url, data=b"{}", timeout=5)

    refused = pytest.raises(oncelog.EffectRefused, match="not performed in 4 attempts")
    with refused, ledger.run("r") as run:
        run.effect("pay", pay, 500)
    step = ledger.steps("r")[0]
    assert (step.state, step.attempts, len(tries), len(set(tries))) == (StepState.FAILED, 4, 4, 1)
    assert step.error is not None
    assert "URLError" in step.error["type"]
    assert ledger.get_run("r").status is oncelog.RunStatus.FAILED
    waits = [e.data["retry_at"] for e in ledger.journal("r") if "retry_at" in e.data]
    assert len(waits) == 3  # journalled with each not_done outcome
    assert verify(ledger.store).problems == []  # retry times and first sends agree
    with pytest.raises(oncelog.EffectRefused), ledger.run("r") as run:  # replayed, not retried
        run.effect("pay", pay, 500)
    assert len(tries) == 4


def test_a_retry_waits_until_the_recorded_time(ledger: oncelog.Ledger) -> None:
    slept = fake_time(ledger)
    provider = Provider()
    provider.script = [ConnectionRefusedError(), ConnectionRefusedError()]
    classify = refused_unsent
    retry = oncelog.Retry(attempts=3, backoff=2.0, multiplier=3.0, jitter=0.0)
    pay = ledger.tool(kind="payment", name="pay", failures=classify, retry=retry)(provider.act)
    with ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert slept == [pytest.approx(2.0), pytest.approx(6.0)]


def test_an_unclassified_error_stays_in_doubt(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    provider.script = [RuntimeError("reset after sending")]
    classify = urllib_failures.classify
    pay = ledger.tool(kind="payment", name="pay", failures=classify, retry=oncelog.Retry())(
        provider.act
    )
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert provider.calls == 1


def test_a_classifier_that_raises_leaves_it_in_doubt(ledger: oncelog.Ledger) -> None:
    def broken(exc: BaseException) -> Failure | None:
        raise ValueError("bug")

    provider = Provider()
    provider.script = [ConnectionRefusedError()]
    pay = ledger.tool(kind="payment", name="pay", failures=broken)(provider.act)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("pay", pay, 500)


def test_retry_policies_are_checked() -> None:
    for bad in ({"attempts": 0}, {"backoff": -1}, {"multiplier": 0.5}, {"jitter": 2}):
        with pytest.raises(oncelog.ConfigurationError):
            oncelog.Retry(**bad)
    assert oncelog.Retry(backoff=1, multiplier=2, cap=10, jitter=0).delay(100_000, 0.3) == 10
    with pytest.raises(oncelog.ConfigurationError, match="older name"):
        oncelog.tool(kind="payment", dedupe_window=1, key_ttl=1)(lambda: None)


# -- 16.3: preflight ------------------------------------------------------------------


def test_a_preflight_that_finds_it_means_no_call(ledger: oncelog.Ledger) -> None:
    provider, asked = Provider(), []

    def preflight(key: str, cents: int) -> oncelog.PreflightAnswer:
        asked.append(key)
        return oncelog.Found({"id": "ch_elsewhere", "cents": cents})

    pay = ledger.tool(kind="payment", name="pay", preflight=preflight)(provider.act)
    with ledger.run("r") as run:
        assert run.effect("pay", pay, 500) == {"id": "ch_elsewhere", "cents": 500}
    assert provider.calls == 0
    assert len(asked) == 1
    step = ledger.steps("r")[0]
    assert (step.state, step.key) == (StepState.DONE, asked[0])
    intent = next(e for e in ledger.journal("r") if e.event == "intent")
    assert intent.data["reason"] == "the preflight found it at the provider"
    with ledger.run("r") as run:  # replayed: not asked again
        run.effect("pay", pay, 500)
    assert len(asked) == 1


def test_a_preflight_not_found_calls_and_is_journalled(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    pay = ledger.tool(kind="payment", name="pay", preflight=lambda key, cents: oncelog.NOT_FOUND)(
        provider.act
    )
    with ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert provider.calls == 1
    intent = next(e for e in ledger.journal("r") if e.event == "intent")
    assert intent.data["reason"] == "the preflight answered not_found"


def test_a_preflight_conflict_halts_with_the_providers_answer(ledger: oncelog.Ledger) -> None:
    provider = Provider()
    conflict = oncelog.Conflict("the cloud says: already patched by change CHG-7")
    pay = ledger.tool(kind="payment", name="pay", preflight=lambda key, cents: conflict)(
        provider.act
    )
    with (
        pytest.raises(oncelog.PreflightConflict, match="CHG-7") as halted,
        ledger.run("r") as run,
    ):
        run.effect("pay", pay, 500)
    assert halted.value.exit_code == oncelog.EXIT_HALTED
    assert provider.calls == 0
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    assert "CHG-7" in (ledger.get_run("r").reason or "")
    assert [s.step_id for s in ledger.in_doubt()] == ["pay"]
    ledger.resolve("r", "pay", "abandon", by="alice")
    with pytest.raises(oncelog.EffectAbandoned), ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert provider.calls == 0


def test_a_preflight_that_cannot_tell_sends_nothing(ledger: oncelog.Ledger) -> None:
    provider = Provider()

    def preflight(key: str, cents: int) -> oncelog.PreflightAnswer:
        raise OSError("the provider is down")

    pay = ledger.tool(kind="payment", name="pay", preflight=preflight)(provider.act)
    with pytest.raises(oncelog.PreflightUnanswered, match="down"), ledger.run("r") as run:
        run.effect("pay", pay, 500)
    assert provider.calls == 0
    assert ledger.steps("r") == []
    assert ledger.get_run("r").status is oncelog.RunStatus.QUEUED


def test_a_preflight_is_asked_before_each_retry(ledger: oncelog.Ledger) -> None:
    fake_time(ledger)
    provider, asked = Provider(), []

    def preflight(key: str, cents: int) -> oncelog.PreflightAnswer:
        asked.append(key)
        return (
            oncelog.Found(provider.answers[key]) if key in provider.answers else oncelog.NOT_FOUND
        )

    provider.honours_keys = False
    provider.script = [ConnectionRefusedError()]
    pay = ledger.tool(
        kind="payment", name="pay", preflight=preflight, failures=refused_unsent,
        retry=oncelog.Retry(attempts=3),
    )(provider.act)  # fmt: skip
    with ledger.run("r") as run:
        run.effect("pay", pay, 500)
    # The refused attempt had in fact acted (this provider lies): the preflight before
    # the retry finds it, and the tool is not called a second time.
    assert (len(asked), provider.calls, sum(provider.performed.values())) == (2, 1, 1)


def test_the_async_api_retries_and_resends_the_same_way(ledger: oncelog.Ledger) -> None:
    fake_time(ledger)
    provider = Provider()
    provider.script = [ConnectionRefusedError(), TimeoutError("read timed out")]

    async def act(cents: int, *, idempotency_key: str) -> dict[str, Any]:
        return provider.act(cents, idempotency_key=idempotency_key)

    pay = ledger.tool(
        kind="payment", name="pay", dedupe_window=60, failures=refused_unsent,
        retry=oncelog.Retry(attempts=3),
    )(act)  # fmt: skip

    async def agent() -> Any:
        async with ledger.run("r") as run:
            return await run.effect("pay", pay, 500)

    result = asyncio.run(agent())
    step = ledger.steps("r")[0]
    assert (step.state, step.attempts, provider.calls) == (StepState.DONE, 3, 3)
    assert provider.performed == Counter({step.key: 1})
    assert result == provider.answers[step.key]
