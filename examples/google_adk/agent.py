"""A Google ADK agent whose email goes out once, however often it is killed.

    pip install '.[google-adk]'
    python examples/google_adk/agent.py ticket-4711

Offline: the model is a scripted ``BaseLlm`` answering from the conversation; sessions
live in ``sessions.db`` (ADK's SQLite session service), so a restarted process resumes
the invocation it was in. The email "provider" appends to outbox.jsonl, with the
idempotency key oncelog derived.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import google_adk as oncelog_adk

warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")
OUTBOX = Path("outbox.jsonl")


def send_email(to: str, body: str) -> dict[str, Any]:
    """Send an email to a customer."""
    key = current_idempotency_key()  # a real provider gets it as its idempotency key
    with OUTBOX.open("a") as out:
        out.write(json.dumps({"key": key, "to": to, "body": body}) + "\n")
    return {"receipt": f"msg_{key[-8:]}"}


def find_email(key: str, arguments: Any) -> oncelog.ProbeAnswer:
    """The provider's lookup by idempotency key: what a kill mid-call leaves in doubt."""
    for line in OUTBOX.read_text().splitlines() if OUTBOX.exists() else []:
        if json.loads(line)["key"] == key:
            return oncelog.Found({"receipt": f"msg_{key[-8:]}"})
    return oncelog.NOT_FOUND


class ScriptedLlm(BaseLlm):
    """Asks for the email until the conversation holds its receipt, then answers."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        said = json.dumps([c.model_dump(mode="json") for c in llm_request.contents])
        if "msg_" in said:
            part = types.Part(text="emailed ada her receipt")
        else:
            call = types.FunctionCall(
                name="send_email", args={"to": "ada@example.com", "body": "your receipt"}
            )
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


async def main(ticket: str) -> str:
    guard = oncelog_adk.Guard(
        oncelog.open(), kinds={"send_email": Policy("create", probe=find_email)}
    )
    agent = LlmAgent(name="clerk", model=ScriptedLlm(), tools=[send_email])
    app = App(
        name="billing",
        root_agent=agent,
        plugins=[guard],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )
    sessions = SqliteSessionService("sessions.db")
    runner = Runner(app=app, session_service=sessions)
    if await sessions.get_session(app_name="billing", user_id="ada", session_id=ticket) is None:
        await sessions.create_session(app_name="billing", user_id="ada", session_id=ticket)
    message = types.Content(role="user", parts=[types.Part(text=f"email ada about {ticket}")])
    answer = ""
    events = guard.run_async(runner, user_id="ada", session_id=ticket, new_message=message)
    async for event in events:
        for part in (event.content.parts if event.content else None) or []:
            answer = part.text or answer
    return answer


if __name__ == "__main__":
    oncelog.run_main(lambda: print(asyncio.run(main(sys.argv[1]))))
