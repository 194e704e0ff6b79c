"""A Google ADK agent that refunds an order through the fake provider process, with a
scripted model (no network) and ADK's SQLite sessions, plain or guarded, with the
declarations a refund tool meets: a subject, a period, a probe, an agent's scope.

    python -m tests.integration_agents.google_adk_refund_agent --ledger L --provider URL
        --sessions S --model-calls M --session ID --flags DIR --order JSON [--guarded]
        [--subject] [--once-for SECONDS] [--probe] [--agent NAME]
        [--retry-plugin] [--node-retries N] [--fault none|kill|raises|declined]
        [--model-fails]

The model asks for ``refund(order=ORDER, cents=500)`` until the turn's conversation holds
a receipt, then answers with it; an error makes it ask again, as a model would. The
provider counts every request as a refund (it ignores keys). ``--fault`` happens once (a
file in ``--flags`` remembers it): ``kill``, the provider SIGKILLs this process after
refunding, before answering; ``raises``, the tool raises after the provider refunded;
``declined``, the provider answers and the tool raises the policy's refusal
(``CardDeclined``) after the on-call person turned the kill switch on. ``--retry-plugin``
adds ADK's ``ReflectAndRetryToolPlugin``, which hands a tool's error to the model, which
asks for the refund again; ``--node-retries`` declares ADK's retry of the agent after an
error (``retry_config``); ``--model-fails``: the model's first call ever raises (the
service unavailable), once.

Each start sends the request as the session's next message; guarded, the guard resumes
the session's unfinished invocation of it (ADK's Resume) or starts a new turn. Prints the
final answer as JSON on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import urllib.parse
import urllib.request
import uuid
import warnings
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.workflow import RetryConfig
from google.genai import types

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import google_adk as oncelog_adk

from .effect_log import count_model_call, post_effect
from .google_adk_agent import _final

warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")
APP, USER, RUN = "refunds", "ada", "refunds"  # RUN: the provider's label for every refund


class CardDeclined(Exception):
    """The provider's definite no: nothing was refunded."""


class ScriptedLlm(BaseLlm):
    """Asks for the refund until this turn's conversation holds its receipt."""

    model: str = "scripted"
    calls_file: str = ""
    order: Any = 42
    fails_once: str = ""  # a flag file: the first call raises, once

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self.fails_once and _first(Path(self.fails_once)):
            raise ConnectionError("the model service is unavailable")
        count_model_call(self.calls_file)
        said = _this_turn(llm_request.contents)
        receipts = [found for s in said for found in re.findall(r"fx_\d+", s)]
        if receipts or len(said) >= 3:  # a model gives up after a few errors
            text = f"refunded order {self.order}: {receipts[-1] if receipts else 'failed'}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        call = types.FunctionCall(
            id=f"call_{uuid.uuid4().hex[:12]}", name="refund",
            args={"order": self.order, "cents": 500},
        )  # fmt: skip
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


def _this_turn(contents: list[types.Content]) -> list[str]:
    """What the refund answered since the user's last message."""
    said: list[str] = []
    for content in contents:
        for part in content.parts or []:
            if part.text and content.role == "user":
                said = []
            response = part.function_response
            if response is not None and response.name == "refund":
                said.append(json.dumps(response.response))
    return said


def main() -> None:
    args = parser().parse_args()
    flags = Path(args.flags)
    flags.mkdir(parents=True, exist_ok=True)
    ledger = oncelog.open(args.ledger)

    def post(payload: dict[str, Any], key: str, *, kill: bool) -> dict[str, Any]:
        return post_effect(args.provider, RUN, payload, key, kill=kill)

    def refund(order: int, cents: int) -> dict[str, Any]:
        """Refund an order."""
        key = current_idempotency_key() if args.guarded else uuid.uuid4().hex
        kill = args.fault == "kill" and _first(flags / "killed")
        payload = {"order": order, "cents": cents, "session": args.session}
        receipt = post(payload, key, kill=kill)
        if args.fault == "raises" and _first(flags / "raised"):
            raise ConnectionError("the connection was reset after the request was sent")
        if args.fault == "declined" and _first(flags / "declined"):
            ledger.halt("refunds misbehave", by="oncall")  # meanwhile, on call
            raise CardDeclined("the card was declined")
        return {"receipt": f"fx_{receipt['effect_id']}"}

    def probe(key: str, arguments: Any) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        if not found:
            return oncelog.NOT_FOUND
        return oncelog.Found({"receipt": f"fx_{found[0]['effect_id']}"})

    policy = Policy(
        "payment", refusals=(CardDeclined,), probe=probe if args.probe else None,
        once_per=(lambda order, **_: ("refund", order)) if args.subject else None,
        once_for=None if args.once_for is None else timedelta(seconds=args.once_for),
    )  # fmt: skip
    fails = str(flags / "model-failed") if args.model_fails else ""
    model = ScriptedLlm(calls_file=args.model_calls, order=json.loads(args.order), fails_once=fails)
    retry = RetryConfig(max_attempts=args.node_retries + 1, initial_delay=0.0, jitter=0.0)
    agent = LlmAgent(
        name="clerk", model=model, tools=[refund],
        retry_config=retry if args.node_retries else None,
    )  # fmt: skip
    plugins: list[BasePlugin] = [ReflectAndRetryToolPlugin()] if args.retry_plugin else []
    guard = oncelog_adk.Guard(ledger, kinds={"refund": policy}, agent=args.agent)
    if args.guarded:
        plugins.append(guard)
    app = App(
        name=APP, root_agent=agent, plugins=plugins,
        resumability_config=ResumabilityConfig(is_resumable=True),
    )  # fmt: skip
    sessions = SqliteSessionService(args.sessions)
    runner = Runner(app=app, session_service=sessions)

    async def turn() -> str:
        known = await sessions.get_session(app_name=APP, user_id=USER, session_id=args.session)
        if known is None:
            await sessions.create_session(app_name=APP, user_id=USER, session_id=args.session)
        text = f"refund order {args.order}"
        message = types.Content(role="user", parts=[types.Part(text=text)])
        run = guard.run_async if args.guarded else _plain(runner)
        events = run(runner, user_id=USER, session_id=args.session, new_message=message)
        return _final([event async for event in events])

    oncelog.run_main(lambda: print(json.dumps(asyncio.run(turn()))))


def _plain(runner: Runner) -> Any:
    def run(_: Runner, **options: Any) -> Any:
        return runner.run_async(**options)

    return run


def _first(flag: Path) -> bool:
    """True the first time only: the fault happens once."""
    if flag.exists():
        return False
    flag.write_text("done")
    return True


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--provider", "--sessions", "--model-calls", "--session"):
        parser.add_argument(name, required=True)
    parser.add_argument("--flags", required=True)
    parser.add_argument("--order", required=True, help="the order, as JSON: 42 or 42.0")
    for flag in ("--guarded", "--subject", "--probe", "--model-fails"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--once-for", type=float, default=None)
    parser.add_argument("--agent", default=None)
    parser.add_argument("--retry-plugin", action="store_true")
    parser.add_argument("--node-retries", type=int, default=0)
    parser.add_argument("--fault", choices=["none", "kill", "raises", "declined"], default="none")
    return parser


if __name__ == "__main__":
    main()
