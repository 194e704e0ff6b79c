"""A Strands agent that refunds an order through the fake provider process, with a
scripted model (no network), plain or guarded, with the declarations a refund tool meets:
a subject, a period, a probe, an agent's scope.

    python -m tests.integration_agents.strands_refund_agent --ledger L --provider URL
        --model-calls M --session ID --flags DIR --order JSON [--guarded] [--subject]
        [--once-for SECONDS] [--probe] [--agent NAME] [--prompts N]
        [--fault none|kill|declined]

The model asks for ``refund(order=ORDER, cents=500)`` until the turn's conversation holds
a receipt, then answers with it; an error makes it ask again, as a model would. The
provider counts every request as a refund (it ignores keys). ``--fault`` happens once (a
file in ``--flags`` remembers it): ``kill``, the provider SIGKILLs this process after
refunding, before answering; ``declined``, the provider answers and the tool raises the
policy's refusal (``CardDeclined``) after the on-call person turned the kill switch on;
Strands hands a tool's error to the model, which asks for the refund again.
``--prompts`` sends the same prompt that many times to the same agent, one turn each.
Prints the last answer as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

import oncelog
from oncelog.integrations import Policy, current_idempotency_key
from oncelog.integrations import strands as oncelog_strands

from .effect_log import count_model_call, post_effect
from .strands_agent import ScriptModel

RUN = "refunds"  # the provider's label for every refund


class CardDeclined(Exception):
    """The provider's definite no: nothing was refunded."""


class ScriptedModel(ScriptModel):
    """Asks for the refund until this turn's conversation holds its receipt."""

    def __init__(self, calls_file: str, order: Any) -> None:
        self.calls_file, self.order = calls_file, order

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        count_model_call(self.calls_file)
        for event in self.answer(_this_turn(messages)):
            yield event

    def answer(self, said: list[str]) -> list[StreamEvent]:
        usage: Any = {"inputTokens": 40, "outputTokens": 8, "totalTokens": 48}
        end: Any = {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}
        receipts = [found for s in said for found in re.findall(r"fx_\d+", s)]
        if receipts or len(said) >= 3:  # a model gives up after a few errors
            text = f"refunded order {self.order}: {receipts[-1] if receipts else 'failed'}"
            return [
                {"messageStart": {"role": "assistant"}},
                {"contentBlockStart": {"start": {}}},
                {"contentBlockDelta": {"delta": {"text": text}}},
                {"contentBlockStop": {}},
                {"messageStop": {"stopReason": "end_turn"}},
                end,
            ]
        start: Any = {"toolUse": {"toolUseId": f"tooluse_{uuid.uuid4().hex[:12]}",
                                  "name": "refund"}}  # fmt: skip
        arguments = json.dumps({"order": self.order, "cents": 500})
        return [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockStart": {"start": start}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}},
            {"contentBlockStop": {}},
            {"messageStop": {"stopReason": "tool_use"}},
            end,
        ]


def _this_turn(messages: Messages) -> list[str]:
    """What the refund answered since the user's last prompt."""
    said: list[str] = []
    for message in messages:
        for block in message["content"]:
            if message["role"] == "user" and "text" in block:
                said = []
            if "toolResult" in block:
                said.append(json.dumps(block["toolResult"], default=str))
    return said


def main() -> None:
    args = parser().parse_args()
    flags = Path(args.flags)
    flags.mkdir(parents=True, exist_ok=True)
    ledger = oncelog.open(args.ledger)

    def post(payload: dict[str, Any], key: str, *, kill: bool) -> dict[str, Any]:
        return post_effect(args.provider, RUN, payload, key, kill=kill)

    @tool
    def refund(order: int, cents: int) -> str:
        """Refund an order."""
        key = current_idempotency_key() if args.guarded else uuid.uuid4().hex
        kill = args.fault == "kill" and _first(flags / "killed")
        payload = {"order": order, "cents": cents, "session": args.session}
        receipt = post(payload, key, kill=kill)
        if args.fault == "declined" and _first(flags / "declined"):
            ledger.halt("refunds misbehave", by="oncall")  # meanwhile, on call
            raise CardDeclined("the card was declined")
        return f"refunded fx_{receipt['effect_id']}"

    def probe(key: str, arguments: Any) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{args.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        if not found:
            return oncelog.NOT_FOUND
        return oncelog.Found(f"refunded fx_{found[0]['effect_id']}")

    policy = Policy(
        "payment", refusals=(CardDeclined,), probe=probe if args.probe else None,
        once_per=(lambda order, **_: ("refund", order)) if args.subject else None,
        once_for=None if args.once_for is None else timedelta(seconds=args.once_for),
    )  # fmt: skip
    order = json.loads(args.order)
    agent = Agent(
        model=ScriptedModel(args.model_calls, order), tools=[refund], agent_id="refunds",
        callback_handler=None,
    )  # fmt: skip
    guard = oncelog_strands.Guard(ledger, kinds={"refund": policy}, agent=args.agent)

    def work() -> None:
        for _ in range(args.prompts):
            prompt = f"Refund order {order}."
            if args.guarded:
                result = guard.invoke(agent, prompt, session=args.session)
            else:
                result = agent(prompt)
        print(json.dumps(str(result).strip()))

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
    parser.add_argument("--order", required=True, help="the order, as JSON: 42 or 42.0")
    for flag in ("--guarded", "--subject", "--probe"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--once-for", type=float, default=None)
    parser.add_argument("--agent", default=None)
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--fault", choices=["none", "kill", "declined"], default="none")
    return parser


if __name__ == "__main__":
    main()
