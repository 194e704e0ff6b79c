"""A Strands agent whose tool sends an email through the fake provider process, plain or
guarded by oncelog, with a scripted model (no network).

    python -m tests.integration_agents.strands_agent --ledger L --provider URL
        --model-calls M --session S --flags DIR [--guarded] [--probe]
        [--confirm none|policy|hook] [--fault none|kill|tool-raises] [--throttled]

``--fault`` is what goes wrong, once (a file in ``--flags`` remembers it happened):
``kill`` (the provider SIGKILLs this process after sending the email, before answering),
``tool-raises`` (the tool raises after the provider sent the email; Strands hands the error
to the model, which asks for the email again). ``--confirm`` asks a person before the email,
the Strands way, with an interrupt: ``hook``, the agent's own ``BeforeToolCallEvent`` hook
raises it; ``policy``, guarded, the tool's policy asks for an oncelog approval and the
guard raises it (plain, the hook does). Either way this script answers yes, as a person at
a UI would, and invokes the agent again with the answer. ``--throttled``: the model's first
call ever raises Strands' ``ModelThrottledException``, which Strands retries (at once here).
Prints the agent's last message as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from strands import Agent, ModelRetryStrategy, tool
from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry
from strands.models.model import Model
from strands.types.content import Messages
from strands.types.exceptions import ModelThrottledException
from strands.types.streaming import StreamEvent
from strands.types.tools import AgentTool, ToolContext, ToolSpec

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import strands as oncelog_strands

from .effect_log import count_model_call, post_effect

TO, BODY = "ada@example.com", "your receipt"


class ScriptModel(Model):
    """A scripted model's part that no script changes: no config, no structured output."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class ScriptedModel(ScriptModel):
    """Answers as a real model would: asks for the email until a tool result holds its
    receipt, then answers. Its tool use ids are new at every call, as a model's."""

    def __init__(self, calls_file: str, throttled: Path | None = None) -> None:
        self.calls_file = calls_file
        self.throttled = throttled  # a flag file: the first call is throttled, once

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        if self.throttled is not None and _first(self.throttled):
            raise ModelThrottledException("slow down")
        count_model_call(self.calls_file)
        for event in answer(messages):
            yield event


def answer(messages: Messages) -> list[StreamEvent]:
    usage: Any = {"inputTokens": 40, "outputTokens": 8, "totalTokens": 48}
    end: Any = {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}
    if "sent fx_" in json.dumps(messages, default=str):
        return [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockStart": {"start": {}}},
            {"contentBlockDelta": {"delta": {"text": "emailed ada"}}},
            {"contentBlockStop": {}},
            {"messageStop": {"stopReason": "end_turn"}},
            end,
        ]
    start: Any = {"toolUse": {"toolUseId": f"tooluse_{uuid.uuid4().hex[:12]}",
                              "name": "send_email"}}  # fmt: skip
    arguments = json.dumps({"to": TO, "body": BODY})
    return [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockStart": {"start": start}},
        {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}},
        {"contentBlockStop": {}},
        {"messageStop": {"stopReason": "tool_use"}},
        end,
    ]


class Confirm(HookProvider):
    """Strands' human-in-the-loop: an interrupt before each email, answered by a person."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.ask)

    def ask(self, event: BeforeToolCallEvent) -> None:
        if event.tool_use["name"] != "send_email":
            return
        said = event.interrupt("confirm-email", reason=event.tool_use["input"])
        if said != "y":
            event.cancel_tool = "the person said no"


def asking_tool() -> AgentTool:
    """A ``send_email`` that asks a person from inside the tool (``tool_context``)."""

    @tool(name="send_email", context=True)
    def send_email(to: str, body: str, tool_context: ToolContext) -> str:
        """Send an email to a customer."""
        tool_context.interrupt("sure?", reason=to)
        return "sent fx_1"

    return send_email


def main() -> None:
    args = parser().parse_args()
    flags = Path(args.flags)
    flags.mkdir(parents=True, exist_ok=True)

    def post(to: str, body: str, key: str) -> Any:
        kill = args.fault == "kill" and _first(flags / "killed")
        payload = {"tool": "send_email", "to": to, "body": body}
        receipt = post_effect(args.provider, args.session, payload, key, kill=kill)
        if args.fault == "tool-raises" and _first(flags / "raised"):
            raise ConnectionError("the connection was reset after the request was sent")
        return receipt

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email to a customer."""
        key = current_idempotency_key() if args.guarded else uuid.uuid4().hex
        return f"sent fx_{post(to, body, key)['effect_id']}"

    def probe(key: str, arguments: Any) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        return oncelog.Found(f"sent fx_{found[0]['effect_id']}") if found else oncelog.NOT_FOUND

    own_hook = args.confirm == "hook" or (args.confirm == "policy" and not args.guarded)
    hooks: list[Any] = [Confirm()] if own_hook else []
    throttled = flags / "throttled" if args.throttled else None
    agent = Agent(
        model=ScriptedModel(args.model_calls, throttled), tools=[send_email], hooks=hooks,
        agent_id="billing", callback_handler=None,
        retry_strategy=ModelRetryStrategy(initial_delay=0),
    )  # fmt: skip
    ledger = oncelog.open(args.ledger)
    approval = True if args.confirm == "policy" else None
    policy = Policy("create", probe=probe if args.probe else None, approval=approval)
    guard = oncelog_strands.Guard(ledger, kinds={"send_email": policy})

    def invoke(prompt: Any) -> Any:
        if args.guarded:
            return guard.invoke(agent, prompt, session=args.session)
        return agent(prompt)

    def work() -> None:
        result = invoke("Email ada@example.com her receipt for ticket 4711.")
        while result.stop_reason == "interrupt":  # a person at a UI says yes
            print("asked", file=sys.stderr)  # the test counts how often a person was asked
            oncelogs = args.guarded and args.confirm == "policy"  # the guard's interrupt
            said: Any = {"approve": True, "by": "alice"} if oncelogs else "y"
            result = invoke([{"interruptResponse": {"interruptId": i.id, "response": said}}
                             for i in result.interrupts])  # fmt: skip
        print(json.dumps(str(result)))

    oncelog.run_main(work)


def _first(flag: Path) -> bool:
    """True the first time only: the fault happens once."""
    if flag.exists():
        return False
    flag.write_text("done")
    return True


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    for name in ("--ledger", "--provider", "--model-calls", "--session", "--flags"):
        parser.add_argument(name, required=True)
    for flag in ("--guarded", "--probe", "--throttled"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--confirm", choices=["none", "policy", "hook"], default="none")
    parser.add_argument("--fault", choices=["none", "kill", "tool-raises"], default="none")
    return parser


if __name__ == "__main__":
    main()
