"""The OpenAI Agents SDK: function tools as oncelog effects, model responses recorded.

    from oncelog.integrations import openai_agents as oncelog_agents

    agent = Agent(
        name="billing",
        model=oncelog_agents.RecordedModel(OpenAIResponsesModel(...)),
        tools=oncelog_agents.guard_tools([send_email, charge], kinds={"send_email": "create",
                                                                     "charge": "payment"}),
    )
    async with ledger.run("ticket-4711"):
        result = await oncelog_agents.run_agent(agent, "...")

The tools may also stay where they are (``Agent(tools=[send_email, charge])``) and the
agent be guarded as a whole: ``oncelog_agents.guard_agent(agent, kinds={...})``. A
``RecordedModel`` refuses, before its first call, an agent that could call a tool nobody
guards (``oncelog.UnguardedTool``): a plain function tool would run again on every replay.
A tool that is harmless to run again is named in ``repeatable=``; the SDK's hosted tools
(web search, file search...) run inside the recorded model call and need nothing.

A restarted process runs the agent again from the top inside the same run: recorded model
responses come back without a request (no tokens spent), so the agent asks for the same
tool calls, whose recorded results come back too; the first step never recorded runs live.
Steps are named ``model#1``, ``send_email#1``: by count in the run, never by the call ids
a model makes up. ``run_config()`` runs a turn's tool calls one at a time, in the order the
model gave them, so that each takes the same position in the run on every replay;
``run_agent`` is ``Runner.run`` with that config, and with oncelog's errors unwrapped.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from oncelog import ConfigurationError, EffectRefused, OnceLogError, UsageError

from ._common import (
    ModelDrift,
    Policy,
    PolicyLike,
    async_run,
    digest,
    keyed,
    mark,
    marked,
    model_drift,
    model_step,
    next_step_id,
    parse_arguments,
    policies,
    policy_for,
    repeatable_names,
    unguarded,
)
from ._common import missing_extra as _missing

try:
    from agents import (
        Agent,
        AgentsException,
        CodeInterpreterTool,
        FileSearchTool,
        FunctionTool,
        HostedMCPTool,
        ImageGenerationTool,
        ModelResponse,
        RunConfig,
        Runner,
        RunResult,
        Usage,
        WebSearchTool,
    )
    from agents.agent_output import AgentOutputSchemaBase
    from agents.handoffs import Handoff
    from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model, ModelProvider, ModelTracing
    from agents.run_config import ToolExecutionConfig
    from agents.tool import (
        Tool,
        resolve_function_tool_failure_error_function,
        set_function_tool_failure_error_function,
    )
    from agents.tool_context import ToolContext
    from openai.types.responses.response_prompt_param import ResponsePromptParam
    from pydantic import TypeAdapter
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("openai-agents", "the OpenAI Agents SDK") from exc

__all__ = [
    "RecordedModel",
    "RecordedModelProvider",
    "guard_agent",
    "guard_tool",
    "guard_tools",
    "run_agent",
    "run_config",
]

# Tools the provider runs inside the model call: the recorded response holds what they did.
_HOSTED = (FileSearchTool, WebSearchTool, HostedMCPTool, ImageGenerationTool, CodeInterpreterTool)
_FIX = "Guard it: oncelog.integrations.openai_agents.guard_agent(agent, kinds={%r: KIND})"

_ITEM = TypeAdapter(TResponseOutputItem)
_USAGE = TypeAdapter(Usage)


def run_config(**options: Any) -> RunConfig:
    """A ``RunConfig`` (with ``options``) that runs function tools one at a time."""
    return RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1), **options)


async def run_agent(agent: Agent[Any], input: Any, **options: Any) -> RunResult:
    """``Runner.run`` for an agent with guarded tools: one tool call at a time (``options``
    may carry a ``run_config``; its other settings are kept), and oncelog's errors raised
    as themselves, not wrapped in the SDK's ``UserError``, so that the run halts or waits
    and ``oncelog.run_main`` exits with the right code."""
    config = options.pop("run_config", None) or RunConfig()
    one_at_a_time = ToolExecutionConfig(max_function_tool_concurrency=1)
    config = dataclasses.replace(config, tool_execution=one_at_a_time)
    try:
        return await Runner.run(agent, input, run_config=config, **options)
    except AgentsException as exc:
        if isinstance(exc.__cause__, OnceLogError):
            raise exc.__cause__ from None
        raise


class RecordedModel(Model):
    """A model whose responses are recorded in the run the agent executes in."""

    def __init__(
        self,
        model: Model,
        *,
        step_name: str = "model",
        repeatable: Iterable[str] = (),
        drift: ModelDrift = "error",
    ) -> None:
        self.model = model
        self.step_name = step_name
        self.drift = model_drift(drift)  # another question at a recorded position stops
        # Tools the agent's own list cannot mark (an MCP server's): safe to call again.
        self.repeatable = repeatable_names(repeatable, {})

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        run = async_run("OpenAI Agents SDK model")
        _refuse_unguarded(t for t in tools if getattr(t, "name", None) not in self.repeatable)

        async def call() -> dict[str, Any]:
            response = await self.model.get_response(
                system_instructions, input, model_settings, tools, output_schema, handoffs,
                tracing, previous_response_id=previous_response_id,
                conversation_id=conversation_id, prompt=prompt,
            )  # fmt: skip
            return _recorded(response)

        asked = digest([system_instructions, input])
        with model_step(run, self.step_name) as step:
            recorded = await run.llm(
                step, call, name="agents_model", input_digest=asked, drift=self.drift
            )
        return _response(recorded)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise UsageError("oncelog records whole responses: use Runner.run, not run_streamed")


class RecordedModelProvider(ModelProvider):
    """Every model a provider hands out, recorded: ``run_config(model_provider=...)``."""

    def __init__(self, provider: ModelProvider, *, repeatable: Iterable[str] = ()) -> None:
        self.provider = provider
        self.repeatable = repeatable_names(repeatable, {})

    def get_model(self, model_name: str | None) -> Model:
        return RecordedModel(self.provider.get_model(model_name), repeatable=self.repeatable)


def _recorded(response: ModelResponse) -> dict[str, Any]:
    return {
        # exclude_unset: the items go back to the model as input; fields it never set
        # must stay absent, not become nulls.
        "output": [item.model_dump(mode="json", exclude_unset=True) for item in response.output],
        "usage": _USAGE.dump_python(response.usage, mode="json"),
        "response_id": response.response_id,
        "request_id": response.request_id,
    }


def _response(recorded: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        output=[_ITEM.validate_python(item) for item in recorded["output"]],
        usage=_USAGE.validate_python(recorded["usage"]),
        response_id=recorded["response_id"],
        request_id=recorded["request_id"],
    )


def _refuse_unguarded(tools: Iterable[Tool]) -> None:
    for tool in tools:
        if not isinstance(tool, _HOSTED) and marked(tool) is None:
            name = str(getattr(tool, "name", type(tool).__name__))
            raise unguarded("Agents SDK", name, _FIX % name)


def guard_agent(
    agent: Agent[Any], *, kinds: Mapping[str, PolicyLike], repeatable: Iterable[str] = ()
) -> Agent[Any]:
    """A copy of ``agent`` whose tools are guarded (``guard_tools``); the SDK's hosted
    tools and tools guarded already are kept as they are."""
    return agent.clone(tools=guard_tools(agent.tools, kinds=kinds, repeatable=repeatable))


def guard_tools(
    tools: Iterable[Tool], *, kinds: Mapping[str, PolicyLike], repeatable: Iterable[str] = ()
) -> list[Any]:
    """Each tool guarded under the policy ``kinds`` names for it, or marked safe to run
    again on every replay if ``repeatable`` names it; any other tool is refused here
    (``UnguardedTool``). The SDK's hosted tools and tools guarded already are kept as
    they are. (A list of ``Any``: ``Agent(tools=...)`` wants its own ``Tool`` union.)"""
    table, again = policies(kinds), repeatable_names(repeatable, kinds)
    return [_guarded(tool, table, again) for tool in tools]


def _guarded(tool: Tool, table: Mapping[str, Policy], again: frozenset[str]) -> Tool:
    if isinstance(tool, _HOSTED) or marked(tool) is not None:
        return tool
    name = str(getattr(tool, "name", type(tool).__name__))
    if name in again:
        kept = copy.copy(tool)
        mark(kept, "repeatable")
        return kept
    if not isinstance(tool, FunctionTool):
        raise unguarded("Agents SDK", name, "Only function tools can be guarded")
    return guard_tool(tool, policy_for(table, name, "Agents SDK"))


def guard_tool(tool: FunctionTool, policy: PolicyLike) -> FunctionTool:
    """A copy of ``tool`` whose every call is an oncelog effect. Its errors no longer turn
    into a message for the model inside the effect: a provider's definite refusal (the
    policy's ``refusals``) and an error of an idempotent kind still do, through the tool's
    own ``failure_error_function``; any other error leaves the effect in doubt and stops
    the run. The tool reads its key with ``current_idempotency_key()``."""
    if not isinstance(tool, FunctionTool):
        raise ConfigurationError(f"only function tools can be guarded, not {tool!r}")
    if marked(tool) == "guarded":
        return tool  # guarding twice would make each call an effect inside an effect
    policy = policy if isinstance(policy, Policy) else Policy(policy)
    guarded = copy.copy(tool)
    set_function_tool_failure_error_function(guarded, None)
    invoke = guarded.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        run = async_run("OpenAI Agents SDK tool")
        _check_one_at_a_time(ctx)

        async def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                return await invoke(ctx, input)

        effect = policy.tool(tool.name, perform)
        try:
            return await run.effect(next_step_id(run, tool.name), effect, parse_arguments(input))
        except OnceLogError as exc:
            if not isinstance(exc, EffectRefused):
                raise
            return await _tell_model(tool, ctx, exc)
        except Exception as exc:  # an idempotent kind's error: recorded not done
            return await _tell_model(tool, ctx, exc)

    guarded.on_invoke_tool = on_invoke_tool
    mark(guarded, "guarded")
    return guarded


def _check_one_at_a_time(ctx: ToolContext[Any]) -> None:
    execution = None if ctx.run_config is None else ctx.run_config.tool_execution
    if execution is None or execution.max_function_tool_concurrency != 1:
        raise ConfigurationError(
            "guarded tools must run one at a time, in the model's order: "
            "oncelog.integrations.openai_agents.run_agent(agent, input), or "
            "Runner.run(..., run_config=oncelog.integrations.openai_agents.run_config())"
        )


async def _tell_model(tool: FunctionTool, ctx: ToolContext[Any], error: Exception) -> Any:
    formatter = resolve_function_tool_failure_error_function(tool, ctx)
    if formatter is None:
        raise error
    message = formatter(ctx, error)
    return await message if inspect.isawaitable(message) else message
