"""The public API's behaviour, in one process. Crash behaviour is in the kill tests."""

from __future__ import annotations

import asyncio
import inspect
import logging
import pydoc
import weakref
from typing import Any

import pytest

import oncelog
from oncelog.testing import FakeProvider, Refused


def answer(request: Any) -> Any:
    """What the provider answers: a number is stored as is; some texts fail on purpose."""
    if request == "declined":
        raise Refused("card declined")
    if request == "boom":
        raise ConnectionError("reset by peer")
    if isinstance(request, int) and request < 0:
        raise TimeoutError("no answer")
    return request if isinstance(request, int) else {"to": request}


def tools(
    ledger: oncelog.Ledger, provider: FakeProvider
) -> tuple[oncelog.Tool[..., dict[str, str]], oncelog.Tool[..., int]]:
    @ledger.tool(kind="create", name="send", refusals=(Refused,))
    def send(to: str, *, idempotency_key: str) -> dict[str, str]:
        sent: dict[str, str] = provider.call(idempotency_key, to)
        return sent

    @ledger.tool(kind="upsert", name="put")
    def put(value: int, *, idempotency_key: str) -> int:
        stored: int = provider.call(idempotency_key, value)
        return stored

    return send, put


def test_replay_returns_recorded_results_without_calling(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    tokens: list[int] = []

    def model(prompt: str) -> dict[str, object]:
        tokens.append(1)
        return {"text": prompt.upper(), "usage": {"input_tokens": 7, "output_tokens": 2}}

    results = []
    for _ in range(3):
        with ledger.run("r", plan=["think", "mail"]) as run:
            text = run.llm("think", model, "hi")["text"]
            results.append(run.effect("mail", send, to=text))
    assert results == [{"to": "HI"}] * 3
    assert len(provider.requests) == 1
    assert len(tokens) == 1
    think = ledger.steps("r")[0]
    assert (think.tokens_in, think.tokens_out) == (7, 2)
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_key_depends_on_run_step_and_tool_only(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with ledger.run("r1") as run:
        run.effect("a", send, to="x")
    with ledger.run("r2") as run:
        run.effect("a", send, to="completely different payload")
    assert provider.requests == [
        oncelog.idempotency_key("r1", "a", send.spec.name),
        oncelog.idempotency_key("r2", "a", send.spec.name),
    ]
    assert oncelog.idempotency_key("r1", "a", "t") == oncelog.idempotency_key("r1", "a", "t")
    assert oncelog.idempotency_key("r1", "a", "t") != oncelog.idempotency_key("r1", "b", "t")


def test_live_call_returns_what_replay_will_return(ledger: oncelog.Ledger) -> None:
    @ledger.tool(kind="read")
    def pair(*, idempotency_key: str) -> tuple[int, int]:
        return (1, 2)

    with ledger.run("r") as run:
        live: object = run.effect("p", pair)
    with ledger.run("r") as run:
        replayed: object = run.effect("p", pair)
    assert live == replayed == [1, 2]


def test_refusal_is_recorded_and_replayed(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    for _ in range(2):
        with ledger.run("r") as run, pytest.raises(oncelog.EffectRefused) as refused:
            run.effect("pay", send, to="declined")
        assert refused.value.error_type == "Refused"
        assert refused.value.step_id == "pay"
    assert len(provider.requests) == 1
    assert ledger.steps("r")[0].state is oncelog.StepState.FAILED


def test_unexpected_error_of_a_create_halts_for_a_person(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with pytest.raises(oncelog.AmbiguousOutcome) as halted, ledger.run("r") as run:
        run.effect("mail", send, to="boom")
    assert halted.value.exit_code == oncelog.EXIT_HALTED
    assert isinstance(halted.value.__cause__, ConnectionError)
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("mail", send, to="boom")
    assert len(provider.requests) == 1
    ledger.resolve("r", "mail", "not_done", by="alice")
    with ledger.run("r") as run:
        assert run.effect("mail", send, to="fixed") == {"to": "fixed"}
    assert provider.requests[0] == provider.requests[1]  # the retry kept its key
    assert ledger.steps("r")[0].attempts == 2


def test_idempotent_kind_reruns_after_an_error_with_the_same_key(
    ledger: oncelog.Ledger,
) -> None:
    provider = FakeProvider(answer=answer)
    _, put = tools(ledger, provider)
    with pytest.raises(TimeoutError), ledger.run("r") as run:
        run.effect("set", put, -1)
    assert ledger.steps("r")[0].state is oncelog.StepState.NOT_DONE
    with ledger.run("r") as run:
        assert run.effect("set", put, 5) == 5
    assert len(set(provider.requests)) == 1
    assert len(provider.requests) == 2


def test_in_flight_create_found_on_resume_is_unknown(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, put = tools(ledger, provider)

    class Killed(BaseException):
        """Stands in for SIGKILL inside the call; the kill tests use the real thing."""

    @ledger.tool(kind="create", name="send")
    def dies(to: str, *, idempotency_key: str) -> None:
        raise Killed

    with pytest.raises(Killed), ledger.run("r") as run:
        run.effect("mail", dies, to="x")
    assert ledger.steps("r")[0].state is oncelog.StepState.IN_FLIGHT
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("mail", send, to="x")
    assert provider.requests == []
    [step] = ledger.in_doubt()
    assert (step.step_id, step.state) == ("mail", oncelog.StepState.UNKNOWN)
    ledger.resolve("r", "mail", "done", result={"to": "x"}, by="bob", note="seen in provider")
    with ledger.run("r") as run:
        assert run.effect("mail", send, to="x") == {"to": "x"}
        assert run.effect("set", put, 1) == 1
    assert len(provider.requests) == 1
    resolved = [e for e in ledger.journal("r") if e.event == "resolved"]
    assert resolved[0].data["by"] == "bob"


def test_abandoned_effect_reaches_the_agent(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r") as run:
        run.effect("mail", send, to="boom")
    ledger.resolve("r", "mail", "abandon", by="carol")
    with ledger.run("r") as run, pytest.raises(oncelog.EffectAbandoned):
        run.effect("mail", send, to="boom")
    assert len(provider.requests) == 1


def test_argument_drift(ledger: oncelog.Ledger, caplog: pytest.LogCaptureFixture) -> None:
    provider = FakeProvider(answer=answer)
    send, put = tools(ledger, provider)
    with ledger.run("r") as run:
        run.effect("mail", send, to="a")
        run.effect("set", put, 1)
    with pytest.raises(oncelog.ArgumentDrift), ledger.run("r") as run:
        run.effect("mail", send, to="b")
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    with caplog.at_level(logging.WARNING, "oncelog"), ledger.run("r") as run:
        run.effect("mail", send, to="a")
        assert run.effect("set", put, 2) == 1  # warn: the recorded result stands
    assert "other arguments" in caplog.text
    assert len(provider.requests) == 2


def test_the_same_call_passed_by_name_instead_of_by_position_is_no_drift(
    ledger: oncelog.Ledger,
) -> None:
    """Arguments are compared bound to the tool's parameters: ``send("a")`` recorded,
    ``send(to="a")`` replayed is the same call (it halted on ArgumentDrift); ``send(to=
    "b")`` still drifts."""
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with ledger.run("r") as run:
        run.effect("mail", send, "a")
    with ledger.run("r") as run:
        assert run.effect("mail", send, to="a") == {"to": "a"}
    with pytest.raises(oncelog.ArgumentDrift), ledger.run("r") as run:
        run.effect("mail", send, to="b")
    assert len(provider.requests) == 1


def test_a_long_run_replays_across_pages_and_arguments_json_writes_alike(
    ledger: oncelog.Ledger,
) -> None:
    """Replay reads the recorded steps a page (512) at a time; arguments JSON cannot tell
    from the recorded ones (a tuple for a list) are the same arguments, not a drift."""
    calls: list[str] = []

    @ledger.tool(kind="upsert", name="pair")
    def pair(values: tuple[int, int], *, idempotency_key: str) -> list[int]:
        calls.append(idempotency_key)
        return list(values)

    def agent() -> list[object]:
        with ledger.run("r") as run:
            seen: list[object] = [run.read(f"q{i}", lambda i: {"i": i}, i) for i in range(600)]
            seen.append(run.effect("pair", pair, (1, 2)))
            return seen

    first = agent()
    assert agent() == agent() == first == [*({"i": i} for i in range(600)), [1, 2]]
    assert len(calls) == 1
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_replay_divergence(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, put = tools(ledger, provider)
    with ledger.run("r") as run:
        run.effect("mail", send, to="a")
        run.effect("set", put, 1)
    with pytest.raises(oncelog.ReplayDivergence) as diverged, ledger.run("r") as run:
        run.effect("set", put, 1)
    assert diverged.value.step_id == "set"
    with pytest.raises(oncelog.ReplayDivergence), ledger.run("r") as run:
        run.effect("mail", send, to="a")  # stops before the recorded "set"
    with ledger.run("r") as run:  # the code fixed: the run gets past where it stopped
        run.effect("mail", send, to="a")
        run.effect("set", put, 1)
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED
    assert len(provider.requests) == 2


def test_direct_tool_calls_are_positional_effects(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with pytest.raises(oncelog.NoActiveRun):
        send(to="x")
    for _ in range(2):
        with ledger.run("r"):
            assert send(to="x") == {"to": "x"}
            assert send(to="y") == {"to": "y"}
    assert [s.step_id for s in ledger.steps("r")] == [f"{send.spec.name}@0", f"{send.spec.name}@1"]
    assert len(provider.requests) == 2


def test_a_tool_shows_its_function_to_help_and_inspect(db_path: str) -> None:
    with oncelog.open(db_path) as ledger:

        @ledger.tool(kind="create")
        def notify(to: str, *, idempotency_key: str) -> str:
            """Tell someone, once."""
            return to

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        assert getattr(notify, name) == getattr(notify.fn, name)
    assert inspect.unwrap(notify) is notify.fn
    assert inspect.signature(notify) == inspect.signature(notify.fn)
    assert "Tell someone, once." in pydoc.render_doc(notify)
    notify.owner = "support"  # type: ignore[attr-defined]  # a tool takes attributes
    assert notify.owner == "support"  # type: ignore[attr-defined]
    assert weakref.ref(notify)() is notify


def test_plan_is_stored_and_guarded(ledger: oncelog.Ledger) -> None:
    asked: list[int] = []

    def make_plan() -> list[str]:
        asked.append(1)
        return ["a", "b"]

    with ledger.run("r", plan=make_plan) as run:
        assert run.plan == ("a", "b")
    with ledger.run("r", plan=make_plan) as run:
        assert run.plan == ("a", "b")
    assert asked == [1]  # a re-plan after a restart is never asked for
    with pytest.raises(oncelog.PlanMismatch), ledger.run("r", plan=["b", "a"]):
        pass
    with ledger.run("r", plan=["b", "a", "c"], replace_plan=True) as run:
        assert run.plan == ("b", "a", "c")
    assert [e.event for e in ledger.journal("r")].count("plan_replaced") == 1


def test_second_live_owner_is_refused(ledger: oncelog.Ledger) -> None:
    with ledger.run("r"):
        with pytest.raises(oncelog.RunLeased) as leased, ledger.run("r"):
            pass
        assert leased.value.exit_code == oncelog.EXIT_TRY_LATER
    with ledger.run("r") as run:
        assert run.fencing_token == 2  # the refused attempt took nothing


def test_agent_exception_marks_the_run_failed_and_resumable(ledger: oncelog.Ledger) -> None:
    provider = FakeProvider(answer=answer)
    send, _ = tools(ledger, provider)
    with pytest.raises(KeyError), ledger.run("r") as run:
        run.effect("mail", send, to="a")
        raise KeyError("agent bug")
    assert ledger.get_run("r").status is oncelog.RunStatus.FAILED
    with ledger.run("r") as run:
        run.effect("mail", send, to="a")
    assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED
    assert len(provider.requests) == 1


def test_exit_codes() -> None:
    assert oncelog.exit_code_for(None) == 0
    assert oncelog.exit_code_for(oncelog.AmbiguousOutcome("x")) == 3
    assert oncelog.exit_code_for(oncelog.RunLeased("x")) == 75
    assert oncelog.exit_code_for(ValueError()) == 1
    with pytest.raises(SystemExit) as done:
        oncelog.run_main(lambda: None)
    assert done.value.code == 0

    def halts() -> None:
        raise oncelog.ReplayDivergence("x", run_id="r")

    with pytest.raises(SystemExit) as halted:
        oncelog.run_main(halts)
    assert halted.value.code == 3


def test_a_key_namespace_separates_services(db_path: str) -> None:
    keys: list[str] = []
    for n, namespace in enumerate(("billing", "shipping", "billing")):  # a ledger each
        with oncelog.open(f"{db_path}.{n}", key_namespace=namespace) as ledger:

            @ledger.tool(kind="create", name="send")
            def send(*, idempotency_key: str) -> None:
                keys.append(idempotency_key)

            with ledger.run("order-7") as run:
                run.effect("mail", send)
    assert keys[0] == keys[2] == oncelog.idempotency_key("order-7", "mail", "send", "billing")
    assert keys[1] != keys[0]
    assert oncelog.idempotency_key("order-7", "mail", "send") not in keys


def test_a_model_call_is_recorded_under_the_name_and_input_digest_given(
    ledger: oncelog.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def call() -> dict[str, str]:
        calls.append("asked")
        return {"answer": "42"}

    for digest in ("sha-1", "sha-1", "sha-2"):
        with ledger.run("r") as run:
            answer = run.llm("think", call, name="model", input_digest=digest)
            looked = run.read(None, lambda: "row", name="lookup")
        assert (answer, looked) == ({"answer": "42"}, "row")
    assert calls == ["asked"]  # replayed twice, the function never called again
    think, lookup = ledger.steps("r")
    assert (think.tool, lookup.tool, lookup.step_id) == ("model", "lookup", "lookup@1")
    assert think.args_payload == {"args": [], "kwargs": {}, "input_digest": "sha-1"}
    assert "think" in caplog.text  # the third replay asked with another input: a warning
    with pytest.raises(oncelog.ReplayDivergence, match="other_model"), ledger.run("r") as run:
        run.llm("think", call, name="other_model", input_digest="sha-1")


def test_a_model_call_with_drift_error_asked_another_question_halts_the_run(
    ledger: oncelog.Ledger,
) -> None:
    """``drift="error"``: the answer recorded at a position was to the question recorded;
    asked another, the run halts for a person, and stays halted on the next start."""
    with ledger.run("r") as run:
        assert run.llm("think", lambda: "42", input_digest="sha-1", drift="error") == "42"
    for _ in range(2):
        halted = pytest.raises(oncelog.ArgumentDrift, match="'think' was recorded with other")
        with halted, ledger.run("r") as run:
            run.llm("think", lambda: "43", input_digest="sha-2", drift="error")
    assert ledger.get_run("r").status is oncelog.RunStatus.HALTED
    assert [s.result for s in ledger.steps("r")] == ["42"]


def test_async_model_calls_take_a_name_and_an_input_digest(ledger: oncelog.Ledger) -> None:
    async def call() -> str:
        return "async answer"

    async def agent() -> None:
        async with ledger.run("r") as run:
            assert await run.llm(None, call, name="model", input_digest="d") == "async answer"
            assert await run.read(None, call, name="query") == "async answer"

    asyncio.run(agent())
    assert [(s.step_id, s.tool) for s in ledger.steps("r")] == [
        ("model@0", "model"), ("query@1", "query"),
    ]  # fmt: skip
    assert ledger.steps("r")[0].args_payload["input_digest"] == "d"
