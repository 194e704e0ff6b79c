"""LangGraph: every tool call of a graph an oncelog effect, every model call recorded.

    from oncelog.integrations import langgraph as oncelog_lg

    model = oncelog_lg.RecordedModel(chat_model.bind_tools(tools))
    builder.add_node("agent", oncelog_lg.node(ledger, call_model, graph="billing"))
    builder.add_node("tools", oncelog_lg.ToolNode(
        ledger, tools, graph="billing", kinds={"send_email": "create"}))

Each execution of a guarded node is one oncelog run, named from the graph's name (which
the user gives, the same in every process) and LangGraph's own coordinates: the thread id,
the node, the superstep and the checkpoint the task runs from
(``billing/ticket-4711/tools@3/1f1e…``): a thread resumed from its checkpoint runs the node
that was running when the process died again in the same run, and so does a graph invoked
from that past checkpoint (``checkpoint_id``: LangGraph runs it from a fork, one superstep
on, which oncelog follows back). Its finished tool calls and model calls return what was
recorded, and only what never finished runs live. That covers what LangGraph's
checkpointer cannot: a node killed after its side effect and before its checkpoint.
Anything else is a new conversation, answered live: a new message on the thread (a new
checkpoint), a thread whose checkpoints were deleted (``checkpointer.delete_thread``), a
graph without a checkpointer (every invoke starts from a new checkpoint), another graph on
the same thread id.

A thread's effects are settled before its model is asked again: every guarded node of a
thread takes the hold ``("langgraph", GRAPH, THREAD)`` (a ``ToolNode`` for its whole
execution), which an effect left in doubt by a killed process keeps blocked. A new message
sent instead of resuming the thread is refused until that node is resumed,
``graph.invoke(None, resume_config(error))`` (from the checkpoint it ran from: the message
moved the thread past it), or a person settles it: with ``oncelog.HoldInDoubt`` (exit 3,
and one notice to a person, with the decisions on the node's effect, however often the
message is sent again) when no process runs that node, with ``oncelog.ResourceHeld`` (exit
75) while one does.

Steps are named ``send_email#1`` (the first ``send_email`` call of that node execution)
and ``model#1``, never from the ids a model gives its tool calls. A model call asked at a
recorded position with other input than recorded stops the run (``ArgumentDrift``), unless
its ``RecordedModel`` says ``drift="warn"``.

A ``RecordedModel`` refuses (``oncelog.UnguardedTool``) a tool that no oncelog ``ToolNode``
of the process guards: LangGraph's own ``ToolNode`` would run it again on every replay.
It looks at the tools bound to the model (``bind_tools``) before its first call, and at the
tools an answer asks for before anything runs them. A tool that is harmless to run again
is named in ``repeatable=`` (of the ``ToolNode`` or the ``RecordedModel``). oncelog sees
tool names only: a plain ``ToolNode`` running a tool of the same name as a guarded one
elsewhere in the process is not found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import shlex
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NamedTuple, TypeVar, cast

from oncelog import (
    NO_RESULT,
    AsyncRun,
    ConfigurationError,
    EffectRefused,
    HoldInDoubt,
    Ledger,
    ResourceHeld,
    Run,
)

from ._common import (
    ModelDrift,
    Policy,
    PolicyLike,
    async_run,
    digest,
    keyed,
    model_drift,
    model_step,
    next_step_id,
    policies,
    policy_for,
    repeatable_names,
    sync_run,
    unguarded,
)
from ._common import missing_extra as _missing

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
    from langgraph.config import get_config
    from langgraph.prebuilt import ToolNode as _LangGraphToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest, ToolInvocationError
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("langgraph", "LangGraph") from exc

__all__ = [
    "RecordedModel", "ToolNode", "graph_name", "node", "resume_config", "task_run_id",
]  # fmt: skip

F = TypeVar("F", bound=Callable[..., Any])

PUSH = "__pregel_push"
CHECKPOINTER = "__pregel_checkpointer"  # where LangGraph hands a node its checkpointer
MAX_FORKS = 100  # forks of forks followed back, at most

# Tool names an oncelog ToolNode of this process guards, or that were declared repeatable:
# what a RecordedModel may let its model ask for.
_DECLARED: set[str] = set()
_FIX = "Run it in oncelog.integrations.langgraph.ToolNode(ledger, tools, kinds={%r: KIND})"


# How long a guarded node waits for another node of its thread to give the thread up (the
# tasks of one superstep run together); an effect in doubt keeps it past any wait.
THREAD_WAIT = 30.0
_GRAPH_CHARS = 128


def graph_name(graph: object) -> str:
    """``graph`` if it can name a graph in run ids: the part before the first ``/``."""
    if graph is None:
        raise ConfigurationError(
            "name the graph with graph=: a stable name, the same in every process "
            '(graph="billing"); its runs are named by it, so two graphs sharing a thread '
            "id and a ledger never share runs"
        )
    if (
        not isinstance(graph, str) or not graph or len(graph) > _GRAPH_CHARS
        or "/" in graph or not graph.isprintable()
    ):  # fmt: skip
        raise ConfigurationError(
            f"graph= must be a non-empty printable string of at most {_GRAPH_CHARS} chars "
            f"without '/', not {graph!r:.100}"
        )
    return graph


class _Task(NamedTuple):
    """Where a node execution is in its thread: LangGraph derives the task's id from the
    same coordinates (the checkpoint it runs from, the node, the superstep, the path)."""

    thread: str
    node: str
    step: int
    send: str  # "#i" for the i-th Send of the superstep
    checkpoint: str

    def run_id(self, graph: str) -> str:
        return f"{graph}/{self.thread}/{self.node}@{self.step}{self.send}/{self.checkpoint}"

    def lookup(self) -> RunnableConfig:
        return {"configurable": {"thread_id": self.thread, "checkpoint_ns": "",
                                 "checkpoint_id": self.checkpoint}}  # fmt: skip

    def before_fork(self, found: CheckpointTuple | None) -> _Task | None:
        """The same task as run from the checkpoint that ``found`` was forked from (a
        graph invoked from a past checkpoint runs from a copy of it, one superstep on)."""
        if found is None or found.metadata.get("source") != "fork" or not found.parent_config:
            return None
        parent = (found.parent_config.get("configurable") or {}).get("checkpoint_id")
        return None if not parent else self._replace(checkpoint=str(parent), step=self.step - 1)


def _task(config: RunnableConfig) -> _Task:
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    thread = configurable.get("thread_id")
    if not thread:
        raise ConfigurationError(
            "a guarded LangGraph node needs a stable thread id: "
            'graph.invoke(..., {"configurable": {"thread_id": "ticket-4711"}})'
        )
    if "|" in str(metadata.get("langgraph_checkpoint_ns", "")):
        raise ConfigurationError(
            "oncelog guards the nodes of the graph you invoke, not of a subgraph inside it"
        )
    node_name, step = metadata.get("langgraph_node"), metadata.get("langgraph_step")
    # The checkpoint the task runs from.
    checkpoint = (configurable.get("checkpoint_map") or {}).get("")
    if node_name is None or step is None or not checkpoint:
        raise ConfigurationError("a guarded LangGraph node ran outside a graph")
    path = tuple(metadata.get("langgraph_path") or ())
    send = f"#{path[1]}" if len(path) > 1 and path[0] == PUSH else ""
    return _Task(str(thread), str(node_name), int(step), send, str(checkpoint))


def _saver(config: RunnableConfig) -> BaseCheckpointSaver[Any] | None:
    saver = (config.get("configurable") or {}).get(CHECKPOINTER)
    return saver if isinstance(saver, BaseCheckpointSaver) else None


def task_run_id(config: RunnableConfig, graph: str) -> str:
    """The oncelog run of one node execution: graph, thread, node, superstep (and for a
    ``Send`` its index), and the id of the checkpoint the task runs from, or for a graph
    invoked from a past checkpoint, of that checkpoint (LangGraph runs it from a fork).
    All of them are the same when a thread resumes the same superstep; the checkpoint is
    new for a new message, a thread deleted and started again, or a graph without a
    checkpointer."""
    task, saver = _task(config), _saver(config)
    for _ in range(MAX_FORKS):
        earlier = None if saver is None else task.before_fork(saver.get_tuple(task.lookup()))
        if earlier is None:
            break
        task = earlier
    return task.run_id(graph)


async def _async_task_run_id(config: RunnableConfig, graph: str) -> str:
    """``task_run_id`` with an async checkpointer's reads."""
    task, saver = _task(config), _saver(config)
    for _ in range(MAX_FORKS):
        if saver is None:
            break
        try:
            found = await saver.aget_tuple(task.lookup())
        except NotImplementedError:  # a sync-only checkpointer (SqliteSaver)
            found = await asyncio.to_thread(saver.get_tuple, task.lookup())
        earlier = task.before_fork(found)
        if earlier is None:
            break
        task = earlier
    return task.run_id(graph)


def resume_config(held: ResourceHeld | HoldInDoubt) -> RunnableConfig:
    """The config that resumes the node a guarded node's ``HoldInDoubt`` (or
    ``ResourceHeld``) names, from the checkpoint it ran from, although messages sent since
    moved its thread past it: ``graph.invoke(None, resume_config(error))``."""
    try:
        resource = json.loads(held.resource or "null")
    except ValueError:
        resource = None
    if not (isinstance(resource, list) and resource[:1] == ["langgraph"] and held.holder):
        raise ConfigurationError(f"not a refusal of a LangGraph thread: {held.message}")
    checkpoint = held.holder.rpartition("/")[2]
    return {"configurable": {"thread_id": resource[2], "checkpoint_id": checkpoint}}


def _thread(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("thread_id"))


def _origin(thread: str) -> str:
    """The run's origin (``Ledger.run``): a person's next step resumes this thread."""
    return f"langgraph:{thread}"


def _unsettled(
    held: ResourceHeld | HoldInDoubt, run_id: str, graph: str, thread: str
) -> ResourceHeld | HoldInDoubt:
    """A new node of a thread whose earlier node has not given it up: what to do. The
    refusal keeps its kind: a node no process runs, with its effect in doubt, is a
    person's (exit 3, announced once); one still running clears by itself (75)."""
    holder = held.holder or "?"
    checkpoint = holder.rpartition("/")[2]
    config = json.dumps({"configurable": {"thread_id": thread, "checkpoint_id": checkpoint}})
    message = (
        f"thread {thread!r} of graph {graph!r} is not settled: {held.message}. A node of "
        "the thread has an effect whose outcome is not known (or is running): resume "
        f"that node before a new message, graph.invoke(None, {config}) "
        "(oncelog.integrations.langgraph.resume_config(error)); it runs again in its run, "
        "from the checkpoint it ran from, and settles its effect. Without that checkpoint "
        f"a person settles it: oncelog show {shlex.quote(holder)} names the commands"
    )
    if isinstance(held, HoldInDoubt):
        return HoldInDoubt(
            message, run_id=run_id, resource=held.resource, holder=holder,
            held_by_step=held.held_by_step,
        )  # fmt: skip
    return ResourceHeld(message, run_id=run_id, resource=held.resource, holder=holder)


@contextmanager
def _settled(run: Run, graph: str, thread: str, wait: float) -> Iterator[None]:
    try:
        hold = run.hold(("langgraph", graph, thread), wait=wait)
        hold.__enter__()
    except (ResourceHeld, HoldInDoubt) as held:
        raise _unsettled(held, run.run_id, graph, thread) from None
    try:
        yield
    finally:
        hold.__exit__(None, None, None)


@asynccontextmanager
async def _settled_async(
    run: AsyncRun, graph: str, thread: str, wait: float
) -> AsyncIterator[None]:
    try:
        hold = run.hold(("langgraph", graph, thread), wait=wait)
        await hold.__aenter__()
    except (ResourceHeld, HoldInDoubt) as held:
        raise _unsettled(held, run.run_id, graph, thread) from None
    try:
        yield
    finally:
        await hold.__aexit__(None, None, None)


def node(
    ledger: Ledger,
    fn: F,
    *,
    graph: str | None = None,
    agent: str | None = None,
    thread_wait: float = THREAD_WAIT,
) -> F:
    """Run the node function ``fn`` (sync or async) inside its own oncelog run, so that the
    ``RecordedModel`` calls and oncelog tools it makes are recorded. LangGraph still sees
    ``fn``'s signature, and injects what it asks for (``config``, ``runtime``...).

    ``graph`` names the graph (required). Before ``fn`` runs, the thread must be settled:
    no other node of it holds it, past ``thread_wait`` seconds."""
    name = graph_name(graph)
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            config = get_config()
            run_id, thread = await _async_task_run_id(config, name), _thread(config)
            async with ledger.run(run_id, agent=agent, origin=_origin(thread)) as run:
                async with _settled_async(run, name, thread, thread_wait):
                    pass  # a check: the model is asked after the thread's effects settled
                return await fn(*args, **kwargs)

        return cast(F, guarded_async)

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        config = get_config()
        thread = _thread(config)
        with ledger.run(task_run_id(config, name), agent=agent, origin=_origin(thread)) as run:
            with _settled(run, name, thread, thread_wait):
                pass  # a check: the model is asked after the thread's effects settled
            return fn(*args, **kwargs)

    return cast(F, guarded)


class RecordedModel(Runnable[Any, BaseMessage]):
    """A chat model (or ``model.bind_tools(...)``) whose answers are recorded in the run of
    the node calling it: a resumed node gets the same answer back and spends no tokens."""

    def __init__(
        self,
        model: Runnable[Any, BaseMessage],
        *,
        step_name: str = "model",
        repeatable: Iterable[str] = (),
        drift: ModelDrift = "error",
    ) -> None:
        self.model = model
        self.step_name = step_name
        self.drift = model_drift(drift)  # another question at a recorded position stops
        _DECLARED.update(repeatable_names(repeatable, {}))

    def invoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> BaseMessage:
        run = sync_run("LangChain model")
        _refuse_unguarded(_bound_tools(self.model))

        def call() -> dict[str, Any]:
            return _response(self.model.invoke(input, config, **kwargs))

        asked = _digest(input)
        with model_step(run, self.step_name) as step:
            recorded = run.llm(
                step, call, name="langchain_model", input_digest=asked, drift=self.drift
            )
        return _asked(_message(recorded))

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> BaseMessage:
        run = async_run("LangChain model")
        _refuse_unguarded(_bound_tools(self.model))

        async def call() -> dict[str, Any]:
            return _response(await self.model.ainvoke(input, config, **kwargs))

        asked = _digest(input)
        with model_step(run, self.step_name) as step:
            recorded = await run.llm(
                step, call, name="langchain_model", input_digest=asked, drift=self.drift
            )
        return _asked(_message(recorded))


def _bound_tools(model: Runnable[Any, BaseMessage]) -> list[str]:
    """The names of the tools ``bind_tools`` gave the model, in any provider's format."""
    tools = getattr(model, "kwargs", {}).get("tools") or []
    names = [
        t.get("function", {}).get("name") or t.get("name") for t in tools if isinstance(t, dict)
    ]
    return [str(name) for name in names if name]


def _asked(message: BaseMessage) -> BaseMessage:
    """The model's answer, once every tool it asks for is known to be guarded."""
    if isinstance(message, AIMessage):
        _refuse_unguarded(call["name"] for call in message.tool_calls)
    return message


def _refuse_unguarded(names: Iterable[str]) -> None:
    for name in names:
        if name not in _DECLARED:
            raise unguarded("LangGraph", name, _FIX % name)


def _digest(input: Any) -> str:
    if isinstance(input, Sequence) and not isinstance(input, str):
        return digest([_content(m) for m in input])
    return digest(input)


def _content(message: Any) -> Any:
    """What a message says, without the id LangGraph gives it anew in every process."""
    if not isinstance(message, BaseMessage):
        return message
    data = message_to_dict(message)["data"]
    return {k: v for k, v in data.items() if k != "id"}


def _response(message: BaseMessage) -> dict[str, Any]:
    usage = message.usage_metadata if isinstance(message, AIMessage) else None
    tokens = {} if usage is None else {k: usage[k] for k in ("input_tokens", "output_tokens")}
    return {"message": message_to_dict(message), "usage": tokens}


def _message(recorded: dict[str, Any]) -> BaseMessage:
    return messages_from_dict([recorded["message"]])[0]


class ToolNode(_LangGraphToolNode):
    """LangGraph's ``ToolNode`` with every tool call an oncelog effect, in its own run per
    node execution. ``graph`` names the graph (required, as for ``node``); the node holds
    its thread while it runs (see the module's doc). ``kinds`` maps each tool's name to
    its kind (``"create"``) or to an ``oncelog.integrations.Policy``; a tool without one
    is refused here, not at 3 a.m., unless ``repeatable`` names it as safe to run again
    on every replay, unguarded.

    Calls run one at a time, in the order the model asked for them (the position of each
    is part of the run). Invalid arguments from the model and a policy's ``refusals`` come
    back to the model as error messages; any other tool error stops the graph, as in
    LangGraph by default, and an effect whose outcome is unknown halts the run. A tool
    reads its idempotency key with ``oncelog.integrations.current_idempotency_key()``."""

    def __init__(
        self,
        ledger: Ledger,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        kinds: Mapping[str, PolicyLike],
        graph: str | None = None,
        agent: str | None = None,
        thread_wait: float = THREAD_WAIT,
        repeatable: Iterable[str] = (),
        name: str = "tools",
        tags: list[str] | None = None,
        messages_key: str = "messages",
    ) -> None:
        super().__init__(
            tools, name=name, tags=tags, handle_tool_errors=False, messages_key=messages_key,
            wrap_tool_call=self._guard, awrap_tool_call=self._guard_async,
        )  # fmt: skip
        self._ledger = ledger
        self._graph = graph_name(graph)
        self._agent = agent
        self._thread_wait = thread_wait
        table, again = policies(kinds), repeatable_names(repeatable, kinds)
        self._policies: dict[str, Policy] = {}
        for tool_name in self.tools_by_name:
            if tool_name in again:
                continue  # runs as LangGraph runs it, again on every replay
            policy = policy_for(table, tool_name, "LangGraph")
            refusals = (*policy.refusals, ToolInvocationError)  # the model's bad arguments
            self._policies[tool_name] = dataclasses.replace(policy, refusals=refusals)
        _DECLARED.update(self.tools_by_name)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        run_id, thread = task_run_id(config, self._graph), _thread(config)
        with (
            self._ledger.run(run_id, agent=self._agent, origin=_origin(thread)) as run,
            _settled(run, self._graph, thread, self._thread_wait),
        ):
            # One call at a time, in the model's order: each takes the next position.
            return super().invoke(input, {**config, "max_concurrency": 1}, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        run_id, thread = await _async_task_run_id(config, self._graph), _thread(config)
        async with (
            self._ledger.run(run_id, agent=self._agent, origin=_origin(thread)) as run,
            _settled_async(run, self._graph, thread, self._thread_wait),
        ):
            return await super().ainvoke(input, config, **kwargs)

    def _guard(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        policy = self._policies.get(call["name"])
        if policy is None or request.tool is None:
            return execute(request)  # not a tool of this node: LangGraph answers the model
        run = sync_run("LangGraph tool")

        def perform(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                return _output(execute(request))

        effect = policy.tool(call["name"], perform)
        try:
            recorded = run.effect(next_step_id(run, call["name"]), effect, call["args"])
        except EffectRefused as refused:
            return _refusal(refused, request)
        return _tool_message(recorded, request)

    async def _guard_async(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Any],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        policy = self._policies.get(call["name"])
        if policy is None or request.tool is None:
            result: ToolMessage | Command[Any] = await execute(request)
            return result
        run = async_run("LangGraph tool")

        async def perform(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                return _output(await execute(request))

        effect = policy.tool(call["name"], perform)
        # Calling effect() takes the call's position at once, before anything is awaited:
        # LangGraph starts the calls in the model's order, so the positions follow it.
        pending = run.effect(next_step_id(run, call["name"]), effect, call["args"])
        try:
            recorded = await pending
        except EffectRefused as refused:
            return _refusal(refused, request)
        return _tool_message(recorded, request)


def _output(result: ToolMessage | Command[Any]) -> Any:
    # A Command is not JSON: oncelog records the effect done and says its result is missing.
    return message_to_dict(result) if isinstance(result, ToolMessage) else result


def _tool_message(recorded: Any, request: ToolCallRequest) -> ToolMessage:
    call = request.tool_call
    if isinstance(recorded, dict) and recorded.get("type") == "tool" and "data" in recorded:
        message = cast(ToolMessage, messages_from_dict([recorded])[0])
        # The recorded answer, addressed to the call the model made this time.
        return message.model_copy(update={"tool_call_id": call["id"]})
    # What a probe found at the provider: the model sees it as the tool's output.
    if recorded is NO_RESULT:
        content = "done; its result is not known (a person recorded it as done without it)"
    else:
        content = recorded if isinstance(recorded, str) else json.dumps(recorded)
    return ToolMessage(content=content, name=call["name"], tool_call_id=call["id"])


def _refusal(refused: EffectRefused, request: ToolCallRequest) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=f"Error: {refused.message}",
        name=call["name"],
        tool_call_id=call["id"],
        status="error",
    )
