"""The OpenAI Agents SDK, for real: an agent with two guarded function tools and the SDK's
own ScriptedModel, in a process SIGKILLed right after a tool returned (before its outcome
was recorded) and restarted. The restarted agent runs again from the top in the same run:
the recorded model response comes back without a model call, the effect in doubt is found
by its probe, and each effect happened once. The same holds for plain ``@function_tool``s
in ``Agent(tools=...)`` guarded with ``guard_agent``; and a recorded agent with a tool
nobody guards is refused before its model is asked anything."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent


def agent_args(tmp_path: Path, style: str) -> list[str]:
    return [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(tmp_path / "effects.jsonl"),
        "--model-calls", str(tmp_path / "model-calls"), "--run", "ticket-3", "--style", style,
    ]  # fmt: skip


@pytest.mark.parametrize("style", ["guard_tools", "guard_agent"])
def test_agent_killed_after_a_tool_call_resumes_and_finishes(tmp_path: Path, style: str) -> None:
    require_framework("agents", "openai-agents")
    log = EffectLog(tmp_path / "effects.jsonl")
    args = agent_args(tmp_path, style)

    killed = run_agent("openai_agents_agent", *args, crash_at="after_call@charge#1")
    assert killed.killed, killed
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}

    resumed = run_agent("openai_agents_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith('"done: ')
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}
    assert len((tmp_path / "model-calls").read_text().splitlines()) == 2
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        steps = ledger.steps("ticket-3")
        assert [(s.step_id, s.state) for s in steps] == [
            ("model#1", StepState.DONE),
            ("send_email#1", StepState.DONE),
            ("charge#1", StepState.DONE),
            ("model#2", StepState.DONE),
        ]
        assert steps[0].tokens_in == 40


def test_a_recorded_agent_with_an_unguarded_tool_is_refused_before_the_model(
    tmp_path: Path,
) -> None:
    require_framework("agents", "openai-agents")
    for _ in range(2):  # a second start is refused the same way: nothing ran to replay
        refused = run_agent("openai_agents_agent", *agent_args(tmp_path, "unguarded"))
        assert refused.returncode == 2, refused  # a usage error: the agent must change
        assert "UnguardedTool: Agents SDK tool 'send_email' is not guarded" in refused.stderr
        assert "guard_agent(agent, kinds={'send_email': KIND})" in refused.stderr
    assert EffectLog(tmp_path / "effects.jsonl").entries() == []
    assert not (tmp_path / "model-calls").exists()


def test_guard_tools_refuses_a_tool_without_a_kind_and_keeps_repeatable_ones() -> None:
    require_framework("agents", "openai-agents")
    from agents import WebSearchTool, function_tool

    from oncelog.integrations import openai_agents as oncelog_agents

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    with pytest.raises(oncelog.UnguardedTool, match="'add' is not guarded") as refused:
        oncelog_agents.guard_tools([add], kinds={"send_email": "create"})
    assert refused.value.tool == "add"
    search = WebSearchTool()
    kept = oncelog_agents.guard_tools([add, search], kinds={}, repeatable=["add"])
    assert kept[1] is search  # hosted: runs inside the recorded model call
    assert kept[0].name == "add"
    assert oncelog_agents.guard_tools(kept, kinds={}) == kept  # declared: kept as it is
    with pytest.raises(oncelog.ConfigurationError, match="both kinds= and repeatable="):
        oncelog_agents.guard_tools([add], kinds={"add": "read"}, repeatable=["add"])


def test_a_recorded_model_lets_tools_it_names_repeatable_through(tmp_path: Path) -> None:
    """Tools outside the agent's own list (an MCP server's, behind `oncelog mcp-proxy`)
    are declared on the model."""
    require_framework("agents", "openai-agents")
    import asyncio

    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from oncelog.integrations import openai_agents as oncelog_agents

    set_tracing_disabled(True)  # offline: no traces sent anywhere
    added: list[int] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append(a + b)
        return a + b

    script = [
        ModelStep(output=[function_call("add", {"a": 1, "b": 2}, call_id="c1")]),
        ModelStep(output=[assistant_message("3")]),
    ]
    model = oncelog_agents.RecordedModel(ScriptedModel(script), repeatable=["add"])
    agent = Agent(name="calc", model=model, tools=[add])

    async def work(ledger: oncelog.Ledger) -> str:
        async with ledger.run("r"):
            result = await oncelog_agents.run_agent(agent, "1 + 2")
        return str(result.final_output)

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        assert asyncio.run(work(ledger)) == "3"
        assert [s.step_id for s in ledger.steps("r")] == ["model#1", "model#2"]
    assert added == [3]
