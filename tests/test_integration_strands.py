"""Strands Agents, for real: an agent whose tool emails through the provider process, with
a scripted model, in processes of its own; the emails are counted at the provider.

Plain Strands sends a second email in each of the ways issue 45 names (a process SIGKILLed
mid-tool and run again; a tool raising after the provider acted, whose error Strands hands
to the model, which asks again; a person's confirmation asked and given again when the
invocation runs again); each test shows the duplicate first, then the guarded agent
sending once. A stop (an email in doubt) sticks although Strands catches every tool
exception: the model is not asked again and the caller exits 3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.processes import require_framework, run_agent
from .support.agents import AgentExit
from .support.provider_process import Provider

AGENT = "strands_agent"


def agent(tmp_path: Path, provider: Provider, session: str, *options: str) -> AgentExit:
    """One process of the agent for ``session`` (its own ledger, flags and model calls)."""
    folder = tmp_path / session
    folder.mkdir(exist_ok=True)
    args = [
        "--ledger", str(folder / "ledger.db"), "--provider", provider.url,
        "--model-calls", str(folder / "model-calls"), "--flags", str(folder / "flags"),
        "--session", session, *options,
    ]  # fmt: skip
    return run_agent(AGENT, *args)


def until_done(tmp_path: Path, provider: Provider, session: str, *options: str) -> AgentExit:
    """The agent, and once more if the provider killed it: as a supervisor restarts it."""
    first = agent(tmp_path, provider, session, *options)
    if not first.killed:
        return first
    return agent(tmp_path, provider, session, *options)


def model_calls(tmp_path: Path, session: str) -> int:
    return len((tmp_path / session / "model-calls").read_text().splitlines())


@pytest.mark.parametrize(
    ("fault", "confirm"),
    [("kill", "none"), ("tool-raises", "none"), ("kill", "policy"), ("kill", "hook")],
)
def test_plain_strands_sends_twice_and_the_guarded_agent_once(
    tmp_path: Path, provider: Provider, fault: str, confirm: str
) -> None:
    """``confirm``: a person says yes before the email, through the guard's approval
    (``policy``) or the agent's own hook (``hook``); plain, the hook asks again after the
    kill, and the email goes out again."""
    require_framework("strands", "strands")
    options = ["--fault", fault, "--confirm", confirm]

    plain = until_done(tmp_path, provider, "plain", *options)
    assert plain.returncode == 0, plain
    assert provider.total("plain") == 2  # the duplicate this integration exists for

    guarded = until_done(tmp_path, provider, "guarded", *options, "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert "emailed ada" in guarded.last_line
    assert provider.total("guarded") == 1
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        steps = ledger.steps("billing/guarded/turn-1")
        assert ledger.get_run("billing/guarded/turn-1").status is oncelog.RunStatus.COMPLETED
        decided = [(a.decided_by, a.status.value) for a in ledger.approvals(None)]
    assert [(s.step_id, s.state) for s in steps] == [
        ("model#1", StepState.DONE), ("send_email#1", StepState.DONE),
        ("model#2", StepState.DONE),
    ]  # fmt: skip
    assert decided == ([("alice", "used")] if confirm == "policy" else [])
    # The restarted agent's first model call was answered from the ledger: no tokens.
    assert model_calls(tmp_path, "guarded") == 2


def test_a_turn_whose_model_call_strands_retried_replays_after_a_kill(
    tmp_path: Path, provider: Provider
) -> None:
    """Strands retries a throttled model call (its default): the attempt that raised
    records nothing and takes no position, so the turn killed after the email replays to
    the email in doubt, its probe settles it, and the turn ends; before, the retry sat one
    position on and every restart stopped with ``ReplayDivergence``."""
    require_framework("strands", "strands")
    options = ["--fault", "kill", "--throttled", "--guarded", "--probe"]
    guarded = until_done(tmp_path, provider, "guarded", *options)
    assert guarded.returncode == 0, guarded
    assert "emailed ada" in guarded.last_line
    assert provider.total("guarded") == 1
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        steps = ledger.steps("billing/guarded/turn-1")
    assert [(s.seq, s.step_id, s.state) for s in steps] == [
        (0, "model#1", StepState.DONE), (1, "send_email#1", StepState.DONE),
        (2, "model#2", StepState.DONE),
    ]  # fmt: skip
    assert model_calls(tmp_path, "guarded") == 2  # the throttled attempt answered nothing


def test_a_stop_sticks_through_strands_error_handling(tmp_path: Path, provider: Provider) -> None:
    """No probe: the email whose tool raised after sending is in doubt. Strands catches the
    stop and would hand it to the model, which would ask for the email again; the guard
    cancels the invocation and raises the stop: the caller exits 3 naming the step, the
    model was asked once. A person records what the provider did; the agent finishes."""
    require_framework("strands", "strands")
    stopped = agent(tmp_path, provider, "r", "--fault", "tool-raises", "--guarded")
    assert stopped.returncode == 3, stopped
    assert "AmbiguousOutcome" in stopped.stderr
    assert "billing/r/turn-1" in stopped.stderr
    assert "send_email#1" in stopped.stderr
    assert provider.total("r") == 1
    assert model_calls(tmp_path, "r") == 1
    with oncelog.open(str(tmp_path / "r" / "ledger.db")) as ledger:
        assert ledger.get_run("billing/r/turn-1").status is oncelog.RunStatus.HALTED
        [email] = provider.effects("r")
        receipt = f"sent fx_{email.response['effect_id']}"
        ledger.resolve("billing/r/turn-1", "send_email#1", "done", result=receipt, by="ops")
    resumed = agent(tmp_path, provider, "r", "--guarded")
    assert resumed.returncode == 0, resumed
    assert "emailed ada" in resumed.last_line
    assert provider.effects("r") == [email]


# -- in this process ----------------------------------------------------------------------


def scripted_agent(tmp_path: Path, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    """An agent in this process with the test agent's scripted model and a tool whose
    emails are counted in a list."""
    from strands import Agent, tool

    from .integration_agents.strands_agent import ScriptedModel

    sent: list[dict[str, Any]] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        from oncelog.integrations import current_idempotency_key

        sent.append({"to": to, "key": current_idempotency_key()})
        return f"sent fx_{len(sent)}"

    model = ScriptedModel(str(tmp_path / "model-calls"))
    built = Agent(model=model, tools=[send_email], agent_id="billing", callback_handler=None,
                  **options)  # fmt: skip
    return built, sent


def test_a_confirmation_is_bound_to_the_arguments_it_was_given_for(tmp_path: Path) -> None:
    """The guard's interrupt names the approval request and the hash of its arguments:
    its answer approves that call. The same answer replayed onto a call with other
    arguments (the model asked again, with another body) approves nothing: the tool does
    not run, a new request is asked."""
    require_framework("strands", "strands")
    from oncelog.integrations import Policy
    from oncelog.integrations import strands as oncelog_strands

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": Policy("create", approval=True)})
        asked = guard.invoke(built, "email ada", session="s")
        assert asked.stop_reason == "interrupt"
        [interrupt] = asked.interrupts
        assert interrupt.name == oncelog_strands.APPROVAL
        assert interrupt.reason["arguments"] == {"to": "ada@example.com", "body": "your receipt"}
        assert sent == []
        assert ledger.get_run("billing/s/turn-1").status is oncelog.RunStatus.WAITING
        # The request as Strands keeps it, edited onto other arguments: refused.
        run_id, step, request, _ = json.loads(interrupt.id)[1:]
        other = json.dumps(["oncelog", run_id, step, request, "0" * 64])
        forged = type(interrupt)(id=other, name=interrupt.name, reason=interrupt.reason)
        built._interrupt_state.interrupts = {other: forged}
        answer: list[Any] = [{"interruptResponse": {"interruptId": other, "response": "y"}}]
        with pytest.raises(oncelog.OnceLogError):
            guard.invoke(built, answer, session="s")
        assert sent == []
        [pending] = ledger.approvals()
        assert (pending.id, pending.status.value) == (request, "pending")


def test_an_answered_confirmation_runs_once_and_a_rerun_asks_nobody(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from oncelog.integrations import Policy
    from oncelog.integrations import strands as oncelog_strands

    kinds: dict[str, Any] = {"send_email": Policy("create", approval=True)}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds=kinds)
        asked = guard.invoke(built, "email ada", session="s")
        said = {"approve": True, "by": "alice", "note": "ok"}
        answer: list[Any] = [
            {"interruptResponse": {"interruptId": i.id, "response": said}} for i in asked.interrupts
        ]
        done = guard.invoke(built, answer, session="s")
        assert done.stop_reason == "end_turn", done
        assert [e["to"] for e in sent] == ["ada@example.com"]
        # The invocation run again in a new process (a new agent, the same session).
        again, sent_again = scripted_agent(tmp_path)
        guard_again = oncelog_strands.Guard(ledger, kinds=kinds)
        replayed = guard_again.invoke(again, "email ada", session="s")
        assert replayed.stop_reason == "end_turn"
        assert sent_again == []
        steps = [s.step_id for s in ledger.steps("billing/s/turn-1")]
    assert steps == ["model#1", "send_email#1", "model#2"]


def test_a_denied_confirmation_is_told_to_the_model(tmp_path: Path) -> None:
    """A denial is what a Strands hook's ``cancel_tool`` is: an error result the model
    reads. This model asks for the email again: a new call, a new request to a person,
    nothing sent."""
    require_framework("strands", "strands")
    from oncelog.integrations import Policy
    from oncelog.integrations import strands as oncelog_strands

    kinds: dict[str, Any] = {"send_email": Policy("create", approval=True)}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds=kinds)
        asked = guard.invoke(built, "email ada", session="s")
        answer: list[Any] = [{"interruptResponse": {"interruptId": i.id, "response": "no"}}
                  for i in asked.interrupts]  # fmt: skip
        told = guard.invoke(built, answer, session="s")
        assert "denied 'send_email#1' with these arguments" in json.dumps(built.messages)
        [again] = told.interrupts
        assert again.reason["step_id"] == "send_email#2"
        assert [a.status.value for a in ledger.approvals(None)] == ["pending", "denied"]
    assert sent == []


def test_a_tool_nobody_guards_is_refused_before_the_model(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from oncelog.integrations import strands as oncelog_strands

    built, sent = scripted_agent(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={})
        with pytest.raises(oncelog.UnguardedTool, match="kinds=\\{'send_email': KIND\\}"):
            guard.invoke(built, "email ada", session="s")
        assert ledger.runs() == []
    assert sent == []
    assert not (tmp_path / "model-calls").exists()


@pytest.mark.parametrize("name", ["", "a/b", "two words", "x" * 129])
def test_a_session_that_cannot_name_runs_is_refused(tmp_path: Path, name: str) -> None:
    require_framework("strands", "strands")
    from oncelog.integrations import strands as oncelog_strands

    built, sent = scripted_agent(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        with pytest.raises(oncelog.ConfigurationError, match="name"):
            guard.invoke(built, "email ada", session=name)
        assert ledger.runs() == []
    assert sent == []


def test_turns_are_runs_and_a_guarded_model_outside_the_guard_is_refused(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from oncelog.integrations import strands as oncelog_strands

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        guard.invoke(built, "email ada", session="s")
        guard.invoke(built, "email ada again", session="s")
        assert [r.run_id for r in ledger.runs()] == ["billing/s/turn-2", "billing/s/turn-1"]
        # The second turn's model had the receipt in the conversation: it only answered.
        assert [s.step_id for s in ledger.steps("billing/s/turn-2")] == ["model#1"]
        with pytest.raises(oncelog.NoActiveRun):
            built("and once more")
    assert len(sent) == 1


def test_the_agents_own_confirmation_hook_answers_once_per_turn(tmp_path: Path) -> None:
    """Strands' own human-in-the-loop under the guard: the hook's interrupt is answered,
    the turn replays from its prompt in its run (recorded model answer, same tool use id,
    so the answer lands on the call it was given for) and the email goes out once."""
    require_framework("strands", "strands")
    from oncelog.integrations import strands as oncelog_strands

    from .integration_agents.strands_agent import Confirm

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path, hooks=[Confirm()])
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        asked = guard.invoke(built, "email ada", session="s")
        assert asked.stop_reason == "interrupt"
        assert ledger.get_run("billing/s/turn-1").status is oncelog.RunStatus.WAITING
        [interrupt] = asked.interrupts
        answer: list[Any] = [{"interruptResponse": {"interruptId": interrupt.id, "response": "y"}}]
        done = guard.invoke(built, answer, session="s")
        assert done.stop_reason == "end_turn", done
        steps = [s.step_id for s in ledger.steps("billing/s/turn-1")]
    assert steps == ["model#1", "send_email#1", "model#2"]
    assert len(sent) == 1
    assert model_calls(tmp_path, ".") == 2  # the replayed model#1 spent nothing


def test_guard_invoke_async_runs_the_turn(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    import asyncio

    from oncelog.integrations import strands as oncelog_strands

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        built, sent = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        done = asyncio.run(guard.invoke_async(built, "email ada", session="s"))
        assert done.stop_reason == "end_turn"
        assert ledger.get_run("billing/s/turn-1").status is oncelog.RunStatus.COMPLETED
    assert len(sent) == 1


def test_an_agent_with_a_session_manager_is_refused(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from strands.session.file_session_manager import FileSessionManager

    from oncelog.integrations import strands as oncelog_strands

    manager = FileSessionManager(session_id="s", storage_dir=str(tmp_path / "sessions"))
    built, sent = scripted_agent(tmp_path, session_manager=manager)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        with pytest.raises(oncelog.ConfigurationError, match="session manager"):
            guard.invoke(built, "email ada", session="s")
        assert ledger.runs() == []
    assert sent == []


def test_other_messages_at_a_recorded_model_call_stop_the_turn(tmp_path: Path) -> None:
    """The same turn asked with another prompt: the recorded answer is not returned for
    it; the run stops (``ArgumentDrift``) and nothing is sent."""
    require_framework("strands", "strands")
    from oncelog.integrations import strands as oncelog_strands

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        first, sent = scripted_agent(tmp_path)
        oncelog_strands.Guard(ledger, kinds={"send_email": "create"}).invoke(
            first, "email ada", session="s"
        )
        other, sent_again = scripted_agent(tmp_path)
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        with pytest.raises(oncelog.ArgumentDrift, match="model#1"):
            guard.invoke(other, "email bob", session="s")
    assert len(sent) == 1
    assert sent_again == []


def test_arguments_the_tool_refuses_are_told_to_the_model_and_record_nothing(
    tmp_path: Path,
) -> None:
    require_framework("strands", "strands")
    from strands import Agent, tool

    from oncelog.integrations import strands as oncelog_strands

    from .integration_agents.strands_agent import ScriptedModel

    calls: list[int] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        calls.append(1)
        return "sent fx_1"

    class Sloppy(ScriptedModel):
        """Asks for the email without its body, then answers."""

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if "toolResult" in json.dumps(messages, default=str):
                told: Any = [{"role": "user", "content": [{"text": "sent fx_"}]}]
                async for event in super().stream(told, *args, **kwargs):
                    yield event
                return
            async for event in super().stream(messages, *args, **kwargs):
                if (
                    "contentBlockDelta" in event
                    and "toolUse" in event["contentBlockDelta"]["delta"]
                ):
                    event = {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"to": "x"}'}}}}
                yield event

    built = Agent(model=Sloppy(str(tmp_path / "calls")), tools=[send_email], agent_id="billing",
                  callback_handler=None)  # fmt: skip
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        done = guard.invoke(built, "email", session="s")
        assert done.stop_reason == "end_turn"
        steps = [s.step_id for s in ledger.steps("billing/s/turn-1")]
    assert steps == ["model#1", "model#2"]
    assert calls == []
    assert "body" in json.dumps(built.messages[2], default=str)  # the model was told


def test_a_tool_registered_after_the_guard_is_refused_before_the_model(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from strands import tool

    from oncelog.integrations import strands as oncelog_strands

    @tool
    def delete_account(account: str) -> str:
        """Delete an account."""
        return "deleted"

    built, sent = scripted_agent(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        guard.guard(built)
        built.tool_registry.register_tool(delete_account)  # after the guard: seen at invoke
        with pytest.raises(oncelog.UnguardedTool, match="delete_account"):
            guard.invoke(built, "email ada", session="s")
    assert not (tmp_path / "model-calls").exists()
    assert sent == []


def test_a_stopped_turn_given_again_to_the_same_agent_replays_in_its_run(tmp_path: Path) -> None:
    """The tool raised after acting (no probe): the turn stops, the conversation is set
    back to before it. A person records the email; the same prompt to the same agent
    object goes on in the same run, and nothing is sent again."""
    require_framework("strands", "strands")
    from strands import Agent, tool

    from oncelog.integrations import strands as oncelog_strands

    from .integration_agents.strands_agent import ScriptedModel

    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        sent.append(to)
        raise ConnectionError("reset after the request was sent")

    model = ScriptedModel(str(tmp_path / "model-calls"))
    built = Agent(model=model, tools=[send_email], agent_id="billing", callback_handler=None)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        with pytest.raises(oncelog.AmbiguousOutcome):
            guard.invoke(built, "email ada", session="s")
        assert built.messages == []
        ledger.resolve("billing/s/turn-1", "send_email#1", "done", result="sent fx_1", by="ops")
        done = guard.invoke(built, "email ada", session="s")
        assert done.stop_reason == "end_turn"
        assert [r.run_id for r in ledger.runs()] == ["billing/s/turn-1"]
    assert sent == ["ada@example.com"]


def test_an_interrupt_inside_a_guarded_tool_leaves_its_effect_in_doubt(tmp_path: Path) -> None:
    require_framework("strands", "strands")
    from strands import Agent

    from oncelog.integrations import strands as oncelog_strands

    from .integration_agents.strands_agent import ScriptedModel, asking_tool

    model = ScriptedModel(str(tmp_path / "model-calls"))
    built = Agent(model=model, tools=[asking_tool()], agent_id="billing", callback_handler=None)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create"})
        with pytest.raises(oncelog.AmbiguousOutcome, match="ask before the effect"):
            guard.invoke(built, "email ada", session="s")
        [_, email] = ledger.steps("billing/s/turn-1")
    assert email.state is StepState.UNKNOWN


def test_a_repeatable_tool_runs_unrecorded_on_every_replay(tmp_path: Path) -> None:
    """A tool named in ``repeatable=`` runs as Strands runs it, again on every replay,
    and takes no position in the run."""
    require_framework("strands", "strands")
    from strands import Agent, tool

    from oncelog.integrations import strands as oncelog_strands

    from .integration_agents.strands_agent import ScriptedModel

    looked: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Harmless here: it only looks, and answers the same each time."""
        looked.append(to)
        return "sent fx_0"

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_strands.Guard(ledger, kinds={}, repeatable=["send_email"])
        for _ in range(2):  # the second time, a new agent replays the turn
            model = ScriptedModel(str(tmp_path / "model-calls"))
            built = Agent(model=model, tools=[send_email], agent_id="billing",
                          callback_handler=None)  # fmt: skip
            guard.invoke(built, "email ada", session="s")
        steps = [s.step_id for s in ledger.steps("billing/s/turn-1")]
    assert steps == ["model#1", "model#2"]
    assert looked == ["ada@example.com", "ada@example.com"]
