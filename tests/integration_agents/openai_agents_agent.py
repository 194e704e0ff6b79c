"""An OpenAI Agents SDK agent with two guarded function tools, in one oncelog run.

    python -m tests.integration_agents.openai_agents_agent --ledger L --effects E
        --model-calls M --run R [--style guard_tools|guard_agent|unguarded]

``--style`` is how the tools reach the agent: through ``guard_tools`` (the default); as
plain ``@function_tool``s in ``Agent(tools=...)``, the agent then guarded with
``guard_agent``; or ``unguarded``, plain tools next to a ``RecordedModel``, which oncelog
must refuse.

The model is the SDK's own ``ScriptedModel``, answering from the conversation as a real
model would: both tools in one turn (an email and a charge, each a real effect written to
E), then a final answer. Its call ids are new at every call. Prints the final output as
JSON on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

from agents import Agent, Usage, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import openai_agents as oncelog_agents

from .effect_log import EffectLog, count_model_call

TURNS = 5  # more than the agent needs: each answer comes from the conversation


def scripted_model(calls_file: str) -> ScriptedModel:
    def respond(call: ModelCall) -> ModelStep:
        count_model_call(calls_file)
        usage = Usage(requests=1, input_tokens=40, output_tokens=8, total_tokens=48)
        outputs = [i["output"] for i in call.input if i.get("type") == "function_call_output"]
        if outputs:
            return ModelStep(output=[assistant_message(f"done: {', '.join(outputs)}")], usage=usage)
        calls = [
            function_call("send_email", {"to": "ada@example.com", "body": "your receipt"},
                          call_id=f"call_{uuid.uuid4().hex[:12]}"),
            function_call("charge", {"customer": "cus_ada", "cents": 500},
                          call_id=f"call_{uuid.uuid4().hex[:12]}"),
        ]  # fmt: skip
        return ModelStep(output=calls, usage=usage)

    return ScriptedModel([ModelStep.respond(respond) for _ in range(TURNS)])


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--effects", "--model-calls", "--run"):
        parser.add_argument(name, required=True)
    parser.add_argument("--style", choices=["guard_tools", "guard_agent", "unguarded"])
    args = parser.parse_args()
    set_tracing_disabled(True)  # offline: no traces sent anywhere
    ledger = oncelog.open(args.ledger)
    log = EffectLog(args.effects)

    @function_tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        return json.dumps(log.perform(key(), "send_email", [to, body]))

    @function_tool
    def charge(customer: str, cents: int) -> str:
        """Charge a customer."""
        return json.dumps(log.perform(key(), "charge", [customer, cents]))

    kinds = {
        "send_email": Policy("create", probe=log.probe),
        "charge": Policy("payment", probe=log.probe),
    }
    model = oncelog_agents.RecordedModel(scripted_model(args.model_calls))
    agent = Agent(name="billing", instructions="Bill the customer and tell them.", model=model)
    if args.style in (None, "guard_tools"):
        agent.tools = oncelog_agents.guard_tools([send_email, charge], kinds=kinds)
    else:
        agent.tools = [send_email, charge]
    if args.style == "guard_agent":
        agent = oncelog_agents.guard_agent(agent, kinds=kinds)

    async def bill() -> str:
        async with ledger.run(args.run):
            result = await oncelog_agents.run_agent(agent, "bill ticket 4711")
        return str(result.final_output)

    oncelog.run_main(lambda: print(json.dumps(asyncio.run(bill()))))


def key() -> str:
    """The guarded call's key; an unguarded tool (which oncelog refuses) would have none."""
    try:
        return current_idempotency_key()
    except oncelog.NoActiveRun:
        return "unguarded"


if __name__ == "__main__":
    main()
