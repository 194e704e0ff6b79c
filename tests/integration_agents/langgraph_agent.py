"""A LangGraph agent: a model node and a ToolNode, guarded by oncelog, in one thread.

    python -m tests.integration_agents.langgraph_agent --ledger L --effects E --model-calls M
        --thread T [--checkpoints C] [--async] [--unguarded] [--once-per]
        [--graph NAME] [--message TEXT] [--reset] [--resend] [--resume-refused]

The model asks for two tools in one answer (an email and a charge, each a real effect
written to E), then says it is done. With ``--checkpoints`` the graph has LangGraph's
SQLite checkpointer and a restart resumes the thread; without, a restart runs the graph
again from the start. With ``--unguarded`` the tools run in LangGraph's own ``ToolNode``,
next to oncelog's ``RecordedModel``: oncelog must refuse that. With ``--once-per`` each tool
names its subject (the email's recipient and body, the charge's customer and amount), so
the same request in another thread acts once. ``--graph`` names the graph (default
``billing``), ``--message`` is the user's message (the email answers it), ``--reset``
deletes the thread's checkpoints first (a new conversation on the same id), ``--resend``
sends the message although the thread could resume (what a user does who re-sends);
``--resume-refused`` resumes the node a refused message names, as documented. Prints
the final answer as JSON on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    UsageMetadata,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import langgraph as oncelog_langgraph

from .effect_log import EffectLog, count_model_call

# Seconds a node waits for another node of its thread: short, so that a refused re-send
# shows at once.
THREAD_WAIT = 1.0


class ScriptedChatModel(BaseChatModel):
    """A test model that answers from the conversation, like a real one: tool calls first,
    then a final answer. Every call it really makes is counted in a file (tokens spent).
    Its tool call ids are new at every call, as a real model's are."""

    calls_file: str

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        count_model_call(self.calls_file)
        # This turn: what follows the user's last message.
        last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        request, turn = str(messages[last].content), messages[last + 1 :]
        results = [m.content for m in turn if isinstance(m, ToolMessage)]
        if results:
            answer = AIMessage(content=f"done: {', '.join(map(str, results))}")
        else:
            answer = AIMessage(
                content="",
                tool_calls=[
                    _call("send_email", {"to": "ada@example.com", "body": f"re: {request}"}),
                    _call("charge", {"customer": "cus_ada", "cents": 500}),
                ],
            )
        answer.usage_metadata = UsageMetadata(
            input_tokens=40, output_tokens=8, total_tokens=48,
            input_token_details={}, output_token_details={},
        )  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=answer)])


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}


def build(
    ledger: oncelog.Ledger,
    log: EffectLog,
    model_calls: str,
    *,
    graph: str,
    unguarded: bool = False,
    once_per: bool = False,
) -> StateGraph[Any]:
    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return json.dumps(log.perform(current_idempotency_key(), "send_email", [to, body]))

    @tool
    def charge(customer: str, cents: int) -> str:
        """Charge a customer."""
        return json.dumps(log.perform(current_idempotency_key(), "charge", [customer, cents]))

    chat_model = ScriptedChatModel(calls_file=model_calls).bind_tools([send_email, charge])
    model = oncelog_langgraph.RecordedModel(chat_model)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def agent_async(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    kinds = {
        "send_email": Policy("create", probe=log.probe),
        "charge": Policy("payment", probe=log.probe),
    }
    if once_per:
        kinds = {
            "send_email": Policy(
                "create", probe=log.probe, once_per=lambda to, body: ("email", to, body)
            ),
            "charge": Policy(
                "payment", probe=log.probe, once_per=lambda customer, cents: ("charge", customer)
            ),
        }
    builder = StateGraph(MessagesState)
    wait = THREAD_WAIT
    builder.add_node("agent", oncelog_langgraph.node(ledger, agent, graph=graph, thread_wait=wait))
    builder.add_node(
        "agent_async", oncelog_langgraph.node(ledger, agent_async, graph=graph, thread_wait=wait)
    )
    if unguarded:
        builder.add_node("tools", ToolNode([send_email, charge]))
    else:
        tools = oncelog_langgraph.ToolNode(
            ledger, [send_email, charge], graph=graph, kinds=kinds, thread_wait=wait
        )
        builder.add_node("tools", tools)
    return builder


def wired(builder: StateGraph[Any], use_async: bool) -> StateGraph[Any]:
    first = "agent_async" if use_async else "agent"
    builder.add_edge(START, first)
    builder.add_conditional_edges(first, tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", first)
    return builder


@contextmanager
def compiled(
    builder: StateGraph[Any], checkpoints: str | None
) -> Iterator[CompiledStateGraph[Any]]:
    wired(builder, use_async=False)
    if checkpoints is None:
        yield builder.compile()
        return
    with SqliteSaver.from_conn_string(checkpoints) as saver:
        yield builder.compile(checkpointer=saver)


@asynccontextmanager
async def compiled_async(
    builder: StateGraph[Any], checkpoints: str | None
) -> AsyncIterator[CompiledStateGraph[Any]]:
    """The same graph on LangGraph's async SQLite checkpointer: the sync one refuses
    ``ainvoke``, so an async graph that resumes needs this one."""
    wired(builder, use_async=True)
    if checkpoints is None:
        yield builder.compile()
        return
    async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
        yield builder.compile(checkpointer=saver)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--effects", "--model-calls", "--thread"):
        parser.add_argument(name, required=True)
    parser.add_argument("--checkpoints")
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--unguarded", action="store_true")
    parser.add_argument("--once-per", action="store_true")
    parser.add_argument("--graph", default="billing")
    parser.add_argument("--message", default="bill ticket 4711")
    parser.add_argument("--reset", action="store_true", help="delete the thread first")
    parser.add_argument("--resend", action="store_true", help="send, even if it could resume")
    parser.add_argument("--resume-refused", action="store_true", help="resume what refuses")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    args = parser.parse_args()
    ledger = oncelog.open(args.ledger, lease_ttl=args.lease_ttl)
    log = EffectLog(args.effects)
    builder = build(
        ledger, log, args.model_calls, graph=args.graph, unguarded=args.unguarded,
        once_per=args.once_per,
    )  # fmt: skip
    config: Any = {"configurable": {"thread_id": args.thread}}

    message = {"messages": [("user", args.message)]}

    def answer() -> Any:
        with compiled(builder, args.checkpoints) as graph:
            if args.reset and graph.checkpointer is not None:
                graph.checkpointer.delete_thread(args.thread)  # type: ignore[union-attr]
            pending = args.checkpoints is not None and graph.get_state(config).next
            try:
                return graph.invoke(None if pending and not args.resend else message, config)
            except (oncelog.HoldInDoubt, oncelog.ResourceHeld) as held:
                if not args.resume_refused:
                    raise
                # The documented pattern: resume the node the refusal names.
                return graph.invoke(None, oncelog_langgraph.resume_config(held))

    async def answer_async() -> Any:
        async with compiled_async(builder, args.checkpoints) as graph:
            if args.reset and graph.checkpointer is not None:
                await graph.checkpointer.adelete_thread(args.thread)  # type: ignore[union-attr]
            pending = args.checkpoints is not None and (await graph.aget_state(config)).next
            try:
                return await graph.ainvoke(None if pending and not args.resend else message, config)
            except (oncelog.HoldInDoubt, oncelog.ResourceHeld) as held:
                if not args.resume_refused:
                    raise
                return await graph.ainvoke(None, oncelog_langgraph.resume_config(held))

    def agent() -> None:
        final = asyncio.run(answer_async()) if args.use_async else answer()
        print(json.dumps(final["messages"][-1].content))

    oncelog.run_main(agent)


if __name__ == "__main__":
    main()
