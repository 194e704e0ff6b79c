"""A PydanticAI agent whose email goes out once, however often it is killed.

    pip install '.[pydantic-ai]'
    python examples/pydantic_ai/agent.py ticket-4711

Offline: the model is a FunctionModel answering from the conversation. The email
"provider" appends to outbox.jsonl, with the idempotency key oncelog derived.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import oncelog
from oncelog.integrations import current_idempotency_key
from oncelog.integrations import pydantic_ai as oncelog_pai

OUTBOX = Path("outbox.jsonl")


def send_email(to: str, body: str) -> str:
    """Send an email to a customer."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with OUTBOX.open("a") as out:
        out.write(json.dumps({"key": key, "to": to, "body": body}) + "\n")
    return f"sent to {to}"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for a real model: one tool call, then a final answer."""
    if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
        return ModelResponse(parts=[TextPart("The customer has been told.")])
    call = ToolCallPart(
        "send_email", {"to": "ada@example.com", "body": "Refunded."}, tool_call_id="c1"
    )
    return ModelResponse(parts=[call])


async def handle(ledger: oncelog.Ledger, ticket: str) -> str:
    # The Guard capability records the model and guards every tool of the agent.
    guard = oncelog_pai.Guard(kinds={"send_email": "create"})
    agent = Agent(FunctionModel(model), tools=[send_email], capabilities=[guard])
    async with ledger.run(ticket):
        result = await agent.run(f"refund {ticket}")
    return result.output


def main() -> None:
    ledger = oncelog.open()
    ticket = sys.argv[1] if len(sys.argv) > 1 else "ticket-4711"
    oncelog.run_main(lambda: print(asyncio.run(handle(ledger, ticket))))


if __name__ == "__main__":
    main()
