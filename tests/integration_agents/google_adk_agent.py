"""A Google ADK agent whose tools charge and email through the fake provider process,
plain or guarded by oncelog, with a scripted model (no network) and ADK's SQLite session
service, in a resumable app (ADK's Resume feature).

    python -m tests.integration_agents.google_adk_agent --ledger L --provider URL
        --sessions S --model-calls M --request R --flags DIR [--guarded] [--probe]
        [--fault NAME] [--confirm none|ask|yes|no] [--retry-plugin] [--invocation-id ID]

The model asks, in one answer, for a charge and an email; once both results are in the
conversation it answers. ``--confirm`` gives the email ADK's tool confirmation
(``FunctionTool(require_confirmation=True)``): the first process ends paused on it, and a
process started with ``--confirm yes`` (or ``no``) answers ADK's confirmation request, as
a person's client would. ``--fault`` happens once (a file in ``--flags`` remembers it):
``tool-raises`` (the email tool raises after the provider sent it), ``kill`` (the provider
SIGKILLs this process after sending the email, before answering). ``--retry-plugin`` adds
ADK's ``ReflectAndRetryToolPlugin``, which hands a tool's error back to the model, which
asks for the tool again.

Every start does what a supervisor's restart does: the session's unfinished invocation
(its user message persisted, no final answer) is resumed under its own invocation id,
ADK's Resume; otherwise the message starts a new one (guarded, ``--invocation-id`` names
it instead). Prints the final answer as JSON on
the last line, or "paused" when ADK waits for a confirmation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.parse
import urllib.request
import uuid
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import google_adk as oncelog_adk

from .effect_log import count_model_call, post_effect

warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")
APP, USER, CONFIRM = "billing", "ada", "adk_request_confirmation"
ASK = "charge ada 500 cents and email her the receipt"


class ScriptedLlm(BaseLlm):
    """Answers as a real model would: asks for what the conversation lacks, then answers.
    A tool's error in the conversation makes it ask for that tool again."""

    model: str = "scripted"
    calls_file: str = ""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        count_model_call(self.calls_file)
        answered = _answers(llm_request.contents)
        wanted: dict[str, dict[str, Any]] = {
            "charge": {"customer": "cus_ada", "cents": 500},
            "send_email": {"to": "ada@example.com", "body": "your receipt"},
        }
        missing = [name for name in wanted if not answered.get(name, "").startswith("ok")]
        if not missing or any(answered.get(n, "").startswith("rejected") for n in missing):
            text = "done: " + ", ".join(f"{n} {answered.get(n)}" for n in wanted)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        calls = [
            types.Part(function_call=types.FunctionCall(
                id=f"call_{uuid.uuid4().hex[:12]}", name=name, args=wanted[name]))
            for name in missing
        ]  # fmt: skip
        yield LlmResponse(content=types.Content(role="model", parts=calls))


def _answers(contents: list[types.Content]) -> dict[str, str]:
    """What the conversation says each tool last answered: ok, rejected or failed."""
    answers: dict[str, str] = {}
    for content in contents:
        for part in content.parts or []:
            response = part.function_response
            if response is None or response.name is None:
                continue
            said = json.dumps(response.response)
            if "rejected" in said:
                answers[response.name] = "rejected"
            elif "fx_" in said:
                answers[response.name] = "ok"
            elif "requires confirmation" not in said:
                answers[response.name] = "failed"
    return answers


def main() -> None:
    args = parser().parse_args()
    flags = Path(args.flags)
    flags.mkdir(parents=True, exist_ok=True)

    def post(tool: str, payload: dict[str, Any], key: str, *, kill: bool) -> dict[str, Any]:
        return post_effect(args.provider, args.request, {"tool": tool, **payload}, key, kill=kill)

    def key() -> str:
        return current_idempotency_key() if args.guarded else uuid.uuid4().hex

    def charge(customer: str, cents: int) -> dict[str, Any]:
        """Charge a customer."""
        receipt = post("charge", {"customer": customer, "cents": cents}, key(), kill=False)
        return {"receipt": f"fx_{receipt['effect_id']}"}

    def send_email(to: str, body: str) -> dict[str, Any]:
        """Send an email to a customer."""
        kill = args.fault == "kill" and _first(flags / "killed")
        receipt = post("send_email", {"to": to, "body": body}, key(), kill=kill)
        if args.fault == "tool-raises" and _first(flags / "raised"):
            raise ConnectionError("the connection was reset after the request was sent")
        return {"receipt": f"fx_{receipt['effect_id']}"}

    email = FunctionTool(send_email, require_confirmation=args.confirm != "none")
    agent = LlmAgent(
        name="clerk", model=ScriptedLlm(calls_file=args.model_calls), tools=[charge, email]
    )
    plugins: list[BasePlugin] = [ReflectAndRetryToolPlugin()] if args.retry_plugin else []
    ledger = oncelog.open(args.ledger)
    guard = None
    if args.guarded:
        guard = oncelog_adk.Guard(ledger, kinds=kinds(args))
        plugins.append(guard)
    app = App(
        name=APP, root_agent=agent, plugins=plugins,
        resumability_config=ResumabilityConfig(is_resumable=True),
    )  # fmt: skip
    sessions = SqliteSessionService(args.sessions)
    runner = Runner(app=app, session_service=sessions)

    async def turn() -> str:
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id=args.request)
        if session is None:
            session = await sessions.create_session(
                app_name=APP, user_id=USER, session_id=args.request
            )
        message = _message(session, args.confirm)
        if guard is not None:
            events = guard.run_async(
                runner, user_id=USER, session_id=args.request, new_message=message,
                invocation_id=args.invocation_id,
            )  # fmt: skip
        else:  # ADK's Resume: the unfinished invocation again, under its own id
            events = runner.run_async(
                user_id=USER, session_id=args.request, new_message=message,
                invocation_id=_unfinished(session),
            )  # fmt: skip
        return _final([event async for event in events])

    oncelog.run_main(lambda: print(json.dumps(asyncio.run(turn()))))


def kinds(args: argparse.Namespace) -> dict[str, Policy]:
    def probe(key: str, arguments: Any) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        return (
            oncelog.Found({"receipt": f"fx_{found[0]['effect_id']}"})
            if found
            else oncelog.NOT_FOUND
        )

    found = probe if args.probe else None
    return {"charge": Policy("payment", probe=found), "send_email": Policy("create", probe=found)}


def _message(session: Session, confirm: str) -> types.Content:
    """The user's request; or, when ADK waits for a confirmation and this process brings
    one, the answer to ADK's confirmation request."""
    pending = _confirmation_asked(session)
    if pending is not None and confirm in ("yes", "no"):
        answer = types.FunctionResponse(
            id=pending, name=CONFIRM, response={"confirmed": confirm == "yes"}
        )
        return types.Content(role="user", parts=[types.Part(function_response=answer)])
    return types.Content(role="user", parts=[types.Part(text=ASK)])


def _confirmation_asked(session: Session) -> str | None:
    answered = {
        p.function_response.id
        for e in session.events for p in (e.content.parts if e.content else []) or []
        if p.function_response is not None
    }  # fmt: skip
    for event in reversed(session.events):
        for part in (event.content.parts if event.content else []) or []:
            call = part.function_call
            if call is not None and call.name == CONFIRM and call.id not in answered:
                return call.id
    return None


def _unfinished(session: Session) -> str | None:
    """The invocation of the session's last user message, if no final answer followed."""
    if not session.events:
        return None
    last = session.events[-1]
    if last.author != "user" and last.is_final_response() and not last.get_function_calls():
        return None
    return last.invocation_id


def _final(events: list[Event]) -> str:
    for event in reversed(events):
        for part in (event.content.parts if event.content else []) or []:
            if part.text:
                return part.text
    return "paused"


def _first(flag: Path) -> bool:
    """True the first time only: the fault happens once."""
    if flag.exists():
        return False
    flag.write_text("done")
    return True


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--provider", "--sessions", "--model-calls", "--request", "--flags"):
        parser.add_argument(name, required=True)
    parser.add_argument("--invocation-id", default=None)
    parser.add_argument("--guarded", action="store_true")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--retry-plugin", action="store_true")
    parser.add_argument("--confirm", choices=["none", "ask", "yes", "no"], default="none")
    parser.add_argument("--fault", choices=["none", "tool-raises", "kill"], default="none")
    return parser


if __name__ == "__main__":
    main()
