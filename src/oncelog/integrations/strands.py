"""Strands Agents: a run per session turn, its tools as oncelog effects, its model recorded,
its interrupts as oncelog approvals.

    from oncelog.integrations import strands as oncelog_strands

    guard = oncelog_strands.Guard(ledger, kinds={"send_email": "create",
                                                 "refund": Policy("payment", approval=True)})
    agent = Agent(model=..., tools=[send_email, refund], agent_id="billing")
    result = guard.invoke(agent, "Refund ticket 4711", session="ticket-4711")

Each invocation is one turn of the conversation and one oncelog run,
``AGENT_ID/SESSION/turn-N``: the agent's ``agent_id`` and the session (``session=``), both
stable names the user gives, and the turn's position: how many prompts the conversation
held before it, plus one. Strands' own ids for an invocation are fresh in every process, so
never used. An agent built again after a kill and given the same prompt runs the same turn
in the same run: recorded model answers come back without a request (no tokens spent), so
the model asks for the same tool calls, whose recorded results come back; the first step
never recorded runs live. Steps are named ``model#1``, ``send_email#1``: by count in the
turn, never by the tool use ids a model makes up. ``guard(agent)`` (which ``invoke`` does)
records the agent's model, wraps every tool of its registry, and runs the tools one at a
time in the model's order (``SequentialToolExecutor``), so each takes the same position on
every replay. A turn that raises sets the agent's conversation back to before it. An agent
with a session manager is refused: it would persist a killed turn apart from the ledger.

A tool whose policy asks a person (``approval=True``, or kind ``destructive``) stops the
turn with a Strands interrupt (``result.stop_reason == "interrupt"``), named
``oncelog-approval``, whose reason holds the run, the step, the tool and the exact
arguments. Its answer, given the Strands way (``guard.invoke(agent, [{"interruptResponse":
{"interruptId": ..., "response": {"approve": True, "by": "alice"}}}], session=...)``) is
recorded as the oncelog decision on that request: bound to those arguments, used once; a
denial is told to the model. The answered turn replays from its prompt, with the answers
to the agent's own interrupts (its hooks') kept for the replay.

Strands catches every exception a tool raises and hands it to the model as an error
result. A stop (an effect in doubt, a halt, a budget) is not handed over: the guard
cancels the invocation before the next model call, the run's next step would raise it
again anyway, and ``invoke`` raises it to its caller (``oncelog.run_main``: its exit
code). A tool error after which the effect's outcome is unknown is such a stop, so the
model never calls the tool again past it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Mapping
from typing import Any

from oncelog import (
    NO_RESULT,
    ApprovalDenied,
    ApprovalRequired,
    ConfigurationError,
    EffectRefused,
    Ledger,
    OnceLogError,
    Run,
    UsageError,
    WaitingForPerson,
)

from ._common import (
    ModelDrift,
    Policy,
    PolicyLike,
    digest,
    keyed,
    mark,
    marked,
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
    from strands import Agent
    from strands.interrupt import Interrupt, InterruptException
    from strands.models.model import Model
    from strands.tools.executors import SequentialToolExecutor
    from strands.tools.structured_output.structured_output_tool import StructuredOutputTool
    from strands.types._events import ToolInterruptEvent, ToolResultEvent
    from strands.types.agent import AgentInput
    from strands.types.content import Messages
    from strands.types.streaming import StreamEvent
    from strands.types.tools import AgentTool, ToolGenerator, ToolResult, ToolSpec, ToolUse
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("strands", "Strands Agents") from exc

from ._strands_interrupts import APPROVAL, answered, ask, remember_start, set_back

__all__ = ["APPROVAL", "Guard", "RecordedModel", "turn_run_id"]

_FIX = "Guard it: oncelog.integrations.strands.Guard(ledger, kinds={%r: KIND})"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


# -- the turn's run -----------------------------------------------------------------------


def _prompts(messages: Messages) -> int:
    """How many prompts a conversation holds: user messages that are not tool results."""
    return sum(
        1 for m in messages
        if m["role"] == "user" and not any("toolResult" in block for block in m["content"])
    )  # fmt: skip


def turn_run_id(agent: Agent, session: str) -> str:
    """The run of the agent's next invocation: ``AGENT_ID/SESSION/turn-N``; an invocation
    that answers interrupts continues the turn they stopped."""
    name = _checked(session, "session")
    resuming = agent._interrupt_state.activated
    turn = _prompts(agent.messages) + (0 if resuming else 1)
    return f"{_checked(agent.agent_id, 'agent_id')}/{name}/turn-{turn}"


def _checked(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"{what} {name!r} must be 1 to 128 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit: it names the agent's runs"
        )
    return name


# -- the model ----------------------------------------------------------------------------


class _Turn:
    """The turn in progress on one thread: its run, its agent, and its stop."""

    def __init__(self, run: Run, agent: Agent, answers: dict[str, Interrupt]) -> None:
        self.run, self.agent = run, agent
        self.answers = answers  # Strands interrupts answered, kept for the turn's replay
        self.stop: OnceLogError | None = None
        self.waiting: ApprovalRequired | None = None


_turns: dict[int, _Turn] = {}  # by id(run): the run's turn, while an invocation runs


def _turn(framework: str) -> _Turn:
    run = sync_run(framework)
    turn = _turns.get(id(run))
    if turn is None or turn.run is not run:
        raise UsageError(f"a guarded {framework} call ran outside guard.invoke(agent, ...)")
    if turn.stop is not None:
        raise turn.stop  # sticky: nothing runs after a stop, whatever Strands caught
    return turn


class RecordedModel(Model):
    """A Strands model whose answers are recorded in the turn's run: a replay gets them
    back without a request. A model asked at a recorded position with other messages than
    recorded stops the run (``ArgumentDrift``) unless ``drift="warn"``."""

    def __init__(
        self, model: Model, *, guarded: Iterable[str] = (), drift: ModelDrift = "error"
    ) -> None:
        if model.stateful:
            raise ConfigurationError(
                "a model that keeps the conversation on the provider's side cannot be "
                "recorded: a replay would not tell it what it was told"
            )
        self.model = model
        self.guarded = frozenset(guarded)  # the tool names the model may ask for
        self.drift = model_drift(drift)

    def update_config(self, **model_config: Any) -> None:
        self.model.update_config(**model_config)

    def get_config(self) -> Any:
        return self.model.get_config()

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise UsageError("oncelog records whole answers: structured output is not recorded")

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        turn = _turn("Strands model")
        # Strands forgets answers at the end of each tool cycle; the replay needs them at
        # the cycle they were given for, keyed by the recorded tool use id.
        for ident, given in turn.answers.items():
            turn.agent._interrupt_state.interrupts.setdefault(ident, given)
        dynamic = turn.agent.tool_registry.dynamic_tools
        for spec in tool_specs or []:
            name = spec["name"]
            # Strands' structured output tool only validates the answer: nothing to guard.
            if name not in self.guarded and not isinstance(dynamic.get(name), StructuredOutputTool):
                raise unguarded("Strands", name, _FIX % name)
        loop = asyncio.get_running_loop()

        def call() -> dict[str, Any]:
            async def collect() -> list[Any]:
                stream = self.model.stream(messages, tool_specs, system_prompt, **kwargs)
                return [event async for event in stream]

            events = asyncio.run_coroutine_threadsafe(collect(), loop).result()
            usage = next((e["metadata"].get("usage") for e in events if "metadata" in e), None)
            return {"events": json.loads(json.dumps(events, default=repr)), "usage": usage or {}}

        asked = digest([system_prompt, messages, sorted(s["name"] for s in tool_specs or [])])
        # A call that raised (Strands retries a throttled one) takes no step: its retry is
        # this step, as on a replay.
        with model_step(turn.run, "model") as step:
            recorded = await asyncio.to_thread(
                turn.run.llm, step, call, name="strands_model", input_digest=asked,
                drift=self.drift,
            )  # fmt: skip
        for event in recorded["events"]:
            yield event


# -- tools --------------------------------------------------------------------------------


class _GuardedTool(AgentTool):
    """A Strands tool whose every call is an oncelog effect at the next position of the
    turn's run; the tool reads its key with ``current_idempotency_key()``."""

    def __init__(self, tool: AgentTool, policy: Policy, ledger: Ledger) -> None:
        super().__init__()
        self.tool, self.policy, self.ledger = tool, policy, ledger
        mark(self, "guarded")

    @property
    def tool_name(self) -> str:
        return str(self.tool.tool_name)

    @property
    def tool_spec(self) -> ToolSpec:
        return self.tool.tool_spec

    @property
    def tool_type(self) -> str:
        return str(self.tool.tool_type)

    async def stream(
        self, tool_use: ToolUse, invocation_state: dict[str, Any], **kwargs: Any
    ) -> ToolGenerator:
        turn = _turn("Strands tool")
        arguments = json.loads(json.dumps(tool_use["input"], default=repr))
        invalid = _invalid(self.tool, arguments)
        if invalid is not None:  # the model's bad arguments: told, nothing recorded
            yield ToolResultEvent(_result(tool_use, "error", f"Error: {invalid}"))
            return
        loop = asyncio.get_running_loop()

        def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                events = self.tool.stream(tool_use, invocation_state, **kwargs)
                coro = _final_result(events)
                return asyncio.run_coroutine_threadsafe(coro, loop).result()

        step = next_step_id(turn.run, self.tool_name)
        effect = self.policy.tool(self.tool_name, perform)
        try:
            recorded = await asyncio.to_thread(turn.run.effect, step, effect, arguments)
        except (EffectRefused, ApprovalDenied) as refused:  # definite: the model is told
            yield ToolResultEvent(_result(tool_use, "error", f"Error: {refused.message}"))
            return
        except ApprovalRequired as waits:
            turn.waiting = waits
            asked = ask(self.ledger, turn.run.run_id, step, self.tool_name, arguments, waits)
            raise InterruptException(asked) from None
        except OnceLogError as stop:
            turn.stop = stop
            invocation_state["agent"].cancel()  # before the model is asked again
            raise
        yield ToolResultEvent(_told(recorded, tool_use))


def _invalid(tool: AgentTool, arguments: Any) -> str | None:
    """Why a decorated tool refuses these arguments, before anything runs; None if not."""
    metadata = getattr(tool, "_metadata", None)
    validate = getattr(metadata, "validate_input", None)
    if validate is None or not isinstance(arguments, dict):
        return None
    try:
        validate(arguments)
    except ValueError as exc:
        return str(exc)
    return None


async def _final_result(events: AsyncIterable[Any]) -> dict[str, Any]:
    """The tool's result, as recorded: its status and content (the tool use id is the
    model's, new when a model is asked again). A tool that raised raises here, so the
    effect's outcome is judged by its kind; so is an interrupt inside a guarded tool: what
    the tool did before it asked is not known."""
    last: Any = None
    async for event in events:
        if isinstance(event, ToolInterruptEvent):
            raise ConfigurationError(
                "a guarded Strands tool raised an interrupt: ask before the effect, with "
                "Policy(..., approval=True) or a BeforeToolCallEvent hook"
            )
        if isinstance(event, ToolResultEvent):
            if event.exception is not None:
                raise event.exception
            last = event.tool_result
        else:
            last = getattr(event, "tool_result", event)
    if not (isinstance(last, dict) and "content" in last):
        last = {"status": "success", "content": [{"text": str(last)}]}
    kept = {"status": last.get("status", "success"), "content": last["content"]}
    jsonable: dict[str, Any] = json.loads(json.dumps(kept, default=repr))
    return jsonable


def _told(recorded: Any, tool_use: ToolUse) -> ToolResult:
    """What the model sees of a recorded effect: the tool's own result, or what a probe
    found at the provider (or a person recorded), as the tool's output."""
    if isinstance(recorded, dict) and "content" in recorded:
        return {"toolUseId": tool_use["toolUseId"], "status": recorded.get("status", "success"),
                "content": recorded["content"]}  # fmt: skip
    if recorded is NO_RESULT:
        text = "done; its result is not known (a person recorded it as done without it)"
    else:
        text = recorded if isinstance(recorded, str) else json.dumps(recorded, default=repr)
    return _result(tool_use, "success", text)


def _result(tool_use: ToolUse, status: Any, text: str) -> ToolResult:
    return {"toolUseId": tool_use["toolUseId"], "status": status, "content": [{"text": text}]}


# -- the guard ----------------------------------------------------------------------------


@dataclasses.dataclass
class Guard:
    """Runs a Strands agent's turns exactly-once (see the module's doc). ``kinds`` maps
    each tool's name to its kind or ``Policy``; ``repeatable`` names tools safe to run
    again on every replay, unguarded; any other tool is refused
    (``oncelog.UnguardedTool``) before the model is asked. ``agent`` names the scope of
    the turns' runs, as ``ledger.run(agent=...)`` does: its kill switch and its daily
    budget (``ledger.set_agent_budget``) cover every session's turns."""

    ledger: Ledger
    kinds: Mapping[str, PolicyLike]
    repeatable: Iterable[str] = ()
    drift: ModelDrift = "error"
    agent: str | None = None

    def __post_init__(self) -> None:
        self.repeatable = repeatable_names(self.repeatable, self.kinds)
        self._policies = policies(self.kinds)
        model_drift(self.drift)

    def guard(self, agent: Agent) -> Agent:
        """Guard ``agent`` in place (``invoke`` does it); guarding it again does nothing."""
        registry = agent.tool_registry.registry
        for name, tool in list(registry.items()):
            registry[name] = self._tool(name, tool)
        if not isinstance(agent.model, RecordedModel):
            agent.model = RecordedModel(agent.model, guarded=registry, drift=self.drift)
        else:
            agent.model.guarded = frozenset(registry)
        agent.tool_executor = SequentialToolExecutor()  # one at a time, the model's order
        return agent

    def _tool(self, name: str, tool: AgentTool) -> AgentTool:
        if marked(tool) is not None:
            return tool
        if name in self.repeatable:
            mark(tool, "repeatable")
            return tool
        if name not in self._policies:
            raise unguarded("Strands", name, _FIX % name)
        return _GuardedTool(tool, policy_for(self._policies, name, "Strands"), self.ledger)

    async def invoke_async(
        self, agent: Agent, prompt: AgentInput = None, *, session: str, **options: Any
    ) -> Any:
        """``invoke`` from async code: the turn runs in a thread of its own (as Strands
        runs ``agent(...)``), and the event loop goes on meanwhile."""
        return await asyncio.to_thread(self.invoke, agent, prompt, session=session, **options)

    def invoke(
        self, agent: Agent, prompt: AgentInput = None, *, session: str, **options: Any
    ) -> Any:
        """``agent(prompt, **options)`` as one turn in its run. An oncelog stop is raised
        to the caller. A turn stopped by an interrupt (the guard's approval, or the agent's
        own hooks') returns Strands' result, ``stop_reason == "interrupt"``, with its run
        left waiting; answering them (a list of ``interruptResponse`` blocks, the Strands
        way) goes on with the turn in its run."""
        self.guard(agent)
        _refuse_session_manager(agent)
        answers: dict[str, Interrupt] = {}
        if agent._interrupt_state.activated:
            prompt, answers = answered(self.ledger, agent, prompt)
        else:
            remember_start(agent, prompt)
        run_id = turn_run_id(agent, session)
        try:
            return self._run_turn(agent, prompt, run_id, answers, options)
        except BaseException:
            # The conversation as it was before the turn: the same prompt, given again to
            # this agent object (a person resolved the stop), replays the same turn.
            set_back(agent)
            raise

    def _run_turn(
        self,
        agent: Agent,
        prompt: AgentInput,
        run_id: str,
        answers: dict[str, Interrupt],
        options: dict[str, Any],
    ) -> Any:
        stopped: WaitingForPerson | None = None
        try:
            with self.ledger.run(run_id, agent=self.agent) as run:
                turn = _turns[id(run)] = _Turn(run, agent, answers)
                try:
                    result = agent(prompt, **options)
                except Exception as exc:
                    raise _oncelog_error(exc) or exc from None
                finally:
                    _turns.pop(id(run), None)
                if turn.stop is not None:
                    raise turn.stop
                if result.stop_reason == "interrupt":  # the run waits for a person
                    stopped = turn.waiting or WaitingForPerson(
                        "the turn waits for answers to its Strands interrupts", run_id=run_id
                    )
                    raise stopped
                return result
        except WaitingForPerson as exc:
            if exc is not stopped:
                raise
            return result


def _refuse_session_manager(agent: Agent) -> None:
    if getattr(agent, "_session_manager", None) is not None:
        raise ConfigurationError(
            "a guarded Strands agent keeps its conversation in oncelog's runs, not in a "
            "session manager (it persists a killed turn's messages apart from the "
            "ledger): build the agent without one; session= names the conversation"
        )


def _oncelog_error(exc: BaseException) -> OnceLogError | None:
    """oncelog's stop inside what Strands raised (it wraps some errors of the loop)."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return None
        if isinstance(seen, OnceLogError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
