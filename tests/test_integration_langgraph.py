"""LangGraph, for real: a graph with a model node and a ToolNode guarded by oncelog, in a
process SIGKILLed right after a tool's effect and restarted.

With LangGraph's SQLite checkpointer, the thread resumes at the node that was running: the
case the checkpointer leaves open (a node killed after its side effect, before its
checkpoint) replays the recorded effect. Without one, the graph runs again from the start
and the recorded model answer comes back without a model call. Either way each effect
happened once, by the effect log's own records."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import oncelog
from oncelog import StepState

from .integration_agents.effect_log import EffectLog
from .integration_agents.processes import require_framework, run_agent

DONE = '"done: '


def agent_args(tmp_path: Path, thread: str, *extra: str) -> list[str]:
    return [
        "--ledger", str(tmp_path / "ledger.db"), "--effects", str(tmp_path / "effects.jsonl"),
        "--model-calls", str(tmp_path / "model-calls"), "--thread", thread, *extra,
    ]  # fmt: skip


def model_calls(tmp_path: Path) -> int:
    return len((tmp_path / "model-calls").read_text().splitlines())


def effects(tmp_path: Path) -> Counter[str]:
    return Counter(e["tool"] for e in EffectLog(tmp_path / "effects.jsonl").entries())


def operator(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A person's ``oncelog`` command on the test's ledger."""
    env = {**os.environ, "ONCELOG_URL": str(tmp_path / "ledger.db")}
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *argv],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def run_of(ledger: oncelog.Ledger, prefix: str) -> str:
    """The one run whose id starts with ``prefix`` (``billing/ticket-1/tools@2/``): the
    task id LangGraph gives the node execution follows."""
    [run] = [r.run_id for r in ledger.runs(limit=1000) if r.run_id.startswith(prefix)]
    return run


def test_checkpointed_thread_resumes_a_node_killed_after_its_effect(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-1", "--checkpoints", str(tmp_path / "checkpoints.db"))

    killed = run_agent("langgraph_agent", *args, crash_at="after_outcome_commit@charge#1")
    assert killed.killed, killed
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}

    resumed = run_agent("langgraph_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith(DONE)
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}
    assert model_calls(tmp_path) == 2  # the checkpointed first answer was not asked again
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        tools = ledger.steps(run_of(ledger, "billing/ticket-1/tools@2/"))
        assert [(s.step_id, s.state, s.attempts) for s in tools] == [
            ("send_email#1", StepState.DONE, 1),
            ("charge#1", StepState.DONE, 1),
        ]
        keys = {e["key"] for e in EffectLog(tmp_path / "effects.jsonl").entries()}
        assert keys == {s.key for s in tools}


def test_an_async_checkpointed_thread_resumes_a_tool_node_killed_between_its_effects(
    tmp_path: Path,
) -> None:
    """The async graph (``ainvoke``, LangGraph's async SQLite checkpointer, the guarded
    ``ToolNode``'s coroutine) killed after the email was sent and before the charge's
    outcome was recorded: the resumed thread finds the email recorded, asks the charge's
    probe, and each effect happened once, by the effect log's own records."""
    require_framework("langgraph", "langgraph")
    args = agent_args(
        tmp_path, "ticket-9", "--async", "--checkpoints", str(tmp_path / "checkpoints.db")
    )
    killed = run_agent("langgraph_agent", *args, crash_at="after_call@charge#1")
    assert killed.killed, killed
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}

    resumed = run_agent("langgraph_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith(DONE)
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}
    assert model_calls(tmp_path) == 2  # the checkpointed first answer was not asked again
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        tools = ledger.steps(run_of(ledger, "billing/ticket-9/tools@2/"))
        assert [(s.step_id, s.state, s.attempts) for s in tools] == [
            ("send_email#1", StepState.DONE, 1),
            ("charge#1", StepState.DONE, 1),  # the probe found it: not sent again
        ]


def test_graph_without_checkpointer_restarted_after_a_kill_waits_for_its_effect(
    tmp_path: Path,
) -> None:
    """Without a checkpointer every invoke is a new conversation: a restart cannot resume
    the node killed mid-tool, and sends nothing while that node's email is in doubt. A
    person settles it with the commands ``oncelog show`` names; then the request sent
    again is answered, and with the tools' subjects it finds the first email."""
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-2", "--async", "--once-per")

    killed = run_agent("langgraph_agent", *args, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    assert effects(tmp_path)["send_email"] == 1

    again = run_agent("langgraph_agent", *args)
    assert again.returncode == 75, again  # ResourceHeld: a TryLater
    assert "thread 'ticket-2' of graph 'billing' is not settled" in again.stderr
    assert "oncelog show billing/ticket-2/tools@2/" in again.stderr
    assert effects(tmp_path)["send_email"] == 1
    assert model_calls(tmp_path) == 1  # refused before the model was asked again

    performed = {e["tool"]: e["receipt"] for e in EffectLog(tmp_path / "effects.jsonl").entries()}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        holder = run_of(ledger, "billing/ticket-2/tools@2/")
        in_doubt = [s.step_id for s in ledger.steps(holder) if s.state is StepState.IN_FLIGHT]
        assert "send_email#1" in in_doubt
        shown = "\n".join(ledger.what_next(holder))
    for step in in_doubt:  # the async ToolNode starts both calls together
        tool = step.partition("#")[0]
        assert f"oncelog resolve {holder} '{step}'" in shown
        decision = (
            ["done", "--result", json.dumps(performed[tool])]
            if tool in performed
            else (["not_done"])
        )
        settled = operator(tmp_path, "resolve", holder, step, *decision, "--by", "ops")
        assert settled.returncode == 0, settled
    said = settled.stdout.split("next: ", 1)[1]  # once settled: the one way it goes on
    assert ("on thread ticket-2" in said, "Celery" in said) == (True, False), said

    answered = run_agent("langgraph_agent", *args)
    assert answered.returncode == 0, answered
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}


def test_a_deleted_thread_starts_a_new_conversation(tmp_path: Path) -> None:
    """The issue's reset thread: after ``checkpointer.delete_thread`` a new request on the
    same thread id is answered live, not from the old conversation's records."""
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-3", "--checkpoints", str(tmp_path / "checkpoints.db"))

    first = run_agent("langgraph_agent", *args, "--message", "refund 4711")
    assert first.returncode == 0, first
    second = run_agent("langgraph_agent", *args, "--reset", "--message", "invoice 4711")
    assert second.returncode == 0, second
    assert effects(tmp_path) == {"send_email": 2, "charge": 2}
    bodies = [e["arguments"][1] for e in EffectLog(tmp_path / "effects.jsonl").entries()
              if e["tool"] == "send_email"]  # fmt: skip
    assert bodies == ["re: refund 4711", "re: invoice 4711"]
    assert model_calls(tmp_path) == 4


def test_without_a_checkpointer_turn_two_runs_live(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-4")

    assert run_agent("langgraph_agent", *args, "--message", "refund 4711").returncode == 0
    second = run_agent("langgraph_agent", *args, "--message", "invoice 4711")
    assert second.returncode == 0, second
    assert effects(tmp_path) == {"send_email": 2, "charge": 2}
    assert model_calls(tmp_path) == 4


@pytest.mark.parametrize("checkpoints", [True, False], ids=["checkpointer", "none"])
def test_two_graphs_sharing_a_thread_id_never_share_runs(tmp_path: Path, checkpoints: bool) -> None:
    """The issue's billing and support graphs, one ledger, the ticket id as thread id:
    each charges, and each graph's runs are its own."""
    require_framework("langgraph", "langgraph")
    for graph in ("support", "billing"):
        saver = ("--checkpoints", str(tmp_path / f"{graph}.db")) if checkpoints else ()
        args = agent_args(tmp_path, "ticket-4712", *saver, "--graph", graph)
        done = run_agent("langgraph_agent", *args, "--message", f"{graph} 4712")
        assert done.returncode == 0, done
    assert effects(tmp_path) == {"send_email": 2, "charge": 2}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        graphs = {r.run_id.partition("/")[0] for r in ledger.runs(limit=1000)}
        assert graphs == {"support", "billing"}


def test_a_graph_without_a_name_is_refused() -> None:
    require_framework("langgraph", "langgraph")
    from langchain_core.tools import tool

    from oncelog.integrations import langgraph as oncelog_langgraph

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        return to

    with oncelog.open(":memory:") as ledger:
        with pytest.raises(oncelog.ConfigurationError, match="name the graph with graph="):
            oncelog_langgraph.ToolNode(ledger, [send_email], kinds={"send_email": "create"})
        with pytest.raises(oncelog.ConfigurationError, match="name the graph with graph="):
            oncelog_langgraph.node(ledger, lambda state: state)
        for bad in ("", "a/b", "x\x00", 7):
            with pytest.raises(oncelog.ConfigurationError, match="graph= must be"):
                oncelog_langgraph.node(ledger, lambda state: state, graph=bad)  # type: ignore[arg-type]


def test_a_model_asked_another_question_at_a_recorded_position_stops_the_run(
    tmp_path: Path,
) -> None:
    """A recorded answer is to the question recorded: asked with other input, the run
    stops (``ArgumentDrift``) unless ``drift="warn"`` says to return it anyway."""
    require_framework("langgraph", "langgraph")
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    from oncelog.integrations import langgraph as oncelog_langgraph

    answers: RunnableLambda[str, AIMessage] = RunnableLambda(
        lambda asked: AIMessage(content=f"done: {asked}")
    )
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        with ledger.run("r"):
            assert oncelog_langgraph.RecordedModel(answers).invoke("refund").content == (
                "done: refund"
            )
        stopped = pytest.raises(oncelog.ArgumentDrift, match="'model#1' was recorded with other")
        with stopped, ledger.run("r"):
            oncelog_langgraph.RecordedModel(answers).invoke("invoice")
        with ledger.run("w"):
            oncelog_langgraph.RecordedModel(answers, drift="warn").invoke("refund")
        with ledger.run("w"):
            relaxed = oncelog_langgraph.RecordedModel(answers, drift="warn").invoke("invoice")
        assert relaxed.content == "done: refund"
        with pytest.raises(oncelog.ConfigurationError, match="drift must be"):
            oncelog_langgraph.RecordedModel(answers, drift="ignore")  # type: ignore[arg-type]


def test_a_call_resolved_done_without_its_result_is_told_to_the_model() -> None:
    """``oncelog.NO_RESULT`` (a person's ``done --no-result``) is not JSON: the model gets
    a tool message saying the call happened and its result is unknown."""
    require_framework("langgraph", "langgraph")
    from oncelog.integrations.langgraph import _tool_message

    request = SimpleNamespace(tool_call={"id": "call-1", "name": "charge", "args": {}})
    message = _tool_message(oncelog.NO_RESULT, request)  # type: ignore[arg-type]
    assert (message.tool_call_id, message.name) == ("call-1", "charge")
    assert "result is not known" in message.content


def test_langgraphs_own_tool_node_next_to_a_recorded_model_is_refused(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-7", "--unguarded")

    refused = run_agent("langgraph_agent", *args)
    assert refused.returncode == 2, refused  # a usage error: the agent must change
    assert "UnguardedTool: LangGraph tool 'send_email' is not guarded" in refused.stderr
    assert "ToolNode(ledger, tools, kinds={'send_email': KIND})" in refused.stderr
    assert effects(tmp_path) == {}
    assert not (tmp_path / "model-calls").exists()  # refused before the model was asked


def test_an_answer_asking_for_an_unguarded_tool_is_refused_before_it_runs(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    from oncelog.integrations import langgraph as oncelog_langgraph

    answer = AIMessage(content="", tool_calls=[{"name": "wire_money", "args": {}, "id": "c1"}])
    model = oncelog_langgraph.RecordedModel(RunnableLambda(lambda _: answer))
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        refused = pytest.raises(oncelog.UnguardedTool, match="'wire_money' is not guarded")
        with refused, ledger.run("r"):
            model.invoke("pay")
        declared = oncelog_langgraph.RecordedModel(
            RunnableLambda(lambda _: answer), repeatable=["wire_money"]
        )
        with ledger.run("r2"):
            assert declared.invoke("pay") == answer


@pytest.mark.parametrize("once_per", [True, False], ids=["once_per", "control"])
def test_a_request_sent_again_in_a_new_thread_after_a_kill_emails_once(
    tmp_path: Path, once_per: bool
) -> None:
    """The issue's case: the agent is SIGKILLed after the provider sent the email, before
    the ledger recorded it; the user sends the message again in a new conversation, not by
    resuming the thread, so the model asks again under a new run and new tool call ids.
    With the tools' subjects declared, the re-sent request sends nothing while the first
    thread holds the email (its run's lease still runs: ``SubjectBusy``, exit 75); once
    that thread has resumed (its probe finds the email), the re-sent request gets the first
    email's result. Without them (the control), it sends a second email."""
    require_framework("langgraph", "langgraph")
    saver = ("--checkpoints", str(tmp_path / "checkpoints.db"))
    subjects = ("--once-per", *saver) if once_per else saver
    first, again = (
        agent_args(tmp_path, "chat-1", *subjects),
        agent_args(tmp_path, "chat-2", *subjects),
    )

    killed = run_agent("langgraph_agent", *first, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    assert effects(tmp_path) == {"send_email": 1}

    resent = run_agent("langgraph_agent", *again)
    if not once_per:
        assert resent.returncode == 0, resent
        assert effects(tmp_path) == {"send_email": 2, "charge": 1}
        return
    assert resent.returncode == 75, resent
    assert "SubjectBusy" in resent.stderr
    assert "held_by_run: billing/chat-1/tools@2/" in resent.stderr
    assert effects(tmp_path)["send_email"] == 1

    resumed = run_agent("langgraph_agent", *first)
    assert resumed.returncode == 0, resumed
    resent = run_agent("langgraph_agent", *again)
    assert resent.returncode == 0, resent
    [email] = [
        e for e in EffectLog(tmp_path / "effects.jsonl").entries() if e["tool"] == "send_email"
    ]
    assert email["receipt"]["id"] in resent.last_line  # the first email's result
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        [claim] = [c for c in ledger.subjects() if "email" in c.subject]
        assert claim.run_id == run_of(ledger, "billing/chat-1/tools@2/")
        assert claim.step_id == "send_email#1"


@pytest.mark.parametrize("once_per", [True, False], ids=["once_per", "control"])
def test_a_message_sent_again_on_the_thread_after_a_kill_mid_tool(
    tmp_path: Path, once_per: bool
) -> None:
    """The issue's re-send: killed after the provider sent the email, the user sends the
    message again on the same thread instead of resuming it. LangGraph drops the pending
    tool node and would ask the model again; oncelog refuses the new turn while the email
    is in doubt, naming how to resume that node. Resumed from its checkpoint (the re-send
    moved the thread past it), it finishes with one email; the message sent again is then
    answered: with the tools' subjects it finds the first email, without them (the
    control) it sends a second one."""
    require_framework("langgraph", "langgraph")
    subjects = ("--once-per",) if once_per else ()
    saver = ("--checkpoints", str(tmp_path / "checkpoints.db"))
    args = agent_args(tmp_path, "chat-5", *saver, *subjects)

    killed = run_agent("langgraph_agent", *args, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    assert effects(tmp_path) == {"send_email": 1}

    resent = run_agent("langgraph_agent", *args, "--resend")
    assert resent.returncode == 75, resent
    assert "ResourceHeld: thread 'chat-5' of graph 'billing' is not settled" in resent.stderr
    assert 'graph.invoke(None, {"configurable": {"thread_id": "chat-5", "checkpoint_id": ' in (
        resent.stderr
    )
    assert effects(tmp_path) == {"send_email": 1}
    assert model_calls(tmp_path) == 1

    # The re-send moved the thread past the tool node: it is resumed from its checkpoint.
    resumed = run_agent("langgraph_agent", *args, "--resend", "--resume-refused")
    assert resumed.returncode == 0, resumed
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}  # the probe found the email
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        tools = ledger.steps(run_of(ledger, "billing/chat-5/tools@2/"))
        assert [(s.step_id, s.state) for s in tools] == [
            ("send_email#1", StepState.DONE), ("charge#1", StepState.DONE),
        ]  # fmt: skip

    resent = run_agent("langgraph_agent", *args, "--resend")
    assert resent.returncode == 0, resent
    if not once_per:
        assert effects(tmp_path) == {"send_email": 2, "charge": 2}
        return
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}
    [email] = [
        e for e in EffectLog(tmp_path / "effects.jsonl").entries() if e["tool"] == "send_email"
    ]
    assert email["receipt"]["id"] in resent.last_line  # the first email's result


def test_a_graph_invoked_from_a_past_checkpoint_runs_its_recorded_runs(tmp_path: Path) -> None:
    """LangGraph's replay from a past checkpoint runs the node from a fork of it, one
    superstep on: oncelog follows the fork back, so the node is the same run and its
    effect is not performed again (async nodes, LangGraph's in-memory checkpointer)."""
    require_framework("langgraph", "langgraph")
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from oncelog.integrations import langgraph as oncelog_langgraph

    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    def answer(messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="done")
        call = {"name": "send_email", "args": {"to": "ada"}, "id": f"c{len(messages)}"}
        return AIMessage(content="", tool_calls=[call])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def conversation() -> None:
        config: Any = {"configurable": {"thread_id": "t"}}
        request: Any = {"messages": [("user", "email ada")]}
        await graph.ainvoke(request, config)
        [before] = [s async for s in graph.aget_state_history(config) if s.next == ("tools",)]
        await graph.ainvoke(None, before.config)  # LangGraph's replay from that checkpoint

    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        model = oncelog_langgraph.RecordedModel(RunnableLambda(answer))
        builder = StateGraph(MessagesState)
        builder.add_node("agent", oncelog_langgraph.node(ledger, agent, graph="g"))
        builder.add_node(
            "tools",
            oncelog_langgraph.ToolNode(
                ledger, [send_email], graph="g", kinds={"send_email": "create"}
            ),
        )
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=InMemorySaver())
        asyncio.run(conversation())
        assert sent == ["ada"]
        tools = [r.run_id for r in ledger.runs(limit=100) if r.run_id.startswith("g/t/tools@")]
        assert len(tools) == 1, tools
