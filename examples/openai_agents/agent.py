"""An OpenAI Agents SDK agent whose charge happens once, however often it is killed.

    pip install '.[openai-agents]'
    python examples/openai_agents/agent.py ticket-4711

Offline: the model is the SDK's ScriptedModel, answering from the conversation. The
payment "provider" appends to payments.jsonl, with the idempotency key oncelog derived.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import oncelog
from oncelog.integrations import current_idempotency_key
from oncelog.integrations import openai_agents as oncelog_agents

PAYMENTS = Path("payments.jsonl")


@function_tool
def charge(customer: str, cents: int) -> str:
    """Charge a customer."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with PAYMENTS.open("a") as out:
        out.write(json.dumps({"key": key, "customer": customer, "cents": cents}) + "\n")
    return "charged"


def answer(call: ModelCall) -> ModelStep:
    """Stands in for a real model: one tool call, then a final answer."""
    if any(item.get("type") == "function_call_output" for item in call.input):
        return ModelStep(output=[assistant_message("The customer was charged.")])
    return ModelStep(
        output=[function_call("charge", {"customer": "cus_ada", "cents": 500}, call_id="c1")]
    )


async def bill(ledger: oncelog.Ledger, ticket: str) -> str:
    agent = Agent(
        name="billing",
        model=oncelog_agents.RecordedModel(ScriptedModel([ModelStep.respond(answer)] * 4)),
        tools=[charge],
    )
    # Every tool of the agent guarded where it is; one left out would be refused.
    agent = oncelog_agents.guard_agent(agent, kinds={"charge": "payment"})
    async with ledger.run(ticket):
        result = await oncelog_agents.run_agent(agent, f"bill {ticket}")
    return str(result.final_output)


def main() -> None:
    set_tracing_disabled(True)  # offline
    ledger = oncelog.open()
    ticket = sys.argv[1] if len(sys.argv) > 1 else "ticket-4711"
    oncelog.run_main(lambda: print(asyncio.run(bill(ledger, ticket))))


if __name__ == "__main__":
    main()
