"""``Run.skip_settled``: a run entered past its settled effects (done, refused, abandoned)
takes its next step where the first other one is recorded, and hands back nothing it
passed over; a step in doubt, not done, a read or a model call is never passed over, so
that it is asked for again, at its position, with the engine's recovery. On both stores.
An agent replaying the run from its top afterwards finds every step where it was."""

from __future__ import annotations

from typing import Any

import pytest

import oncelog
from oncelog.testing import FakeProvider, Refused


def answer(request: Any) -> Any:
    if request == "declined":
        raise Refused("card declined")
    if request == "boom":
        raise ConnectionError("reset by peer")
    if isinstance(request, int) and request < 0:
        raise TimeoutError("no answer")
    return {"got": request}


class Killed(BaseException):
    """Stands in for SIGKILL inside the call; the gateway's tests use the real thing."""


def tools(ledger: oncelog.Ledger, provider: FakeProvider) -> tuple[Any, Any]:
    @ledger.tool(kind="create", name="send", refusals=(Refused,))
    def send(to: Any, *, idempotency_key: str) -> Any:
        return provider.call(idempotency_key, to)

    @ledger.tool(kind="upsert", name="put")
    def put(value: int, *, idempotency_key: str) -> Any:
        return provider.call(idempotency_key, value)

    return send, put


def test_settled_effects_are_passed_over_and_the_next_step_goes_at_the_end(
    ledger: oncelog.Ledger,
) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("a", send, "x")
        run.effect("b", send, "y")
        with pytest.raises(oncelog.EffectRefused):
            run.effect("c", send, "declined")
        run.effect("d", send, "boom")
    ledger.resolve("r", "d", "abandon", by="ana")
    with ledger.run("r") as run:
        assert run.skip_settled() == 4
        assert run.effect("e", send, "z") == {"got": "z"}
    assert [(s.seq, s.step_id) for s in ledger.steps("r")][-1] == (4, "e")
    assert len(provider.requests) == 5
    with ledger.run("r") as run:  # an agent's code, from the top: all recorded, in place
        assert run.effect("a", send, "x") == {"got": "x"}
        assert run.effect("b", send, "y") == {"got": "y"}
        with pytest.raises(oncelog.EffectRefused):
            run.effect("c", send, "declined")
        with pytest.raises(oncelog.EffectAbandoned):
            run.effect("d", send, "boom")
        assert run.effect("e", send, "z") == {"got": "z"}
    assert len(provider.requests) == 5
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_a_step_in_doubt_is_not_passed_over_and_goes_through_recovery(
    ledger: oncelog.Ledger,
) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)

    @ledger.tool(kind="create", name="send")
    def dies(to: Any, *, idempotency_key: str) -> None:
        raise Killed

    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("a", send, "x")
        run.effect("b", dies, "y")
    with pytest.raises(oncelog.AmbiguousOutcome) as stopped, ledger.run("r") as run:
        assert run.skip_settled() == 1
        run.effect("b", send, "y")
    assert stopped.value.step_id == "b"
    with pytest.raises(oncelog.RunStopped), ledger.run("r") as run:
        assert run.skip_settled() == 1  # the run's stop holds it there
        run.effect("c", send, "z")  # a later step waits with it
    assert len(provider.requests) == 1


def test_a_step_not_done_a_read_and_a_model_call_are_not_passed_over(
    ledger: oncelog.Ledger,
) -> None:
    provider = FakeProvider(answer=answer)
    send, put = tools(ledger, provider)
    with pytest.raises(TimeoutError), ledger.run("not-done") as run:
        run.effect("a", send, "x")
        run.effect("b", put, -1)
    with ledger.run("not-done") as run:
        assert run.skip_settled() == 1
        assert run.effect("b", put, 5) == {"got": 5}  # run again, with its key
    for step_type in ("read", "llm"):
        with ledger.run(step_type) as run:
            run.effect("a", send, "x")
            getattr(run, step_type)("asked", lambda: {"text": "hi"})
            run.effect("c", send, "y")
        with ledger.run(step_type) as run:
            assert run.skip_settled() == 1
            assert getattr(run, step_type)("asked", lambda: {"text": "hi"}) == {"text": "hi"}
            assert run.effect("c", send, "y") == {"got": "y"}  # replayed at its position
    assert len(provider.requests) == 3 + 2 * 2  # a, b twice with its key; a and c of each


def test_it_stops_before_a_position_given_and_only_before_the_first_step(
    ledger: oncelog.Ledger,
) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with ledger.run("r") as run:
        for name in "abc":
            run.effect(name, send, name)
    with ledger.run("r") as run:
        assert run.skip_settled(before=2) == 2
        assert run.effect("c", send, "c") == {"got": "c"}  # replayed at its position
        with pytest.raises(oncelog.UsageError, match="before the run's first step"):
            run.skip_settled()
    with ledger.run("empty") as run:
        assert run.skip_settled() == 0
    assert len(provider.requests) == 3
