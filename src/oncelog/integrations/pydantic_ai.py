"""PydanticAI: tool calls as oncelog effects, model responses recorded.

    from oncelog.integrations import pydantic_ai as oncelog_pai

    agent = Agent(
        oncelog_pai.RecordedModel("openai:gpt-4o"),
        toolsets=[oncelog_pai.GuardedToolset(FunctionToolset([send_email, charge]),
                                             kinds={"send_email": "create", "charge": "payment"})],
    )
    async with ledger.run("ticket-4711"):
        result = await agent.run("...")

A restarted process runs the agent again from the top inside the same run: recorded model
responses come back without a request (no tokens spent), so the agent asks for the same
tool calls, whose recorded results come back too; the first step never recorded runs live.
Steps are named ``model#1``, ``send_email#1``: by count in the run, never by the tool call
ids a model makes up. Guarded tools are ``sequential``: each runs alone, in the order the
model gave them, so that it takes the same position in the run on every replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from .._exceptions import EffectRefused, UsageError
from ._common import (
    Policy,
    PolicyLike,
    async_run,
    digest,
    keyed,
    named,
    next_step_id,
    policies,
    policy_for,
)
from ._common import missing_extra as _missing

try:
    from pydantic_ai import ModelRetry, RunContext, ToolFailed
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import KnownModelName, Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _missing("pydantic-ai", "PydanticAI") from exc

__all__ = ["GuardedToolset", "RecordedModel"]

# Parts of a request that differ in every process, for the same conversation.
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})


class RecordedModel(WrapperModel):
    """A model whose responses are recorded in the run the agent executes in."""

    def __init__(self, wrapped: Model | KnownModelName | str, *, step_name: str = "model") -> None:
        super().__init__(wrapped)
        self.step_name = step_name

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        run = async_run("PydanticAI model")

        async def call(input_sha256: str) -> dict[str, Any]:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
            usage = {"input_tokens": response.usage.input_tokens,
                     "output_tokens": response.usage.output_tokens}  # fmt: skip
            return {"response": ModelMessagesTypeAdapter.dump_python([response], mode="json")[0],
                    "usage": usage}  # fmt: skip

        asked = _stable(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))
        step = next_step_id(run, self.step_name)
        recorded = await run.llm(step, named(call, "pydantic_ai_model"), digest(asked))
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


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


@dataclasses.dataclass(init=False)
class GuardedToolset(WrapperToolset[Any]):
    """A toolset whose every tool call is an oncelog effect. ``kinds`` maps each tool's name
    to its kind (``"create"``) or an ``oncelog.integrations.Policy``.

    A tool's ``ModelRetry`` or ``ToolFailed`` is a definite refusal: recorded, and raised
    again for the model on replay, as are the policy's ``refusals`` (as ``ModelRetry``).
    Any other error of a kind that is not idempotent leaves the effect in doubt and stops
    the run. The tool reads its key with ``current_idempotency_key()``."""

    policies: dict[str, Policy]

    def __init__(self, wrapped: AbstractToolset[Any], *, kinds: Mapping[str, PolicyLike]) -> None:
        super().__init__(wrapped)
        self.policies = {
            name: dataclasses.replace(p, refusals=(*p.refusals, ModelRetry, ToolFailed))
            for name, p in policies(kinds).items()
        }

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        for name in tools:
            policy_for(self.policies, name, "PydanticAI")
        # A sequential tool runs alone, after the calls before it: the model's order.
        return {
            name: dataclasses.replace(t, tool_def=dataclasses.replace(t.tool_def, sequential=True))
            for name, t in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = async_run("PydanticAI tool")

        async def perform(arguments: Any, *, idempotency_key: str) -> Any:
            with keyed(idempotency_key):
                result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            return to_jsonable_python(result)

        effect = self.policies[name].tool(name, perform)
        arguments = to_jsonable_python(tool_args)
        try:
            return await run.effect(next_step_id(run, name), effect, arguments)
        except EffectRefused as refused:
            message = refused.message.removeprefix("the provider refused: ")
            if refused.error_type == "ToolFailed":
                raise ToolFailed(message) from refused
            raise ModelRetry(message) from refused
