"""PydanticAI, for real: an agent with a guarded FunctionToolset and a FunctionModel, in a
process SIGKILLed right after a tool's outcome was recorded and restarted. The restarted
agent runs again from the top in the same run: recorded model responses and tool results
come back without calls, and each effect happened once. The same holds for tools
registered the framework's usual way (``@agent.tool_plain``, ``@agent.tool``) under the
``Guard`` capability; and a recorded agent with a tool nobody guards is refused before its
model is asked anything."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent


def agent_args(tmp_path: Path, style: str) -> list[str]:
    return [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(tmp_path / "effects.jsonl"),
        "--model-calls", str(tmp_path / "model-calls"), "--run", "ticket-4", "--style", style,
    ]  # fmt: skip


@pytest.mark.parametrize("style", ["toolset", "decorators"])
def test_agent_killed_after_an_effect_resumes_and_finishes(tmp_path: Path, style: str) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    log = EffectLog(tmp_path / "effects.jsonl")
    args = agent_args(tmp_path, style)

    killed = run_agent("pydantic_ai_agent", *args, crash_at="after_outcome_commit@send_email#1")
    assert killed.killed, killed
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1}

    resumed = run_agent("pydantic_ai_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith('"done: ')
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}
    assert len((tmp_path / "model-calls").read_text().splitlines()) == 2
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        steps = ledger.steps("ticket-4")
        assert [(s.step_id, s.state, s.attempts) for s in steps] == [
            ("model#1", StepState.DONE, 1),
            ("send_email#1", StepState.DONE, 1),
            ("charge#1", StepState.DONE, 1),
            ("model#2", StepState.DONE, 1),
        ]


def test_a_recorded_agent_with_an_unguarded_tool_is_refused_before_the_model(
    tmp_path: Path,
) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    refused = run_agent("pydantic_ai_agent", *agent_args(tmp_path, "unguarded"))
    assert refused.returncode == 2, refused  # a usage error: the agent must change
    assert "UnguardedTool: PydanticAI tool 'send_email' is not guarded" in refused.stderr
    assert "capabilities=[oncelog_pai.Guard(kinds={'send_email': KIND})]" in refused.stderr
    assert EffectLog(tmp_path / "effects.jsonl").entries() == []
    assert not (tmp_path / "model-calls").exists()
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        assert ledger.get_run("ticket-4").status is oncelog.RunStatus.RUNNING  # not failed


def test_a_repeatable_tool_runs_unrecorded_next_to_guarded_ones(tmp_path: Path) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from oncelog.integrations import pydantic_ai as oncelog_pai

    added: list[int] = []
    guard = oncelog_pai.Guard(kinds={"send_email": "create"}, repeatable=["add"])
    agent = Agent(TestModel(), capabilities=[guard])

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append(a + b)
        return a + b

    @agent.tool_plain
    def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    async def work(ledger: oncelog.Ledger) -> None:
        async with ledger.run("r"):
            await agent.run("go")

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        for _ in range(2):  # the second time replays the run
            asyncio.run(work(ledger))
        steps = [s.step_id for s in ledger.steps("r")]
    assert steps == ["model#1", "send_email#1", "model#2"]
    assert len(added) == 2  # repeatable: ran again on replay, as declared


def test_a_refused_run_sync_leaves_no_failed_run_behind(tmp_path: Path) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from oncelog.integrations import pydantic_ai as oncelog_pai

    agent = Agent(TestModel(), capabilities=[oncelog_pai.Guard(kinds={})])
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        refused = pytest.raises(oncelog.UsageError, match="run the agent inside `async with")
        with refused as raised, ledger.run("r"):
            agent.run_sync("go")
        # run_sync leaves the event loop it made set as current: close it, as a script ends.
        asyncio.get_event_loop_policy().get_event_loop().close()
        asyncio.set_event_loop(None)
        run = ledger.get_run("r")
        assert run.status is oncelog.RunStatus.RUNNING, run
        assert (run.next_seq, run.reason) == (0, f"refused: UsageError: {raised.value}")

        async def work() -> None:
            async with ledger.run("r"):
                await agent.run("go")

        asyncio.run(work())  # the code fixed, the same run goes on
        assert ledger.get_run("r").status is oncelog.RunStatus.COMPLETED


def test_a_tool_guarded_twice_is_one_effect(tmp_path: Path) -> None:
    require_framework("pydantic_ai", "pydantic-ai")
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.toolsets import FunctionToolset

    from oncelog.integrations import pydantic_ai as oncelog_pai

    def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    kinds: dict[str, Any] = {"send_email": "create"}
    inner = oncelog_pai.GuardedToolset(FunctionToolset([send_email]), kinds=kinds)
    agent = Agent(TestModel(), toolsets=[inner], capabilities=[oncelog_pai.Guard(kinds=kinds)])

    async def work(ledger: oncelog.Ledger) -> None:
        async with ledger.run("r"):
            await agent.run("go")

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        asyncio.run(work(ledger))
        steps = [(s.step_id, s.type.value) for s in ledger.steps("r")]
    assert steps == [("model#1", "llm"), ("send_email#1", "effect"), ("model#2", "llm")]


@pytest.mark.parametrize("once_per", [True, False], ids=["once_per", "control"])
def test_a_request_sent_again_in_a_new_run_after_a_kill_emails_once(
    tmp_path: Path, once_per: bool
) -> None:
    """The agent is SIGKILLed after the provider sent the email, before the ledger recorded
    it; its restart, with no probe, halts the run in doubt. The user sends the request
    again, which starts a new run where the model asks again. With the tools' subjects
    declared, the new run sends nothing (``SubjectInDoubt``, exit 3, naming the first run's
    step) until a person records what the provider did; then it gets that email's result.
    Without them (the control), it sends a second email."""
    require_framework("pydantic_ai", "pydantic-ai")
    log = EffectLog(tmp_path / "effects.jsonl")
    options = ["--no-probe", *(["--once-per"] if once_per else [])]
    files = [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(log.path),
        "--model-calls", str(tmp_path / "model-calls"), *options,
    ]  # fmt: skip
    first, again = [*files, "--run", "ticket-1"], [*files, "--run", "ticket-2"]

    killed = run_agent("pydantic_ai_agent", *first, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    halted = run_agent("pydantic_ai_agent", *first)
    assert halted.returncode == 3, halted
    assert "AmbiguousOutcome" in halted.stderr

    resent = run_agent("pydantic_ai_agent", *again)
    if not once_per:
        assert resent.returncode == 0, resent
        assert Counter(e["tool"] for e in log.entries()) == {"send_email": 2, "charge": 1}
        return
    assert resent.returncode == 3, resent
    assert "SubjectInDoubt" in resent.stderr
    assert "held_by_run: ticket-1\n  held_by_step: send_email#1" in resent.stderr
    [email] = log.entries()

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        ledger.resolve("ticket-1", "send_email#1", "done", result=email["receipt"], by="ops")
    resent = run_agent("pydantic_ai_agent", *again)
    assert resent.returncode == 0, resent
    assert email["receipt"]["id"] in resent.last_line  # the first email's result
    assert Counter(e["tool"] for e in log.entries()) == {"send_email": 1, "charge": 1}
