"""A LangGraph support agent whose email goes out once, however often it is killed.

    pip install '.[langgraph]'
    python examples/langgraph/agent.py ticket-4711

Offline: the model is a scripted chat model that answers from the conversation. The
email "provider" appends to outbox.jsonl, with the idempotency key oncelog derived; the
thread's checkpoints are in checkpoints.db (LangGraph's SQLite checkpointer).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

import oncelog
from oncelog.integrations import current_idempotency_key
from oncelog.integrations import langgraph as oncelog_lg

OUTBOX = Path("outbox.jsonl")


class ScriptedModel(BaseChatModel):
    """Stands in for a real chat model: one tool call, then a final answer."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if any(isinstance(m, ToolMessage) for m in messages):
            answer = AIMessage(content="The customer has been told.")
        else:
            call = {"name": "send_email", "args": {"to": "ada@example.com", "body": "Refunded."},
                    "id": "call_1"}  # fmt: skip
            answer = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=answer)])


@tool
def send_email(to: str, body: str) -> str:
    """Send an email to a customer."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with OUTBOX.open("a") as out:
        out.write(json.dumps({"key": key, "to": to, "body": body}) + "\n")
    return f"sent to {to}"


def main() -> None:
    ledger = oncelog.open()
    model = oncelog_lg.RecordedModel(ScriptedModel())

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", oncelog_lg.node(ledger, agent, graph="refunds"))
    builder.add_node(
        "tools",
        oncelog_lg.ToolNode(ledger, [send_email], graph="refunds", kinds={"send_email": "create"}),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    thread = sys.argv[1] if len(sys.argv) > 1 else "ticket-4711"
    config: Any = {"configurable": {"thread_id": thread}}

    def run() -> None:
        with SqliteSaver.from_conn_string("checkpoints.db") as checkpointer:
            graph = builder.compile(checkpointer=checkpointer)
            # A thread cut short by a kill goes on from its checkpoint, in the same runs.
            resuming = bool(graph.get_state(config).next)
            inputs = None if resuming else {"messages": [("user", "refund me")]}
            final = graph.invoke(inputs, config)
        print(final["messages"][-1].content)

    oncelog.run_main(run)


if __name__ == "__main__":
    main()
