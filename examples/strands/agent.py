"""A Strands agent whose refund goes out once, however often it is killed, and only once a
person said yes to exactly that refund.

    pip install '.[strands]'
    python examples/strands/agent.py ticket-4711

Offline: the model is a scripted ``Model`` answering from the conversation. The payment
"provider" appends to outbox.jsonl, with the idempotency key oncelog derived. The refund
asks a person first: the turn stops with a Strands interrupt, answered here as a person at
a UI would (``ONCELOG_EXAMPLE_ANSWER=no`` says no).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.models.model import Model
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import strands as oncelog_strands

OUTBOX = Path("outbox.jsonl")


@tool
def refund(order: str, cents: int) -> str:
    """Refund an order."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with OUTBOX.open("a") as out:
        out.write(json.dumps({"key": key, "order": order, "cents": cents}) + "\n")
    return f"refunded {order}"


class ScriptedModel(Model):
    """Stands in for a real model: one tool call, then a final answer."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        said = json.dumps(messages)
        if "refunded" in said or "denied" in said:
            text = "The refund is done." if "refunded" in said else "No refund: a person said no."
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": text}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        start: Any = {"toolUse": {"toolUseId": "t1", "name": "refund"}}
        yield {"contentBlockStart": {"start": start}}
        arguments = json.dumps({"order": "o-4711", "cents": 1500})
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def handle(ledger: oncelog.Ledger, ticket: str) -> str:
    guard = oncelog_strands.Guard(
        ledger,
        kinds={"refund": Policy("payment", approval=True)},  # a person says yes first
    )
    agent = Agent(model=ScriptedModel(), tools=[refund], agent_id="support",
                  callback_handler=None)  # fmt: skip
    result = guard.invoke(agent, f"Refund the order of {ticket}.", session=ticket)
    while result.stop_reason == "interrupt":
        # What a UI shows the person: the tool and its exact arguments.
        asked = [i for i in result.interrupts if i.name == oncelog_strands.APPROVAL]
        for interrupt in asked:
            print(f"asks: {interrupt.reason['tool']} {json.dumps(interrupt.reason['arguments'])}")
        yes = os.environ.get("ONCELOG_EXAMPLE_ANSWER", "yes") == "yes"
        said = {"approve": yes, "by": "alice"}
        answers: list[Any] = [
            {"interruptResponse": {"interruptId": i.id, "response": said}} for i in asked
        ]
        result = guard.invoke(agent, answers, session=ticket)  # a "no" is told to the model
    return str(result).strip()


def main() -> None:
    ledger = oncelog.open()
    ticket = sys.argv[1] if len(sys.argv) > 1 else "ticket-4711"
    oncelog.run_main(lambda: print(handle(ledger, ticket)))


if __name__ == "__main__":
    main()
