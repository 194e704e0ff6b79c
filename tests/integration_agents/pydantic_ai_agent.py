"""A PydanticAI agent with two guarded tools, in one oncelog run.

    python -m tests.integration_agents.pydantic_ai_agent --ledger L --effects E
        --model-calls M --run R [--style toolset|decorators|unguarded] [--lease-ttl S]
        [--once-per] [--no-probe]

``--style`` is how the tools are registered: a ``GuardedToolset`` (the default); the
framework's usual ``@agent.tool_plain`` and ``@agent.tool`` with the ``Guard`` capability;
or ``unguarded``, plain tools next to a ``RecordedModel``, which oncelog must refuse.

The model is PydanticAI's ``FunctionModel``, answering from the conversation as a real
model would: both tools in one answer (an email and a charge, each a real effect written
to E), then a final answer. Its tool call ids are new at every call. Prints the output as
JSON on the last line. With ``--once-per`` each tool names its subject (the email's
recipient and body, the charge's customer), so the same request in another run acts once;
``--no-probe`` declares no probe, so an effect in doubt halts its run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import pydantic_ai as oncelog_pai

from .effect_log import EffectLog, count_model_call


def function_model(calls_file: str) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        count_model_call(calls_file)
        usage = RequestUsage(input_tokens=40, output_tokens=8)
        returns = [
            part.model_response_str()
            for message in messages
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {', '.join(returns)}")], usage=usage)
        calls: list[Any] = [
            ToolCallPart("send_email", {"to": "ada@example.com", "body": "your receipt"},
                         tool_call_id=f"call_{uuid.uuid4().hex[:12]}"),
            ToolCallPart("charge", {"customer": "cus_ada", "cents": 500},
                         tool_call_id=f"call_{uuid.uuid4().hex[:12]}"),
        ]  # fmt: skip
        return ModelResponse(parts=calls, usage=usage)

    return FunctionModel(respond)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--effects", "--model-calls", "--run"):
        parser.add_argument(name, required=True)
    parser.add_argument("--style", choices=list(STYLES), default="toolset")
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    parser.add_argument("--once-per", action="store_true")
    parser.add_argument("--no-probe", action="store_true")
    args = parser.parse_args()
    ledger = oncelog.open(args.ledger, lease_ttl=args.lease_ttl)
    policies = kinds(EffectLog(args.effects), args.once_per, probe=not args.no_probe)
    agent = STYLES[args.style](function_model(args.model_calls), EffectLog(args.effects), policies)

    async def bill() -> str:
        async with ledger.run(args.run):
            result = await agent.run("bill ticket 4711")
        return result.output

    oncelog.run_main(lambda: print(json.dumps(asyncio.run(bill()))))


def kinds(log: EffectLog, once_per: bool, *, probe: bool) -> dict[str, Policy]:
    found = log.probe if probe else None
    if once_per:
        return {
            "send_email": Policy(
                "create", probe=found, once_per=lambda to, body: ("email", to, body)
            ),
            "charge": Policy(
                "payment", probe=found, once_per=lambda customer, cents: ("charge", customer)
            ),
        }
    return {"send_email": Policy("create", probe=found), "charge": Policy("payment", probe=found)}


Kinds = dict[str, Policy]


def with_toolset(model: FunctionModel, log: EffectLog, policies: Kinds) -> Agent[None, str]:
    def send_email(to: str, body: str) -> dict[str, Any]:
        """Send an email to a customer."""
        return log.perform(current_idempotency_key(), "send_email", [to, body])

    def charge(customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer."""
        return log.perform(current_idempotency_key(), "charge", [customer, cents])

    tools = FunctionToolset([send_email, charge])
    guarded = oncelog_pai.GuardedToolset(tools, kinds=policies)
    return Agent(oncelog_pai.RecordedModel(model), toolsets=[guarded])


def with_decorators(model: FunctionModel, log: EffectLog, policies: Kinds) -> Agent[None, str]:
    """As a PydanticAI user writes it; oncelog is one capability."""
    agent = Agent(model, capabilities=[oncelog_pai.Guard(kinds=policies)])

    @agent.tool_plain
    def send_email(to: str, body: str) -> dict[str, Any]:
        """Send an email to a customer."""
        return log.perform(current_idempotency_key(), "send_email", [to, body])

    @agent.tool
    def charge(ctx: RunContext[None], customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer."""
        return log.perform(current_idempotency_key(), "charge", [customer, cents])

    return agent


def unguarded(model: FunctionModel, log: EffectLog, policies: Kinds) -> Agent[None, str]:
    """A recorded model with tools nobody guards: refused before the model is asked."""

    def send_email(to: str, body: str) -> dict[str, Any]:
        """Send an email to a customer."""
        return log.perform("unguarded", "send_email", [to, body])

    def charge(customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer."""
        return log.perform("unguarded", "charge", [customer, cents])

    return Agent(oncelog_pai.RecordedModel(model), tools=[send_email, charge])


STYLES = {"toolset": with_toolset, "decorators": with_decorators, "unguarded": unguarded}


if __name__ == "__main__":
    main()
