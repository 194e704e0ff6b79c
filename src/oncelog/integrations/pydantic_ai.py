"""PydanticAI: tool calls as oncelog effects, model responses recorded.

    from oncelog.integrations import pydantic_ai as oncelog_pai

    agent = Agent(
        "openai:gpt-4o",
        tools=[send_email, charge],  # or @agent.tool_plain, @agent.tool, toolsets=[...]
        capabilities=[oncelog_pai.Guard(kinds={"send_email": "create", "charge": "payment"})],
    )
    async with ledger.run("ticket-4711"):
        result = await agent.run("...")

``Guard`` records the agent's model and guards every tool the agent has, however it was
registered; ``RecordedModel`` and ``GuardedToolset`` are its two halves, for agents built
piece by piece. A ``RecordedModel`` refuses, before its first request, an agent that could
call a tool nobody guards (``oncelog.UnguardedTool``): it would run again on every replay.
A tool that is harmless to run again is named in ``repeatable=``.

A restarted process runs the agent again from the top inside the same run: recorded model
responses come back without a request (no tokens spent), so the agent asks for the same
tool calls, whose recorded results come back too; the first step never recorded runs live.
Steps are named ``model#1``, ``send_email#1``: by count in the run, never by the tool call
ids a model makes up. Guarded tools are ``sequential``: each runs alone, in the order the
model gave them, so that it takes the same position in the run on every replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from oncelog import EffectRefused, UsageError

from ._common import (
    ModelDrift,
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
    unguarded,
)
from ._common import missing_extra as _missing

try:
    from pydantic_ai import ModelRetry, RunContext, ToolFailed
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import KnownModelName, Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("pydantic-ai", "PydanticAI") from exc

__all__ = ["Guard", "GuardedToolset", "RecordedModel"]

# Parts of a request that differ in every process, for the same conversation.
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})
# The key of a tool definition's metadata saying how oncelog treats the tool.
_MARK = "oncelog"
_FIX = "Guard the agent's tools: Agent(..., capabilities=[oncelog_pai.Guard(kinds={%r: KIND})])"


class RecordedModel(WrapperModel):
    """A model whose responses are recorded in the run the agent executes in."""

    def __init__(
        self,
        wrapped: Model | KnownModelName | str,
        *,
        step_name: str = "model",
        drift: ModelDrift = "error",
    ) -> None:
        super().__init__(wrapped)
        self.step_name = step_name
        self.drift = model_drift(drift)  # another question at a recorded position stops

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        run = async_run("PydanticAI model")
        _refuse_unguarded(model_request_parameters.function_tools)

        async def call() -> dict[str, Any]:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
            usage = {"input_tokens": response.usage.input_tokens,
                     "output_tokens": response.usage.output_tokens}  # fmt: skip
            return {"response": ModelMessagesTypeAdapter.dump_python([response], mode="json")[0],
                    "usage": usage}  # fmt: skip

        asked = _stable(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))
        with model_step(run, self.step_name) as step:
            recorded = await run.llm(
                step, call, name="pydantic_ai_model", input_digest=digest(asked), drift=self.drift
            )
        response = ModelMessagesTypeAdapter.validate_python([recorded["response"]])[0]
        assert isinstance(response, ModelResponse)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        raise UsageError("oncelog records whole responses: use agent.run, not run_stream")
        yield  # pragma: no cover - makes this an async generator


def _refuse_unguarded(tools: Iterable[ToolDefinition]) -> None:
    for tool_def in tools:
        if (tool_def.metadata or {}).get(_MARK) is None:
            raise unguarded("PydanticAI", tool_def.name, _FIX % tool_def.name)


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@dataclasses.dataclass(init=False)
class GuardedToolset(WrapperToolset[Any]):
    """A toolset whose every tool call is an oncelog effect. ``kinds`` maps each tool's name
    to its kind (``"create"``) or an ``oncelog.integrations.Policy``; ``repeatable`` names
    the tools that may run again on every replay, unguarded. Any other tool is refused
    (``oncelog.UnguardedTool``) when the agent lists its tools, before a model request.

    A tool's ``ModelRetry`` or ``ToolFailed`` is a definite refusal: recorded, and raised
    again for the model on replay, as are the policy's ``refusals`` (as ``ModelRetry``).
    Any other error of a kind that is not idempotent leaves the effect in doubt and stops
    the run. The tool reads its key with ``current_idempotency_key()``."""

    # The fields are what __init__ takes: PydanticAI copies a toolset per run with
    # dataclasses.replace, which calls __init__ again with them.
    kinds: Mapping[str, PolicyLike]
    repeatable: frozenset[str]

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        *,
        kinds: Mapping[str, PolicyLike],
        repeatable: Iterable[str] = (),
    ) -> None:
        super().__init__(wrapped)
        self.kinds = kinds
        self.repeatable = repeatable_names(repeatable, kinds)
        self._policies = {
            name: dataclasses.replace(p, refusals=(*p.refusals, ModelRetry, ToolFailed))
            for name, p in policies(kinds).items()
        }
        self._inner: set[str] = set()  # tools an inner GuardedToolset guards already

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        return {name: self._declared(name, t) for name, t in tools.items()}

    def _declared(self, name: str, tool: ToolsetTool[Any]) -> ToolsetTool[Any]:
        """The tool's definition marked guarded (and ``sequential``: it runs alone, after
        the calls before it, in the model's order) or repeatable."""
        tool_def = tool.tool_def
        if (tool_def.metadata or {}).get(_MARK) is not None:
            self._inner.add(name)  # guarding it again would make an effect inside an effect
            return tool
        if name in self.repeatable:
            changes: dict[str, Any] = {
                "metadata": {**(tool_def.metadata or {}), _MARK: "repeatable"}
            }
        else:
            policy_for(self._policies, name, "PydanticAI")
            changes = {
                "metadata": {**(tool_def.metadata or {}), _MARK: "guarded"},
                "sequential": True,
            }
        return dataclasses.replace(tool, tool_def=dataclasses.replace(tool_def, **changes))

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if name in self.repeatable or name in self._inner or name not in self._policies:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        run = async_run("PydanticAI tool")

        async def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            return to_jsonable_python(result)

        effect = self._policies[name].tool(name, perform)
        arguments = to_jsonable_python(tool_args)
        try:
            return await run.effect(next_step_id(run, name), effect, arguments)
        except EffectRefused as refused:
            message = refused.message.removeprefix("the provider refused: ")
            if refused.error_type == "ToolFailed":
                raise ToolFailed(message) from refused
            raise ModelRetry(message) from refused


@dataclasses.dataclass
class Guard(AbstractCapability[Any]):
    """The capability that makes an agent exactly-once: its model recorded (a
    ``RecordedModel``) and every tool it has guarded (a ``GuardedToolset`` around all of
    them, however they were registered: ``tools=``, ``@agent.tool``, ``@agent.tool_plain``,
    ``toolsets=``). ``kinds`` and ``repeatable`` are ``GuardedToolset``'s."""

    kinds: Mapping[str, PolicyLike]
    repeatable: Iterable[str] = ()

    def __post_init__(self) -> None:
        self.repeatable = repeatable_names(self.repeatable, self.kinds)
        policies(self.kinds)  # a wrong kind is refused where the agent is built

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return GuardedToolset(toolset, kinds=self.kinds, repeatable=self.repeatable)

    def get_wrapper_model(self, model: Model) -> Model:
        return model if isinstance(model, RecordedModel) else RecordedModel(model)
