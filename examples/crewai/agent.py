"""A CrewAI crew whose email goes out once, however often it is killed or retried.

    pip install '.[crewai]'
    python examples/crewai/agent.py ticket-4711

Offline: the model is a scripted ``BaseLLM`` answering from the conversation. The email
"provider" appends to outbox.jsonl, with the idempotency key oncelog derived.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # offline: nothing sent anywhere
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

import oncelog
from oncelog.integrations import crewai as oncelog_crewai
from oncelog.integrations import current_idempotency_key

OUTBOX = Path("outbox.jsonl")


@tool("send_email")
def send_email(to: str, body: str) -> str:
    """Send an email to a customer."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with OUTBOX.open("a") as out:
        out.write(json.dumps({"key": key, "to": to, "body": body}) + "\n")
    return f"sent to {to}"


class ScriptedLLM(BaseLLM):
    """Stands in for a real model: one tool call, then a final answer."""

    def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
        if "sent to" in json.dumps(messages, default=str):
            return "The customer has been told."
        arguments = json.dumps({"to": "ada@example.com", "body": "Refunded."})
        return [{"id": "c1", "type": "function",
                 "function": {"name": "send_email", "arguments": arguments}}]  # fmt: skip

    def supports_function_calling(self) -> bool:
        return True


def handle(ledger: oncelog.Ledger, ticket: str) -> str:
    clerk = Agent(role="Support clerk", goal="Answer refunds", backstory="Careful.",
                  llm=ScriptedLLM(model="scripted"), tools=[send_email])  # fmt: skip
    task = Task(description=f"Refund {ticket} and tell the customer.",
                expected_output="What the customer was told.", agent=clerk)  # fmt: skip
    crew = Crew(agents=[clerk], tasks=[task])
    # The guard records the agents' models, guards their tools, and runs each task in
    # the run support/TICKET/task-1.
    guard = oncelog_crewai.Guard(ledger, crew="support", kinds={"send_email": "create"})
    return str(guard.kickoff(crew, request=ticket).raw)


def main() -> None:
    ledger = oncelog.open()
    ticket = sys.argv[1] if len(sys.argv) > 1 else "ticket-4711"
    oncelog.run_main(lambda: print(handle(ledger, ticket)))


if __name__ == "__main__":
    main()
