"""LangGraph, for real: a graph with a model node and a ToolNode guarded by oncelog, in a
process SIGKILLed right after a tool's effect and restarted.

With LangGraph's SQLite checkpointer, the thread resumes at the node that was running: the
case the checkpointer leaves open (a node killed after its side effect, before its
checkpoint) replays the recorded effect. Without one, the graph runs again from the start
and the recorded model answer comes back without a model call. Either way each effect
happened once, by the effect log's own records."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

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
        tools = ledger.steps("ticket-1/tools@2")
        assert [(s.step_id, s.state, s.attempts) for s in tools] == [
            ("send_email#1", StepState.DONE, 1),
            ("charge#1", StepState.DONE, 1),
        ]
        keys = {e["key"] for e in EffectLog(tmp_path / "effects.jsonl").entries()}
        assert keys == {s.key for s in tools}


def test_graph_without_checkpointer_replays_from_the_start(tmp_path: Path) -> None:
    require_framework("langgraph", "langgraph")
    args = agent_args(tmp_path, "ticket-2", "--async")

    killed = run_agent("langgraph_agent", *args, crash_at="after_call@send_email#1")
    assert killed.killed, killed
    assert effects(tmp_path)["send_email"] == 1

    resumed = run_agent("langgraph_agent", *args)
    assert resumed.returncode == 0, resumed
    assert resumed.last_line.startswith(DONE)
    # The email's outcome was never recorded: the probe found it at the provider.
    assert effects(tmp_path) == {"send_email": 1, "charge": 1}
    assert model_calls(tmp_path) == 2  # the first answer came from the ledger on restart
    with oncelog.open(str(tmp_path / "ledger.db")) as ledger:
        assert [s.step_id for s in ledger.steps("ticket-2/agent_async@1")] == ["model#1"]
        email = ledger.steps("ticket-2/tools@2")[0]
        assert (email.step_id, email.state) == ("send_email#1", StepState.DONE)


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
    subjects = ("--once-per",) if once_per else ()
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
    assert "held_by_run: chat-1/tools@2" in resent.stderr
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
        assert (claim.run_id, claim.step_id) == ("chat-1/tools@2", "send_email#1")
