"""An agent that the crash tests run as a subprocess and kill.

    python tests/crash_agents/http_agent.py --ledger L --run R --provider URL
        [--kinds create,create,create] [--tool-sleep S] [--kill-before-answer effect-2]
        [--probe] [--preflight] [--dedupe-window S] [--retry N --backoff S] [--tries FILE]

One run through the public oncelog API: an llm step (a fake model), a read, then one
effect per entry of ``--kinds`` (step ids ``effect-1``, ``effect-2``, ...), each an HTTP
POST to the provider carrying the step's idempotency key. It prints the effects' results
as one JSON line and exits through ``oncelog.run_main`` (0 completed, 3 a person must act).

``ONCELOG_CRASH_AT`` in the environment kills it at a named crash point; with
``--kill-before-answer STEP`` the provider kills it after performing that step's effect
and before answering.

``--dedupe-window`` declares that the provider deduplicates keys for that many seconds;
``--retry N`` gives every tool a retry policy of N attempts (``--backoff`` seconds first)
and classifies urllib's errors (``oncelog.failures.urllib``); ``--preflight`` asks the
provider for the key before each attempt; ``--tries FILE`` appends the key to FILE before
each request, so a test counts attempts even when no request reaches a provider.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import oncelog
from oncelog.failures import urllib as urllib_failures

KINDS = ("create", "payment", "upsert")


@dataclass(frozen=True)
class Config:
    ledger: str
    run_id: str
    provider: str
    kinds: tuple[str, ...]
    tool_sleep: float
    kill_before_answer: str | None
    probe: bool = False
    preflight: bool = False
    dedupe_window: float | None = None
    retry: int | None = None
    backoff: float = 0.1
    tries: str | None = None


def parse(argv: Sequence[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(description="an oncelog agent that posts effects")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--provider", required=True, help="base URL of the provider")
    parser.add_argument("--kinds", default="create,create,create")
    parser.add_argument("--tool-sleep", type=float, default=0.0)
    parser.add_argument("--kill-before-answer", default=None, metavar="STEP_ID")
    parser.add_argument("--probe", action="store_true", help="payments ask the provider")
    parser.add_argument("--preflight", action="store_true", help="ask before each attempt")
    parser.add_argument("--dedupe-window", type=float, default=None)
    parser.add_argument("--retry", type=int, default=None, metavar="ATTEMPTS")
    parser.add_argument("--backoff", type=float, default=0.1)
    parser.add_argument("--tries", default=None, metavar="FILE")
    args = parser.parse_args(argv)
    kinds = tuple(args.kinds.split(","))
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds takes {KINDS}, not {kinds}")
    return Config(
        args.ledger,
        args.run,
        args.provider,
        kinds,
        args.tool_sleep,
        args.kill_before_answer,
        args.probe,
        args.preflight,
        args.dedupe_window,
        args.retry,
        args.backoff,
        args.tries,
    )


def fake_model(messages: list[dict[str, str]]) -> dict[str, Any]:
    """Stands in for an LLM: an OpenAI-shaped response with token usage."""
    return {
        "choices": [{"message": {"role": "assistant", "content": "billing"}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
    }


def lookup_customer(customer_id: str) -> dict[str, Any]:
    return {"id": customer_id, "email": f"{customer_id}@example.com", "plan": "pro"}


def post_effect(config: Config, step: str, payload: dict[str, Any], key: str) -> Any:
    """One request to the provider; the key is the only thing that lets it deduplicate."""
    time.sleep(config.tool_sleep)  # widens the window between the intent and the request
    if config.tries is not None:
        with open(config.tries, "a") as tries:
            tries.write(key + "\n")
    body = {
        "key": key,
        "run": config.run_id,
        "payload": payload,
        "ledger": config.ledger,  # so the provider can check the intent is durable
        "pid": os.getpid(),
        "kill_before_answer": step == config.kill_before_answer,
    }
    request = urllib.request.Request(
        config.provider + "/effect",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        result = json.loads(response.read())
    time.sleep(config.tool_sleep)  # ... and the one between the answer and the outcome
    return result


def find_effect(config: Config) -> Callable[..., oncelog.ProbeAnswer]:
    """A probe (or a preflight): asks the provider for the effects it performed under
    the key."""

    def probe(key: str, step: str, payload: dict[str, Any]) -> oncelog.ProbeAnswer:
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(f"{config.provider}/effects?{query}", timeout=30) as answer:
            found = json.loads(answer.read())["found"]
        if len(found) == 1:
            return oncelog.Found(found[0])
        return oncelog.NOT_FOUND if not found else oncelog.CANNOT_TELL

    return probe


def make_tools(ledger: oncelog.Ledger, config: Config) -> dict[str, oncelog.Tool[..., Any]]:
    """One tool per kind; the tool name is part of the key, so it is fixed here."""

    def declare(kind: str) -> oncelog.Tool[..., Any]:
        def call_provider(step: str, payload: dict[str, Any], *, idempotency_key: str) -> Any:
            return post_effect(config, step, payload, idempotency_key)

        probe = find_effect(config) if config.probe and kind == "payment" else None
        declared = ledger.tool(
            kind=oncelog.Kind(kind), name=f"provider.{kind}", probe=probe,
            preflight=find_effect(config) if config.preflight else None,
            dedupe_window=config.dedupe_window,
            failures=None if config.retry is None else urllib_failures.classify,
            retry=None if config.retry is None else oncelog.Retry(config.retry, config.backoff),
        )  # fmt: skip
        return declared(call_provider)

    return {kind: declare(kind) for kind in KINDS}


def effect_ids(kinds: Sequence[str]) -> list[str]:
    return [f"effect-{n}" for n in range(1, len(kinds) + 1)]


def agent(config: Config) -> None:
    with oncelog.open(config.ledger) as ledger:
        tools = make_tools(ledger, config)
        steps = effect_ids(config.kinds)
        with ledger.run(config.run_id, plan=["classify", "lookup", *steps]) as run:
            reply = run.llm("classify", fake_model, [{"role": "user", "content": "refund?"}])
            label = reply["choices"][0]["message"]["content"]
            customer = run.read("lookup", lookup_customer, "cus_1")
            results = {}
            for step, kind in zip(steps, config.kinds, strict=True):
                payload = {"label": label, "to": customer["email"], "step": step, "kind": kind}
                results[step] = run.effect(step, tools[kind], step, payload)
    print(json.dumps(results, sort_keys=True), flush=True)


if __name__ == "__main__":
    cfg = parse()
    oncelog.run_main(lambda: agent(cfg))
