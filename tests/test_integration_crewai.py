"""CrewAI, for real: a crew whose tool emails through the provider process, with a scripted
model, in processes of its own; the emails are counted at the provider.

Plain CrewAI sends a second email in each of the three ways crewAIInc/crewAI#5802 reports
(a tool raising after its effect is called again; a model error after the tool re-runs the
task, ``max_retry_limit``; a process SIGKILLed mid-tool and restarted), and in a guardrail's
re-run; each test shows the duplicate first, then the guarded crew sending once. Sequential
and hierarchical crews and a Flow; CrewAI's native function calling and its ReAct text.
A stop (an email in doubt) sticks although CrewAI catches every tool exception: the crew
aborts and the caller exits 3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.processes import require_framework, run_agent
from .support.agents import AgentExit
from .support.provider_process import Provider

AGENT = "crewai_agent"
# CrewAI warns, in this process, of its own deprecated fields (which the crews here do not
# set) and of how it imports its modules lazily.
pytestmark = [
    pytest.mark.filterwarnings("ignore:function_calling_llm is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:deprecated$:DeprecationWarning"),  # a pydantic field's
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
]


def crew(tmp_path: Path, provider: Provider, request: str, *options: str, **kw: Any) -> AgentExit:
    """One process of the crew for ``request`` (its own ledger, flags and model calls)."""
    folder = tmp_path / request
    folder.mkdir(exist_ok=True)
    args = [
        "--ledger", str(folder / "ledger.db"), "--provider", provider.url,
        "--model-calls", str(folder / "model-calls"), "--flags", str(folder / "flags"),
        "--request", request, *options,
    ]  # fmt: skip
    return run_agent(AGENT, *args, **kw)


def until_done(tmp_path: Path, provider: Provider, request: str, *options: str) -> AgentExit:
    """The crew, and once more if the provider killed it: as a supervisor restarts it."""
    first = crew(tmp_path, provider, request, *options)
    if not first.killed:
        return first
    return crew(tmp_path, provider, request, *options)


@pytest.mark.parametrize(
    ("fault", "path"),
    [("tool-raises", "native"), ("tool-raises", "react"), ("model-error", "native"),
     ("kill", "native")],
)  # fmt: skip
def test_plain_crewai_sends_twice_and_the_guarded_crew_once(
    tmp_path: Path, provider: Provider, fault: str, path: str
) -> None:
    require_framework("crewai", "crewai")
    options = ["--fault", fault, "--path", path]

    plain = until_done(tmp_path, provider, "plain", *options)
    assert plain.returncode == 0, plain
    assert provider.total("plain") == 2  # the duplicate this integration exists for

    guarded = until_done(tmp_path, provider, "guarded", *options, "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert "emailed ada" in guarded.last_line
    assert provider.total("guarded") == 1
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        steps = ledger.steps("billing/guarded/task-1")
    assert [(s.step_id, s.state) for s in steps] == [
        ("model#1", StepState.DONE), ("send_email#1", StepState.DONE),
        ("model#2", StepState.DONE),
    ]  # fmt: skip


def test_a_hierarchical_crew_killed_mid_tool_sends_once(tmp_path: Path, provider: Provider) -> None:
    """The manager delegates to the clerk, whose email is a step of the task's run."""
    require_framework("crewai", "crewai")
    options = ["--fault", "kill", "--process", "hierarchical", "--path", "react"]

    plain = until_done(tmp_path, provider, "plain", *options)
    assert plain.returncode == 0, plain
    assert provider.total("plain") == 2

    guarded = until_done(tmp_path, provider, "guarded", *options, "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert provider.total("guarded") == 1
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        steps = [s.step_id for s in ledger.steps("billing/guarded/task-1")]
    assert steps == ["model#1", "model#2", "send_email#1", "model#3", "model#4"]


def test_a_flow_whose_crew_is_killed_mid_tool_sends_once(
    tmp_path: Path, provider: Provider
) -> None:
    require_framework("crewai", "crewai")
    options = ["--fault", "kill", "--process", "flow"]
    guarded = until_done(tmp_path, provider, "guarded", *options, "--guarded", "--probe")
    assert guarded.returncode == 0, guarded
    assert provider.total("guarded") == 1


def test_a_guardrails_rerun_does_not_send_again(tmp_path: Path, provider: Provider) -> None:
    """The guardrail refuses the first answer; CrewAI re-runs the task with the refusal as
    input, and the model asks for the email again. Guarded, the re-run's steps follow the
    first attempt's in the task's run, and the same call is answered with its receipt."""
    require_framework("crewai", "crewai")
    plain = crew(tmp_path, provider, "plain", "--guardrail")
    assert plain.returncode == 0, plain
    assert provider.total("plain") == 2

    for _ in range(2):  # the second process replays the whole task, re-run included
        guarded = crew(tmp_path, provider, "guarded", "--guardrail", "--guarded")
        assert guarded.returncode == 0, guarded
    assert provider.total("guarded") == 1
    with oncelog.open(str(tmp_path / "guarded" / "ledger.db")) as ledger:
        steps = [s.step_id for s in ledger.steps("billing/guarded/task-1")]
    assert steps == ["model#1", "send_email#1", "model#2", "model#3", "model#4"]
    assert len((tmp_path / "guarded" / "model-calls").read_text().splitlines()) == 4


@pytest.mark.parametrize("path", ["native", "react"])
def test_a_stop_sticks_through_crewais_exception_handling(
    tmp_path: Path, provider: Provider, path: str
) -> None:
    """No probe: the email whose tool raised after sending is in doubt. CrewAI catches the
    stop and shows it to the model, as it does every tool exception; the next model call
    raises it again, which aborts the crew: the caller exits 3 naming the step."""
    require_framework("crewai", "crewai")
    stopped = crew(tmp_path, provider, "r", "--fault", "tool-raises", "--path", path, "--guarded")
    assert stopped.returncode == 3, stopped
    assert "AmbiguousOutcome: 'model#2' was not started" in stopped.stderr
    assert "oncelog resolve billing/r/task-1 'send_email#1'" in stopped.stderr
    assert provider.total("r") == 1
    with oncelog.open(str(tmp_path / "r" / "ledger.db")) as ledger:
        assert ledger.get_run("billing/r/task-1").status is oncelog.RunStatus.HALTED
        [email] = provider.effects("r")  # a person looks the key up at the provider
        receipt = f"sent fx_{email.response['effect_id']}"
        ledger.resolve("billing/r/task-1", "send_email#1", "done", result=receipt, by="ops")
    resumed = crew(tmp_path, provider, "r", "--path", path, "--guarded")
    assert resumed.returncode == 0, resumed
    assert provider.effects("r") == [email]


def scripted_crew(tmp_path: Path, description: str = "Email ada her receipt.") -> Any:
    """A crew in this process, with the test crew's scripted model and a tool whose emails
    are counted in a list."""
    from crewai import Agent, Crew, Task
    from crewai.tools import tool

    from .integration_agents.crewai_agent import ScriptedLLM

    sent: list[str] = []

    @tool("send_email")
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        sent.append(to)
        return f"sent fx_{len(sent)}"

    llm = ScriptedLLM(model="scripted", calls_file=str(tmp_path / "model-calls"))
    clerk = Agent(role="Clerk", goal="Email", backstory="Careful.", llm=llm, tools=[send_email])
    task = Task(description=description, expected_output="What was sent.", agent=clerk)
    return Crew(agents=[clerk], tasks=[task]), sent


def test_a_tool_nobody_guards_is_refused_before_the_model(tmp_path: Path) -> None:
    require_framework("crewai", "crewai")
    from oncelog.integrations import crewai as oncelog_crewai

    crew_, sent = scripted_crew(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        guard = oncelog_crewai.Guard(ledger, crew="billing", kinds={})
        with pytest.raises(oncelog.UnguardedTool, match="kinds=\\{'send_email': KIND\\}"):
            guard.kickoff(crew_, request="r")
        assert ledger.runs() == []
    assert sent == []
    assert not (tmp_path / "model-calls").exists()


@pytest.mark.parametrize("name", ["", "a/b", "billing crew", "x" * 65])
def test_a_crew_or_request_name_that_cannot_name_runs_is_refused(tmp_path: Path, name: str) -> None:
    require_framework("crewai", "crewai")
    from oncelog.integrations import crewai as oncelog_crewai

    crew_, _ = scripted_crew(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        with pytest.raises(oncelog.ConfigurationError, match="names the crew's runs"):
            oncelog_crewai.Guard(ledger, crew=name, kinds={"send_email": "create"})
        guard = oncelog_crewai.Guard(ledger, crew="billing", kinds={"send_email": "create"})
        with pytest.raises(oncelog.ConfigurationError, match="names the crew's runs"):
            guard.kickoff(crew_, request=name)
        assert ledger.runs() == []


def test_a_guarded_crew_kicked_off_without_the_guard_is_refused(tmp_path: Path) -> None:
    require_framework("crewai", "crewai")
    from oncelog.integrations import crewai as oncelog_crewai

    crew_, sent = scripted_crew(tmp_path)
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        oncelog_crewai.Guard(ledger, crew="billing", kinds={"send_email": "create"}).guard(crew_)
        with pytest.raises(oncelog.UsageError, match=r"outside Guard\.kickoff"):
            crew_.kickoff()
    assert sent == []


def test_other_messages_at_a_recorded_model_call_stop_the_run(tmp_path: Path) -> None:
    """The same request asked again with another task: the recorded answer is not
    returned for it; the run stops (``ReplayDivergence``), unless relaxed."""
    require_framework("crewai", "crewai")
    from oncelog.integrations import crewai as oncelog_crewai

    kinds: dict[str, Any] = {"send_email": "create"}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        first, sent = scripted_crew(tmp_path)
        oncelog_crewai.Guard(ledger, crew="billing", kinds=kinds).kickoff(first, request="r")
        assert sent == ["ada@example.com"]
        other, sent_again = scripted_crew(tmp_path, "Email bob his invoice.")
        guard = oncelog_crewai.Guard(ledger, crew="billing", kinds=kinds)
        with pytest.raises(oncelog.ReplayDivergence, match="'model#1' was recorded for other"):
            guard.kickoff(other, request="r")
        assert sent_again == []


def test_a_model_running_its_tools_itself_raises_a_stop_instead_of_dropping_it(
    tmp_path: Path,
) -> None:
    """``BaseLLM._handle_tool_execution`` logs a tool's error and returns None. Asked to
    run the tools itself (``available_functions``), ``RecordedLLM`` runs the model's tool
    call after the recorded call, through the guarded tool: the email in doubt stops the
    run, and the stop reaches the caller."""
    require_framework("crewai", "crewai")
    from crewai.tools import tool

    from oncelog.integrations import crewai as oncelog_crewai

    from .integration_agents.crewai_agent import ScriptedLLM

    sent: list[str] = []

    @tool("send_email")
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        sent.append(to)
        raise ConnectionError("reset after the request was sent")

    guarded = oncelog_crewai.guard_tool(send_email, "create")
    llm = oncelog_crewai.RecordedLLM.around(
        ScriptedLLM(model="scripted", calls_file=str(tmp_path / "model-calls"))
    )
    tools = [{"type": "function", "function": {"name": "send_email"}}]
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        with pytest.raises(oncelog.AmbiguousOutcome), ledger.run("r"):
            llm.call("email ada", tools, available_functions={"send_email": guarded.run})
        steps = [(s.step_id, s.state) for s in ledger.steps("r")]
    assert steps == [("model#1", StepState.DONE), ("send_email#1", StepState.UNKNOWN)]
    assert sent == ["ada@example.com"]
